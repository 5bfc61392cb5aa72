"""Both command lines on a real redis-server: ``celery -A ... fairqueue`` as a subprocess, and
``manage.py fairqueue`` through call_command, with its permission checks."""

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
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.shards.account_move import AccountMover
from tests.harness import REDIS_URL_ENV, wait_until

APP = "tests.apps.reliable"
SEND = "tests.apps.reliable.send_message"
PLAIN = "tests.apps.reliable.plain_send"
ROOT = Path(__file__).resolve().parents[2]



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
    # ready, delayed, running, accounts ready, deferred and paused, oldest waiting age, workers
    assert row[:7] == ["celery", "4", "0", "0", "2", "0", "0"] and row[-1] == "0"
    assert re.fullmatch(r"\d+s", row[7])
    assert "Dead letters: 1" in status.stdout
    assert "enqueued" in status.stdout

    accounts = celery("accounts", redis_url=redis_url)
    assert accounts.returncode == 0, accounts.stderr
    lines = accounts.stdout.splitlines()
    assert lines[0].split() == ["ACCOUNT", "QUEUE", "READY", "RUNNING", "STATE", "RESUMES",
                                "IN", "LIMIT", "REASON"]
    assert lines[2].split()[:5] == ["acme", "celery", "3", "0", "ready"]
    assert "10/s burst 5, 2 at once" in lines[2]
    assert lines[2].endswith("no worker consumes this queue")
    assert lines[3].split()[:7] == ["beta", "celery", "1", "0", "ready", "-", "default"]


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
    [row] = [line.split() for line in manage("recorded").splitlines()
             if line.startswith("acme")]
    assert row[:6] == ["acme", "1", "0", "0", "0", "1"]
    assert "PermanentError: lead 5 was deleted" in manage("recorded", "--account", "acme")
    assert "No jobs recorded." in manage("recorded", "--account", "nobody")
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


def subcommands_of_manage() -> set[str]:
    from celery_fairqueue.contrib.django.management.commands.fairqueue import Command
    parser = Command().create_parser("manage.py", "fairqueue")
    [commands] = [a for a in parser._actions if a.dest == "command"]
    return set(commands.choices)


def test_both_commands_use_one_set_of_names():
    from celery_fairqueue.cli import fairqueue
    assert set(fairqueue.commands) <= subcommands_of_manage()
    # those of the database's recorded jobs
    assert subcommands_of_manage() - set(fairqueue.commands) == {"recorded", "prune"}


@pytest.mark.slow
def test_status_warns_when_no_worker_consumes_a_queue(rel, redis_url, celery_worker_factory):
    rel.send_message.delay("acme", 1)
    warning = "WARNING: queue 'celery' has 1 ready job but no live worker consumes it"
    status = celery("status", redis_url=redis_url)
    assert status.returncode == 0, status.stderr
    assert warning in status.stdout
    assert "Live workers: none registered" in status.stdout

    # a real worker on the queue (paused, so the job stays to be counted): no warning
    celery_fairqueue.pause(rel.app, queue="celery", by="ops", reason="maintenance")
    worker = celery_worker_factory(APP, concurrency=3)
    assert wait_until(lambda: "Live workers: 1" in celery("status", redis_url=redis_url).stdout,
                      timeout=30)
    status = celery("status", redis_url=redis_url)
    assert warning not in status.stdout
    row, pause = [line.split() for line in status.stdout.splitlines()
                  if line.startswith("celery ")]
    assert row[1] == "1" and row[-1] == "1"  # still ready; one worker consumes it
    assert pause[:5] == ["celery", "(the", "whole", "queue)", "ops"]
    assert worker.hostname in status.stdout
    assert "maintenance" in status.stdout


@pytest.mark.slow
def test_celery_pause_resume_and_account_reason(rel, redis_url):
    rel.send_message.delay("acme", 1)
    paused = celery("pause", "--account", "acme", "--by", "alice", "--reason", "asked to",
                    redis_url=redis_url)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("paused account 'acme' in every queue (by alice at ")
    assert paused.stdout.rstrip().endswith("): asked to")

    account = celery("accounts", "--account", "acme", redis_url=redis_url)
    assert account.returncode == 0, account.stderr
    assert re.search(r"celery: paused by alice at \d\d:\d\d:\d\d UTC: asked to", account.stdout)
    assert "paused by alice" in celery("accounts", redis_url=redis_url).stdout

    resumed = celery("resume", "--account", "acme", redis_url=redis_url)
    assert resumed.returncode == 0 and "resumed account 'acme' in every queue" in resumed.stdout
    assert "celery: no worker consumes this queue" in celery(
        "accounts", "--account", "acme", redis_url=redis_url).stdout
    again = celery("resume", "--account", "acme", redis_url=redis_url)
    assert again.returncode == 1 and "was not paused" in again.stdout
    assert celery("pause", redis_url=redis_url).returncode == 2  # neither --account nor --queue


@pytest.mark.django_db
def test_pausing_an_account_a_reshard_is_moving_says_so_and_asks_to_try_again(rel, redis_url):
    """Both command lines refuse with the reshard's words and a try-again status, and leave the
    reshard's own pause in place."""
    store = store_for(rel.app)
    AccountMover(store.shards).freeze(0, {encode_id("acme"): 1})
    paused = celery("pause", "--account", "acme", redis_url=redis_url)
    assert paused.returncode == 75, paused.stderr  # EX_TEMPFAIL
    assert "moving it to shard 1" in paused.stderr + paused.stdout
    User.objects.create_superuser("root")
    with pytest.raises(CommandError, match="moving it to shard 1"):
        manage("resume", "--account", "acme", "--user", "root")
    assert [p.by for p in store.pauses()] == ["fairqueue reshard"]


@pytest.mark.slow
def test_celery_jobs_cancel_and_run_now(rel, redis_url):
    ready = rel.send_message.delay("acme", 1)
    later = rel.send_message.apply_async(args=("acme", 2), countdown=3600)
    jobs = celery("jobs", "--account", "acme", redis_url=redis_url)
    assert jobs.returncode == 0, jobs.stderr
    rows = [line.split() for line in jobs.stdout.splitlines()[2:]]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (f"{ready.id}:0", SEND, "celery", "ready"), (f"{later.id}:0", SEND, "celery", "delayed")]
    assert rows[1][-2:] == ["59m", "59s"] or rows[1][-2] in ("59m", "1h")

    run = celery("run-now", later.id, ready.id, redis_url=redis_url)
    assert run.returncode == 1
    assert f"made {later.id} ready" in run.stdout
    assert f"not made ready {ready.id}: not delayed" in run.stderr
    assert [r.state for r in store_inspector(rel).console.live_jobs("acme")] == ["ready", "ready"]

    cancelled = celery("cancel", f"{ready.id}:0", "nope", redis_url=redis_url)
    assert cancelled.returncode == 1
    assert f"cancelled {ready.id}:0" in cancelled.stdout and "not cancelled nope" in \
        cancelled.stderr
    assert ready.state == "REVOKED"
    assert [j.job_id for j in store_inspector(rel).console.live_jobs("acme")] == [f"{later.id}:0"]
    assert "no job in the fair store" in celery("jobs", "--account", "nobody",
                                                 redis_url=redis_url).stdout


def store_inspector(rel):
    from celery_fairqueue.store import StoreInspector
    return StoreInspector(rel.app)


@pytest.mark.slow
def test_dlq_show_accepts_the_task_id_as_the_worker_logs_print_it(rel, redis_url):
    bury(rel, "3f2a-77:2", lead=9)
    for name in ("3f2a-77:2", "3f2a-77", f"{SEND}[3f2a-77]"):
        shown = celery("dlq", "show", name, redis_url=redis_url)
        assert shown.returncode == 0, (name, shown.stderr)
        assert "permanent: lead 9 was deleted" in shown.stdout
    missing = celery("dlq", "show", "3f2a-78", redis_url=redis_url)
    assert missing.returncode == 1 and "no dead letter '3f2a-78'" in missing.stderr


@pytest.mark.django_db
def test_manage_has_the_same_reports(rel):
    rel.send_message.delay("acme", 1)
    bury(rel, "t9:1", lead=9)
    assert "no live worker consumes it" in manage("status")
    assert "celery: no worker consumes this queue" in manage("accounts", "--account", "acme")
    assert "no worker consumes this queue" in manage("accounts")
    assert ":0" in manage("jobs", "--account", "acme")
    assert "Live workers: none registered" in manage("workers")
    assert "permanent: lead 9 was deleted" in manage("dlq", "show", "t9")


@pytest.mark.django_db
def test_manage_pause_cancel_and_run_now_need_a_user_with_the_permission(rel):
    job = rel.send_message.apply_async(args=("acme", 1), countdown=3600)
    User.objects.create_user("ann", is_staff=True)
    User.objects.create_superuser("root")
    for args in (("pause", "--account", "acme"), ("resume", "--account", "acme"),
                 ("cancel", job.id), ("run-now", job.id)):
        with pytest.raises(CommandError, match="Refused: ann lacks the permission"):
            manage(*args, "--user", "ann")
    assert celery_fairqueue.store_for(rel.app).pauses() == []

    assert "(by root at " in manage("pause", "--account", "acme", "--reason", "x",
                                    "--user", "root")
    [pause] = celery_fairqueue.store_for(rel.app).pauses()
    assert (pause.account, pause.by, pause.reason) == ("acme", "root", "x")
    assert "resumed account 'acme'" in manage("resume", "--account", "acme", "--user", "root")
    assert f"made {job.id} ready" in manage("run-now", job.id, "--user", "root")
    assert f"cancelled {job.id}" in manage("cancel", job.id, "--user", "root")
    with pytest.raises(CommandError, match="1 jobs were not cancelled"):
        manage("cancel", job.id, "--user", "root")


@pytest.mark.django_db
def test_manage_reshard_needs_a_superuser(rel, redis_client):
    User.objects.create_user("ann", is_staff=True)
    User.objects.create_superuser("root")
    with pytest.raises(CommandError, match="Refused: ann is not an active superuser"):
        manage("reshard", "--to", "2", "--settle", "0", "--user", "ann")
    assert redis_client.get("{fairqueue}:shards") is None
    assert "moved the store from 1 to 2 shards" in manage("reshard", "--to", "2", "--settle",
                                                          "0", "--user", "root")
    assert redis_client.get("{fairqueue}:shards") == "2"
    redis_client.flushall()  # the app's store is of one shard


@pytest.mark.django_db
def test_manage_upgrade_needs_a_superuser_and_converts_a_store_of_format_1(rel, redis_client):
    User.objects.create_user("ann", is_staff=True)
    User.objects.create_superuser("root")
    redis_client.set("{fairqueue}:format", "1")  # as a store an earlier version wrote reads
    redis_client.zadd("{fairqueue}:queue:celery:ready", {"acme|01700000000000000|t:0": 0})
    redis_client.hset("{fairqueue}:records", "t:0",
                      "celery acme 01700000000000000 - - 0 - - -\n{}")
    redis_client.sadd("{fairqueue}:queues", "celery")
    before = manage("status")  # the job waiting in format 1's set is counted, and why none runs
    [row] = [line.split() for line in before.splitlines() if line.startswith("celery ")]
    assert row[1] == "1" and "WARNING: the store's layout is at format 1" in before
    with pytest.raises(CommandError, match="Refused: ann is not an active superuser"):
        manage("upgrade", "--settle", "0", "--user", "ann")
    assert redis_client.get("{fairqueue}:format") == "1"
    assert "converted" in manage("upgrade", "--settle", "0", "--user", "root")
    assert redis_client.get("{fairqueue}:format") == "2"
    assert redis_client.zrange("{fairqueue}:queue:celery:f:acme", 0, -1) == [
        "01700000000000000|t:0"]
    assert "at format 2 already" in manage("upgrade", "--user", "root")
    assert "layout is at format" not in manage("status")


def test_status_counts_an_operator_pause_as_paused_not_deferred(rel, redis_url):
    rel.send_message.delay("acme", 1)
    celery_fairqueue.pause(rel.app, "acme", by="alice", reason="billing")
    status = celery("status", redis_url=redis_url)
    assert status.returncode == 0, status.stderr
    header = status.stdout.splitlines()[2]
    assert "ACCOUNTS DEFERRED" in header and "ACCOUNTS PAUSED" in header
    [row] = [line.split() for line in status.stdout.splitlines() if line.startswith("celery ")]
    assert row[4:7] == ["1", "0", "1"]  # accounts ready, deferred by a limit, paused
    accounts = celery("accounts", redis_url=redis_url)
    assert "held" not in accounts.stdout


@pytest.mark.slow
def test_limits_default_sets_the_stores_default_limit_and_status_reports_it(rel, redis_url):
    shown = celery("limits", redis_url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert "Default limit: none stored yet" in shown.stdout
    changed = celery("limits", "--default", "--rate", "10/s", "--concurrency", "2",
                     redis_url=redis_url)
    assert changed.returncode == 0, changed.stderr
    assert "Default limit: 10/s, 2 at once" in changed.stdout
    assert celery_fairqueue.get_default_limit(rel.app) == celery_fairqueue.AccountLimit(
        rate="10/s", concurrency=2)
    assert "Default limit: 10/s, 2 at once" in celery("status", redis_url=redis_url).stdout
    refused = celery("limits", "--rate", "5/s", redis_url=redis_url)
    assert refused.returncode != 0 and "--default" in refused.stderr


@pytest.mark.slow
def test_limits_account_sets_shows_and_clears_an_accounts_weight(rel, redis_url):
    changed = celery("limits", "--account", "acme", "--weight", "4", "--rate", "10/s",
                     redis_url=redis_url)
    assert changed.returncode == 0, changed.stderr
    assert "Account 'acme': 10/s, weight 4; weight 4" in changed.stdout
    assert celery_fairqueue.get_account_limit(rel.app, "acme") == celery_fairqueue.AccountLimit(
        rate="10/s", weight=4)
    listing = celery("limits", redis_url=redis_url)
    assert re.search(r"acme\s+10/s, weight 4\s+4", listing.stdout), listing.stdout
    for bad in ("0", "-3", "1001", "2.5", "99999999999999999999999"):
        refused = celery("limits", "--account", "acme", "--weight", bad, redis_url=redis_url)
        assert refused.returncode != 0 and "weight" in refused.stderr, (bad, refused.stderr)
    assert celery_fairqueue.get_account_limit(rel.app, "acme").weight == 4
    cleared = celery("limits", "--account", "acme", "--clear", redis_url=redis_url)
    assert "no limit of its own" in cleared.stdout
    assert celery_fairqueue.get_account_limit(rel.app, "acme") is None


@pytest.mark.django_db
def test_manage_limits_sets_an_accounts_weight_with_the_permission(rel):
    User.objects.create_user("ann")
    User.objects.create_superuser("root")
    with pytest.raises(CommandError, match="lacks the permission"):
        manage("limits", "--account", "acme", "--weight", "3", "--user", "ann")
    with pytest.raises(CommandError, match="--user"):
        manage("limits", "--account", "acme", "--weight", "3")
    assert "weight 3" in manage("limits", "--account", "acme", "--weight", "3", "--user", "root")
    assert celery_fairqueue.get_account_limit(rel.app, "acme").weight == 3
    assert re.search(r"acme\s+weight 3\s+3", manage("limits"))
    with pytest.raises(CommandError, match="weight 0 must be"):
        manage("limits", "--account", "acme", "--weight", "0", "--user", "root")
