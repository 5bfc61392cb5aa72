"""The lean layout (format 2): each account's ready jobs in a small sorted set of its own, a
pending job's business-key marker short, on a real redis-server."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_fairqueue.envelope import Envelope
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.protocol import delivery_id, encode_id
from celery_fairqueue.store.formats.records import LegacyMember
from tests.harness.store_tools import claim_jobs

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-1"


def test_an_accounts_fifo_is_a_small_key_of_its_own_gone_when_empty(store):
    for n in range(100):
        put(store, "acme", n)
    fifo = store.keys.queue("default").fifo(encode_id("acme"))
    assert store.client.zcard(fifo) == 100
    assert store.client.object("encoding", fifo) in ("listpack", b"listpack")
    first = store.client.zrange(fifo, 0, 0)[0]
    assert str(first.decode() if isinstance(first, bytes) else first).endswith("|acme-0:0")
    while leases := claim_jobs(store, ["default"], 50, TOKEN, NO_LIMIT):
        for lease in leases:
            store.ack(lease)
    assert not store.client.exists(fifo)


def test_a_head_the_claim_does_not_take_keeps_its_place(store):
    """The claim pops an account's head before it asks the limits and pauses: a head it does
    not take (here, the account paused) goes back, and the FIFO is as it was."""
    ids = [put(store, "acme", n, priority=n % 2) for n in range(4)]
    fifo = store.keys.queue("default").fifo(encode_id("acme"))
    before = store.client.zrange(fifo, 0, -1)
    store.pause("acme", "default")
    assert claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT) == []
    assert store.client.zrange(fifo, 0, -1) == before
    store.resume("acme", "default")
    taken = [lease.job_id for lease in claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT)]
    assert taken == [ids[0], ids[2], ids[1], ids[3]]  # priority, then arrival


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task_id=st.text(min_size=1, max_size=60).filter(lambda t: "\x00" not in t))
def test_a_short_pending_marker_dedupes_any_job_id(store, task_id):
    """``p account|job_id``: the job id is last, whatever it holds (``|``, spaces, braces)."""
    store.client.flushdb()
    envelope = Envelope(body="[[], {}, {}]", headers={"task": "t", "id": task_id,
                                                        "fairqueue_account": "acme"}).to_json()
    first = store.enqueue(queue="default", account="acme", job_id=delivery_id(task_id, 0),
                          envelope=envelope, job_key="the-key")
    again = store.enqueue(queue="default", account="acme", job_id=delivery_id("other", 0),
                          envelope=envelope, job_key="the-key")
    assert first.created and not again.created
    assert again.job_id == delivery_id(task_id, 0)
    raw = store.client.get(store.keys.job_key("the-key"))
    assert (raw.decode() if isinstance(raw, bytes) else raw) == f"p |{delivery_id(task_id, 0)}"
    assert store.marker("the-key").state == "pending"


@pytest.mark.parametrize("shards", [2])
def test_a_sharded_stores_pending_marker_names_its_account(make_store, shards):
    store = make_store(shards=shards)
    put(store, "acme", 1, job_key="k1")
    shard = store.shard_for("acme")
    raw = shard.client.get(shard.keys.job_key("k1"))
    assert (raw.decode() if isinstance(raw, bytes) else raw) == "p acme|acme-1:0"


def test_the_jobs_ever_stored_are_counted_without_a_counter_per_enqueue(store):
    """``enqueued`` is the jobs held and those that left (acked, cancelled, expired, rejected),
    read at once: each delivery once, whatever became of it."""
    put(store, "acme", 0)
    put(store, "acme", 1)
    put(store, "acme", 2, expires=time.time() - 1)  # dropped by the claim, never run
    put(store, "acme", 3)
    put(store, "acme", 4)
    put(store, "acme", 4)  # the same delivery again: stored once
    assert store.cancel("acme-3") == ["acme-3:0"]
    leases = claim_jobs(store, ["default"], 5, TOKEN, NO_LIMIT)
    assert [lease.job_id for lease in leases] == ["acme-0:0", "acme-1:0", "acme-4:0"]
    store.ack(leases[0])
    store.reject(leases[1], "undecodable")
    assert store.stats()["enqueued"] == 5
    assert {name: store.stats().get(name) for name in ("acked", "cancelled", "expired")} == \
        {"acked": 1, "cancelled": 1, "expired": 1}


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(st.tuples(st.text(min_size=1, max_size=20).filter(lambda a: "\x00" not in a),
                               st.text(min_size=1, max_size=30)), min_size=1, max_size=12))
def test_an_accounts_range_in_the_set_of_format_1_holds_its_jobs_and_no_other(store, jobs):
    """Readers of a store at format 1 read an account's jobs off the queue's one set by a lex
    range (records.LegacyMember.account_range, legacy_range in Lua): whatever the account ids
    (one a prefix of another, ``|``, braces) and job ids, each range holds that account's."""
    ready = store.keys.queue("default").ready
    store.client.delete(ready)
    members = {f"{encode_id(account)}|1{n:016d}|{job_id}": (encode_id(account), job_id)
               for n, (account, job_id) in enumerate(jobs)}
    store.client.zadd(ready, dict.fromkeys(members, 0))
    for encoded in {encoded for encoded, _ in members.values()}:
        found = store.client.zrangebylex(ready, *LegacyMember.account_range(encoded))
        parsed = [LegacyMember.parse(raw) for raw in found]
        assert sorted(member.ready.job_id for member in parsed) == sorted(
            job_id for owner, job_id in members.values() if owner == encoded)
        assert {member.encoded_account for member in parsed} == {encoded}
