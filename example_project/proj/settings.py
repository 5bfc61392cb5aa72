"""Settings of the example project.

Environment: ``DATABASE_URL`` (``sqlite:///relative.db``, ``sqlite:////absolute.db`` or
``postgres://user:password@host:port/name``; default: SQLite in ``example_project/db.sqlite3``),
``REDIS_URL`` (Celery broker and result backend), ``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``.
"""

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def database_from_url(url: str) -> dict:
    """Turn a database URL into a ``DATABASES`` entry (SQLite and PostgreSQL only)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = unquote(parts.path[1:]) or ":memory:"
        if name != ":memory:":
            name = str(BASE_DIR / name)  # an absolute path stays as it is
        # IMMEDIATE transactions keep concurrent worker writes from failing with "locked".
        options = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name, "OPTIONS": options}
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path[1:]),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": dict(parse_qsl(parts.query)),
        }
    raise ImproperlyConfigured(f"DATABASE_URL: unsupported scheme {parts.scheme!r} in {url!r}")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "celery_fairqueue.contrib.django",
    "automations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "proj.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(os.environ.get("DATABASE_URL", "sqlite:///db.sqlite3")),
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

# Workers record every job transition into the Django app's tables (admin, queries).
CELERY_FAIRQUEUE_RECORDER = True
