"""Nothing lost at the edges: error replies, a full Redis, hostile values, one bad message among
good ones. Each test is named for the guarantee it checks, against the session's real
redis-server; jobs run in this process through ``celery_fairqueue.testing.run_fair_jobs``, the
same claim, message and settle path a worker uses."""

import json
import math
import time

import pytest
from celery import Celery, signals

import celery_fairqueue
from celery_fairqueue import (
    BacklogFullError,
    DeadLetterNotFound,
    DeadLetters,
    EnqueueError,
    FairTask,
    InvalidAccountError,
    StoreFullError,
    StoreUnavailableError,
)
from celery_fairqueue.envelope import Envelope
from celery_fairqueue.protocol import MAX_ID_LENGTH, EventType
from celery_fairqueue.reports import replay_each
from celery_fairqueue.store import EventReader, store_for
from celery_fairqueue.store.formats.records import JobRecord
from celery_fairqueue.testing import run_fair_jobs
from tests.harness import free_port


def test_dead_letters_keep_big_integers_floats_and_empty_lists_exactly(fair_store, rel):
    args = ["acme", 1234567890123456789, 0.30000000000000004, [], {}, [[]], 2**70,
            float("nan")]
    fair_store.bury("j:0", "permanent: kept as sent", record={"task": "t", "args": args})
    letter = DeadLetters(rel.app).get("j:0")
    assert letter.args[:-1] == args[:-1]
    assert math.isnan(letter.args[-1])
    assert [type(v) for v in letter.args] == [type(v) for v in args]


def test_a_lone_surrogate_in_an_error_keeps_its_dead_letter_and_its_event(make_store, rel):
    fair_store = make_store()  # its own: a shared store may have looked for a recorder lately
    reader = EventReader(fair_store, "test")
    reader.ensure_group()  # a recorder listens: events are written
    text = "cannot open /data/caf\udce9.csv"  # os.fsdecode of a Latin-1 file name
    assert fair_store.emit(EventType.FAILED, job="s:0", error=text, reason=text)
    fair_store.bury("s:0", f"permanent: {text}", record={"task": "t", "error": text,
                                                         "args": [text]})
    letter = DeadLetters(rel.app).get("s:0")
    assert letter.args == [text]  # the record is JSON with escapes: exact
    assert letter.reason == "permanent: cannot open /data/caf\\udce9.csv"
    events = reader.read(count=10, block_ms=10)
    assert [e.type for e in events] == ["failed", "dead"]
    assert "caf\\udce9.csv" in events[0].error and "caf\\udce9.csv" in events[1].reason


def test_a_hostile_retry_after_is_cut_to_fairqueue_max_retry_delay(rel, redis_client):
    store = store_for(rel.app)
    for n, retry_after in enumerate(("inf", "1e12", "nan"), start=1):
        redis_client.set(f"fail:{n}", f"retry_after:{retry_after}:1")
        # an account each: a Retry-After of ours holds its account too (issue 47)
        result = rel.send_message.delay(f"acme{n}", n)
        [ran] = run_fair_jobs(rel.app, limit=1)  # NaN falls back to the backoff: due now
        assert ran.state == "RETRY", ran.result
        retry = f"{result.id}:1"
        assert store.records([retry])[0] is not None  # stored, not lost to an OverflowError
        due = store.client.zscore(store.keys.queue("celery").delayed, retry)
        if retry_after != "nan":  # NaN's backoff may be due at once: then it is ready, not delayed
            assert due is not None and due <= time.time() + store.settings.max_retry_delay + 5
    # and the holds of its account are cut to fairqueue_max_slow_down (NaN holds nothing)
    holds = store.slow_downs()
    assert [hold.account for hold in holds] == ["acme1", "acme2"]
    assert all(hold.until <= time.time() + store.settings.max_slow_down + 5 for hold in holds)


def test_a_stored_message_that_is_not_utf8_harms_only_itself(fair, fair_store, ledger):
    for n in range(5):
        fair.job.delay("acme", n)
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "tests.apps.fair.job", "id": "x"})
    fair_store.enqueue(queue="celery", account="acme", job_id="x:0",
                       envelope=envelope.to_json())
    header = fair_store.client.hget(fair_store.keys.records, "x:0").split("\n")[0]
    fair_store.client.hset(fair_store.keys.records, "x:0",
                           header.encode() + b"\n\xff\xfe not utf-8 \x80")
    ran = run_fair_jobs(fair.app)
    assert sorted(job.state for job in ran) == ["REJECTED"] + ["SUCCESS"] * 5
    assert ledger.counts() == {f"acme:{n}": 1 for n in range(5)}
    assert "malformed" in DeadLetters(fair.app).get("x:0").reason or \
        "cannot be run" in DeadLetters(fair.app).get("x:0").reason


def test_an_explicit_job_key_with_spaces_runs_and_is_scoped_by_account(fair, fair_store,
                                                                       ledger):
    key = "occurrence 2026-12-03 09:00 | {weekly} ü"
    first = fair.job.apply_async(("acme", 1), job_key=key)
    assert fair.job.apply_async(("acme", 2), job_key=key).id == first.id  # one job per key
    other = fair.job.apply_async(("beta", 1), job_key=key)  # another tenant, same text
    assert other.id != first.id
    ran = run_fair_jobs(fair.app)
    assert sorted(job.state for job in ran) == ["SUCCESS", "SUCCESS"]
    assert ledger.counts() == {"acme:1": 1, "beta:1": 1}


def test_error_replies_at_enqueue_raise_store_errors_naming_the_cause(fair, fair_store,
                                                                      redis_client):
    redis_client.replicaof("127.0.0.1", free_port())  # a replica whose primary is away
    try:
        with pytest.raises(StoreUnavailableError, match="read-only replica"):
            fair.job.delay("acme", 1)
    finally:
        redis_client.replicaof("no", "one")
    redis_client.config_set("maxmemory", 1)
    try:
        with pytest.raises(StoreFullError, match="is full"):
            fair.job.delay("acme", 2)
    finally:
        redis_client.config_set("maxmemory", 0)
    assert fair_store.counts("celery")["ready"] == 0


def test_an_account_id_over_the_maximum_is_an_enqueue_error(fair, fair_store):
    fair.job.delay("ü" * (MAX_ID_LENGTH // 2), 1)  # 1,024 bytes: the most the store takes
    with pytest.raises(InvalidAccountError, match=r"tests\.apps\.fair\.job") as raised:
        fair.job.delay("a" * (MAX_ID_LENGTH + 1), 1)
    assert isinstance(raised.value, EnqueueError)


def test_a_hung_redis_holds_a_producer_no_longer_than_fairqueue_enqueue_timeout(
        redis_server_factory):
    server = redis_server_factory()
    app = Celery("hung", broker=server.url)
    app.conf.fairqueue_enqueue_timeout = 1.0
    celery_fairqueue.install(app)

    @app.task(shared=False, base=FairTask, account_arg="account")
    def t(account):
        pass

    t.delay("acme")  # connected and answering
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            t.delay("acme")
        waited = time.monotonic() - started
    finally:
        server.resume()
    assert waited < 3 * app.conf.fairqueue_enqueue_timeout, waited


def test_an_account_past_its_backlog_bound_is_refused_and_retries_are_not(redis_url,
                                                                           redis_client):
    app = Celery("bounded", broker=redis_url)
    app.conf.fairqueue_max_pending_per_account = 3
    app.conf.fairqueue_key_prefix = "bounded"
    celery_fairqueue.install(app)

    @app.task(shared=False, base=FairTask, bind=True, account_arg="account",
              job_key=("account", "n"))
    def t(self, account, n):
        if self.request.retries == 0 and n == 0:
            raise self.retry(countdown=0)

    for n in range(3):
        t.delay("whale", n)
    with pytest.raises(BacklogFullError, match="max_pending_per_account"):
        t.delay("whale", 3)
    t.delay("minnow", 9)  # other accounts are not held back by the whale
    ran = run_fair_jobs(app, limit=1)  # job 0 retries: its next delivery is stored anyway
    assert [job.state for job in ran] == ["RETRY"]
    with pytest.raises(BacklogFullError):
        t.delay("whale", 3)
    assert len(run_fair_jobs(app)) == 4  # the retry, jobs 1 and 2, the minnow's
    t.delay("whale", 3)  # room again


def test_purging_an_old_dead_letter_keeps_the_marker_of_a_newer_job_with_its_key(rel,
                                                                                  fair_store):
    dlq = DeadLetters(rel.app)
    fair_store.bury("old:2", "gave up", record={"task": "t", "job_key": "key-1"})
    fair_store.mark_started("key-1", "new:0")  # a replay of the key is running right now
    assert dlq.purge(["old:2"]) == 1
    assert fair_store.marker("key-1").job_id == "new:0"
    fair_store.bury("new:0", "gave up", record={"task": "t", "job_key": "key-1"})
    assert dlq.purge(["new:0"]) == 1  # its own marker goes with it
    assert fair_store.marker("key-1") is None


def test_a_purge_racing_a_failing_replay_leaves_no_letter_half_deleted(rel, fair_store,
                                                                       monkeypatch):
    dlq = DeadLetters(rel.app)
    fair_store.bury("p:0", "permanent: no", record={"task": rel.plain_send.name,
                                                    "args": ["acme", 1]})

    def send_while_purged(*args, **kwargs):
        assert dlq.purge(["p:0"]) == 0  # the replay holds the letter: nothing to purge
        raise ConnectionError("broker down")

    monkeypatch.setattr(rel.app, "send_task", send_while_purged)
    with pytest.raises(ConnectionError):
        dlq.replay("p:0")
    in_hash = fair_store.client.hexists(fair_store.keys.dead, "p:0")
    in_index = fair_store.client.zscore(fair_store.keys.dead_index, "p:0") is not None
    assert in_hash and in_index  # put back whole: listed, counted, purgeable
    assert [d.job_id for d in dlq.list()] == ["p:0"]


def test_replaying_a_fair_letter_twice_runs_it_once(rel, fair_store, redis_client):
    redis_client.set("fail:7", "permanent")
    rel.send_message.delay("acme", 7)
    run_fair_jobs(rel.app)
    [letter] = DeadLetters(rel.app).list()
    redis_client.delete("fail:7")
    DeadLetters(rel.app).replay(letter.job_id)
    with pytest.raises(DeadLetterNotFound):
        DeadLetters(rel.app).replay(letter.job_id)
    assert [job.state for job in run_fair_jobs(rel.app)] == ["SUCCESS"]
    assert DeadLetters(rel.app).count() == 0


def test_a_replay_that_loses_the_race_reports_not_found(rel, fair_store):
    fair_store.bury("race:0", "permanent: no", record={
        "task": rel.send_message.name, "account": "acme", "args": ["acme", 9]})
    loser, winner = DeadLetters(rel.app), DeadLetters(rel.app)
    won: list[str] = []

    def win_the_race(**_: object) -> None:  # between the loser's read and its store call
        if not won:
            won.append("replaying")
            won[0] = winner.replay("race:0").id

    signals.before_task_publish.connect(win_the_race, weak=False)
    try:
        with pytest.raises(DeadLetterNotFound):  # not kombu's OperationalError
            loser.replay("race:0")
    finally:
        signals.before_task_publish.disconnect(win_the_race)
    assert [job.task_id for job in run_fair_jobs(rel.app)] == won
    assert loser.count() == 0


@pytest.mark.slow  # kombu tries the refused broker for a few seconds
def test_a_replay_the_broker_refuses_is_reported_and_the_batch_goes_on(redis_client, redis_url):
    """A plain task's replay goes through the broker: when the broker is away, that letter is
    reported and kept, and the batch goes on to replay the fair letter after it."""
    app = Celery("broker-down", broker=f"redis://127.0.0.1:{free_port()}/0",
                 set_as_current=False)
    app.conf.update(fairqueue_redis_url=redis_url, task_publish_retry=False)
    celery_fairqueue.install(app)

    @app.task(name="broker_down.plain")
    def plain(n: int) -> int:
        return n

    @app.task(base=FairTask, name="broker_down.fair", account_arg="account")
    def fair(account: str) -> str:
        return account

    store = store_for(app)
    store.bury("plain:0", "permanent: no", record={"task": plain.name, "args": [1]})
    store.bury("fair:0", "permanent: no", record={"task": fair.name, "account": "acme",
                                                  "args": ["acme"]})
    outcome = replay_each(DeadLetters(app), ["plain:0", "fair:0"])
    assert list(outcome.done) == ["fair:0"] and outcome.unreachable is None
    assert "broker" in outcome.failed["plain:0"]
    assert [letter.job_id for letter in DeadLetters(app).list()] == ["plain:0"]  # kept


def test_memory_per_real_job_is_measured(fair, fair_store, redis_client, figure):
    jobs = 2000
    before = int(redis_client.info("memory")["used_memory"])
    for n in range(jobs):
        fair.job.delay(f"account-{n % 100}", n)
    per_job = (int(redis_client.info("memory")["used_memory"]) - before) / jobs
    envelope = JobRecord.parse(fair_store.client.hget(fair_store.keys.records, json.loads(
        json.dumps(fair_store.client.hkeys(fair_store.keys.records)[0])))).envelope
    figure(f"redis memory per real .delay() job: {per_job:.0f} B ({len(envelope)} B of it the "
           f"stored Celery message), {jobs} jobs over 100 accounts")
    assert per_job < 2048
