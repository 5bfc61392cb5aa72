"""The search syntax of the console: a key from its parts, computed as the task computes it, and
an argument's searchable line; hostile parts get a clear error or the producer's own key."""

import json
import math
import re

import pytest
from celery import Celery
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_fairqueue import FairTask, ReliableTask
from celery_fairqueue.search import (
    IncompleteKeyError,
    SearchQueryError,
    argument_line,
    arguments_text,
    key_parts,
    key_search,
    query_for,
    shown_value,
    typed_value,
    words,
)

app = Celery("search", set_as_current=False)


@app.task(base=FairTask, bind=True, account_arg="account_id", shared=False,
          job_key=("account_id", "lead_id", "step", "campaign_rev"), redact=("email",))
def unit_step(self, account_id, lead_id, step, campaign_rev, email=""):
    raise NotImplementedError


@app.task(base=ReliableTask, bind=True, shared=False, job_key=("lead_id",))
def plain(self, lead_id, note="x"):
    raise NotImplementedError


@app.task(base=FairTask, bind=True, account_arg="account_id", shared=False,
          job_key=lambda account_id, lead_id: lead_id)
def by_function(self, account_id, lead_id):
    raise NotImplementedError


def producer_key(*args):
    """The key the producer puts in the message: FairTask's own path."""
    account = unit_step.resolve_account(args, {})
    return unit_step.business_key(account, args, {})


def test_key_search_by_parts_finds_the_producers_key():
    found = key_search(app, "unit_step account_id=acme lead_id=1 step=intro campaign_rev=3")
    assert found is not None
    assert found.job_key == producer_key("acme", 1, "intro", 3)
    assert (found.task, found.account) == (unit_step.name, "acme")
    # by full name, parts in any order, a quoted string, and account= as the account
    assert key_search(app, f'{unit_step.name} campaign_rev=3 step="intro" lead_id=1 '
                           'account=acme').job_key == found.job_key
    # typed as JSON: the string "1" is another lead than the int 1
    assert key_search(app, 'unit_step account_id=acme lead_id="1" step=intro campaign_rev=3'
                      ).job_key == producer_key("acme", "1", "intro", 3)


def test_a_task_without_an_account_argument_takes_account_and_its_defaults():
    assert key_parts(plain) == ["account", "lead_id"]
    assert key_search(app, "plain account=acme lead_id=7").job_key == \
        plain.business_key("acme", (7,), {})


def test_a_search_that_is_not_a_key_search_returns_none():
    assert key_search(app, "lead 1") is None
    assert key_search(app, "lead_id=1") is None
    assert key_search(app, "") is None
    assert key_search(app, "by_function account_id=a lead_id=1") is None  # its key is a function


@pytest.mark.parametrize(("query", "says"), [
    ("unit_step account_id=acme lead_id=1", "the key needs step, campaign_rev"),
    ("unit_step account_id=acme lead_id=1 step=a campaign_rev=1 email=x", "'email=x' is not"),
    ("unit_step acme 1 intro 3", "search as: unit_step account_id=... lead_id=..."),
    ("unit_step account_id=acme lead_id=NaN step=a campaign_rev=1", "NaN is not a JSON value"),
    ("unit_step account_id=acme lead_id=-Infinity step=a campaign_rev=1", "Infinity"),
    ("unit_step account_id=acme lead_id=1e999 step=a campaign_rev=1", "Infinity"),
    ('unit_step account_id=acme lead_id="1 step=a campaign_rev=1', "double-quoted"),
    ("unit_step account_id=[1] lead_id=1 step=a campaign_rev=1", "account must be a str"),
    ("unit_step lead_id=1 step=a campaign_rev=1", "the key needs account_id"),
])
def test_parts_that_make_no_key_are_refused_with_what_to_type(query, says):
    with pytest.raises(SearchQueryError, match="unit_step") as refused:
        key_search(app, query)
    assert says in str(refused.value)


def test_words_that_are_not_all_of_the_parts_are_an_incomplete_key_not_a_wrong_one():
    for query in ("unit_step lead_id=1", "unit_step acme", "unit_step account_id=a lead_id=1 x"):
        with pytest.raises(IncompleteKeyError, match="search as: unit_step account_id="):
            key_search(app, query)


@settings(max_examples=300, deadline=None)
@given(lead=st.text(), step=st.text(min_size=1))
def test_a_forms_inputs_read_as_json_or_text_make_the_query_of_that_key(lead, step):
    def value(text):
        try:
            return json.loads(text)
        except ValueError:
            return text

    query = query_for("unit_step", {"account_id": "acme", "lead_id": lead, "step": step,
                                    "campaign_rev": "3"})
    try:
        found = key_search(app, query)
    except IncompleteKeyError:  # an input left empty
        assert not lead.strip() or not step.strip()
        return
    except SearchQueryError as refused:  # NaN, Infinity, an int past Python's digit limit
        assert "JSON value" in str(refused) or "digits" in str(refused)
        return
    assert found.job_key == producer_key("acme", value(lead.strip()), value(step.strip()), 3)


def test_a_huge_int_is_refused_clearly():
    with pytest.raises(SearchQueryError, match=r"lead_id: .*digits.*no job key holds"):
        key_search(app, f"unit_step account_id=a lead_id={'9' * 5000} step=a campaign_rev=1")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner, max_size=3), max_leaves=5)


@settings(max_examples=300, deadline=None)
@given(lead=JSON_VALUES, step=st.text(), rev=st.integers(min_value=-(2**200), max_value=2**200),
       account=st.text(min_size=1))
def test_any_parts_typed_as_json_give_the_producers_key(lead, step, rev, account):
    """Unicode, lone surrogates (as JSON escapes), big ints, nested lists: the same key."""
    query = " ".join(["unit_step", f"account_id={json.dumps(account)}",
                      f"lead_id={json.dumps(lead, separators=(',', ':'))}",
                      f"step={json.dumps(step)}", f"campaign_rev={rev}"])
    found = key_search(app, query)
    assert found is not None and found.job_key == producer_key(account, lead, step, rev)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([math.nan, math.inf, -math.inf]))
def test_any_nan_or_infinity_is_refused_not_hashed(value):
    with pytest.raises(SearchQueryError, match="not a JSON value"):
        key_search(app, f"unit_step account_id=a lead_id={json.dumps(value)} step=a "
                        "campaign_rev=1")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_a_value_typed_is_json_or_the_text_never_a_crash(text):
    try:
        value = typed_value(text)
    except SearchQueryError:
        return
    assert value == text or json.loads(text) == value


def test_words_keep_a_quoted_value_whole():
    assert words('unit_step step="intro email" lead_id=1  x tags=["a b",1]') == [
        'unit_step', 'step="intro email"', "lead_id=1", "x", 'tags=["a b",1]']
    assert shown_value('"intro email"') == "intro email"
    assert shown_value("1") == "1"


def test_argument_lines_are_one_line_each_text_as_is_the_rest_compact_json():
    assert argument_line("step", "intro\nemail") == "step=intro\\nemail"
    assert argument_line("tags", {"b": 1, "a": [1, "é"]}) == 'tags={"a":[1,"é"],"b":1}'
    assert arguments_text({"lead_id": 1, "email": "***"}) == "\nlead_id=1\nemail=***\n"
    assert arguments_text({}) == ""


def test_a_short_name_of_two_keyed_tasks_asks_for_the_full_name():
    other = Celery("search-two", set_as_current=False)

    def send(lead_id):
        raise NotImplementedError

    for name in ("billing.plain", "crm.plain"):
        other.task(base=ReliableTask, shared=False, name=name, job_key=("lead_id",))(send)
    with pytest.raises(SearchQueryError, match=re.escape(
            "type the full name, one of billing.plain, crm.plain")):
        key_search(other, "plain account=a lead_id=1")
    assert key_search(other, "crm.plain account=a lead_id=1").task == "crm.plain"
