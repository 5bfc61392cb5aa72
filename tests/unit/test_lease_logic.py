"""The pure logic around a lease, without Redis: the marker guard, the failure verdict, the
lease's one-settle rule and the ticket a task reads."""

import json
import math
from types import SimpleNamespace

import pytest

from celery_fairqueue.errors import StoreUnavailableError
from celery_fairqueue.markers import MarkerGuard
from celery_fairqueue.protocol import LEASE_HEADER, LeaseTicket
from celery_fairqueue.retry import PermanentError, RetryableError, RetryPolicy
from celery_fairqueue.store import Lease


class Markers:
    """A stand-in for the store's three marker calls (what the guard asks of the store)."""

    def __init__(self, marker=None, failures=0):
        self.stored = marker
        self.failures = failures
        self.calls = []

    def marker(self, job_key):
        self.calls.append("marker")
        return self.stored

    def mark_started(self, job_key, job_id):
        self.calls.append("started")

    def mark_done(self, job_key, job_id, external_id=None):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("down")
        self.calls.append(("done", external_id))


def test_a_claimed_job_reads_its_marker_from_its_ticket_and_writes_none():
    store = Markers()
    guard = MarkerGuard(store, "t[1]", LeaseTicket(marker="", ack_marks_done=True))
    assert guard.before_run("k", "1:0", lambda: None) == (False, None)
    assert store.calls == []


def test_a_broker_delivery_reads_and_writes_its_markers_itself():
    store = Markers()
    assert MarkerGuard(store, "t[1]", None).before_run("k", "1:0", lambda: None) == (False, None)
    assert store.calls == ["marker", "started"]


def test_a_done_key_is_not_run_again_and_returns_its_external_id():
    done = json.dumps({"state": "done", "job_id": "1:0", "external_id": "msg-9"})
    guard = MarkerGuard(Markers(), "t[1]", LeaseTicket(marker=done, ack_marks_done=True))
    assert guard.before_run("k", "2:0", lambda: pytest.fail("reconciled a done key")) == (
        True, "msg-9")


def test_a_started_key_asks_the_reconciliation_hook_and_marks_done_when_it_answers():
    started = json.dumps({"state": "started", "job_id": "1:0"})
    store = Markers()
    guard = MarkerGuard(store, "t[1]", LeaseTicket(marker=started, ack_marks_done=True))
    assert guard.before_run("k", "1:0", lambda: "ext-1") == (True, "ext-1")
    assert store.calls == [("done", "ext-1")]
    assert guard.before_run("k", "1:0", lambda: None) == (False, None)  # not applied: run


def test_the_done_marker_waits_out_a_short_outage_and_gives_up_after_its_timeout():
    store = Markers(failures=1)
    MarkerGuard(store, "t[1]", None).after_run("k", "1:0", "e", timeout=5.0)
    assert store.calls == [("done", "e")]
    with pytest.raises(StoreUnavailableError):
        MarkerGuard(Markers(failures=99), "t[1]", None).after_run("k", "1:0", None, timeout=0.0)


def test_the_ticket_round_trips_through_the_message_headers():
    ticket = LeaseTicket(marker='{"state":"started"}', ack_marks_done=False)
    request = SimpleNamespace(**{LEASE_HEADER: ticket.header()})
    assert LeaseTicket.of(request) == ticket
    assert LeaseTicket.of(SimpleNamespace()) is None  # a broker message has no lease


def policy(**kwargs):
    return RetryPolicy(random=lambda low, high: high, clock=lambda: 0.0, **kwargs)


def test_a_retryable_failure_is_retried_after_its_backoff_cut_to_the_longest_delay():
    verdict = policy(base=5, cap=900).after_failure(TimeoutError(), attempts=3, longest=10.0)
    assert verdict.retry_in == 10.0 and "timeout" in verdict.reason
    assert policy().after_failure(RetryableError(retry_after=math.inf), 1,
                                  longest=60.0).retry_in == 60.0


def test_a_permanent_failure_is_dead_lettered_with_its_reason():
    verdict = policy().after_failure(PermanentError("lead deleted"), attempts=1)
    assert verdict.retry_in is None and verdict.reason == "permanent: lead deleted"


def test_an_exhausted_or_given_up_job_is_dead_lettered_saying_so():
    assert policy(max_attempts=2).after_failure(TimeoutError(), 2).reason.startswith(
        "gave up after 2 attempts")
    verdict = policy().after_failure(TimeoutError(), 1, gave_up=True)
    assert verdict.retry_in is None and verdict.reason.startswith("gave up after 1 attempts")


class Holder:
    def __init__(self, later=True):
        self.later, self.events = later, []

    def released(self, lease):
        self.events.append("released")

    def ack_later(self, lease):
        self.events.append("ack_later")
        return self.later

    def settled(self, lease, owned):
        self.events.append(("settled", owned))


class Settles:
    """What a lease asks of the store: records each call, answers owned."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda lease, *args: self.calls.append((name, *args)) or True


def lease(store, **kwargs):
    return Lease(store, "w1", queue="q", account="a", job_id="1:0", envelope="{}", **kwargs)


def test_a_lease_settles_once_whatever_settles_it_again():
    store, holder = Settles(), Holder(later=False)
    held = lease(store, holder=holder)
    held.succeeded()
    held.ack()
    held.requeue()
    held.basic_reject("1:0", requeue=False)
    assert store.calls == [("ack",)] and held.ack_args(1)[-1] == "1"
    assert holder.events == ["released", "ack_later", ("settled", True)]


def test_a_claiming_holder_takes_the_ack_for_its_next_claim():
    store, holder = Settles(), Holder(later=True)
    lease(store, holder=holder).ack()
    assert store.calls == [] and holder.events == ["released", "ack_later"]


def test_each_outcome_is_one_store_call_and_an_expired_lease_asks_none():
    store = Settles()
    lease(store).requeue()
    lease(store).give_back(2.0)
    lease(store).dead_letter("bad")
    lease(store).basic_reject("1:0", requeue=True)
    lease(store, expired=True).ack()
    assert store.calls == [("requeue",), ("give_back", 2.0), ("reject", "bad"), ("requeue",)]
