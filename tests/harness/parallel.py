"""How ``make test`` spreads the suite over pytest-xdist workers (registered by
``tests/conftest.py`` through ``pytest_plugins``).

Each xdist worker is a pytest session of its own, so the session fixtures (``redis_server``,
``pg_server``) already give each worker its own servers; ``free_port`` gives each worker its own
share of the ports. What is left is the order: xdist hands tests out in collection order, a few
at a time, so a long test collected last would run alone at the end while the other workers
idle. Under xdist the longest tests go first: by the time each took in the last run that
recorded it (pytest's cache), else the ``slow`` mark.

A few tests keep a core busy for half a minute or more (a storm of jobs, a reshard under load,
the demo, a fresh interpreter per module). Beside each other on 2 cores they starve everything,
their own deadlines included, so they are split into two groups (``xdist_group("cpu-a")`` and
``"cpu-b"``): each group runs on one worker, one test after another, so at most two run at once.
"""

from __future__ import annotations

import pytest

#: pytest's cache key of each test's last call duration (seconds, by node id).
DURATIONS_KEY = "fairqueue/durations"
#: The call durations this process saw (in xdist's controller, every worker's).
_durations: dict[str, float] = {}


def _under_xdist(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first, in an xdist worker (every worker sorts alike, as xdist requires)."""
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    if not _under_xdist(config):
        return
    known: dict[str, float] = cache.get(DURATIONS_KEY, {}) if cache is not None else {}

    def longest_first(item: pytest.Item) -> float:
        guess = 2.0 if item.get_closest_marker("slow") else 0.0
        return -known.get(item.nodeid, guess)

    items.sort(key=longest_first)  # stable: ties keep the collection order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        _durations[report.nodeid] = report.duration
    _sendable(report)


def _text(value: str) -> str:
    """``value`` as UTF-8 can carry it: a lone surrogate becomes ``\\udcff``."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _sendable(report: pytest.TestReport) -> None:
    """Make a report fit for the wire to xdist's controller, which is UTF-8: the hostile-value
    tests log lone surrogates, which the worker would otherwise die on while sending (an
    INTERNALERROR that ends the run). Runs before xdist's own hook sends the report."""
    report.sections = [(_text(title), _text(content)) for title, content in report.sections]
    report.user_properties = [(name, _text(value) if isinstance(value, str) else value)
                              for name, value in report.user_properties]
    if report.longrepr is not None:
        try:
            str(report.longrepr).encode("utf-8")
        except UnicodeEncodeError:
            report.longrepr = _text(str(report.longrepr))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remember the durations for the next run's order (the controller, or a serial run)."""
    config = session.config
    cache = getattr(config, "cache", None)
    if _under_xdist(config) or cache is None or not _durations:
        return
    known: dict[str, float] = cache.get(DURATIONS_KEY, {})
    known.update({nodeid: round(seconds, 2) for nodeid, seconds in _durations.items()})
    cache.set(DURATIONS_KEY, known)
