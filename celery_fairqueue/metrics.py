"""Prometheus metrics of one app's fair store, read from Redis at scrape time.

Every value is read when Prometheus scrapes (a custom collector), so nothing in the hot path
counts anything: gauges come from the store's counts, counters from the store's own ``stats``
hash, which the Lua scripts increment anyway.

================================================  =========================================
``fairqueue_ready_jobs{queue}``                   jobs waiting for a worker
``fairqueue_delayed_jobs{queue}``                 jobs waiting for their time (eta, retry)
``fairqueue_running_jobs{queue}``                 jobs leased to a worker
``fairqueue_deferred_accounts{queue}``            accounts deferred by their limit (rate, window,
                                                  concurrency cap)
``fairqueue_paused_accounts{queue}``              accounts an operator paused in the queue
``fairqueue_dead_letters``                        jobs in the dead-letter queue
``fairqueue_event_backlog``                       transitions not yet recorded
``fairqueue_unrecorded_events{shard}``            the same per event stream (one per shard)
``fairqueue_oldest_unrecorded_event_age_seconds`` how long ago the oldest transition not yet
  ``{shard}``                                     recorded was written; 0: none waits
``fairqueue_<name>_total``                        enqueued, claimed, deferred, requeued,
                                                  reaped, dead, replayed, acked, capped, ...;
                                                  pruned: recorded jobs deleted past their
                                                  retention (contrib/django/recording/
                                                  pruner.py)
``fairqueue_deferrals_total{reason}``             the claim's deferrals by reason (states:
                                                  rate_limited, window_closed,
                                                  concurrency_cap, slowed: the provider asked
                                                  an account, or a queue's claim, to slow
                                                  down; queue_quota: a queue at its shared
                                                  limit stopped a claim)
``fairqueue_oldest_waiting_age_seconds{queue}``   how long the oldest waiting job (ready,
                                                  deferred by a limit, paused, or delayed and
                                                  due) has waited, from Redis; 0: none waits
``fairqueue_account_oldest_waiting_age_seconds``  the same per account, for the
  ``{queue, account, reason}``                    ``fairqueue_metrics_top_accounts`` accounts
                                                  of each queue waiting longest; ``reason`` is
                                                  why it does not run (states.Reason)
``fairqueue_queue_workers{queue}``                live workers that consume the queue
``fairqueue_workers``                             live workers (registered by heartbeat)
``fairqueue_operator_pauses``                     accounts and queues an operator paused
``fairqueue_oldest_ready_age_seconds{queue}``     how long the oldest ready job has waited,
                                                  when a callback provides it (the Django
                                                  app passes ``queries.oldest_ready_age_by_queue``)
``fairqueue_store_up``                            0 when Redis did not answer the scrape
================================================  =========================================

Alert on waiting time, not on depth: a deep queue that drains is healthy, a short one nobody
claims is not. ``docs/prometheus/alerts.yml`` has rules, ``docs/grafana/`` a dashboard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from celery import Celery
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .errors import StoreUnavailableError
from .states import ACCOUNTS_DEFERRED, ACCOUNTS_PAUSED, DeferReason, Reason
from .store import DeadLetters, EventReader, StoreInspector, store_for

logger = logging.getLogger(__name__)

COUNTERS = {
    "enqueued": "Jobs stored (retries included).",
    "claimed": "Jobs leased to a worker.",
    "deferred": "Ready jobs deferred because their account was over its limit.",
    "requeued": "Leased jobs given back to ready by their worker.",
    "reaped": "Leased jobs returned to ready after their lease expired.",
    "dead": "Jobs moved to the dead-letter queue.",
    "replayed": "Dead letters sent again.",
    "acked": "Leased jobs settled by their worker.",
    "capped": "Claims that deferred an account at its concurrency cap.",
    "cancelled": "Waiting jobs taken out of the store by a revoke or cancel().",
    "expired": "Jobs dropped by the claim, past Celery's expires, without running.",
    "pruned": "Recorded jobs (Job rows, with their attempts) deleted past their retention.",
}
#: The stats field counting each reason of ``fairqueue_deferrals_total`` (claim.lua's defer,
#: hold_at_cap, wait_for_quota and a slowed queue's claim write them).
DEFERRAL_STATS = {
    DeferReason.RATE_LIMITED: "deferred_rate_limited",
    DeferReason.WINDOW_CLOSED: "deferred_window_closed",
    DeferReason.CONCURRENCY_CAP: "capped",
    DeferReason.SLOWED: "deferred_slowed",  # an account's, and a queue's claims it held
    Reason.QUEUE_QUOTA: "deferred_queue_quota",
}
QUEUE_GAUGES = {
    "ready": ("fairqueue_ready_jobs", "Jobs waiting for a worker."),
    "delayed": ("fairqueue_delayed_jobs", "Jobs waiting for their time (eta, retry backoff)."),
    "running": ("fairqueue_running_jobs", "Jobs leased to a worker."),
    "deferred_accounts": ("fairqueue_deferred_accounts",
                          f"{ACCOUNTS_DEFERRED} by their limit (rate, window, concurrency cap)."),
    "paused_accounts": ("fairqueue_paused_accounts",
                        f"{ACCOUNTS_PAUSED} by an operator in the queue (or everywhere)."),
}

OldestReadyAge = Callable[[], dict[str, float]]


class FairqueueCollector:
    """A prometheus_client collector of ``app``'s fair store; register it in a registry."""

    def __init__(self, app: Celery, oldest_ready_age: OldestReadyAge | None = None) -> None:
        self.app = app
        self.oldest_ready_age = oldest_ready_age

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("fairqueue_store_up", "1 when the fair store answered.")
        try:
            metrics = list(self._store_metrics())
        except StoreUnavailableError as exc:
            logger.warning("fairqueue metrics: the fair store did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics
        if self.oldest_ready_age is not None:
            try:
                yield self._oldest_ready_age()
            except Exception as exc:  # the callback's source (a database) may be down
                logger.warning("fairqueue metrics: no oldest ready age: %s", exc)

    def _store_metrics(self) -> Iterator[Metric]:
        store = store_for(self.app)
        gauges = {field: GaugeMetricFamily(name, doc, labels=["queue"])
                  for field, (name, doc) in QUEUE_GAUGES.items()}
        for queue in store.known_queues():
            counts = store.counts(queue)
            for field, gauge in gauges.items():
                gauge.add_metric([queue], counts[field])
        yield from gauges.values()
        yield GaugeMetricFamily("fairqueue_dead_letters", "Jobs in the dead-letter queue.",
                                value=DeadLetters(self.app).count())
        lags = EventReader(store, "metrics").lag()
        yield GaugeMetricFamily("fairqueue_event_backlog", "Transitions not yet recorded.",
                                value=sum(lag.waiting for lag in lags))
        waiting = GaugeMetricFamily("fairqueue_unrecorded_events",
                                    "Transitions not yet recorded, per event stream (shard).",
                                    labels=["shard"])
        oldest = GaugeMetricFamily(
            "fairqueue_oldest_unrecorded_event_age_seconds",
            "Seconds since the oldest transition not yet recorded was written, per event "
            "stream (shard); 0 when the recorders are through.", labels=["shard"])
        for lag in lags:
            waiting.add_metric([str(lag.shard)], lag.waiting)
            oldest.add_metric([str(lag.shard)], lag.oldest_age)
        yield waiting
        yield oldest
        stats = store.stats()
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"fairqueue_{name}", doc, value=stats.get(name, 0))
        deferrals = CounterMetricFamily(
            "fairqueue_deferrals", "Deferrals the claim made, by reason (a queue at its shared "
            "limit: claims it stopped).", labels=["reason"])
        for reason, field in DEFERRAL_STATS.items():
            deferrals.add_metric([reason.value], stats.get(field, 0))
        yield deferrals
        yield from self._waiting_metrics()

    def _waiting_metrics(self) -> Iterator[Metric]:
        """How long jobs wait, per queue and for the accounts waiting longest; live workers."""
        inspector = StoreInspector(self.app)
        now = inspector.console.server_time()
        queue_age = GaugeMetricFamily(
            "fairqueue_oldest_waiting_age_seconds",
            "Seconds the oldest waiting job of the queue (ready, deferred, paused, or delayed "
            "and due) has waited; 0 when none waits.", labels=["queue"])
        account_age = GaugeMetricFamily(
            "fairqueue_account_oldest_waiting_age_seconds",
            "Seconds the oldest waiting job of the account has waited, for the accounts of "
            "each queue waiting longest (fairqueue_metrics_top_accounts), with the reason it "
            "does not run.", labels=["queue", "account", "reason"])
        top = store_for(self.app).settings.metrics_top_accounts
        workers = inspector.console.workers()
        for queue, since in inspector.console.queue_oldest_waiting().items():
            queue_age.add_metric([queue], max(now - since, 0.0) if since else 0.0)
            for account, waiting in inspector.console.oldest_accounts(queue, top) if since else []:
                [state] = inspector.console.account_state(account, [queue], workers=workers)
                account_age.add_metric([queue, label(account), state.reason],
                                       max(now - waiting, 0.0))
        yield queue_age
        yield account_age
        consumers = GaugeMetricFamily("fairqueue_queue_workers",
                                      "Live workers that consume the queue.", labels=["queue"])
        for queue in sorted(set(store_for(self.app).known_queues()) |
                            {q for w in workers for q in w.queues}):
            consumers.add_metric([queue], sum(queue in w.queues for w in workers))
        yield consumers
        yield GaugeMetricFamily("fairqueue_workers", "Live workers (registered by heartbeat).",
                                value=len(workers))
        yield GaugeMetricFamily("fairqueue_operator_pauses",
                                "Accounts and queues paused by an operator.",
                                value=len(inspector.console.pauses()))

    def _oldest_ready_age(self) -> Metric:
        gauge = GaugeMetricFamily("fairqueue_oldest_ready_age_seconds",
                                  "Seconds the oldest ready job of the queue has waited.",
                                  labels=["queue"])
        assert self.oldest_ready_age is not None
        for queue, age in sorted(self.oldest_ready_age().items()):
            gauge.add_metric([queue], age)
        return gauge


def label(value: str) -> str:
    """An id as a label value: the exposition is UTF-8, which a lone surrogate is not."""
    return value.encode("utf-8", "backslashreplace").decode()


#: Every metric name this module exports (a counter's samples add ``_total``); the shipped
#: dashboard and alert rules are checked against it.
METRIC_NAMES = frozenset({
    "fairqueue_store_up", "fairqueue_dead_letters", "fairqueue_event_backlog",
    "fairqueue_unrecorded_events", "fairqueue_oldest_unrecorded_event_age_seconds",
    "fairqueue_oldest_waiting_age_seconds", "fairqueue_account_oldest_waiting_age_seconds",
    "fairqueue_queue_workers", "fairqueue_workers", "fairqueue_operator_pauses",
    "fairqueue_oldest_ready_age_seconds",
    *(name for name, _ in QUEUE_GAUGES.values()),
    *(f"fairqueue_{name}_total" for name in COUNTERS), "fairqueue_deferrals_total",
})


def make_registry(app: Celery, oldest_ready_age: OldestReadyAge | None = None
                  ) -> CollectorRegistry:
    """A registry holding only the fair-queue metrics of ``app``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairqueueCollector(app, oldest_ready_age))
    return registry


def start_metrics_server(app: Celery, port: int, addr: str = "0.0.0.0",
                         oldest_ready_age: OldestReadyAge | None = None) -> Any:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; returns (server, thread)."""
    return start_http_server(port, addr, registry=make_registry(app, oldest_ready_age))
