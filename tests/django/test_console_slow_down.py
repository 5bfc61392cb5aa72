"""Issue 47 in the console: the account page says when the provider asked to slow down, until
when and because of which job, and an operator lifts it with its own permission (a user with
every other operator permission cannot: 403, the hold kept), the lift logged."""

import time

import pytest
from django.contrib.admin.models import LogEntry

from celery_fairqueue.contrib.django.admin.common import account_url
from celery_fairqueue.reasons import format_clock
from celery_fairqueue.store import StoreInspector, store_for
from celery_fairqueue.store.formats.keys import slow_down_field

from .test_console import ACTION_PERMISSIONS, VIEWER, action_url, logged_in, staff

pytestmark = pytest.mark.django_db


def hold(rel, account: str | None, seconds: float = 600.0) -> float:
    """A provider's hold of ``account`` in queue celery (the whole queue: None), as a retry's
    enqueue writes it (a 429 on job t-429)."""
    store = store_for(rel.app)
    until = store.server_time() + seconds
    store.client.hset(store.keys.pauses, slow_down_field(account, "celery"),
                      f"{until:.6f} 429 t-429")
    return until


def test_lifting_a_slow_down_needs_its_own_permission_and_is_logged(rel):
    rel.send_message.delay("acme", 1)
    hold(rel, "acme")
    store = store_for(rel.app)
    everything_else = logged_in(staff(*VIEWER, *ACTION_PERMISSIONS.values()))
    lift = {"action": "lift", "account": "acme", "queue": "celery"}
    assert everything_else.post(action_url(), lift).status_code == 403
    assert [h.account for h in store.slow_downs()] == ["acme"]
    assert not LogEntry.objects.exists()
    operator = logged_in(staff(*VIEWER, "lift_slow_down", name="alice"))
    assert operator.post(action_url(), lift).status_code == 302
    assert store.slow_downs() == []
    [entry] = LogEntry.objects.all()
    assert entry.change_message == "Lifted the provider's slow-down of account 'acme' in queue " \
                                   "'celery'"


def test_the_account_page_says_the_provider_asked_to_slow_down_until_when_and_why(rel):
    rel.send_message.delay("acme", 1)
    until = hold(rel, "acme")
    [state] = StoreInspector(rel.app).console.account_state("acme")
    assert state.reason == "slowed" and state.until == pytest.approx(until)
    viewer = logged_in(staff(*VIEWER, "pause_account"))
    page = viewer.get(account_url("acme")).content.decode()
    assert f"the provider asked to slow down until {format_clock(until)} (429 on job t-429)" \
        in page
    assert 'class="fq-lift"' not in page  # no permission, no button
    page = logged_in(staff(*VIEWER, "lift_slow_down")).get(account_url("acme")).content.decode()
    assert 'class="fq-lift"' in page


def test_a_queues_slow_down_holds_every_account_there_and_lifts_for_all(rel):
    rel.send_message.delay("acme", 1)
    rel.send_message.delay("beta", 2)
    until = hold(rel, None, seconds=60)
    console = StoreInspector(rel.app).console
    for account in ("acme", "beta"):
        [state] = console.account_state(account)
        assert state.reason == "slowed" and state.slowed.scope == "queue"
    page = logged_in(staff(*VIEWER, "lift_slow_down")).get(account_url("beta")).content.decode()
    assert f"the provider asked queue celery to slow down until {format_clock(until)}" in page
    response = logged_in(staff(*VIEWER, "lift_slow_down")).post(
        action_url(), {"action": "lift", "queue": "celery"})
    assert response.status_code == 302 and store_for(rel.app).slow_downs() == []
    assert time.time() < until


@pytest.mark.slow  # the command lines as subprocesses
def test_fairqueue_status_names_the_slow_down_and_fairqueue_lift_ends_it(rel, redis_url):
    from django.core.management import CommandError

    from .test_cli import celery, manage

    rel.send_message.delay("acme", 1)
    until = hold(rel, "acme")
    status = celery("status", redis_url=redis_url)
    assert status.returncode == 0, status.stderr
    row = status.stdout.split("Slowed down by the provider")[1].splitlines()[3]
    assert row.split()[:2] == ["celery", "acme"] and row.endswith("429 on job t-429")
    assert format_clock(until).split()[0] in row
    accounts = celery("accounts", "--account", "acme", redis_url=redis_url)
    assert "the provider asked to slow down until" in accounts.stdout
    with pytest.raises(CommandError, match="Refused"):
        manage("lift", "--queue", "celery", "--account", "acme", "--user",
               staff(*VIEWER, *ACTION_PERMISSIONS.values()).username)
    lifted = celery("lift", "--queue", "celery", "--account", "acme", redis_url=redis_url)
    assert lifted.returncode == 0 and "lifted the provider's slow-down of account 'acme'" \
        in lifted.stdout
    again = celery("lift", "--queue", "celery", "--account", "acme", redis_url=redis_url)
    assert again.returncode != 0 and "nothing to lift" in again.stdout
    hold(rel, None)
    assert "lifted" in manage("lift", "--queue", "celery", "--user",
                              staff(*VIEWER, "lift_slow_down").username)
