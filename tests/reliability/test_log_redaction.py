"""No configured PII in worker logs: a task's ``redact`` arguments are masked in what Celery and
this package log about it (arguments, return values, error texts, tracebacks)."""

import pytest

from tests.harness import wait_until

APP = "tests.apps.reliable"
EMAIL, PHONE = "jane.doe@example.com", "+1-555-0100"


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_redacted_arguments_never_reach_the_worker_log(rel, celery_worker_factory, dlq, pool,
                                                       figure):
    worker = celery_worker_factory(APP, pool=pool)
    ok = rel.notify.delay("acme", 2, EMAIL, profile={"phone": PHONE})
    rel.notify.delay("acme", 1, EMAIL, profile={"phone": PHONE})
    assert ok.get(timeout=20) == f"sent to {EMAIL}"  # the caller still gets the real value
    assert wait_until(lambda: dlq.count() == 1, 20)
    # Celery logs the traceback of the last attempt just after the job is dead-lettered.
    assert wait_until(lambda: "Traceback" in worker.log_tail(100_000), 10)
    log = worker.log_tail(100_000)
    assert "succeeded in" in log and "mailbox *** rejected the message (phone ***)" in log
    leaks = [line for line in log.splitlines() if EMAIL in line or PHONE in line]
    figure(f"log redaction ({pool}): 2 jobs quoting an email and a phone, {len(leaks)} log "
           "lines with either")
    assert leaks == []


def test_celery_shows_masked_arguments_in_its_events(rel):
    message = {}

    def capture(headers, **_):
        message.update(headers)

    from celery import signals
    signals.before_task_publish.connect(capture, weak=False)
    try:
        rel.notify.delay("acme", 4, EMAIL, profile={"phone": PHONE, "plan": "pro"})
    finally:
        signals.before_task_publish.disconnect(capture)
    assert message["argsrepr"] == "['acme', 4, '***']"
    assert message["kwargsrepr"] == "{'profile': {'phone': '***', 'plan': 'pro'}}"
