"""RabbitMQ as the broker, the fair store on Redis: one worker runs plain tasks from RabbitMQ and
fair tasks from the store, with Debian's rabbitmq-server started on free loopback ports."""

import importlib
import sys

import pytest

from tests.harness import wait_until
from tests.harness.rabbitmq import RabbitMQServer

APP = "tests.apps.amqp"

pytestmark = pytest.mark.reliability


@pytest.fixture
def rabbitmq(tmp_path):
    server = RabbitMQServer(tmp_path / "rabbitmq").start()
    yield server
    server.stop()


@pytest.fixture
def amqp(rabbitmq, monkeypatch, redis_server, redis_client):
    monkeypatch.setenv("FQ_BROKER_URL", rabbitmq.url)
    sys.modules.pop(APP, None)  # the broker URL is read at import
    yield importlib.import_module(APP)
    sys.modules.pop(APP, None)


def test_plain_tasks_through_rabbitmq_and_fair_tasks_through_the_store_in_one_worker(
        amqp, rabbitmq, celery_worker_factory, ledger, figure):
    worker = celery_worker_factory(APP, concurrency=4, env={"FQ_BROKER_URL": rabbitmq.url})
    plain = [amqp.plain.delay(str(n)) for n in range(20)]
    fair = [amqp.job.delay(f"acct{n % 4}", n) for n in range(20)]
    assert [r.get(timeout=30) for r in plain] == [str(n) for n in range(20)]
    assert [r.get(timeout=30) for r in fair] == list(range(20))
    expected = {f"plain:{n}": 1 for n in range(20)} | {f"acct{n % 4}:{n}": 1 for n in range(20)}
    assert wait_until(lambda: ledger.counts() == expected, timeout=10), ledger.counts()
    assert "claiming fair jobs" in worker.log_path.read_text() and worker.is_alive()
    figure("rabbitmq broker: 20 plain tasks through RabbitMQ and 20 fair tasks through the "
           "store in one worker, 0 lost, 0 run twice")
