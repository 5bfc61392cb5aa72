"""``fairqueue accounts`` and ``fairqueue accounts --account`` count the same things with the
same words (states.py), on a real redis-server: a deferred job is deferred in both, and an
account whose only job is delayed is listed."""

from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reports import account_report, accounts_report
from celery_fairqueue.store import AccountPage

from .conftest import put
from .test_console_store import Inspector, drain, live, state_of


def listing(store) -> tuple[AccountPage, dict, str]:
    inspector = Inspector(store)
    page = inspector.accounts()
    states = {(s.queue, s.account): s for row in page.rows
              for s in inspector.console.account_state(row.account, [row.queue])}
    return page, states, accounts_report(page, store.server_time(), states)


def row_of(report: str, account: str) -> list[str]:
    [row] = [line.split() for line in report.splitlines() if line.startswith(account + " ")]
    return row


def test_the_listing_counts_a_deferred_job_as_deferred_as_the_account_view_does(store):
    live(store)
    store.set_limit("acme", AccountLimit(rate="1/h", burst=1))
    for n in range(2):
        put(store, "acme", n)
    assert drain(store) == ["acme"]  # the second job waits for the next token: deferred
    state = state_of(store, "acme")
    assert (state.ready, state.deferred) == (0, 1)

    page, _, report = listing(store)
    assert row_of(report, "acme")[2:7] == ["0", "0", "deferred", "(1", "deferred)"]
    [row] = page.rows
    assert (row.ready, row.deferred, row.state) == (0, 1, "deferred")
    single = account_report([state])
    [line] = [line.split() for line in single.splitlines() if line.startswith("default ")]
    assert line[1:3] == ["0", "1"]  # READY 0, DEFERRED 1: the same counts


def test_an_account_whose_only_job_is_delayed_is_listed(store):
    live(store)
    put(store, "later", 1, due=store.server_time() + 3600)
    put(store, "now", 1)
    page, states, report = listing(store)
    assert row_of(report, "now")[2:5] == ["1", "0", "ready"]
    assert row_of(report, "later")[2:7] == ["0", "0", "idle", "(1", "delayed)"]
    assert states[("default", "later")].delayed_future == 1
    assert {(r.account, r.ready, r.delayed) for r in page.rows} == {("later", 0, 1),
                                                                     ("now", 1, 0)}


def test_the_listing_reads_delayed_accounts_from_the_per_account_counts_not_the_jobs(store):
    """Bounded: the delayed accounts come from the queue's per-account count hash; with
    --limit below the accounts, the listing stops and says so."""
    for n in range(5):
        put(store, f"acct{n}", 1, due=store.server_time() + 3600)
    page = Inspector(store).accounts(limit=3)
    assert len(page.rows) == 3 and not page.complete
    assert Inspector(store).accounts(limit=10).complete
