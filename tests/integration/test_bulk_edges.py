"""Bulk enqueue at its edges (issue 48): one rule for every call of a batch, whoever refuses
it. Every call that can be stored is stored; each refused call is told "not stored" with its
own error; the error's ``outcomes`` hold every call, in order; what the store holds is exactly
what was told "stored". A call the task cannot take stores nothing; an outage mid-bulk tells
every call, the ones it never tried too, so a caller resends exactly those."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery, chord, group
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.connection import Connection

import celery_fairqueue
from celery_fairqueue import (
    BacklogFullError,
    EnqueueError,
    FairTask,
    InvalidAccountError,
    InvalidJobKeyError,
    MissingAccountError,
    PayloadTooLargeError,
    SerializationError,
    StoreUnavailableError,
    bulk,
)
from celery_fairqueue.store import store_for

_NUMBERS = itertools.count()

#: Largest message the tests' apps take: a call with a 5,000-character argument is over it.
MAX_PAYLOAD = 4096

#: A call refused before Redis, by kind: how to make it (``t``'s signature) and its error.
BAD: dict[str, tuple[Callable[[Any, int], Any], type[EnqueueError]]] = {
    "not JSON": (lambda t, n: t.s("acme", n, object()), SerializationError),
    "a 2,000-byte account": (lambda t, n: t.s("a" * 2000, n), InvalidAccountError),
    "too large": (lambda t, n: t.s("acme", n, "x" * 5000), PayloadTooLargeError),
    "no account": (lambda t, n: t.s("", n), MissingAccountError),
    "an empty job_key=": (lambda t, n: t.s("acme", n).set(job_key=""), InvalidJobKeyError),
}


def app_with_task(url: str, prefix: str, keyed: bool = False, **conf: Any) -> tuple[Celery, Any]:
    """An app of its own on ``url`` and its fair task ``t(account, n, blob="")``: without a
    business key (a resent call is a second job), or keyed by account and n."""
    prefix = f"{prefix}{next(_NUMBERS)}"  # a task name is registered once per process
    app = Celery(prefix, broker=url)
    app.conf.update(fairqueue_key_prefix=prefix, fairqueue_max_payload_bytes=MAX_PAYLOAD, **conf)
    celery_fairqueue.install(app)

    @app.task(base=FairTask, account_arg="account", name=f"{prefix}.t",
              job_key=("account", "n") if keyed else None)
    def t(account: str, n: int, blob: Any = "") -> None:
        pass

    return app, t


def stored_ids(app: Celery) -> set[str]:
    """The task ids of the jobs the app's store holds, on every shard."""
    return {job_id.split(":")[0] for shard in store_for(app).shards
            for job_id in shard.client.hkeys(shard.keys.records)}


def call(t: Any, n: int, kind: str = "good") -> Any:
    """Call ``n``, good or of a bad kind, with its own task id (so its outcome's place shows)."""
    sig = t.s("acme", n) if kind == "good" else BAD[kind][0](t, n)
    return sig.set(task_id=f"call-{n}")


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_call_in_a_bulk_enqueue_stores_nothing_it_does_not_report(kind, redis_url,
                                                                       redis_client):
    app, t = app_with_task(redis_url, "bulkbad")
    calls = [call(t, n, kind if n == 10 else "good") for n in range(20)]
    with pytest.raises(BAD[kind][1]) as raised:
        t.apply_many(calls)
    outcomes = raised.value.outcomes
    assert outcomes is not None
    assert [o.task_id for o in outcomes] == [f"call-{n}" for n in range(20)]
    assert [o.state for o in outcomes] == ["stored"] * 10 + ["not stored"] + ["stored"] * 9
    assert isinstance(outcomes[10].error, BAD[kind][1])
    assert "1 of 20 jobs were not stored (19 stored" in str(raised.value)
    assert stored_ids(app) == {o.task_id for o in outcomes if o.stored}
    # the caller resends exactly the calls not stored, fixed: one job a call, none twice
    again = t.apply_many([call(t, n) for n, o in enumerate(outcomes) if not o.stored])
    assert [o.state for o in again] == ["stored"]
    assert len(stored_ids(app)) == 20


def test_a_call_the_task_cannot_take_stops_a_bulk_enqueue_before_it_stores_any(
        redis_url, redis_client):
    """Arguments that do not fit the task are a bug of the caller's: the TypeError one
    ``.delay()`` raises, with nothing stored, so the fixed batch can be sent again whole."""
    app, t = app_with_task(redis_url, "bulktype")
    calls = [call(t, n) for n in range(20)]
    calls[10] = t.s("acme").set(task_id="call-10")  # n is missing
    with pytest.raises(TypeError) as raised:
        t.apply_many(calls)
    assert not isinstance(raised.value, EnqueueError)
    assert stored_ids(app) == set()


def test_a_group_with_a_refused_call_stores_the_others_and_tells_every_call(
        redis_url, redis_client):
    app, t = app_with_task(redis_url, "bulkgroupbad")
    with pytest.raises(SerializationError) as raised:
        group(call(t, n, "not JSON" if n == 3 else "good") for n in range(8)).apply_async()
    outcomes = raised.value.outcomes
    assert [o.task_id for o in outcomes] == [f"call-{n}" for n in range(8)]
    assert [o.state for o in outcomes] == ["stored"] * 3 + ["not stored"] + ["stored"] * 4
    assert stored_ids(app) == {o.task_id for o in outcomes if o.stored}


def test_a_chords_header_with_a_refused_call_stores_the_others_and_tells_every_call(
        fair, fair_store):
    header = [fair.job.s("acme", n).set(task_id=f"head-{n}") for n in range(5)]
    header[2] = fair.job.s("acme", object()).set(task_id="head-2")
    with pytest.raises(SerializationError) as raised:
        chord(header)(fair.urgent.s("acme", 99).set(immutable=True))
    outcomes = raised.value.outcomes
    assert [o.task_id for o in outcomes] == [f"head-{n}" for n in range(5)]
    assert [o.state for o in outcomes] == ["stored"] * 2 + ["not stored"] + ["stored"] * 2
    assert stored_ids(fair.app) == {o.task_id for o in outcomes if o.stored}


def test_a_sharded_bulk_enqueue_tells_every_call_in_its_place(redis_url, redis_client):
    """Four shards: each shard's calls go in their own round trips, the outcomes come back in
    the calls' order, a refusal by Redis (a full backlog) and one before it side by side."""
    app, t = app_with_task(redis_url, "bulkshards", fairqueue_shards=4,
                           fairqueue_max_pending_per_account=2)
    accounts = [f"acct{n % 6}" for n in range(30)]
    calls = [t.s(account, n).set(task_id=f"call-{n}") for n, account in enumerate(accounts)]
    calls[7] = t.s("acme", 7, object()).set(task_id="call-7")
    with pytest.raises(SerializationError) as raised:
        t.apply_many(calls)
    outcomes = raised.value.outcomes
    assert [o.task_id for o in outcomes] == [f"call-{n}" for n in range(30)]
    assert len({store_for(app).shard_for(a).keys.tag for a in accounts}) > 1
    waiting: dict[str, int] = {}
    for n, account in enumerate(accounts):
        if n == 7:
            assert isinstance(outcomes[n].error, SerializationError)
            continue
        waiting[account] = waiting.get(account, 0) + 1  # each account's first two stored
        assert outcomes[n].stored == (waiting[account] <= 2), n
        assert outcomes[n].stored or isinstance(outcomes[n].error, BacklogFullError)
    assert stored_ids(app) == {o.task_id for o in outcomes if o.stored}


# -- an outage mid-bulk -------------------------------------------------------------------------

@contextlib.contextmanager
def before_round_trip(number: int, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` just before the ``number``-th request of several script calls (a round
    trip of a bulk enqueue: one pipeline) that redis-py sends while the block runs."""
    original = Connection.send_packed_command
    sent = [0]

    def watching(self, command, check_health=True):  # type: ignore[no-untyped-def]
        packed = b"".join(map(bytes, command)) if isinstance(command, list) else bytes(command)
        if packed.count(b"EVALSHA") > 1 and sent[0] < number:
            sent[0] += 1
            if sent[0] == number:
                action()
        return original(self, command, check_health)

    Connection.send_packed_command = watching  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection.send_packed_command = original  # type: ignore[method-assign]


@pytest.mark.slow
@pytest.mark.parametrize("stall", ["CLIENT PAUSE WRITE", "CLIENT PAUSE ALL", "SIGSTOP"])
def test_an_outage_mid_bulk_reports_every_call(stall, redis_server_factory, figure):
    """Redis stalls before the third round trip of an apply_many of 1,000, for longer than the
    producer's deadline: the first 200 are stored, and every other call is told "not stored"
    with the failure, tried or not; once Redis runs the late calls, none of them stored a
    job; resending exactly the calls not stored stores each once."""
    server = redis_server_factory()
    app, t = app_with_task(server.url, "bulkoutage", fairqueue_enqueue_timeout=1.0,
                           fairqueue_enqueue_batch=100)
    t.delay("warm", 0)  # connected, scripts loaded, Redis's clock read
    operator = redis.Redis.from_url(server.url)
    timers: list[threading.Timer] = []

    stalled_at: list[float] = []

    def stall_redis() -> None:
        stalled_at.append(time.monotonic())
        if stall == "SIGSTOP":
            server.pause()
            timers.append(threading.Timer(3.0, server.resume))
            timers[-1].start()
        else:
            operator.execute_command("CLIENT", "PAUSE", 3000, stall.split()[-1])

    started = time.monotonic()
    try:
        with before_round_trip(3, stall_redis), pytest.raises(StoreUnavailableError) as raised:
            t.apply_many([("acme", n) for n in range(1000)])
    finally:
        for timer in timers:
            timer.join()
    took = time.monotonic() - started
    outcomes = raised.value.outcomes
    assert outcomes is not None and len(outcomes) == 1000
    assert [o.state for o in outcomes] == ["stored"] * 200 + ["not stored"] * 800
    assert all(isinstance(o.error, StoreUnavailableError) for o in outcomes[200:])
    assert "800 of 1000 jobs were not stored (200 stored" in str(raised.value)
    # the stall (3 s from its start, not from the call's) is over and the late calls have run
    time.sleep(max(0.0, stalled_at[0] + 3.3 - time.monotonic()))
    assert len(stored_ids(app)) == 201  # the warm-up job and the 200 told "stored"
    figure(f"an outage mid-bulk ({stall}): raised after {took:.2f} s, 1000 of 1000 calls told "
           f"(200 stored, 800 not stored); the store holds the 200")
    again = t.apply_many([("acme", n) for n, o in enumerate(outcomes) if not o.stored])
    assert [o.state for o in again] == ["stored"] * 800
    assert len(stored_ids(app)) == 1001


@pytest.mark.slow
def test_a_group_that_meets_an_outage_tells_every_call_and_sends_no_more(
        redis_server_factory, monkeypatch):
    """A group of 1,000 (its first call alone, then batches of 100): Redis pauses writes
    before the third batch; the calls after it are not sent at all, each told so."""
    monkeypatch.setattr(bulk, "FLUSH_SECONDS", 3600.0)  # batches only when full
    server = redis_server_factory()
    app, t = app_with_task(server.url, "bulkgroupoutage", fairqueue_enqueue_timeout=1.0,
                           fairqueue_enqueue_batch=100)
    warm = t.delay("warm", 0)
    operator = redis.Redis.from_url(server.url)
    pause = lambda: operator.execute_command("CLIENT", "PAUSE", 3000, "WRITE")  # noqa: E731
    started = time.monotonic()
    with before_round_trip(3, pause), pytest.raises(StoreUnavailableError) as raised:
        group(t.s("acme", n) for n in range(1000)).apply_async()
    took = time.monotonic() - started
    outcomes = raised.value.outcomes
    assert [o.state for o in outcomes] == ["stored"] * 201 + ["not stored"] * 799
    assert all("not sent" in str(o.error) for o in outcomes[301:])
    assert took < 3.0  # one producer's deadline, not one a batch
    time.sleep(max(0.0, 3.3 - took))
    assert stored_ids(app) == {warm.id} | {o.task_id for o in outcomes if o.stored}


# -- Hypothesis: a batch mixing good and bad calls ----------------------------------------------

KINDS = ["good", "good", "good", *sorted(BAD)]
#: The apps of the examples, one per batch size (a task name is registered once).
MIXED_APPS: dict[tuple[str, int], tuple[Celery, Any]] = {}


@settings(max_examples=int(os.environ.get("BULK_EXAMPLES", "50")), deadline=None,
          database=None, derandomize=os.environ.get("CI") == "true",
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["acme", "beta"]),
                                st.integers(0, 12)), min_size=1, max_size=30),
       enqueue_batch=st.integers(1, 8))
def test_a_mixed_batch_stores_exactly_the_calls_told_stored(batch, enqueue_batch, redis_url,
                                                            redis_client):
    """Good calls (some duplicates of others by their business key, some over an account's
    bound of 6 waiting jobs) and bad ones of every kind, in any order and any batch size."""
    if (redis_url, enqueue_batch) not in MIXED_APPS:
        MIXED_APPS[redis_url, enqueue_batch] = app_with_task(
            redis_url, f"bulkmix{enqueue_batch}", keyed=True,
            fairqueue_max_pending_per_account=6, fairqueue_enqueue_batch=enqueue_batch)
    app, t = MIXED_APPS[redis_url, enqueue_batch]
    store_for(app).clear()
    calls = [(t.s(account, n) if kind == "good" else BAD[kind][0](t, n)).set(
        task_id=f"call-{place}") for place, (kind, account, n) in enumerate(batch)]
    try:
        outcomes = t.apply_many(calls)
    except EnqueueError as exc:
        assert exc.outcomes is not None
        assert any(o.error is not None for o in exc.outcomes)
        outcomes = exc.outcomes
    else:
        assert all(o.error is None for o in outcomes)
    assert [o.task_id for o in outcomes] == [f"call-{place}" for place in range(len(batch))]
    assert stored_ids(app) == {o.task_id for o in outcomes if o.state == "stored"}
    for (kind, _account, _n), outcome in zip(batch, outcomes, strict=True):
        if kind == "good":
            assert outcome.state in ("stored", "duplicate") or \
                isinstance(outcome.error, BacklogFullError)
        else:
            assert outcome.state == "not stored" and isinstance(outcome.error, BAD[kind][1])
