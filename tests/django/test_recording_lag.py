"""The recorders' lag, seen: events waiting and the oldest one's age per event stream, as
Prometheus gauges and on the console's overview (real redis-server; a sharded store has a
stream per shard)."""

import importlib

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from celery_fairqueue.metrics import make_registry
from celery_fairqueue.store import EventReader, store_for

pytestmark = pytest.mark.django_db(transaction=True)


def gauges(app) -> dict:
    text = generate_latest(make_registry(app)).decode()
    return {(s.name, s.labels.get("shard")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def write_event_at(client, stream: str, seconds_ago: float) -> None:
    """An event whose id says it was written ``seconds_ago`` (ids are Redis ms times)."""
    now_ms = int(float(client.time()[0]) * 1000)
    client.xadd(stream, {"e": "enqueued"}, id=f"{now_ms - int(seconds_ago * 1000)}-0")


def test_the_lag_gauges_show_each_streams_waiting_events_and_its_oldest_age(
        redis_server, redis_client):
    sharded = importlib.import_module("tests.apps.sharded")
    store = store_for(sharded.app)
    reader = EventReader(store, "test")
    reader.ensure_group()
    streams = [shard.keys.events for shard in store.shards]
    write_event_at(redis_client, streams[1], 120)
    write_event_at(redis_client, streams[1], 60)
    write_event_at(redis_client, streams[2], 5)
    values = gauges(sharded.app)
    assert values[("fairqueue_unrecorded_events", "1")] == 2
    assert values[("fairqueue_unrecorded_events", "2")] == 1
    assert values[("fairqueue_unrecorded_events", "0")] == 0
    assert 120 <= values[("fairqueue_oldest_unrecorded_event_age_seconds", "1")] < 180
    assert 5 <= values[("fairqueue_oldest_unrecorded_event_age_seconds", "2")] < 60
    assert values[("fairqueue_oldest_unrecorded_event_age_seconds", "0")] == 0
    assert values[("fairqueue_event_backlog", None)] == 3
    reader.ack(reader.read(count=10, block_ms=10))  # recorded: the lag is gone
    values = gauges(sharded.app)
    assert {v for (name, _), v in values.items()
            if name.startswith(("fairqueue_unrecorded", "fairqueue_oldest_unrecorded"))} == {0}


def test_the_overview_says_how_many_transitions_wait_to_be_recorded_and_since_when(
        rel, redis_client, client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "x"))
    EventReader(store_for(rel.app), "test").ensure_group()
    page = client.get(reverse("admin:celery_fairqueue_account_changelist"))
    assert b"No transition waits to be recorded" in page.content
    write_event_at(redis_client, store_for(rel.app).keys.events, 125)
    page = client.get(reverse("admin:celery_fairqueue_account_changelist"))
    assert b"1 transitions wait to be recorded; the oldest was written 2m 0" in page.content
