"""The recorder: events in the Redis stream become Job and Attempt rows.

The first tests write events into the stream by hand, so each ordering case is a sentence; the
later ones run jobs through real workers and read the rows while they run.
"""

import contextlib
import importlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from urllib.parse import quote

import pytest
import redis
from django.db import connections
from django.utils import timezone

import celery_fairqueue
from celery_fairqueue.contrib.django.columns import from_column
from celery_fairqueue.contrib.django.console import overview
from celery_fairqueue.contrib.django.models import Attempt, Job
from celery_fairqueue.contrib.django.recording.fold import EXPIRED
from celery_fairqueue.contrib.django.recording.recorder import NO_OUTCOME, Recorder
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import MAX_ID_LENGTH
from celery_fairqueue.store import store_for
from celery_fairqueue.store.formats.keys import encode_id
from tests.django.conftest import listen
from tests.harness import REDIS_URL_ENV, wait_until
from tests.harness.store_tools import claim_jobs

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
Outcome = Attempt.Outcome
VISIBLE_WITHIN = 5.0  # seconds from a transition to its row (well under a second when idle)


@pytest.fixture
def fair(redis_server):
    return importlib.import_module("tests.apps.fair")


@pytest.fixture
def rel(redis_server):
    return importlib.import_module("tests.apps.reliable")


class Stream:
    """Writes events as the store's scripts do, with times the test chooses."""

    def __init__(self, app, client):
        self.client = client
        self.key = store_for(app).keys.events
        self.clock = itertools.count(1_700_000_000)

    def send(self, type_, **fields):
        fields = {"e": type_, "at": next(self.clock), **fields}
        self.client.xadd(self.key, {k: str(v) for k, v in fields.items()})
        return fields

    def enqueue(self, task_id=None, retries=0, account="acme", key="-", due=None, args=None):
        task_id = task_id or uuid.uuid4().hex
        at = next(self.clock)
        # quoted as the scripts receive ids, without encode_id's length check: the recorder
        # must cope with whatever the stream holds
        self.send("enqueued", job=f"{task_id}:{retries}", q=encode_id("default"),
                  a=quote(account, safe=""), k=key, t="tests.apps.fair.job",
                  args=args or json.dumps({"account_id": account, "n": 1}), at=at,
                  due=due or at)
        return task_id


@pytest.fixture
def stream(fair, redis_client):
    return Stream(fair.app, redis_client)


@pytest.fixture
def recorder(fair, make_recorder) -> Recorder:
    return make_recorder(fair.app)


def drain(recorder: Recorder) -> int:
    total = 0
    while applied := recorder.run_once():
        total += applied
    return total


def test_enqueued_job_is_ready_with_its_arguments(database, stream, recorder):
    task_id = stream.enqueue(account="ac/me ü")
    assert drain(recorder) == 1
    job = Job.objects.get()
    assert job.job_key == f"task:{task_id}" and job.delivery_id == f"{task_id}:0"
    assert (job.status, job.account, job.queue, job.attempts) == (Status.READY, "ac/me ü",
                                                                  "default", 0)
    assert job.args == {"account_id": "ac/me ü", "n": 1}
    assert job.enqueued_at.timestamp() == pytest.approx(1_700_000_000, abs=5)
    assert recorder.reader.backlog() == 0


def test_job_due_later_is_deferred_until_then(stream, recorder):
    stream.enqueue(key="k1", due=1_800_000_000)
    drain(recorder)
    job = Job.objects.get(job_key="k1")
    assert job.status == Status.DEFERRED and job.next_run_at.timestamp() == 1_800_000_000


def test_delayed_job_is_ready_once_promoted_unless_its_account_is_paused(stream, recorder):
    soon = stream.enqueue(key="d1", due=1_700_000_100)
    paused = stream.enqueue(key="d2", account="whale", due=1_700_000_100)
    stream.send("account_deferred", q=encode_id("default"), a=encode_id("whale"),
                due=1_800_000_000)
    stream.send("promoted", job=f"{soon}:0", at=1_700_000_100)
    stream.send("promoted", job=f"{paused}:0", at=1_700_000_100)
    drain(recorder)
    rows = {j.job_key: (j.status, j.next_run_at and j.next_run_at.timestamp())
            for j in Job.objects.all()}
    assert rows == {"d1": (Status.READY, None), "d2": (Status.DEFERRED, 1_800_000_000)}


def test_retry_then_success_keeps_the_attempt_history(database, stream, recorder):
    task_id = stream.enqueue(key="k2")
    first, second = f"{task_id}:0", f"{task_id}:1"
    stream.send("running", job=first, worker="w1")
    stream.send("retrying", job=first, err="TimeoutError: upstream timed out",
                reason="timeout", due=1_800_000_000)
    stream.enqueue(task_id, retries=1, key="k2", due=1_800_000_000)
    stream.send("acked", job=first)  # the first delivery settles after its retry was stored
    drain(recorder)
    job = Job.objects.get()
    assert job.status == Status.DEFERRED and job.attempts == 1
    assert job.last_error == "TimeoutError: upstream timed out"
    stream.send("running", job=second, worker="w2")
    stream.send("succeeded", job=second, ext="msg-1")
    stream.send("acked", job=second)
    drain(recorder)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.external_id) == (Status.SUCCEEDED, 2, "msg-1")
    assert job.enqueued_at.timestamp() == 1_700_000_000  # the first enqueue, not the retry's
    history = [(a.number, a.delivery_id, a.worker, a.outcome, a.error)
               for a in job.attempt_list()]
    assert history == [(1, first, "w1", Outcome.RETRYING, "TimeoutError: upstream timed out"),
                       (2, second, "w2", Outcome.SUCCEEDED, "")]


def test_dead_job_keeps_its_last_error(stream, recorder):
    task_id = stream.enqueue(key="k3")
    stream.send("running", job=f"{task_id}:0", worker="w")
    stream.send("failed", job=f"{task_id}:0", err="PermanentError: lead 3 was deleted",
                reason="permanent: lead 3 was deleted")
    stream.send("dead", job=f"{task_id}:0", reason="permanent: lead 3 was deleted")
    stream.send("acked", job=f"{task_id}:0")
    drain(recorder)
    job = Job.objects.get()
    assert job.status == Status.DEAD and job.finished_at is not None
    assert job.last_error == "PermanentError: lead 3 was deleted"
    assert job.attempt_history.get().outcome == Outcome.FAILED


def test_rejected_job_is_dead_with_the_reason_as_error(stream, recorder):
    task_id = stream.enqueue()
    stream.send("running", job=f"{task_id}:0", worker="w")
    stream.send("dead", job=f"{task_id}:0", reason="unknown task")
    drain(recorder)
    job = Job.objects.get()
    assert (job.status, job.last_error) == (Status.DEAD, "unknown task")
    assert job.attempt_history.get().outcome == Outcome.DEAD


def test_job_settled_without_an_outcome_is_failed(stream, recorder):
    task_id = stream.enqueue()
    stream.send("running", job=f"{task_id}:0", worker="w")
    stream.send("acked", job=f"{task_id}:0")
    drain(recorder)
    job = Job.objects.get()
    assert (job.status, job.last_error) == (Status.FAILED, NO_OUTCOME)
    assert job.attempt_history.get().outcome == Outcome.FAILED


def test_cancelled_and_expired_jobs_are_revoked_and_say_why(stream, recorder):
    cancelled, expired = stream.enqueue(key="c1"), stream.enqueue(key="x1")
    stream.send("cancelled", job=f"{cancelled}:0")
    stream.send("expired", job=f"{expired}:0")
    drain(recorder)
    rows = {j.job_key: (j.status, j.last_error) for j in Job.objects.all()}
    assert rows == {"c1": (Status.REVOKED, ""), "x1": (Status.REVOKED, EXPIRED)}


def test_requeued_job_is_ready_again_and_its_attempt_says_why(stream, recorder):
    task_id = stream.enqueue()
    stream.send("running", job=f"{task_id}:0", worker="w1")
    stream.send("requeued", job=f"{task_id}:0", reason="lease expired")
    drain(recorder)
    job = Job.objects.get()
    assert job.status == Status.READY
    assert list(job.attempt_history.values_list("outcome", "error")) == [
        (Outcome.REQUEUED, "lease expired")]
    stream.send("running", job=f"{task_id}:0", worker="w2")
    stream.send("succeeded", job=f"{task_id}:0")
    drain(recorder)
    job.refresh_from_db()
    assert [(a.worker, a.outcome) for a in job.attempt_list()] == [
        ("w1", Outcome.REQUEUED), ("w2", Outcome.SUCCEEDED)]
    assert job.attempt_history.count() == 1  # the success is told by the job row


def test_events_of_jobs_enqueued_before_any_recorder_are_skipped(stream, recorder):
    stream.send("running", job="unknown:0", worker="w")
    stream.send("succeeded", job="unknown:0")
    stream.send("dead", job="unknown:1", reason="poison")
    assert drain(recorder) == 3
    assert not Job.objects.exists() and recorder.reader.backlog() == 0


def test_a_replayed_dead_job_is_the_same_row_enqueued_afresh(stream, recorder):
    old = stream.enqueue(key="k4")
    stream.send("running", job=f"{old}:0", worker="w")
    stream.send("failed", job=f"{old}:0", err="Boom: 1", reason="permanent")
    stream.send("dead", job=f"{old}:0", reason="permanent")
    drain(recorder)
    new = stream.enqueue(key="k4")
    drain(recorder)
    job = Job.objects.get()
    assert (job.task_id, job.status, job.attempts, job.last_error) == (new, Status.READY, 0, "")
    assert job.enqueued_at.timestamp() > 1_700_000_000 + 3


def test_late_news_of_an_earlier_delivery_does_not_move_the_job_back(stream, recorder):
    task_id = stream.enqueue(key="k5")
    stream.enqueue(task_id, retries=1, key="k5")
    stream.send("running", job=f"{task_id}:1", worker="w")
    stream.send("succeeded", job=f"{task_id}:1")
    drain(recorder)
    stream.enqueue(task_id, retries=0, key="k5")
    stream.send("running", job=f"{task_id}:0", worker="w")
    stream.send("requeued", job=f"{task_id}:1")
    drain(recorder)
    job = Job.objects.get()
    assert (job.status, job.delivery_id) == (Status.SUCCEEDED, f"{task_id}:1")
    assert len(job.attempt_list()) == 1


def test_a_batch_applied_twice_gives_the_same_rows(stream, recorder, redis_client):
    task_id = stream.enqueue(key="k6")
    stream.send("running", job=f"{task_id}:0", worker="w")
    events = recorder.reader.read(count=10, block_ms=10)
    recorder.apply(events)  # ... and the ack was lost: the events are read again
    assert recorder.run_once() == 2
    job = Job.objects.get()
    assert job.status == Status.RUNNING and len(job.attempt_list()) == 1


def test_an_event_the_database_refuses_is_skipped_not_retried_forever(database, stream,
                                                                      recorder, caplog):
    stream.send("enqueued", job="hostile:-2", q=encode_id("default"), a=encode_id("acme"),
                k="bad", t="t", args="{}")  # attempts -3: refused by the column's check
    stream.enqueue(key="good")
    assert drain(recorder) == 2
    assert list(Job.objects.values_list("job_key", flat=True)) == ["good"]
    assert recorder.reader.backlog() == 0 and "skipped event" in caplog.text


def test_long_ids_and_nul_characters_are_stored(database, stream, recorder):
    task_id = stream.enqueue(account="a" * 2000, key="long", args=json.dumps({"x": "n\0ul"}))
    stream.send("running", job=f"{task_id}:0", worker="w" * 400)
    stream.send("failed", job=f"{task_id}:0", err="Boom: \0", reason="permanent")
    drain(recorder)
    job = Job.objects.get()
    assert job.account == "a" * 1024 and job.worker == "w" * 255
    assert job.args == {"x": "nul"} and job.last_error == "Boom: "


#: Pairs of distinct account ids the store takes (each at most MAX_ID_LENGTH UTF-8 bytes, a
#: lone surrogate counted as 3) that a lossy column form would make one: ids that differ only
#: past the column's length once each lone surrogate is escaped to 6 characters, a lone
#: surrogate next to the text of its escape, a NUL (which PostgreSQL refuses) next to nothing.
DISTINCT_ACCOUNTS = {
    "long lone surrogates": ("\udc80" * (MAX_ID_LENGTH // 3) + "a",
                             "\udc80" * (MAX_ID_LENGTH // 3) + "b"),
    "escape lookalike": ("\udc80", "\\udc80"),
    "nul": ("a\x00b", "ab"),
}


@pytest.mark.parametrize("pair", DISTINCT_ACCOUNTS.values(), ids=DISTINCT_ACCOUNTS.keys())
def test_two_distinct_accounts_stay_two_rows(database, stream, recorder, pair):
    for n, account in enumerate(pair):
        assert len(account.encode("utf-8", "surrogatepass")) <= MAX_ID_LENGTH
        encode_id(account)  # the store takes it
        stream.send("enqueued", job=f"t{n}:0", q=encode_id("default"), a=encode_id(account),
                    k=f"key{n}", t="tests.apps.fair.job", args="{}")
    assert drain(recorder) == 2 and recorder.skipped == 0
    recorded = dict(Job.objects.values_list("job_key", "account"))
    assert len(set(recorded.values())) == 2, recorded
    assert len(overview.account_overview()) == 2
    assert {from_column(account) for account in recorded.values()} == set(pair)  # lossless


def test_a_limit_defers_the_recorded_jobs_of_an_account_with_a_lone_surrogate(
        database, stream, recorder):
    account = "caf\udce9"  # os.fsdecode of a Latin-1 name
    stream.send("enqueued", job="t0:0", q=encode_id("default"), a=encode_id(account), k="k0",
                t="tests.apps.fair.job", args="{}")
    drain(recorder)  # the account event meets a stored row
    stream.send("account_deferred", q=encode_id("default"), a=encode_id(account),
                due=1_800_000_000)
    assert drain(recorder) == 1 and recorder.skipped == 0
    job = Job.objects.get()
    assert job.status == Status.DEFERRED and from_column(job.account) == account


def test_rate_limited_account_is_deferred_then_ready(database, stream, recorder):
    stream.enqueue(key="a1", account="whale")
    stream.enqueue(key="a2", account="whale")
    stream.enqueue(key="b1", account="minnow")
    drain(recorder)  # the account event meets rows already stored ...
    stream.enqueue(key="a3", account="whale")  # ... and one stored in its own batch
    deferral = stream.send("account_deferred", q=encode_id("default"), a=encode_id("whale"),
                           due=1_800_000_000)
    stream.enqueue(key="a4", account="whale")  # joins the paused account: waits with it
    drain(recorder)
    rows = dict(Job.objects.values_list("job_key", "status"))
    assert rows == {"a1": Status.DEFERRED, "a2": Status.DEFERRED, "a3": Status.DEFERRED,
                    "a4": Status.DEFERRED, "b1": Status.READY}
    assert {j.next_run_at.timestamp() for j in Job.objects.filter(account="whale")} == {
        deferral["due"]}
    stream.send("account_ready", q=encode_id("default"), a=encode_id("whale"), at=1_800_000_001)
    drain(recorder)
    assert set(Job.objects.values_list("status", flat=True)) == {Status.READY}
    assert not Job.objects.filter(next_run_at__isnull=False).exists()


def test_one_recorder_leads_and_a_standby_takes_over_its_unacked_events(
        stream, make_recorder, fair):
    leader, standby = make_recorder(fair.app, "one"), make_recorder(fair.app, "two")
    stream.enqueue(key="k7")
    assert leader.run_once() == 1
    task_id = stream.enqueue(key="k8")
    stream.send("running", job=f"{task_id}:0", worker="w")
    assert standby.run_once() == 0 and not standby.leading
    leader.reader.read(count=10, block_ms=10)  # read, then the leader dies before applying
    leader.release()
    assert standby.run_once() == 2 and standby.leading
    assert Job.objects.get(job_key="k8").status == Status.RUNNING


def test_recorder_carries_on_after_redis_was_away(redis_server, stream, start_recorder, fair,
                                                  redis_client):
    start_recorder(fair.app)
    stream.enqueue(key="before")
    assert wait_until(lambda: Job.objects.filter(job_key="before").exists(), VISIBLE_WITHIN)
    redis_server.stop()
    time.sleep(1.0)
    redis_server.start()  # empty: it kept nothing, so the recorder must recreate its group
    assert wait_until(lambda: _exists(redis_client, stream.key), 15)
    stream.enqueue(key="after")
    assert wait_until(lambda: Job.objects.filter(job_key="after").exists(), VISIBLE_WITHIN)


def _exists(client, key):
    try:
        return bool(client.exists(key))
    except redis.ConnectionError:
        return False


# -- real workers ------------------------------------------------------------------------------


def rows_where(timeout=VISIBLE_WITHIN, **lookup):
    """Wait until a job row matches ``lookup``; return it (None after ``timeout``)."""
    found = []

    def match():
        found[:] = Job.objects.filter(**lookup)[:1]
        return bool(found)

    return found[0] if wait_until(match, timeout) else None


def test_jobs_through_a_real_worker_end_up_with_their_rows(database, rel, start_recorder,
                                                           celery_worker_factory, redis_client):
    redis_client.set("fail:2", "retry:1")
    redis_client.set("fail:3", "permanent")
    start_recorder(rel.app)
    celery_worker_factory("tests.apps.reliable")
    ok, retried, dead = (rel.send_message.delay("acme", n) for n in (1, 2, 3))
    ok.get(timeout=20)
    assert rows_where(task_id=ok.id, status=Status.SUCCEEDED, attempts=1), "not within 2 s"
    retried.get(timeout=20)
    job = rows_where(task_id=retried.id, status=Status.SUCCEEDED)
    assert job and job.attempts == 2 and job.external_id == ""
    assert [(a.number, a.outcome) for a in job.attempt_list()] == [
        (1, Outcome.RETRYING), (2, Outcome.SUCCEEDED)]
    assert job.attempt_history.first().error == "TimeoutError: upstream timed out"
    assert job.job_key == rel.send_message.business_key("acme", ("acme", 2), {})
    with pytest.raises(rel.PermanentError):
        dead.get(timeout=20)
    job = rows_where(task_id=dead.id, status=Status.DEAD)
    assert job and job.last_error == "PermanentError: lead 3 was deleted"
    assert job.args == {"account_id": "acme", "lead_id": 3}
    assert Job.objects.count() == 3


def test_rate_limited_jobs_are_deferred_with_their_next_run(database, fair, start_recorder,
                                                            celery_worker_factory):
    celery_fairqueue.set_account_limit(fair.app, "whale", rate="1/m", burst=1)
    start_recorder(fair.app)
    celery_worker_factory("tests.apps.fair")
    first = fair.job.delay("whale", 0)
    first.get(timeout=20)
    fair.job.delay("whale", 1)  # the account runs out of tokens ...
    fair.job.delay("whale", 2)  # ... and this one joins it while it is paused
    assert wait_until(lambda: Job.objects.filter(status=Status.DEFERRED).count() == 2,
                      VISIBLE_WITHIN)
    for job in Job.objects.filter(status=Status.DEFERRED):
        assert 50 < (job.next_run_at - timezone.now()).total_seconds() <= 60
    assert overview.account_overview()[0]["deferred"] == 2


def test_delayed_jobs_are_recorded_ready_when_the_store_promotes_them(database, fair,
                                                                      start_recorder):
    start_recorder(fair.app)
    results = [fair.job.apply_async(args=("acme", n), countdown=0.5) for n in range(2)]
    assert wait_until(lambda: Job.objects.filter(status=Status.DEFERRED).count() == 2,
                      VISIBLE_WITHIN)
    time.sleep(0.6)
    store = store_for(fair.app)
    # the claim promotes both and leases one
    [claimed] = claim_jobs(store, ["celery"], 1, "test-worker", AccountLimit().pack(0))
    assert wait_until(lambda: sorted(Job.objects.values_list("status", flat=True)) == sorted(
        [Status.READY, Status.RUNNING]), VISIBLE_WITHIN)
    assert claimed.job_id.split(":")[0] in {r.id for r in results}


DOWN_SECONDS = float(os.environ.get("FQ_DB_DOWN_SECONDS", "30"))


def run_jobs_while(outage, seconds, label, figure, worker):
    """Enqueue a job every 0.2 s while ``outage`` keeps the database away for ``seconds`` from
    a worker that records job state itself (the recorder step): it must run them meanwhile, and
    afterwards every one must be recorded, attempts included."""
    recorded = importlib.import_module("tests.apps.recorded")
    results = []
    with outage():
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            results.append(recorded.job.delay("acme", len(results)))
            time.sleep(0.2)
        run_meanwhile = sum(result.ready() for result in results)
        said = "database unavailable" in worker.log_tail(100_000)
    for result in results:
        result.get(timeout=30)
    n = len(results)
    assert wait_until(lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == n, 30)
    recorded_rows = Job.objects.filter(status=Status.SUCCEEDED, started_at__isnull=False,
                                       attempts=1).count()
    figure(f"{label} {seconds:.0f} s: {n} jobs enqueued, {run_meanwhile} of them run by the "
           f"recording worker while it was away, {recorded_rows}/{n} recorded once it was back, "
           f"{n - recorded_rows} rows lost")
    assert recorded_rows == n
    assert run_meanwhile >= n - 3, "dispatch must not wait for the database"
    assert said, "the worker's recorder must say the database is unavailable"


@pytest.fixture
def start_recording_worker(db_env, redis_client, celery_worker_factory):
    """``start_recording_worker(pool=...)``: a worker of the recorded app whose recorder step
    writes job state, once it has made the event stream that producers then write to."""
    recorded = importlib.import_module("tests.apps.recorded")
    events = store_for(recorded.app).keys.events

    def start(pool: str = "threads"):
        worker = celery_worker_factory("tests.apps.recorded", pool=pool,
                                       env={**db_env, "FQ_RECORDER": "1"})
        assert wait_until(lambda: redis_client.exists(events), 10), "no worker made the stream"
        listen(recorded.app)
        return worker

    return start


@pytest.fixture
def recording_worker(start_recording_worker):
    return start_recording_worker()


@pytest.mark.parametrize("database", ["default"], indirect=True)
@pytest.mark.parametrize("down_seconds", [3.0])
@pytest.mark.slow
def test_recorder_catches_up_after_sqlite_was_locked(figure, database, recording_worker,
                                                     down_seconds):
    if connections[database].vendor != "sqlite":
        pytest.skip("the suite runs on PostgreSQL; the next test stops it instead")
    path = connections[database].settings_dict["NAME"]

    @contextlib.contextmanager
    def locked():
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()

    run_jobs_while(locked, down_seconds, "sqlite locked", figure, recording_worker)


@pytest.mark.reliability
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
@pytest.mark.parametrize("down_seconds", [DOWN_SECONDS])
@pytest.mark.slow
def test_recorder_catches_up_after_postgres_was_down(figure, database, recording_worker,
                                                     pg_server, down_seconds):
    @contextlib.contextmanager
    def stopped():
        connections[database].close()
        pg_server.stop()
        try:
            yield
        finally:
            pg_server.start()

    run_jobs_while(stopped, down_seconds, "postgres down", figure, recording_worker)


@pytest.mark.slow
def test_workers_with_the_recorder_step_record_one_at_a_time(database, start_recording_worker):
    recorded = importlib.import_module("tests.apps.recorded")
    workers = [start_recording_worker(pool) for pool in ("prefork", "threads")]
    for result in [recorded.job.delay("acme", n) for n in range(5)]:
        result.get(timeout=20)
    assert wait_until(lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == 5,
                      VISIBLE_WITHIN)
    leaders = [w for w in workers if f"fairqueue recorder {w.hostname} leads" in w.log_tail(200)]
    assert len(leaders) == 1


def test_the_management_command_records_until_sigterm(database, db_env, fair, redis_server,
                                                      redis_client, request):
    env = {**os.environ, **db_env, REDIS_URL_ENV: redis_server.url,
           "PYTHONPATH": str(request.config.rootpath)}
    command = subprocess.Popen(
        [sys.executable, "-m", "django", "fairqueue_recorder", "--block-ms", "100",
         "--settings", "tests.django.settings"],
        env=env, cwd=request.config.rootpath, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: redis_client.exists(store_for(fair.app).keys.events), 15)
        listen(fair.app)
        result = fair.job.delay("acme", 1)
        assert rows_where(task_id=result.id, status=Status.READY)
        command.send_signal(signal.SIGTERM)
        assert command.wait(10) == 0
    finally:
        command.kill()
    assert b"recording" in command.stdout.read()


def test_an_event_that_cannot_be_applied_is_skipped_once_not_read_again_forever(
        database, stream, recorder):
    stream.send("account_deferred", q=encode_id("default"), a=encode_id("whale"))  # no due
    far = stream.enqueue(key="far")
    stream.send("retrying", job=f"{far}:0", due="1e15", err="Retry-After: 31 million years")
    stream.enqueue(key="good")
    assert drain(recorder) == 4
    assert recorder.skipped == 1
    assert drain(recorder) == 0  # nothing is read again
    rows = {job.job_key: job for job in Job.objects.all()}
    assert sorted(rows) == ["far", "good"]
    assert rows["far"].status == Status.DEFERRED and rows["far"].next_run_at.year == 9999


def test_waiting_since_is_when_a_job_could_run_and_dead_reason_why_it_died(database, stream,
                                                                           recorder):
    later = stream.enqueue(key="w1", due=1_800_000_000)  # a countdown: waits from its due time
    now = stream.enqueue(key="w2")
    drain(recorder)
    rows = {j.job_key: j.waiting_since.timestamp() for j in Job.objects.all()}
    assert rows["w1"] == 1_800_000_000 and rows["w2"] == pytest.approx(1_700_000_000, abs=10)
    stream.send("running", job=f"{now}:0", worker="w1")
    drain(recorder)
    assert Job.objects.get(job_key="w2").waiting_since is None  # running: not waiting
    reason = "gave up after 3 attempts: TimeoutError (timeout or connection error)"
    stream.send("failed", job=f"{now}:0", err="TimeoutError: upstream", reason=reason)
    stream.send("dead", job=f"{now}:0", reason=reason)
    stream.send("cancelled", job=f"{later}:0")
    drain(recorder)
    dead, cancelled = Job.objects.get(job_key="w2"), Job.objects.get(job_key="w1")
    assert (dead.status, dead.dead_reason, dead.waiting_since) == (Status.DEAD, reason, None)
    assert (cancelled.status, cancelled.waiting_since) == (Status.REVOKED, None)
