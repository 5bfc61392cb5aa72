"""``install(app)`` in a Django project's ``proj/celery.py`` reads no setting: Django's settings,
loaded later through ``config_from_object``, are the ones the store and Celery use."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.harness import REDIS_URL_ENV

SETTINGS = """
import os
SECRET_KEY = "test"
INSTALLED_APPS = ["django.contrib.contenttypes", "celery_fairqueue.contrib.django"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CELERY_BROKER_URL = os.environ["{env}"]
CELERY_TASK_PUBLISH_RETRY = False
"""

CELERY = """
import os
from celery import Celery
import celery_fairqueue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
{first}
app.config_from_object("django.conf:settings", namespace="CELERY")
{second}

@app.task(base=celery_fairqueue.FairTask, account_arg="account")
def send(account):
    return account
"""

PRODUCER = """
import django
django.setup()
from proj.celery import app, send
from celery_fairqueue.store import store_for
send.delay("acme")
print(store_for(app).stats().get("enqueued"), app.conf.task_publish_retry)
"""


@pytest.mark.parametrize("order", ["install, then Django's settings",
                                   "Django's settings, then install"])
def test_install_before_djangos_settings_are_loaded_uses_them(tmp_path, redis_server, redis_client,
                                                             order):
    install = "celery_fairqueue.install(app)"
    first, second = (install, "") if order.startswith("install") else ("", install)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "__init__.py").write_text("from .celery import app as celery_app\n")
    (proj / "settings.py").write_text(SETTINGS.replace("{env}", REDIS_URL_ENV))
    (proj / "celery.py").write_text(CELERY.format(first=first, second=second))
    env = {**os.environ, REDIS_URL_ENV: redis_server.url, "PYTHONPATH": str(tmp_path)}
    env["DJANGO_SETTINGS_MODULE"] = "proj.settings"  # as manage.py sets it
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PRODUCER)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # the job is in the store named by CELERY_BROKER_URL, and Celery's own sender was made with
    # the project's settings, not frozen at its defaults by install
    assert out.stdout.split() == ["1", "False"]
