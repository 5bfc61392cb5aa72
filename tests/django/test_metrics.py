"""Prometheus metrics: the fair store's gauges and counters, the oldest-ready age, the view."""

import importlib
import urllib.request
from datetime import timedelta

import pytest
from celery import Celery
from django.test import RequestFactory
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import celery_fairqueue
from celery_fairqueue.contrib.django import metrics_view
from celery_fairqueue.contrib.django.models import Job
from celery_fairqueue.metrics import make_registry, start_metrics_server
from celery_fairqueue.settings import settings_for
from celery_fairqueue.store import EventReader, FairStore, store_for
from celery_fairqueue.store.connection.connect import make_client
from celery_fairqueue.store.formats.keys import Keys
from tests.harness import free_port


@pytest.fixture
def fair(redis_server, redis_client):
    return importlib.import_module("tests.apps.fair")


def samples(text):
    """{(name, labels...): value} of an exposition."""
    return {(s.name, *sorted(s.labels.values())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_gauges_and_counters_come_from_the_store(fair):
    EventReader(store_for(fair.app), "metrics").ensure_group()
    for n in range(3):
        fair.job.delay("acme", n)
    fair.job.apply_async(("acme", 9), countdown=300)
    fair.urgent.delay("acme", 1)
    store_for(fair.app).bury("gone:0", "permanent: gone", record={"task": "t"})
    metrics = samples(generate_latest(make_registry(fair.app)).decode())
    assert metrics[("fairqueue_ready_jobs", "celery")] == 3
    assert metrics[("fairqueue_delayed_jobs", "celery")] == 1
    assert metrics[("fairqueue_ready_jobs", "critical")] == 1
    assert metrics[("fairqueue_running_jobs", "celery")] == 0
    assert metrics[("fairqueue_deferred_accounts", "celery")] == 0
    assert metrics[("fairqueue_paused_accounts", "celery")] == 0
    assert metrics[("fairqueue_enqueued_total",)] == 5
    assert metrics[("fairqueue_dead_total",)] == 1
    assert metrics[("fairqueue_reaped_total",)] == 0
    assert metrics[("fairqueue_dead_letters",)] == 1
    assert metrics[("fairqueue_event_backlog",)] == 6  # five enqueued, one dead
    assert metrics[("fairqueue_store_up",)] == 1
    assert not any(name == "fairqueue_oldest_ready_age_seconds" for name, *_ in metrics)


def test_the_metrics_server_serves_the_exposition(fair):
    fair.job.delay("acme", 1)
    port = free_port()
    server, thread = start_metrics_server(fair.app, port, "127.0.0.1",
                                          oldest_ready_age=lambda: {"celery": 12.5})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    finally:
        server.shutdown()
        thread.join(5)
    metrics = samples(text)
    assert metrics[("fairqueue_ready_jobs", "celery")] == 1
    assert metrics[("fairqueue_oldest_ready_age_seconds", "celery")] == 12.5


def test_a_store_that_does_not_answer_reports_down_instead_of_failing_the_scrape():
    url = f"redis://127.0.0.1:{free_port()}/0"
    down = Celery("down", broker=url)
    down.conf.fairqueue_redis_url = url
    celery_fairqueue.install(down)
    down._fairqueue_store = FairStore(  # no retries: the store's own client backs off for seconds
        make_client(url, retries=0),
        Keys(), settings_for(down))
    metrics = samples(generate_latest(make_registry(down)).decode())
    assert metrics == {("fairqueue_store_up",): 0}


@pytest.mark.django_db
def test_the_django_view_adds_the_oldest_ready_age_from_the_jobs(fair):
    now = timezone.now()
    for key, queue, age in [("a", "celery", 90), ("b", "celery", 30), ("c", "critical", 5)]:
        Job.objects.create(job_key=key, task_id=key, task="t", queue=queue, account="acme",
                           status=Job.Status.READY, enqueued_at=now - timedelta(seconds=age))
    Job.objects.create(job_key="d", task_id="d", task="t", queue="celery", account="acme",
                       status=Job.Status.SUCCEEDED, enqueued_at=now - timedelta(hours=1))
    metrics_view.registry.cache_clear()
    response = metrics_view.metrics(RequestFactory().get("/metrics"))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    metrics = samples(response.content.decode())
    assert metrics[("fairqueue_oldest_ready_age_seconds", "celery")] == pytest.approx(90, abs=5)
    assert metrics[("fairqueue_oldest_ready_age_seconds", "critical")] == pytest.approx(5, abs=5)
