"""Masking of ``redact`` arguments: in shown arguments, in Celery's reprs and in log records."""

import json
import logging
import sys

from celery import Celery
from celery._state import _task_stack

from celery_fairqueue import FairTask
from celery_fairqueue.redaction import (
    RedactingFilter,
    Secrets,
    masked_reprs,
    redact_arguments,
    secret_values,
)
from celery_fairqueue.worker.redacted import RedactingBackend


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


# -- by value: Secrets -------------------------------------------------------------------------

def test_a_secret_is_masked_as_written_and_as_repr_saferepr_and_json_quote_it():
    from celery.utils.saferepr import saferepr

    secret = "ann's \"box\"\n\\é"
    secrets = Secrets([secret])
    for shown in (secret, repr(secret), repr([secret, "it's"]), saferepr(secret),
                  json.dumps(secret), json.dumps(secret, ensure_ascii=False),
                  repr(ValueError(f"no mailbox {secret}"))):
        assert secrets.text(shown).count("***") == 1, shown


def test_masking_goes_on_until_no_secret_is_left_and_ignores_what_only_looks_like_the_mask():
    assert Secrets(["x**"]).text("xx**") == "****"  # "x" + "***" spelled it again
    assert Secrets(["***", "****", "ab"]).forms == []  # the mask itself; too short


def test_a_secret_cut_short_by_a_truncating_repr_is_masked_from_where_it_starts():
    from celery.utils.saferepr import saferepr

    secret = "ann smith of 12 baker street"
    shown = saferepr(f"sent to {secret} " + "x" * 2000, 30)
    assert shown.endswith("...'") and "ann smith" in shown
    masked = Secrets([secret]).cut_text(shown)
    assert masked.startswith("'sent to ***") and "ann" not in masked


def test_an_exception_is_copied_with_its_arguments_attributes_and_text_masked():
    class Bounced(Exception):
        def __init__(self, address, code):
            super().__init__(f"{address} bounced")
            self.address, self.code = address, code

        def __str__(self):
            return f"{self.address} bounced ({self.code})"

    class Stubborn(Exception):  # made only with a keyword: no copy of it can be made so
        def __new__(cls, *args, token):
            return super().__new__(cls, *args)

        def __init__(self, *args, token):
            super().__init__(*args)

    secrets = Secrets(["ann@example.com"])
    original = Bounced("ann@example.com", 550)
    masked = secrets.exception(original)
    assert type(masked) is Bounced and masked.args == ("*** bounced",)
    assert str(masked) == "*** bounced (550)" and original.address == "ann@example.com"
    untouched = ValueError("nothing to hide")
    assert secrets.exception(untouched) is untouched
    fallback = secrets.exception(Stubborn("ann@example.com", token=1))
    assert type(fallback).__qualname__ == Stubborn.__qualname__ and str(fallback) == "***"


def test_a_redacted_value_is_masked_where_another_argument_quotes_it():
    args, kwargs = masked_reprs(send, ("acme", 7, "ann@example.com"),
                                {"profile": {"note": "write to ann@example.com"}}, ("email",))
    assert args == "['acme', 7, '***']" and kwargs == "{'profile': {'note': 'write to ***'}}"
    assert redact_arguments((), {"email": "ann@example.com", "note": "ann@example.com!"},
                            ("email",))["kwargs"] == {"email": "***", "note": "***!"}


def test_the_result_backend_stores_a_failure_masked_and_a_success_as_it_is():
    app = Celery("redaction", backend="cache+memory://", set_as_current=False)
    backend = RedactingBackend(app.backend, Secrets(["ann@example.com"]))
    backend.mark_as_failure("t1", ValueError("no mailbox ann@example.com"),
                            traceback="Traceback...\nValueError: no mailbox ann@example.com\n")
    meta = app.backend.get_task_meta("t1")
    assert str(meta["result"]) == "no mailbox ***" and "ann@" not in meta["traceback"]
    backend.mark_as_retry("t2", ValueError("ann@example.com busy"), traceback="ann@example.com")
    assert app.backend.get_task_meta("t2")["traceback"] == "***"
    backend.mark_as_done("t3", "sent to ann@example.com")
    assert app.backend.get_task_meta("t3")["result"] == "sent to ann@example.com"


def test_positional_arguments_are_masked_by_name_past_the_signature_and_through_star_args():
    def spread(account_id, *emails, **extra):
        raise NotImplementedError

    assert masked_reprs(spread, ("acme", "a@x.io", "b@x.io"), {"note": "cc a@x.io"},
                        ("emails",)) == ("['acme', '***', '***']", "{'note': 'cc ***'}")
    # more arguments than the task takes (sent with typing=False): the named ones still masked
    assert masked_reprs(send, (1, 2, "ann@example.com", None, 5), {}, ("email",))[0] == \
        "[1, 2, '***', None, 5]"
