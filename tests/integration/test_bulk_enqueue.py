"""Bulk enqueue: a group, a chord's header, ``chunks`` and ``FairTask.apply_many`` store their
fair jobs in pipelined batches, one round trip per shard per batch, each job its own atomic
script call, each job's outcome reported on its own (bulk.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from celery import Celery, chord, group
from redis.connection import Connection

import celery_fairqueue
from celery_fairqueue import BacklogFullError, EnqueueOutcome, FairTask, StoreUnavailableError, bulk
from celery_fairqueue.store import store_for
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.formats.records import member_job_id


@contextlib.contextmanager
def round_trips() -> Iterator[list[str]]:
    """The first word of each request redis-py sends while the block runs (a pipeline is one
    request, named by its first command): the round trips, counted at the client."""
    sent: list[str] = []
    original = Connection.send_packed_command

    def counting(self, command, check_health=True):  # type: ignore[no-untyped-def]
        first = command[0] if isinstance(command, list) else command
        words = bytes(first).split(b"\r\n")
        sent.append(words[2].decode().upper() if len(words) > 2 else "?")
        return original(self, command, check_health)

    Connection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        Connection.send_packed_command = original  # type: ignore[method-assign]


def stored_ids(store) -> set[str]:
    return {job_id.split(":")[0] for job_id in store.client.hkeys(store.keys.records)}


@pytest.fixture
def unhurried(monkeypatch):
    """A batch is stored only when full or at the end of its block, however slowly this
    machine builds the group (the count of round trips is then the design's)."""
    monkeypatch.setattr(bulk, "FLUSH_SECONDS", 3600.0)


def test_a_group_of_fair_tasks_is_stored_in_one_round_trip_per_shard(fair, fair_store,
                                                                     unhurried):
    fair.job.delay("warm", 0)  # connected, scripts loaded, Redis's clock read
    jobs = group(fair.job.s(f"acct{n % 7}", n) for n in range(300))
    with round_trips() as sent:
        result = jobs.apply_async()
    # its first job alone, at once (see bulk.FLUSH_SECONDS), then 299 in one request
    assert sent.count("EVALSHA") == 2, sent
    assert "SCRIPT" not in sent  # no SCRIPT EXISTS round trip before it
    assert {r.id for r in result.results} <= stored_ids(fair_store)
    assert len(stored_ids(fair_store)) == 301


def test_a_groups_jobs_keep_their_order_within_each_account(fair, fair_store):
    group(fair.job.s("acme", n) for n in range(50)).apply_async()
    fifo = fair_store.keys.queue("celery").fifo(encode_id("acme"))
    ready = fair_store.client.zrange(fifo, 0, -1)
    order = [fair_store.records([member_job_id(member)])[0] for member in ready]
    assert [record.envelope.count('"n": ') >= 0 for record in order]
    task_ids = [member_job_id(member).split(":")[0] for member in ready]
    assert len(task_ids) == 50


def test_apply_many_reports_each_jobs_outcome_and_a_duplicate_names_the_job_holding_its_key(
        fair, fair_store):
    first = fair.job.delay("acme", 1)
    outcomes = fair.job.apply_many([("acme", 1), ("acme", 2), {"account_id": "beta", "n": 3},
                                    ("acme", 2)])
    assert [o.state for o in outcomes] == ["duplicate", "stored", "stored", "duplicate"]
    assert outcomes[0].duplicate_of == first.id
    assert outcomes[3].duplicate_of == outcomes[1].task_id
    assert all(isinstance(o, EnqueueOutcome) for o in outcomes)
    assert stored_ids(fair_store) == {first.id, outcomes[1].task_id, outcomes[2].task_id}


def test_apply_many_takes_signatures_with_their_own_options(fair, fair_store):
    outcomes = fair.job.apply_many([fair.job.s("x", 1).set(account="other"),
                                    fair.job.s("x", 2)], countdown=60)
    assert [o.state for o in outcomes] == ["stored", "stored"]
    records = fair_store.records([f"{o.task_id}:0" for o in outcomes])
    assert [r.account for r in records] == ["other", "x"]
    assert fair_store.counts("celery")["delayed"] == 2


def bounded_app(url: str, prefix: str, **conf: object) -> tuple[Celery, object]:
    """An app of its own on ``url`` with ``conf``, and its keyed fair task ``t``."""
    app = Celery(prefix, broker=url)
    app.conf.update(fairqueue_key_prefix=prefix, **conf)
    celery_fairqueue.install(app)

    @app.task(base=FairTask, account_arg="account", job_key=("account", "n"), name=f"{prefix}.t")
    def t(account: str, n: int) -> None:
        pass

    return app, t


def test_a_bulk_enqueue_that_fails_midway_says_which_jobs_were_stored(redis_url, redis_client):
    app, t = bounded_app(redis_url, "bulkbound", fairqueue_max_pending_per_account=3)
    with pytest.raises(BacklogFullError) as raised:
        t.apply_many([("acme", n) for n in range(5)] + [("beta", 9)])
    outcomes = raised.value.outcomes
    assert [o.state for o in outcomes] == ["stored"] * 3 + ["not stored"] * 2 + ["stored"]
    assert all(isinstance(o.error, BacklogFullError) for o in outcomes[3:5])
    assert "2 of 6 jobs were not stored (4 stored" in str(raised.value)
    assert stored_ids(store_for(app)) == {o.task_id for o in outcomes if o.stored}


def test_a_group_refused_by_a_bound_raises_the_error_of_one_delay(redis_url, redis_client):
    _app, t = bounded_app(redis_url, "bulkgroup", fairqueue_max_pending_per_account=2)
    with pytest.raises(BacklogFullError, match="max_pending_per_account") as raised:
        group(t.s("acme", n) for n in range(4)).apply_async()
    assert [o.state for o in raised.value.outcomes] == ["stored"] * 2 + ["not stored"] * 2


@pytest.mark.slow
def test_a_group_sent_while_redis_is_paused_raises_and_stores_none_of_its_jobs(
        redis_server_factory):
    """Redis stalls (SIGSTOP) for longer than the producer's deadline: the group raises one
    StoreUnavailableError, and once Redis runs the late calls, none of them stored a job."""
    server = redis_server_factory()
    app, t = bounded_app(server.url, "bulkpaused", fairqueue_enqueue_timeout=1.0)
    t.delay("warm", 0)  # connected, scripts loaded, Redis's clock read
    resume = threading.Timer(2.0, server.resume)
    server.pause()
    resume.start()
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            group(t.s("acme", n) for n in range(20)).apply_async()
    finally:
        resume.join()
    outcomes = raised.value.outcomes
    assert [o.state for o in outcomes] == ["not stored"] * 20  # every call told, tried or not
    assert all("not sent" in str(o.error) for o in outcomes[1:])  # after its first failed
    time.sleep(0.3)  # the late calls run as Redis resumes
    assert len(stored_ids(store_for(app))) == 1  # the warm-up job only


def test_a_group_whose_building_raises_midway_stores_the_jobs_sent_before_as_plain_celery(
        fair, fair_store, unhurried):
    """A call the task cannot take (Celery's TypeError) ends the group there, as in plain
    Celery; a call the store refuses does not (test_bulk_edges.py)."""
    sent = [fair.job.s("acme", n).freeze().id for n in range(3)]
    with pytest.raises(TypeError):
        group([*(fair.job.s("acme", n).set(task_id=task_id) for n, task_id in enumerate(sent)),
               fair.job.s("acme"), fair.job.s("acme", 9)]).apply_async()
    assert stored_ids(fair_store) == set(sent)


def test_a_chords_header_is_stored_in_one_round_trip(fair, fair_store, unhurried):
    fair.job.delay("warm", 0)
    with round_trips() as sent:
        chord(fair.job.s("acme", n) for n in range(20))(fair.urgent.s("acme", 99).set(
            immutable=True))
    assert sent.count("EVALSHA") == 2, sent  # its first job, then the 19 others
    assert len(stored_ids(fair_store)) == 1 + 20  # the body waits in the result backend


def test_a_lone_delay_is_stored_before_it_returns(fair, fair_store):
    with fair.app.producer_or_acquire():
        pass  # an empty block stores nothing and raises nothing
    result = fair.job.delay("acme", 5)
    assert stored_ids(fair_store) == {result.id}


def test_jobs_sent_in_a_users_producer_block_are_stored_as_the_block_ends(fair, fair_store,
                                                                          unhurried):
    first = fair.job.delay("acme", 1)
    with fair.app.producer_or_acquire() as producer:
        again = fair.job.apply_async(("acme", 1), producer=producer)
        other = fair.job.apply_async(("acme", 2), producer=producer)
        assert stored_ids(fair_store) == {first.id}
    assert again.id == first.id  # a duplicate's result is the job holding its key, as alone
    assert stored_ids(fair_store) == {first.id, other.id}


def test_a_sharded_group_makes_one_round_trip_per_shard(redis_client, unhurried):
    from tests.apps import sharded
    store = sharded.fresh()
    sharded.job.delay("warm", 0)
    accounts = [f"acct{n}" for n in range(40)]
    with round_trips() as sent:
        group(sharded.job.s(account, n) for n, account in enumerate(accounts)).apply_async()
    shards_used = {store.shards.index(store.shard_for(a)) for a in accounts}
    assert sent.count("EVALSHA") == 1 + len(shards_used) > 2  # the first job, then each shard
    for account in accounts:  # each job on its account's own shard
        shard = store.shard_for(account)
        assert shard.client.zcard(shard.keys.queue("celery").fifo(encode_id(account)))


def test_a_bulk_enqueue_of_large_messages_sends_a_few_megabytes_a_round_trip(fair, fair_store,
                                                                               unhurried):
    fair.job.delay("warm", 0)
    big = "x" * 1_500_000
    with round_trips() as sent:
        outcomes = fair.job.apply_many([("acme", n, big) for n in range(6)])
    assert [o.state for o in outcomes] == ["stored"] * 6
    assert sent.count("EVALSHA") == 2, sent  # 3 messages of 1.5 MB make a 4 MiB round trip


def test_a_group_fed_by_a_slow_generator_stores_its_first_jobs_while_the_generator_runs(
        fair, fair_store):
    """Celery's #3021: a chord header's generator is consumed as its tasks are sent, so the
    first ones run before the last is made; a batch waits at most FLUSH_SECONDS."""
    stored_meanwhile: list[int] = []

    def slowly():
        for n in range(4):
            time.sleep(bulk.FLUSH_SECONDS * 2)
            stored_meanwhile.append(len(stored_ids(fair_store)))
            yield fair.job.s("acme", n)

    group(slowly()).apply_async()
    # Celery's group reads two tasks ahead; each job is stored as it is sent: the first at
    # once, before the third task is made, the next ones as they come, slowly
    assert stored_meanwhile == [0, 0, 1, 1]
    assert len(stored_ids(fair_store)) == 4


def test_a_group_larger_than_a_batch_is_stored_a_batch_at_a_time(fair, fair_store, unhurried):
    store_for(fair.app)  # the app's settings, read
    fair.job.delay("warm", 0)
    with round_trips() as sent:
        group(fair.job.s(f"acct{n % 3}", n) for n in range(1201)).apply_async()
    # the first alone, then 500, 500 and 200 (fairqueue_enqueue_batch)
    assert sent.count("EVALSHA") == 4, sent
    assert len(stored_ids(fair_store)) == 1202
