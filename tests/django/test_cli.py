"""Both command lines on a real redis-server: ``celery -A ... fairqueue`` as a subprocess, and
``manage.py fairqueue`` through call_command, with its permission checks."""

import importlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.utils import timezone

import celery_fairqueue
from celery_fairqueue import DeadLetters
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.store import store_for
from tests.harness import REDIS_URL_ENV

APP = "tests.apps.reliable"
SEND = "tests.apps.reliable.send_message"
PLAIN = "tests.apps.reliable.plain_send"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rel(redis_server, redis_client, settings):
    settings.CELERY_FAIRQUEUE_APP = f"{APP}.app"
    return importlib.import_module(APP)


def celery(*args: str, redis_url: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", APP, "fairqueue", *args], cwd=ROOT,
        env={**os.environ, REDIS_URL_ENV: redis_url}, input=stdin, capture_output=True,
        text=True, timeout=60)


def bury(rel, letter_id: str, task: str = SEND, account: str = "acme", lead: int = 1,
         **kwargs) -> None:
    """A dead letter as the worker writes it."""
    store_for(rel.app).bury(letter_id, f"permanent: lead {lead} was deleted", record={
        "task": task, "account": account,
        "args": [account, lead], "kwargs": kwargs, "attempts": 3,
        "error": f"PermanentError: lead {lead} was deleted",
        "traceback": "Traceback (most recent call last):\n  ...\nPermanentError"})


def manage(*args: str) -> str:
    out = io.StringIO()
    call_command("fairqueue", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_celery_status_and_accounts_read_the_store(rel, redis_url):
    for lead in range(3):
        rel.send_message.delay("acme", lead)
    rel.send_message.delay("beta", 1)
    celery_fairqueue.set_account_limit(rel.app, "acme", rate="10/s", burst=5, concurrency=2)
    bury(rel, "t1:0")

    status = celery("status", redis_url=redis_url)
    assert status.returncode == 0, status.stderr
    [row] = [line.split() for line in status.stdout.splitlines() if line.startswith("celery ")]
    assert row == ["celery", "4", "0", "0", "2", "0"]  # ready, delayed, running, accounts
    assert "Dead letters: 1" in status.stdout
    assert "enqueued" in status.stdout

    accounts = celery("accounts", redis_url=redis_url)
    assert accounts.returncode == 0, accounts.stderr
    lines = accounts.stdout.splitlines()
    assert lines[0].split() == ["ACCOUNT", "QUEUE", "READY", "RUNNING", "STATE", "RESUMES",
                                "IN", "LIMIT"]
    assert lines[2].split()[:5] == ["acme", "celery", "3", "0", "ready"]
    assert lines[2].endswith("10/s burst 5, 2 at once")
    assert lines[3].split() == ["beta", "celery", "1", "0", "ready", "-", "default"]


def test_celery_dlq_lists_shows_and_replays_without_showing_arguments(rel, redis_url):
    bury(rel, "t1:0", task=PLAIN, lead=5, email="ann@example.com")
    bury(rel, "t2:0", account="beta", lead=6)

    listing = celery("dlq", "list", redis_url=redis_url)
    assert listing.returncode == 0, listing.stderr
    assert "t1:0" in listing.stdout and "permanent: lead 6 was deleted" in listing.stdout
    assert "ann@example.com" not in listing.stdout and "ARGS" not in listing.stdout
    assert "2 shown of 2 dead letters." in listing.stdout

    shown = celery("dlq", "show", "t1:0", "--show-args", redis_url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert '{"account_id": "acme", "lead_id": 5, "email": "***"}' in shown.stdout
    assert "ann@example.com" not in shown.stdout and "PermanentError" in shown.stdout

    replayed = celery("dlq", "replay", "t2:0", "gone:0", redis_url=redis_url)
    assert replayed.returncode == 1
    assert "replayed t2:0 as task " in replayed.stdout
    assert "not replayed gone:0: not found: replayed or purged already" in replayed.stderr
    assert [d.job_id for d in DeadLetters(rel.app).list()] == ["t1:0"]
    assert store_for(rel.app).counts("celery")["ready"] == 1  # the replayed job waits to run


def test_celery_dlq_purge_asks_unless_yes(rel, redis_url):
    bury(rel, "t1:0")
    bury(rel, "t2:0", lead=2)
    refused = celery("dlq", "purge", "t1:0", redis_url=redis_url, stdin="n\n")
    assert refused.returncode == 1 and "Purge 1 dead letter?" in refused.stdout
    assert DeadLetters(rel.app).count() == 2

    purged = celery("dlq", "purge", "--older-than", "0", "--yes", redis_url=redis_url)
    assert purged.returncode == 0, purged.stderr
    assert "purged 2 dead letters" in purged.stdout
    assert DeadLetters(rel.app).count() == 0


def test_celery_command_says_when_redis_is_down():
    # In process, with the no-retry store of the admin tests' app whose Redis is a closed port:
    # the store's own client would back off for seconds before giving up.
    result = CliRunner().invoke(celery_main, ["-A", "tests.django.test_admin.down", "fairqueue",
                                              "status"])
    assert result.exit_code == 69  # EX_UNAVAILABLE
    assert "The fair store (Redis) cannot be reached" in result.output


@pytest.mark.django_db
def test_manage_status_accounts_and_dlq_list(rel):
    rel.send_message.delay("acme", 1)
    bury(rel, "t1:0", task=PLAIN, lead=5, email="ann@example.com")
    now = timezone.now()
    Job.objects.create(job_key="k1", task_id="a", delivery_id="a:0", task=SEND, queue="celery",
                       account="acme", status="ready", enqueued_at=now)
    Job.objects.create(job_key="k2", task_id="t1", delivery_id="t1:0", task=PLAIN,
                       queue="celery", account="acme", status="dead", finished_at=now,
                       last_error="PermanentError: lead 5 was deleted")

    assert "Dead letters: 1" in manage("status")
    [row] = [line.split() for line in manage("accounts").splitlines()
             if line.startswith("acme")]
    assert row[:6] == ["acme", "1", "0", "0", "0", "1"]
    assert "PermanentError: lead 5 was deleted" in manage("accounts", "--account", "acme")
    assert "No jobs recorded." in manage("accounts", "--account", "nobody")
    listing = manage("dlq", "list", "--show-args")
    assert '"email": "***"' in listing and "ann@example.com" not in listing


@pytest.mark.django_db
def test_manage_replay_and_purge_need_a_user_with_the_permission(rel):
    bury(rel, "t1:0")
    bury(rel, "t2:0", lead=2)
    Job.objects.create(job_key="task:t1", task_id="t1", delivery_id="t1:0", task=SEND,
                       queue="celery", account="acme", status="dead")  # no business key
    User.objects.create_user("ann")
    holder = User.objects.create_user("bob")
    holder.user_permissions.set(Permission.objects.filter(
        codename__in=["replay_job", "purge_job"], content_type__app_label="celery_fairqueue"))

    with pytest.raises(CommandError, match="replay_job"):
        manage("dlq", "replay", "t1:0", "--user", "ann")
    with pytest.raises(CommandError, match="purge_job"):
        manage("dlq", "purge", "t1:0", "--user", "ann")
    with pytest.raises(CommandError, match="no user 'carl'"):
        manage("dlq", "replay", "t1:0", "--user", "carl")
    assert DeadLetters(rel.app).count() == 2
    assert Job.objects.get(job_key="task:t1").status == "dead"

    [task_id] = re.findall(r"replayed t1:0 as task (\S+)",
                           manage("dlq", "replay", "t1:0", "--user", "bob"))
    row = Job.objects.get(task_id=task_id)
    assert (row.job_key, row.delivery_id, row.status) == (f"task:{task_id}", f"{task_id}:0",
                                                          "ready")
    assert "purged 1 dead letters" in manage("dlq", "purge", "t2:0", "--user", "bob")
    assert DeadLetters(rel.app).count() == 0
    with pytest.raises(CommandError, match="1 dead letters were not purged"):
        manage("dlq", "purge", "t2:0", "--user", "bob")
