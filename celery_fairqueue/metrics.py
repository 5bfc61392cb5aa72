"""Prometheus metrics of one app's fair store, read from Redis at scrape time.

Every value is read when Prometheus scrapes (a custom collector), so nothing in the hot path
counts anything: gauges come from the store's counts, counters from the store's own ``stats``
hash, which the Lua scripts increment anyway.

================================================  =========================================
``fairqueue_ready_jobs{queue}``                   jobs waiting for a worker
``fairqueue_delayed_jobs{queue}``                 jobs waiting for their time (eta, retry)
``fairqueue_running_jobs{queue}``                 jobs leased to a worker
``fairqueue_paused_accounts{queue}``              accounts waiting for their rate or window
``fairqueue_dead_letters``                        jobs in the dead-letter queue
``fairqueue_event_backlog``                       transitions not yet recorded
``fairqueue_<name>_total``                        enqueued, claimed, deferred, requeued,
                                                  reaped, dead, replayed, acked, capped
``fairqueue_oldest_ready_age_seconds{queue}``     how long the oldest ready job has waited,
                                                  when a callback provides it (the Django
                                                  app passes ``queries.oldest_ready_age_by_queue``)
``fairqueue_store_up``                            0 when Redis did not answer the scrape
================================================  =========================================

Alert on waiting time, not on depth: a deep queue that drains is healthy, a short one nobody
claims is not. A rule for Prometheus::

    groups:
      - name: fairqueue
        rules:
          - alert: FairqueueJobsWaiting
            expr: max by (queue) (fairqueue_oldest_ready_age_seconds) > 300
            for: 5m
            labels: {severity: page}
            annotations:
              summary: "Ready jobs in {{ $labels.queue }} have waited over 5 minutes"
              description: "No worker takes them: workers down, stuck, or too few."
          - alert: FairqueueRecorderBehind
            expr: fairqueue_event_backlog > 10000
            for: 10m
            annotations:
              summary: "The recorder is not keeping up; job state in the database is stale"
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from celery import Celery
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .errors import StoreUnavailableError
from .store import DeadLetters, EventReader, store_for

logger = logging.getLogger(__name__)

COUNTERS = {
    "enqueued": "Jobs stored (retries included).",
    "claimed": "Jobs leased to a worker.",
    "deferred": "Ready jobs held back because their account was over its limit.",
    "requeued": "Leased jobs given back to ready by their worker.",
    "reaped": "Leased jobs returned to ready after their lease expired.",
    "dead": "Jobs moved to the dead-letter queue.",
    "replayed": "Dead letters sent again.",
    "acked": "Leased jobs settled by their worker.",
    "capped": "Claims that skipped an account at its concurrency cap.",
    "cancelled": "Waiting jobs taken out of the store by a revoke or cancel().",
    "expired": "Jobs dropped by the claim, past Celery's expires, without running.",
}
QUEUE_GAUGES = {
    "ready": ("fairqueue_ready_jobs", "Jobs waiting for a worker."),
    "delayed": ("fairqueue_delayed_jobs", "Jobs waiting for their time (eta, retry backoff)."),
    "running": ("fairqueue_running_jobs", "Jobs leased to a worker."),
    "paused_accounts": ("fairqueue_paused_accounts", "Accounts waiting for their limit."),
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
        yield GaugeMetricFamily("fairqueue_event_backlog", "Transitions not yet recorded.",
                                value=EventReader(store, "metrics").backlog())
        stats = store.stats()
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"fairqueue_{name}", doc, value=stats.get(name, 0))

    def _oldest_ready_age(self) -> Metric:
        gauge = GaugeMetricFamily("fairqueue_oldest_ready_age_seconds",
                                  "Seconds the oldest ready job of the queue has waited.",
                                  labels=["queue"])
        assert self.oldest_ready_age is not None
        for queue, age in sorted(self.oldest_ready_age().items()):
            gauge.add_metric([queue], age)
        return gauge


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
