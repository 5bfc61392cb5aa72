"""Eager mode (``task_always_eager``): a fair task runs locally as Celery's tasks do, and
touches no store: no marker, no event, no warning about a store that is not there."""

import logging

from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, RetryPolicy
from tests.harness import free_port


def eager_app() -> Celery:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: a touch would fail
    app = Celery("eager", broker=unreachable, set_as_current=False)
    app.conf.update(task_always_eager=True, fairqueue_redis_url=unreachable,
                    fairqueue_enqueue_timeout=0.5)
    celery_fairqueue.install(app)
    return app


def test_eager_mode_touches_no_store_and_logs_nothing(caplog):
    app = eager_app()
    sent = []

    @app.task(base=FairTask, bind=True, account_arg="account", job_key=("account", "lead"),
              name="eager.send")
    def send(self, account, lead):
        sent.append((account, lead, self.request.job_key))
        return f"sent {lead}"

    with caplog.at_level(logging.DEBUG, logger="celery_fairqueue"):
        first = send.delay("acme", 1)
        again = send.delay("acme", 1)  # no store: nothing dedupes, as with Celery's eager
    assert first.get() == again.get() == "sent 1"
    assert [(a, lead) for a, lead, _ in sent] == [("acme", 1), ("acme", 1)]
    assert all(key for _, _, key in sent)  # the business key is still computed for the task
    assert [r.getMessage() for r in caplog.records if r.name.startswith("celery_fairqueue")] \
        == []


def test_an_eager_failure_raises_as_celery_eager_tasks_do_and_keeps_no_dead_letter(caplog):
    app = eager_app()

    @app.task(base=FairTask, bind=True, account_arg="account", name="eager.fail",
              retry_policy=RetryPolicy(max_attempts=1))
    def fail(self, account):
        raise ValueError("bad input")

    with caplog.at_level(logging.WARNING, logger="celery_fairqueue"):
        result = fail.delay("acme")
    assert result.failed() and isinstance(result.result, ValueError)
    assert [r for r in caplog.records if r.name.startswith("celery_fairqueue")] == []
