"""Bad input gets a precise error or a dead letter with its reason; nothing is dropped silently."""

import json
import time

import pytest
from celery import Celery, group

import celery_fairqueue
from celery_fairqueue import (
    FairTask,
    MissingAccountError,
    PayloadTooLargeError,
    SerializationError,
    StoreUnavailableError,
)
from celery_fairqueue.envelope import Envelope
from tests.harness import free_port, wait_until

APP = "tests.apps.fair"


def test_missing_account_names_the_task(fair, fair_store):
    with pytest.raises(MissingAccountError,
                       match=r"tests\.apps\.fair\.context was enqueued with no account"):
        fair.context.delay("acme")  # declares no account_arg, and no account= given
    with pytest.raises(ValueError):
        fair.job.delay(None, 1)
    assert fair_store.stats() == {}


def test_arguments_that_are_not_json_are_refused(fair, fair_store):
    with pytest.raises(SerializationError, match=r"tests\.apps\.fair\.job: arguments are not "
                                                 r"JSON-serializable"):
        fair.job.delay("acme", object())
    assert fair_store.stats() == {}


def test_oversized_payload_is_refused_with_the_setting_named(fair, fair_store):
    with pytest.raises(PayloadTooLargeError, match="fairqueue_max_payload_bytes=4194304"):
        fair.job.delay("acme", 1, "x" * 4_200_000)
    assert fair_store.stats() == {}


def test_a_chain_to_a_chord_with_a_large_header_is_under_the_default_payload_bound(fair,
                                                                               fair_store):
    """Celery's own test_chain_to_a_chord_with_large_header: its first message carries the
    chord's 1,000 header signatures, some 270 KB."""
    (fair.urgent.si("acme", 0) | group(fair.job.si("acme", n) for n in range(1000))
     | fair.urgent.si("acme", 1)).delay()
    [record] = fair_store.client.hvals(fair_store.keys.records)  # the chain's first task
    assert len(record) > 256 * 1024


def test_pickle_serializer_is_refused(fair, fair_store):
    with pytest.raises(SerializationError, match="JSON only, not 'pickle'"):
        fair.job.apply_async(args=("acme", 1), serializer="pickle")
    assert fair_store.stats() == {}


def test_unreachable_redis_raises_with_a_redacted_url():
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    app = Celery("down", broker=url)
    app.conf.fairqueue_redis_url = url
    celery_fairqueue.install(app)

    @app.task(base=FairTask, account_arg="account")
    def t(account):
        pass

    with pytest.raises(StoreUnavailableError) as raised:
        t.delay("acme")
    assert "hunter2" not in str(raised.value)
    assert "unreachable during enqueue" in str(raised.value)


def raw_job(fair_store, job_id, envelope, account="acme"):
    fair_store.enqueue(queue="celery", account=account, job_id=job_id, envelope=envelope)


def dead_reason(fair_store, job_id):
    record = fair_store.client.hget(fair_store.keys.dead, job_id)
    return json.loads(record)["reason"] if record else None


@pytest.mark.parametrize(
    "envelope,reason",
    [
        ("not json at all", "malformed message: stored job is not JSON"),
        (
            json.dumps(
                {
                    "body": "\x80\x04pickled",
                    "content_type": "application/x-python-serialize",
                    "headers": {"task": "tests.apps.fair.job", "id": "p"},
                }
            ),
            "only JSON is accepted",
        ),
        (
            Envelope(
                body="[[1], {}, {}", headers={"task": "tests.apps.fair.job", "id": "b"}
            ).to_json(),
            "malformed message",
        ),
        (
            Envelope(body="[[], {}, {}]", headers={"task": "no.such.task", "id": "u"}).to_json(),
            "unknown task 'no.such.task'",
        ),
        (
            Envelope(body='[{"account_id": "acme"}, {}, {}]',
                     headers={"task": "tests.apps.fair.job", "id": "d"}).to_json(),
            "malformed message: the body is not [args (a list)",
        ),
    ],
)
def test_undeliverable_jobs_are_dead_lettered_with_their_reason(
    fair, celery_worker_factory, fair_store, envelope, reason, figure
):
    worker = celery_worker_factory(APP)
    raw_job(fair_store, "bad:0", envelope)
    assert wait_until(lambda: dead_reason(fair_store, "bad:0") is not None, timeout=10)
    assert reason in dead_reason(fair_store, "bad:0")
    assert fair_store.counts("celery")["running"] == 0
    assert "bad:0" in worker.log_path.read_text()  # and the worker log says which job
    figure(f"bad input: dead-lettered as {dead_reason(fair_store, 'bad:0')[:60]!r}, 0 lost")


@pytest.mark.slow
def test_poison_message_that_kills_its_worker_is_dead_lettered_not_retried_forever(
    fair, celery_worker_factory, fair_store, redis_client, figure
):
    worker = celery_worker_factory(
        APP, pool="prefork", concurrency=1, env={"FQ_MAX_DELIVERIES": "3"}
    )
    fair.job.delay("acme", 1, 30.0)
    for _ in range(3):
        assert wait_until(lambda: redis_client.hget("starts", "acme:1") is not None, timeout=20)
        redis_client.hdel("starts", "acme:1")
        worker.kill_child()
    assert wait_until(lambda: fair_store.client.hlen(fair_store.keys.dead) == 1, timeout=20)
    job_id = fair_store.client.hkeys(fair_store.keys.dead)[0]
    assert "without being settled" in dead_reason(fair_store, job_id)
    time.sleep(2)  # a worker that still held or re-queued it would start it again by now
    assert redis_client.hget("starts", "acme:1") is None
    counts = fair_store.counts("celery")
    assert counts["ready"] == counts["delayed"] == counts["running"] == 0, counts
    figure("poison message: killed its worker's child 3 times, then dead-lettered, not retried "
           "(not started again in the 2 s after)")
