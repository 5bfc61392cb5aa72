"""The codec of what the fair store holds (store/formats/records.py): every format reads back
what it built, for any id a user can send (spaces, "|", lone surrogates, 10 KB)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_fairqueue.protocol import MAX_ID_LENGTH, NO_JOB_KEY, normalize_id
from celery_fairqueue.store.formats.keys import encode_id, encode_job_key
from celery_fairqueue.store.formats.records import (
    Bucket,
    DeadRecord,
    Deferral,
    JobRecord,
    Marker,
    ReadyMember,
    WorkerEntry,
    build_dead_record,
    marker_external_id,
    member_job_id,
    record_account,
    seq_time,
)

#: Ids as hostile as a user's: any code point (lone surrogates too), separators, long.
hostile = st.one_of(
    st.text(min_size=1, max_size=40),
    st.text(alphabet=" |{}:%\n\udc80\ud800", min_size=1, max_size=20),
    st.just("| " * (MAX_ID_LENGTH // 2)),
).filter(lambda s: len(normalize_id(s).encode("utf-8", "surrogatepass")) <= MAX_ID_LENGTH)
#: Job ids are not encoded (they are only ever the last field): any text, up to 10 KB.
job_ids = st.one_of(st.text(min_size=1, max_size=60), st.just("| \udc80" * 3_000)).map(
    lambda t: f"{t}:0")


@settings(max_examples=200, deadline=None)
@given(hostile, hostile, st.integers(0, 10**15), st.one_of(st.none(), hostile),
       st.one_of(st.none(), st.floats(0, 4e9)), st.integers(0, 100), st.booleans(),
       st.text(max_size=50))
def test_job_record_round_trips_any_ids_and_message(queue, account, micros, job_key, expires,
                                                    deliveries, leased, envelope):
    record = JobRecord(queue, account, f"3{micros:016d}", encode_job_key(job_key),
                       None if expires is None else round(expires, 6), deliveries,
                       "token-1" if leased else None, 1.5 if leased else None, leased,
                       envelope + "\n{}")
    back = JobRecord.parse(record.build())
    assert back.queue == normalize_id(queue) and back.account == normalize_id(account)
    assert back.stored_key == encode_job_key(job_key)
    assert back.seq == record.seq and back.ready_since == micros / 1e6
    assert back.expires == pytest.approx(record.expires) if expires is not None else \
        back.expires is None
    assert (back.deliveries, back.owner, back.started, back.capped, back.envelope) == (
        deliveries, record.owner, record.started, leased, record.envelope)
    assert record_account(record.build()) == normalize_id(account)


@settings(max_examples=200, deadline=None)
@given(job_ids, st.integers(0, 10**15), st.integers(0, 9))
def test_ready_member_round_trips_and_a_job_id_may_hold_the_separator(job_id, micros, priority):
    member = ReadyMember(f"{priority}{micros:016d}", job_id + "|x|y")
    back = ReadyMember.parse(member.build())
    assert back == member and back.ready_since == micros / 1e6
    assert member_job_id(member.build()) == job_id + "|x|y"
    with pytest.raises(ValueError):
        ReadyMember.parse("no separator")


def test_an_accounts_fifo_sorts_by_priority_then_by_when_its_jobs_became_ready():
    """Every member of an account's FIFO has score 0, so Redis orders them by their bytes:
    the seq's fixed width makes that the priority digit's order, then the time's."""
    seqs = ["00000000000000009", "00000000000000010", "10000000000000001", "90000000000000000"]
    members = [ReadyMember(seq, f"job-{n}|{n}:0").build() for n, seq in enumerate(seqs)]
    assert sorted(m.encode() for m in reversed(members)) == [m.encode() for m in members]


def test_a_dead_letters_header_is_read_in_either_layout():
    assert JobRecord.parse_header("default acme 0000000000000001 -") == \
        JobRecord("default", "acme", "0000000000000001", NO_JOB_KEY, None)
    assert JobRecord.parse_header("default acme 0000000000000001 k 12.500000").expires == 12.5
    header = JobRecord("default", "acme", "01733000000000000", "k", deliveries=2).build()
    assert JobRecord.parse_header(header.rstrip("\n")).deliveries == 2
    for bad in ("not a meta", "no newline at all in a record"):
        with pytest.raises(ValueError):
            JobRecord.parse_header(bad) if bad == "not a meta" else JobRecord.parse(bad)
    assert seq_time("0000000000000001") is None  # a counter of the layout before records


@given(st.floats(0, 1e6), st.floats(0, 4e9))
def test_bucket_round_trips_exactly(tokens, updated):
    assert Bucket.parse(Bucket(tokens, updated).build()) == Bucket(tokens, updated)


def test_bucket_refills_at_its_rate_up_to_its_burst():
    bucket = Bucket(0.5, 100.0)
    assert bucket.tokens_at(101.0, rate=0.25, burst=5) == 0.75
    assert bucket.tokens_at(1000.0, rate=1, burst=5) == 5
    assert bucket.tokens_at(99.0, rate=1, burst=5) == 0.5  # a clock going back adds nothing


@settings(max_examples=200, deadline=None)
@given(job_ids, st.one_of(st.none(), st.text(max_size=50), st.just("é" * 10_000)))
def test_marker_external_ids_come_back_exactly(job_id, external_id):
    # write_marker's JSON, as lib/records.lua splices the literal records.py makes
    tail = marker_external_id(external_id)
    raw = ('{"state":"done","job_id":' + json.dumps(job_id) + ',"at":12.5' +
           (',"external_id":' + tail if tail else "") + "}")
    marker = Marker.parse(raw)
    assert (marker.state, marker.job_id, marker.at, marker.external_id) == \
        ("done", job_id, 12.5, external_id)
    assert marker.done
    assert Marker.read(raw) == marker


def test_an_unreadable_marker_is_none():
    assert Marker.read(None) is None
    assert Marker.read("") is None
    assert Marker.read("[1, 2]") is None
    assert Marker.read('{"job_id": "a:0"}') is None


def test_a_dead_record_reads_the_opaque_worker_record_and_the_old_flat_form():
    record = build_dead_record({"task": "t", "account": "a b|c", "error": None})
    assert json.loads(record) == {"task": "t", "account": "a b|c"}
    assert build_dead_record({"error": None}) == ""
    meta = JobRecord("q q", "a|b", "0000000000000001", NO_JOB_KEY).build().rstrip("\n")
    raw = json.dumps({"job_id": "j:0", "at": 3.0, "reason": "boom", "record": record,
                      "envelope": "{}", "meta": meta, "deliveries": 2})
    dead = DeadRecord.parse(raw)
    assert (dead.job_id, dead.reason, dead.at, dead.deliveries) == ("j:0", "boom", 3.0, 2)
    assert dead.record["account"] == "a b|c" and dead.envelope == "{}"
    assert dead.meta is not None and dead.meta.queue == "q q"
    flat = DeadRecord.parse(json.dumps({"job_id": "j:0", "task": "t", "envelope": "E"}))
    assert flat.record["task"] == "t" and flat.envelope == "E" and flat.meta is None


@given(st.sampled_from(["rate_limited", "window_closed", "concurrency_cap"]),
       st.one_of(st.none(), st.floats(0, 4e9)))
def test_a_deferral_round_trips(reason, until):
    back = Deferral.parse(Deferral(reason, until).build())
    assert back.reason == reason
    assert back.until == (None if until is None else pytest.approx(until, abs=1e-6))


def test_a_worker_entry_is_its_heartbeat_and_its_json():
    entry = WorkerEntry.parse('12.500000 {"name": "celery@a b", "queues": ["x|y"]}')
    assert entry.heartbeat == 12.5 and entry.info["queues"] == ["x|y"]


def test_encoded_ids_never_hold_a_separator():
    for value in ("a b", "a|b", "\udc80", "|" * MAX_ID_LENGTH):
        assert not {" ", "|"} & set(encode_id(value))
