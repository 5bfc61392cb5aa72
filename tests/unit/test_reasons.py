"""The store returns facts (a Reason, until when by the store's clock, counts); the words are
celery_fairqueue.reasons', one format for every duration the CLI and the console show."""

import dataclasses
from datetime import UTC, datetime

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reasons import reason_text
from celery_fairqueue.states import DeferReason, Reason
from celery_fairqueue.store import QueueState
from celery_fairqueue.store.formats.records import Deferral
from celery_fairqueue.store.readers.console import explain
from celery_fairqueue.store.writers.operator import OperatorPause

NOW = 1_700_000_000.0


def state(reason: Reason, until: float | None = None, **fields) -> QueueState:
    values = dict(queue="default", account="acme", reason=reason, until=until, ready=1,
                  deferred=0, delayed_due=0, delayed_future=0, running=0, oldest_waiting=None,
                  limit=None, limit_is_default=True, paused_by=None, paused_at=None,
                  pause_reason=None, server_time=NOW)
    return QueueState(**{**values, **fields})


def test_the_store_returns_facts_not_sentences():
    fields = {f.name for f in dataclasses.fields(QueueState)}
    assert not {name for name in fields if "text" in name}
    deferral = Deferral(DeferReason.RATE_LIMITED.value, NOW + 3533.9)
    assert explain(now=NOW, waiting=1, state="p", limit_wake=None, deferral=deferral,
                   pause=None, consumed=True) == (Reason.RATE_LIMITED, NOW + 3533.9)
    pause = OperatorPause("acme", None, "alice", NOW, "asked")
    assert explain(now=NOW, waiting=1, state="o", limit_wake=None, deferral=None, pause=pause,
                   consumed=True) == (Reason.PAUSED, None)


def test_a_rate_limit_wait_reads_in_the_one_duration_format():
    text = reason_text(state(Reason.RATE_LIMITED, NOW + 3533.9))
    assert text == "rate limit: next token in 58m 53s"  # as "57m 33s" beside it, never "3533.9 s"


def test_every_reason_reads_in_words():
    at = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert reason_text(state(Reason.PAUSED, paused_by="alice", paused_at=at,
                             pause_reason="asked")) == "paused by alice at 03:04:05 UTC: asked"
    assert reason_text(state(Reason.PAUSED, pause_scope="queue")) == \
        "queue paused by an operator"
    assert reason_text(state(Reason.CONCURRENCY_CAP, running=2,
                             limit=AccountLimit(concurrency=3))) == \
        "concurrency cap: 2 of 3 running"
    opening = NOW + 3600
    assert reason_text(state(Reason.WINDOW_CLOSED, opening,
                             limit=AccountLimit(window="09:00-17:00", tz="UTC"))) == \
        f"window closed until {datetime.fromtimestamp(opening, UTC):%H:%M} UTC"
    assert reason_text(state(Reason.NO_WORKER)) == "no worker consumes this queue"
    assert reason_text(state(Reason.NO_READY_JOBS)) == "no ready jobs"
    assert reason_text(state(Reason.RUNNABLE)).startswith("runnable")
