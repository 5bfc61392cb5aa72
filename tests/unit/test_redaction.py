"""Masking of ``redact`` arguments: in shown arguments, in Celery's reprs and in log records."""

import logging
import sys

from celery import Celery
from celery._state import _task_stack

from celery_fairqueue import FairTask
from celery_fairqueue.redaction import RedactingFilter, masked_reprs, secret_values


def send(account_id, lead_id, email, profile=None):
    raise NotImplementedError


def test_reprs_mask_by_parameter_name_and_by_nested_key():
    args, kwargs = masked_reprs(send, ("acme", 7, "ann@example.com"),
                                {"profile": {"phone": "+1 555", "plan": "pro"}},
                                ("email", "phone"))
    assert args == "['acme', 7, '***']"
    assert kwargs == "{'profile': {'phone': '***', 'plan': 'pro'}}"


def test_secret_values_are_the_texts_of_named_values_long_enough_to_mask():
    named = {"email": "ann@example.com", "phone": 12, "profile": {"phone": [5550100, "x"]},
             "note": "ann@example.com is fine here"}
    assert secret_values(named, ("email", "phone")) == {"ann@example.com", "5550100"}


def test_filter_masks_message_traceback_and_celerys_data_while_the_task_runs():
    app = Celery("redaction", set_as_current=False)

    @app.task(base=FairTask, bind=True, account_arg="account_id", redact=("email",),
              shared=False)
    def notify(self, account_id, email):
        try:
            raise ValueError(f"no mailbox {email}")
        except ValueError:
            return logging.LogRecord("t", logging.ERROR, __file__, 1, "failed: %s", (email,),
                                     exc_info=sys.exc_info())

    notify.push_request(args=("acme", "ann@example.com"), kwargs={})
    _task_stack.push(notify)  # as Celery's trace does while the task runs
    try:
        record = notify.run("acme", "ann@example.com")
        record.data = {"exc": "ValueError('no mailbox ann@example.com')", "id": 1}
        assert RedactingFilter().filter(record)
    finally:
        _task_stack.pop()
        notify.pop_request()
    assert record.getMessage() == "failed: ***"
    assert "no mailbox ***" in record.exc_text and "ann@example.com" not in record.exc_text
    assert record.data == {"exc": "ValueError('no mailbox ***')", "id": 1}


def test_filter_leaves_records_alone_outside_a_task():
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello %s", ("ann",), None)
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "hello ann"
