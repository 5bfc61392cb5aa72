"""Idle workers are woken by the store, not by their poll: every worker here polls once a
minute, so a job that runs within seconds was signalled."""

import time

import pytest

from tests.harness import wait_until

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


def blocked_on_doorbells(redis_client) -> list[dict]:
    return [c for c in redis_client.client_list() if c.get("cmd") == "bzpopmin"]


def test_a_lost_doorbell_connection_is_made_again_and_nothing_waits(fair, celery_worker_factory,
                                                                    fair_store, redis_client):
    celery_worker_factory(APP, env=NO_POLL)
    assert wait_until(lambda: blocked_on_doorbells(redis_client), timeout=10)
    for client in blocked_on_doorbells(redis_client):
        redis_client.client_kill_filter(_id=client["id"])
    job = fair.job.delay("acme", 3)  # rung while nobody waits, or to the new connection
    assert job.get(timeout=15) == 3
    assert wait_until(lambda: blocked_on_doorbells(redis_client), timeout=10)


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
