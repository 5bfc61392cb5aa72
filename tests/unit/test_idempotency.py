"""Business job keys: stable, scoped by task and account, derived from the named arguments."""

import pytest

from celery_fairqueue.errors import ConfigurationError
from celery_fairqueue.idempotency import compute_job_key, hash_identity


def send_step(account_id, lead_id, step, campaign_rev=1):
    pass


SPEC = ("account_id", "lead_id", "step", "campaign_rev")


def test_key_is_stable_across_processes_and_versions():
    # sha256 of the canonical JSON '["t","acme",42]' (checked with sha256sum): changing the
    # hashing would silently break dedupe of jobs already stored
    assert hash_identity(["t", "acme", 42]) == (
        "3d5895a69bcded02a65f2ef29c279592024e38e341e29bfa88744f13c0146cbf")


def test_positional_and_keyword_arguments_give_the_same_key():
    a = compute_job_key("t", "acme", SPEC, send_step, ("acme", 42, "intro", 3), {})
    b = compute_job_key("t", "acme", SPEC, send_step, (), {"account_id": "acme", "lead_id": 42,
                                                         "step": "intro", "campaign_rev": 3})
    assert a == b


def test_defaults_are_part_of_the_identity():
    a = compute_job_key("t", "acme", SPEC, send_step, ("acme", 42, "intro"), {})
    b = compute_job_key("t", "acme", SPEC, send_step, ("acme", 42, "intro", 1), {})
    assert a == b


def test_other_task_or_account_gives_another_key():
    base = compute_job_key("t", "acme", ("lead_id",), send_step, ("acme", 42, "x"), {})
    assert base != compute_job_key("u", "acme", ("lead_id",), send_step, ("acme", 42, "x"), {})
    assert base != compute_job_key("t", "beta", ("lead_id",), send_step, ("beta", 42, "x"), {})


def test_callable_spec():
    key = compute_job_key("t", "acme", lambda account_id, lead_id, step: (lead_id, step),
                          send_step, ("acme", 42, "x"), {})
    assert key == hash_identity(["t", "acme", 42, "x"])


def test_no_spec_means_no_key():
    assert compute_job_key("t", "acme", None, send_step, ("acme", 1, "x"), {}) is None


def test_unknown_argument_name_is_a_configuration_error_naming_the_task():
    with pytest.raises(ConfigurationError, match="task t: job_key names \\['lead'\\]"):
        compute_job_key("t", "acme", ("lead",), send_step, ("acme", 1, "x"), {})


def test_a_key_argument_the_call_leaves_out_is_a_type_error_not_a_configuration_error():
    with pytest.raises(TypeError, match="task t: missing a required argument of its job_key"):
        compute_job_key("t", "acme", ("account_id", "lead_id"), send_step, ("acme",), {})
