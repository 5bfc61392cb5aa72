"""The models: migrations that match them, AccountLimit validation and its push to Redis."""

import importlib
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ValidationError

from celery_fairqueue import AccountLimit as Limit
from celery_fairqueue import get_account_limit
from celery_fairqueue.contrib.django.models import AccountLimit


@pytest.fixture
def fair(redis_server, redis_client):
    return importlib.import_module("tests.apps.fair")


def test_models_and_migrations_agree(request):
    # a process of its own: makemigrations also checks the history of every configured database
    check = subprocess.run(
        [sys.executable, "-m", "django", "makemigrations", "celery_fairqueue", "--check",
         "--dry-run", "--settings", "tests.django.settings"],
        env={**os.environ, "FAIRQUEUE_TEST_SQLITE_PATH": ":memory:",
             "PYTHONPATH": str(request.config.rootpath)},
        cwd=request.config.rootpath, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, f"the models changed without a migration:\n{check.stdout}"
    assert "No changes detected" in check.stdout


@pytest.mark.parametrize(("fields", "message"), [
    ({"rate": "ten"}, "not in Celery's format"),
    ({"rate": "1/s", "burst": 0.5}, "burst 0.5 must be at least 1"),
    ({"concurrency": 0}, "concurrency 0"),
    ({"window": "25:00-26:00"}, "impossible time of day"),
    ({"window": "09:00-17:00", "tz": "Mars/Base"}, "not a known IANA time zone"),
])
@pytest.mark.django_db
def test_an_invalid_limit_is_refused_with_the_reason(fields, message):
    with pytest.raises(ValidationError, match=message):
        AccountLimit(account="acme", **fields).save()
    assert not AccountLimit.objects.exists()


@pytest.mark.django_db
def test_saving_a_limit_pushes_it_to_redis_and_deleting_clears_it(
        database, fair, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        limit = AccountLimit.objects.create(account="acme", rate="10/s", burst=10,
                                            concurrency=2, window="09:00-17:00",
                                            tz="Europe/Berlin")
    assert get_account_limit(fair.app, "acme") == Limit(
        rate="10/s", burst=10, concurrency=2, window="09:00-17:00", tz="Europe/Berlin")
    with django_capture_on_commit_callbacks(execute=True):
        limit.concurrency = 5
        limit.save()
    assert get_account_limit(fair.app, "acme").concurrency == 5
    with django_capture_on_commit_callbacks(execute=True):
        limit.delete()
    assert get_account_limit(fair.app, "acme") is None
