"""Property-based tests: arbitrary JSON arguments and hostile strings (lone surrogates, NUL, the
store's separators ``|``/space, hash-tag braces, percent signs, 10 KB strings, NaN, huge
integers) go through enqueue, claim, failure, dead letter and replay unchanged.

A real redis-server (the session ``redis_server``), no mocks: the jobs run in this process
through :func:`celery_fairqueue.testing.run_fair_jobs`, which claims and settles them as a
worker does. Each Hypothesis example starts from an empty Redis (``FLUSHDB``), since one test
function runs many examples. Values are compared as canonical JSON text
(``json.dumps(..., sort_keys=True)``, ASCII): byte for byte, and NaN equals NaN.

JSON itself cannot keep one thing apart: a high surrogate followed by a low one (two lone code
points, "\\ud800\\udcff") is written exactly like the astral character they pair to, and read
back as it. Arguments are compared as JSON text, so that is no difference there; for account ids
the split pair is normalised to the character it stands for (see the last test).
"""

from __future__ import annotations

import importlib
import json
import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from celery_fairqueue import DeadLetters, EnqueueError, FairqueueError
from celery_fairqueue.protocol import MAX_ID_LENGTH, normalize_id
from celery_fairqueue.testing import run_fair_jobs

pytestmark = pytest.mark.slow

EXAMPLES = settings(
    deadline=None,
    database=None,  # no example database (Hypothesis still keeps caches in .hypothesis/)
    # CI runs the same examples every time (green or red for a reason, never by the draw);
    # a run on a developer's machine draws new ones, to find what CI's fixed draw does not
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.large_base_example, HealthCheck.data_too_large],
)

# -- strategies -------------------------------------------------------------------------------

#: Pieces that stress a Redis store: lone surrogates (os.fsdecode of a non-UTF-8 name),
#: NUL, the scripts' separators (space, "|"), hash-tag braces, glob and percent characters,
#: backslashes and quotes, line breaks (JSON's and JavaScript's), astral characters.
HOSTILE_PIECES = [
    "\ud800", "\udcff", "\udfff", "\udc80", "\ud83d", "\x00", " ", "  ", "\n", "\r\n", "\t",
    "|", "{", "}", "{}", "*", "?", "[", "]", "%", "%41", "%00", "%ZZ", "\\", "\\ud800", '"',
    "'", ":", "-", "\u2028", "\u2029", "\x7f", "\x85", "é", "ß", "\ufeff", "\uffff",
    "\U0001f600", "\U0010ffff", "NaN", "null", "__type__",
]
#: What a 10 KB string is made of (ASCII-heavy, so a payload holding one stays far below
#: ``fairqueue_max_payload_bytes`` once JSON-escaped twice).
BIG_PIECES = ["x", " ", "|{}", "\x00", "\ud800", "\udcff", "é", "\n", "%41", "\\\""]

hostile_char = st.one_of(st.characters(), st.sampled_from(HOSTILE_PIECES))
hostile_text = st.lists(hostile_char, max_size=12).map("".join)
big_text = st.sampled_from(BIG_PIECES).map(lambda piece: (piece * 10_000)[:10_000])
some_text = st.one_of(hostile_text, hostile_text, hostile_text, big_text)

integers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.sampled_from([0, -1, 2**53 + 1, 1234567890123456789, 2**63, -(2**63) - 1, 2**64,
                     2**64 + 1, 18446744073709551617123, -(10**40), 10**300]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.30000000000000004, 0.1, -0.0, 5e-324, 1.7976931348623157e308, 1e16,
                     math.nan, math.inf, -math.inf]),
)
leaves = st.one_of(
    st.none(), st.booleans(), integers, floats, some_text,
    st.sampled_from([[], {}, [[]], [{}], {"": {}}, {"a": []}, [[], {}, [[]]]]),
)


def _kombu_safe(value: dict) -> bool:
    # kombu's JSON decoder turns {"__type__": t, "__value__": v} into a datetime, Decimal,
    # bytes...: a Celery/kombu convention, not this package's, so such objects are not sent
    return value.keys() != {"__type__", "__value__"}


json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(hostile_text, children, max_size=4).filter(_kombu_safe),
    ),
    max_leaves=12,
)
#: keyword arguments the task takes through ``**kwargs`` (any str is a valid key there)
kwarg_names = hostile_text.filter(lambda name: name not in ("self", "account", "payload"))
extra_kwargs = st.dictionaries(kwarg_names, json_values, max_size=3).filter(_kombu_safe)


def json_normal(text: str) -> str:
    """``text`` as it comes back from any JSON hop: ensure_ascii writes a high surrogate followed
    by a low one ("\\ud800\\udcff", two lone code points) exactly as the astral character
    they pair to, and json.loads reads that back as the astral character."""
    return json.loads(json.dumps(text))


def json_stable(text: str) -> bool:
    """Whether ``text`` survives a JSON hop unchanged (it holds no split surrogate pair)."""
    return json_normal(text) == text


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _fill_to(piece: str, size: int) -> str:
    """``piece`` repeated, padded with "a", to exactly ``size`` UTF-8 bytes."""
    text = piece * (size // _utf8_size(piece))
    return text + "a" * (size - _utf8_size(text))


ID_PIECES = ["a", "é", "\U0001f600", "\ud800", "\udcff", "|", " ", "{", "}", "*", "%41", "%",
             "\x00", "\n", ":"]
#: Account ids and job keys: short hostile text, or exactly the longest the store takes. Split
#: surrogate pairs are left out: they are normalised (see the last test).
ids = st.one_of(
    st.lists(hostile_char, min_size=1, max_size=12).map("".join),
    st.sampled_from(HOSTILE_PIECES),
    st.sampled_from(["%41", "A", "a b", "a|b", "{a}", "*", "a:b", "acme-7", "\ud800", "\x00"]),
    st.sampled_from(ID_PIECES).map(lambda piece: _fill_to(piece, MAX_ID_LENGTH)),
).filter(json_stable)
#: Over the maximum in bytes; "é" * 513 is 513 characters but 1026 bytes.
too_long_ids = st.one_of(
    st.sampled_from(ID_PIECES).map(lambda piece: _fill_to(piece, MAX_ID_LENGTH + 1)),
    st.sampled_from(["é" * 513, "\ud800" * 342, "\U0001f600" * 257, "a" * 5000]),
)


#: One string with every kind of hostile character at once.
HOSTILE_LINE = "a b|{x}*%41%\x00\n\r\t\udcff-\ud800\U0001f600é\\\"'\u2028:-"
#: Finite JSON of every awkward kind (a business key can hash it).
FINITE = {
    "huge": [1234567890123456789, 2**64, 2**64 + 1, -(2**63) - 1, 10**40],
    "floats": [0.30000000000000004, -0.0, 5e-324, 1.7976931348623157e308],
    "text": [HOSTILE_LINE, "\ud800", "\udcff", "", " ", "x" * 10_000],
    "empty": [[], {}, [[]], {"": {}}, [{}, []]],
    HOSTILE_LINE: {"\x00": None, "|": True, "{}": False},
}
#: ... and the non-finite floats Python's json writes as NaN and Infinity.
EVERYTHING = {**FINITE, "nonfinite": [math.nan, math.inf, -math.inf]}


# -- helpers -----------------------------------------------------------------------------------

def canonical(value: Any) -> str:
    """What the task records: JSON with sorted keys, ASCII-escaped (lone surrogates as \\udXXX),
    NaN and Infinity spelled out."""
    return json.dumps(value, sort_keys=True)


def escaped(text: str) -> str:
    """``text`` with its lone surrogates written as ``\\udXXX`` (how the store keeps text it
    cannot encode as UTF-8); every other character unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def kept(text: str, where: str | None) -> bool:
    """``where`` holds ``text`` whole: as it was, with its lone surrogates escaped (the store's
    Redis arguments), or as a JSON hop gives it back (the worker's record)."""
    return where is not None and any(
        form in where for form in (text, escaped(text), json_normal(text)))


@pytest.fixture
def hostile(redis_server):
    """The hostile test app module, imported once the session Redis it points at is up."""
    return importlib.import_module("tests.apps.hostile")


@pytest.fixture
def fresh(hostile, redis_client):
    """``fresh()``: empty the session Redis (store, flags, records, results) for one example."""

    def reset() -> None:
        redis_client.flushdb()

    return reset


def received(redis_client, hostile) -> list[str]:
    return redis_client.lrange(hostile.RECEIVED, 0, -1)


def accounts_seen(redis_client, hostile) -> list[list[str]]:
    return [json.loads(raw) for raw in redis_client.lrange(hostile.ACCOUNTS, 0, -1)]


# -- the properties ----------------------------------------------------------------------------

@settings(EXAMPLES, max_examples=50)
@given(payload=json_values, kwargs=extra_kwargs, keyed=st.booleans())
@example(payload=EVERYTHING, kwargs={"a b|{}": "\ud800", "\udcff": [{}], "": None}, keyed=False)
@example(payload=FINITE, kwargs={"k\x00": "x" * 10_000}, keyed=True)
@example(payload=EVERYTHING, kwargs={}, keyed=True)  # NaN in the key: refused
def test_arguments_round_trip_through_a_dead_letter_and_its_replay(
        hostile, fresh, redis_client, payload, kwargs, keyed):
    sent = canonical([payload, kwargs])
    for name, present in (("NaN/inf", "NaN" in sent or "Infinity" in sent),
                          ("\\udXXX in JSON", any(f"\\u{n}" in sent for n in ("d8", "d9", "da",
                                                                             "db", "dc", "dd",
                                                                             "de", "df"))),
                          ("10 KB string", len(sent) > 10_000), ("keyed", keyed)):
        if present:
            event(name)
    # a payload far below fairqueue_max_payload_bytes once escaped into the stored message
    assume(len(sent) < 120_000)
    fresh()
    task = hostile.echo_keyed if keyed else hostile.echo
    if keyed:
        try:
            json.dumps(["acme", payload], allow_nan=False)
        except ValueError:
            # the business key hashes canonical JSON, which has no NaN or Infinity: refused
            # before anything is stored, with an error of the package's family
            with pytest.raises(FairqueueError):
                task.apply_async(("acme", payload), kwargs)
            assert run_fair_jobs(hostile.app) == []
            return
    redis_client.set(hostile.FAIL_FLAG, "1")
    task.apply_async(("acme", payload), kwargs)

    [first] = run_fair_jobs(hostile.app)
    assert (first.state, first.task, first.account) == ("FAILURE", task.name, "acme")
    assert received(redis_client, hostile) == [sent]

    dead = DeadLetters(hostile.app)
    [letter] = dead.list()
    assert letter.job_id == dead.get(letter.job_id).job_id
    assert canonical(letter.args) == canonical(["acme", payload])
    assert canonical(letter.kwargs) == canonical(kwargs)
    assert (letter.task, letter.account, letter.replayable) == (task.name, "acme", True)
    assert letter.reason.startswith("permanent: ")
    assert (letter.job_key is not None) == keyed
    # the worker's own record (kept as JSON text by the store) holds the same arguments
    record = json.loads(json.loads(letter.raw)["record"])
    assert canonical(record["args"]) == canonical(["acme", payload])
    assert canonical(record["kwargs"]) == canonical(kwargs)

    redis_client.delete(hostile.FAIL_FLAG, hostile.RECEIVED)
    dead.replay(letter.job_id)
    assert dead.count() == 0
    [second] = run_fair_jobs(hostile.app)
    assert (second.state, second.task, second.account) == ("SUCCESS", task.name, "acme")
    assert second.task_id != first.task_id
    assert received(redis_client, hostile) == [sent]
    assert run_fair_jobs(hostile.app) == []


@settings(EXAMPLES, max_examples=40)
@given(text=some_text, keyed=st.booleans())
@example(text=HOSTILE_LINE, keyed=False)
@example(text=("{} |\ud800\x00\udcff \n" * 700)[:10_000], keyed=True)
def test_hostile_text_in_an_error_keeps_its_dead_letter(
        hostile, fresh, redis_client, text, keyed):
    fresh()
    task = hostile.echo_keyed if keyed else hostile.echo
    redis_client.set(hostile.FAIL_FLAG, "1")
    redis_client.set(hostile.ERROR_TEXT, hostile.error_text_value(text))
    task.delay("acme", 7)

    [job] = run_fair_jobs(hostile.app)
    assert job.state == "FAILURE"
    message = hostile.ERROR_PREFIX + text

    dead = DeadLetters(hostile.app)
    [letter] = dead.list()
    assert dead.count() == 1
    # the reason keeps the whole message (lone surrogates possibly escaped, nothing else lost)
    assert letter.reason.startswith("permanent: ")
    assert kept(message, letter.reason), (letter.reason[:200], message[:200])
    # the error is "Type: message", cut to the package's MAX_ERROR_CHARS (2000): what it keeps
    # of the message is a prefix of it, and it keeps all of a short one
    assert letter.error is not None and letter.error.startswith("PermanentError: ")
    shown = letter.error.removeprefix("PermanentError: ")
    assert any(form.startswith(shown) for form in (message, json_normal(message)))
    # (JSON, which carries the record, reads a split surrogate pair as its one character)
    assert len(shown) >= min(len(json_normal(message)), 1900)
    # the traceback ends with the exception line, the whole message in it
    assert kept(message, letter.traceback)
    assert canonical(letter.args) == canonical(["acme", 7]) and letter.kwargs == {}
    assert letter.replayable

    # the letter is still a working one: replayed, the job runs again and succeeds
    redis_client.delete(hostile.FAIL_FLAG)
    dead.replay(letter.job_id)
    [again] = run_fair_jobs(hostile.app)
    assert again.state == "SUCCESS"
    assert dead.count() == 0


@settings(EXAMPLES, max_examples=50)
@given(account=ids, too_long=too_long_ids)
@example(account=HOSTILE_LINE, too_long="é" * 513)
@example(account=_fill_to("\ud800", MAX_ID_LENGTH), too_long="\ud800" * 342)
@example(account="%41", too_long="a" * (MAX_ID_LENGTH + 1))
def test_hostile_account_ids_round_trip(hostile, fresh, redis_client, account, too_long):
    assert 1 <= _utf8_size(account) <= MAX_ID_LENGTH
    assert _utf8_size(too_long) > MAX_ID_LENGTH
    fresh()

    # over the maximum: refused at .delay() with the package's EnqueueError, nothing stored
    with pytest.raises(EnqueueError):
        hostile.echo.delay(too_long, 1)
    assert run_fair_jobs(hostile.app) == []

    redis_client.set(hostile.FAIL_FLAG, "1")
    hostile.echo.delay(account, {"n": 1})
    [first] = run_fair_jobs(hostile.app)
    assert first.state == "FAILURE"
    assert first.account == account
    assert accounts_seen(redis_client, hostile) == [[account, account]]

    dead = DeadLetters(hostile.app)
    [letter] = dead.list(account=account)
    assert letter.account == account
    assert letter.args == [account, {"n": 1}]

    redis_client.delete(hostile.FAIL_FLAG, hostile.ACCOUNTS)
    dead.replay(letter.job_id)
    [second] = run_fair_jobs(hostile.app)
    assert second.state == "SUCCESS"
    assert second.account == account
    assert accounts_seen(redis_client, hostile) == [[account, account]]


@settings(EXAMPLES, max_examples=30)
@given(accounts=st.lists(ids, min_size=1, max_size=4))
@example(accounts=[HOSTILE_LINE, "\ud800", "a b|{}", "%41"])
def test_hostile_account_ids_round_trip_through_a_bulk_enqueue(hostile, fresh, redis_client,
                                                                 accounts):
    """apply_many, each account's keyed job twice: the first stored, the second its duplicate;
    each job runs once, under its own account."""
    fresh()
    outcomes = hostile.echo_keyed.apply_many(
        [(account, {"n": 1}) for account in accounts] * 2)
    first_of = {}
    for account, outcome in zip(accounts * 2, outcomes, strict=True):
        held = first_of.setdefault(normalize_id(account), outcome.task_id)
        assert outcome.state == ("stored" if held == outcome.task_id else "duplicate")
        assert outcome.duplicate_of in (None, held)
    finished = run_fair_jobs(hostile.app)
    assert sorted(job.account for job in finished) == sorted(
        normalize_id(account) for account in dict.fromkeys(map(normalize_id, accounts)))
    assert {job.state for job in finished} == {"SUCCESS"}


@settings(EXAMPLES, max_examples=40)
@given(key=st.one_of(ids, st.integers().filter(lambda n: len(str(n)) <= MAX_ID_LENGTH)))
@example(key=HOSTILE_LINE)
@example(key=_fill_to("\U0001f600", MAX_ID_LENGTH))
@example(key=1234567890123456789)
def test_explicit_job_keys_are_scoped_by_account_and_may_hold_anything(
        hostile, fresh, redis_client, key):
    fresh()
    echo = hostile.echo
    first = echo.apply_async(("a", 1), job_key=key)
    other = echo.apply_async(("b", 1), job_key=key)
    again = echo.apply_async(("a", 1), job_key=key)
    assert other.id != first.id  # another account: another job
    assert again.id == first.id  # the same account and key: the job already stored

    finished = run_fair_jobs(hostile.app)
    assert sorted((job.account, job.state) for job in finished) == [
        ("a", "SUCCESS"), ("b", "SUCCESS")]
    assert {job.task_id for job in finished} == {first.id, other.id}
    assert sorted(accounts_seen(redis_client, hostile)) == [["a", "a"], ["b", "b"]]

    # done within the retention: the key still answers with the job that ran, whatever the
    # arguments, and nothing runs again
    late = echo.apply_async(("a", 2), job_key=key)
    assert late.id == first.id
    assert run_fair_jobs(hostile.app) == []


def test_an_account_holding_a_split_surrogate_pair_keeps_its_identity(
        hostile, fresh, redis_client):
    account = "\ud800\udcff"
    fresh()
    redis_client.set(hostile.FAIL_FLAG, "1")
    hostile.echo.delay(account, 1)
    [first] = run_fair_jobs(hostile.app)
    # JSON (every header and record) reads the pair as one character: the id is that from the
    # start, so the job, its dead letter and its replay all belong to one account
    assert first.account == "\U000100ff"

    dead = DeadLetters(hostile.app)
    [letter] = dead.list(account=account)
    redis_client.delete(hostile.FAIL_FLAG)
    dead.replay(letter.job_id)
    [second] = run_fair_jobs(hostile.app)
    assert (letter.account, second.account) == (first.account, first.account)
