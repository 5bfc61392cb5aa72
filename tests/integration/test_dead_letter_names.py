"""Hostile task ids (spaces, brackets inside the id, lone surrogates, 1 KB) through the one
resolver of dead-letter names, on a real redis-server: every form a person may hold names the
letter, and replay and purge act on it by that form."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_fairqueue.protocol import delivery_id
from celery_fairqueue.reports import purge_each, replay_each
from celery_fairqueue.store import store_for

pytestmark = pytest.mark.slow

SEND = "tests.apps.reliable.send_message"
EXAMPLES = settings(
    deadline=None, database=None, derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.large_base_example, HealthCheck.data_too_large])
PIECES = ["\ud800", "\udcff", "\udfff", "\x00", " ", "\t", "\n", "[", "]", "][", "[x]", ":",
          ":0", "~1", "~", "*", "?", "%", "%41", "\\", "\\ud800", '"', "|", "{", "}", "é",
          "\U0001f600", "\ufeff"]
hostile_ids = st.one_of(
    st.lists(st.one_of(st.characters(), st.sampled_from(PIECES)), min_size=1,
             max_size=12).map("".join),
    st.sampled_from([*PIECES, "a", "-"]).map(lambda piece: (piece * 1024)[:1024]),  # 1 KB
)


def forms(task_id: str, letter_id: str) -> list[str]:
    return [letter_id, task_id, f"{SEND}[{task_id}]", f"{SEND}[{task_id}]:"]


def bury(rel, letter_id: str) -> None:
    store_for(rel.app).bury(letter_id, "permanent: lead 7 was deleted", record={
        "task": SEND, "account": "acme", "args": ["acme", 7], "kwargs": {}, "attempts": 1})


@settings(EXAMPLES, max_examples=60)
@given(task_id=hostile_ids, retries=st.integers(0, 9), replaced=st.sampled_from([0, 0, 2]),
       form=st.integers(0, 3))
def test_every_name_of_a_hostile_id_resolves_to_its_one_letter_and_purges_it(
        rel, dlq, task_id, retries, replaced, form):
    dlq.purge(dlq.ids())
    letter = delivery_id(task_id, retries, replaced)
    bury(rel, letter)
    [stored] = dlq.ids()
    for name in forms(task_id, letter):
        assert dlq.resolve(name) == [stored], name
        assert [d.reason for d in dlq.named(name)] == ["permanent: lead 7 was deleted"]
    outcome = purge_each(dlq, [forms(task_id, letter)[form]])
    assert (outcome.done, outcome.failed) == ({stored: ""}, {})
    assert dlq.count() == 0


@settings(EXAMPLES, max_examples=15)
@given(task_id=hostile_ids)
def test_a_hostile_task_id_replays_by_its_task_id(rel, dlq, task_id):
    dlq.purge(dlq.ids())
    bury(rel, delivery_id(task_id, 1))
    outcome = replay_each(dlq, [task_id])
    assert not outcome.failed and len(outcome.done) == 1
    assert dlq.count() == 0
    store_for(rel.app).client.flushdb()  # the replayed job too


@settings(EXAMPLES, max_examples=40)
@given(name=st.one_of(hostile_ids, st.just(" "), st.just("x[]"), st.just("[")))
def test_a_hostile_name_of_no_letter_is_not_found_without_an_error(rel, dlq, name):
    bury(rel, "other:0")
    assert dlq.resolve(name) == []
    for outcome in (replay_each(dlq, [name]), purge_each(dlq, [name])):
        assert outcome.failed == {name: "not found: replayed or purged already"}
    assert dlq.count() == 1
