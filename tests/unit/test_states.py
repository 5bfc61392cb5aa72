"""One vocabulary of account states: deferred by a limit (with its reason) vs paused by an
operator. The CLI, the console and the metrics take their words from celery_fairqueue.states."""

import ast
import re
from pathlib import Path

import celery_fairqueue
from celery_fairqueue import states
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reports import accounts_report
from celery_fairqueue.states import AccountState, DeferReason, Reason
from celery_fairqueue.store import AccountPage, AccountRow

PACKAGE = Path(celery_fairqueue.__file__).parent


def string_literals(path: Path) -> list[str]:
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_every_state_and_reason_has_its_words():
    assert {s.label for s in AccountState} == {"ready", "deferred", "paused", "idle"}
    assert {r.value for r in DeferReason} <= {r.value for r in Reason}
    assert all(r.label for r in Reason)
    assert Reason.PAUSED.value == AccountState.PAUSED.value


def test_held_is_no_state_name():
    """The operator's stop is "paused" everywhere; "held" went."""
    for path in PACKAGE.rglob("*"):
        if path.suffix == ".py":
            assert "held" not in string_literals(path), path
        elif path.suffix in {".html", ".lua"}:
            text = path.read_text()
            assert not re.search(r"['\"]held['\"]|Accounts held", text), path


def test_the_cli_shows_the_state_labels_of_the_one_enum():
    rows = [AccountRow("q", f"a{n}", 1, 0, state, None, None) for n, state in
            enumerate(AccountState)]
    report = accounts_report(AccountPage(rows, 4, True), now=0.0)
    shown = [line.split()[4] for line in report.splitlines()[2:2 + len(rows)]]
    assert sorted(shown) == sorted(s.label for s in AccountState)
    assert AccountRow("q", "a", 1, 0, AccountState.DEFERRED, 5.0, AccountLimit(),
                      DeferReason.RATE_LIMITED).reason.label == "Deferred: rate limited"


def test_the_counts_of_status_console_and_metrics_are_named_once():
    """The column heads of `fairqueue status`, the console's overview and the metrics' help
    come from states.ACCOUNTS_*; nowhere else spells them."""
    words = {states.ACCOUNTS_READY, states.ACCOUNTS_DEFERRED, states.ACCOUNTS_PAUSED}
    spelled = re.compile(r"accounts (ready|deferred|paused|held)", re.I)
    for path in PACKAGE.rglob("*.py"):
        if path.name == "states.py":
            continue
        for literal in string_literals(path):
            assert not spelled.fullmatch(literal.strip()), (path, literal)
    overview = (PACKAGE / "contrib/django/templates/admin/celery_fairqueue/overview.html")
    text = overview.read_text()
    assert "{{ labels.accounts_deferred }}" in text and "{{ labels.accounts_paused }}" in text
    assert not spelled.search(re.sub(r"\{\{.*?\}\}", "", text))
    views = (PACKAGE / "contrib/django/console/account_views.py").read_text()
    assert "from ....states import ACCOUNTS_DEFERRED, ACCOUNTS_PAUSED, ACCOUNTS_READY" in views
    assert words == {"Accounts ready", "Accounts deferred", "Accounts paused"}


def test_the_state_codes_the_scripts_write_are_read_through_one_table():
    assert states.STATE_CODES["o"][0] is AccountState.PAUSED
    assert states.STATE_CODES["p"][0] is AccountState.DEFERRED
    assert states.STATE_CODES["c"] == (AccountState.DEFERRED, DeferReason.CONCURRENCY_CAP)
