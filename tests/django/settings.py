"""Django settings of the Django app's tests: SQLite by default, PostgreSQL when
``FAIRQUEUE_TEST_DATABASE_URL`` names one (the ``postgres`` tests set it).

The SQLite database is a file (``FAIRQUEUE_TEST_SQLITE_PATH``, else one per test run in the temp
folder), so workers and beat processes that the tests start can share it. The ``postgres`` alias
stays a dummy until tests/django/conftest.py points it at the session's throwaway cluster for
the tests parametrized over both databases; ``FairqueueRouter`` sends the fair-queue (and beat)
models to the alias such a test chose.
"""

import os
import tempfile
from urllib.parse import urlsplit

SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_celery_beat",
    "celery_fairqueue.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "tests.django.urls"


def postgres_settings(url: str) -> dict:
    """Django's settings of the PostgreSQL database at ``url``."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    return {"ENGINE": "django.db.backends.postgresql", "NAME": name,
            "USER": parts.username or "postgres", "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "127.0.0.1", "PORT": parts.port or 5432}


SQLITE_PATH = os.environ.get("FAIRQUEUE_TEST_SQLITE_PATH") or os.path.join(
    tempfile.gettempdir(), f"fairqueue-tests-{os.getpid()}.sqlite3")
DATABASES = {
    "default": (postgres_settings(os.environ["FAIRQUEUE_TEST_DATABASE_URL"])
                if os.environ.get("FAIRQUEUE_TEST_DATABASE_URL") else
                {"ENGINE": "django.db.backends.sqlite3", "NAME": SQLITE_PATH,
                 "TEST": {"NAME": SQLITE_PATH}, "OPTIONS": {"timeout": 2}}),
    "postgres": {"ENGINE": "django.db.backends.dummy"},
}


class FairqueueRouter:
    """Routes the fair-queue and beat models to ``alias`` (tests switch it per database)."""

    alias = "default"
    labels = ("celery_fairqueue", "django_celery_beat")

    def db_for_read(self, model, **hints):
        return self.alias if model._meta.app_label in self.labels else None

    db_for_write = db_for_read


DATABASE_ROUTERS = ["tests.django.settings.FairqueueRouter"]
CELERY_FAIRQUEUE_APP = os.environ.get("FAIRQUEUE_TEST_APP", "tests.apps.fair.app")
