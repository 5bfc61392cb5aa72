"""Idle workers are woken by the store, not by their poll: every worker here polls once a
minute, so a job that runs within seconds was signalled."""

import time

import pytest

from tests.harness import drop_result_subscriptions, wait_until

APP = "tests.apps.fair"
NO_POLL = {"FQ_POLL_INTERVAL": "60"}


@pytest.fixture
def idle_worker(fair, celery_worker_factory, fair_store):
    worker = celery_worker_factory(APP, env=NO_POLL)
    time.sleep(1)  # its first claims found nothing: it waits
    return worker


def test_an_idle_worker_is_woken_by_an_enqueue_not_by_its_poll(fair, idle_worker):
    assert fair.job.delay("acme", 1).get(timeout=15) == 1


@pytest.mark.slow
def test_a_countdown_job_runs_when_due_though_the_worker_polls_seldom(fair, idle_worker):
    assert fair.job.apply_async(("acme", 2), countdown=1).get(timeout=15) == 2


def test_a_lost_wake_up_connection_is_made_again_and_nothing_waits(fair, celery_worker_factory,
                                                                   fair_store, redis_client):
    # no remote control: the worker's one pub/sub connection is the store's wake-up subscription
    celery_worker_factory(APP, env={**NO_POLL, "FQ_REMOTE_CONTROL": "0"})
    channel = fair_store.keys.queue("celery").wake

    def listening() -> bool:
        return dict(redis_client.pubsub_numsub(channel)).get(channel) == 1

    assert wait_until(listening, timeout=10)
    drop_result_subscriptions()  # so the kill hits the worker's subscription, not this process's
    redis_client.client_kill_filter(_type="pubsub")
    job = fair.job.delay("acme", 3)  # signalled while nobody listens, or to the new subscription
    assert job.get(timeout=15) == 3
    assert wait_until(listening, timeout=10)


@pytest.mark.slow
def test_an_idle_worker_asks_the_redis_broker_every_five_seconds_not_every_second(
        fair, idle_worker, redis_client):
    def brpops() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_brpop", {}).get("calls", 0))

    before = brpops()
    time.sleep(6)
    assert brpops() - before <= 2  # kombu's own pace (1 s) asks 6 times
    sent = time.monotonic()
    assert fair.plain.delay("broker-message").get(timeout=15) == "broker-message"
    assert time.monotonic() - sent < 4  # the waiting BRPOP returned with it, not at its timeout
