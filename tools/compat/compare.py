"""Compare the plain and the fair run of Celery's integration tests (two JUnit reports).

A *regression* is a test that passed plain and did not pass fair (failed, errored, was skipped
or did not run). Regressions fail the comparison unless ``docs/compatibility.md`` lists them
under "## Exceptions" as ``- `file.py::Class::test`: reason`` (at most ``MAX_EXCEPTIONS``; a
listed name also covers its parametrized variants, ``name[...]``).

Usage: ``python tools/compat/compare.py [.compat/runs [docs/compatibility.md]]`` compares the
last run's reports again (``plain-*.xml``, ``fair-*.xml``, one per shard).
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_EXCEPTIONS = 3
EXCEPTION_LINE = re.compile(r"^- `(?P<test>[^`]+)`\s*[:\u2014-]\s*(?P<reason>.*\S)?\s*$")

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def read_junit(paths: Iterable[Path]) -> dict[str, str]:
    """Outcome per test id (``file.py::Class::name``) of pytest JUnit (xunit1) reports. A test
    reported more than once (a teardown error, a failed subtest) passed only if every entry
    did."""
    outcomes: dict[str, str] = {}
    cases = (case for path in paths for case in ET.parse(path).getroot().iter("testcase"))
    for case in cases:
        test_id = test_id_of(case)
        kinds = {child.tag for child in case}
        outcome = (FAILED if kinds & {"failure", "error"}
                   else SKIPPED if "skipped" in kinds else PASSED)
        if outcomes.get(test_id, PASSED) == PASSED or outcome == FAILED:
            outcomes[test_id] = outcome
    return outcomes


def test_id_of(case: ET.Element) -> str:
    """``test_tasks.py::test_tasks::test_simple_call`` from a testcase element."""
    path = case.get("file") or ""
    module = path.removesuffix(".py").replace("/", ".")
    classname = case.get("classname") or ""
    inner = classname[len(module) + 1:] if module and classname.startswith(module + ".") else ""
    return "::".join(filter(None, [Path(path).name or classname, *inner.split("."),
                                   case.get("name") or ""]))


def read_exceptions(doc: Path) -> dict[str, str]:
    """The listed exceptions of ``doc``: test id -> reason (an empty reason is an error)."""
    exceptions: dict[str, str] = {}
    section = False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            section = line.strip().lower() == "## exceptions"
            continue
        match = EXCEPTION_LINE.match(line) if section else None
        if match:
            exceptions[match["test"]] = (match["reason"] or "").strip()
    return exceptions


def covered(test_id: str, exceptions: Mapping[str, str]) -> str | None:
    """The exception that lists ``test_id`` (itself, or its name without parameters)."""
    if test_id in exceptions:
        return test_id
    base = test_id.split("[", 1)[0]
    return base if base in exceptions else None


@dataclass
class Report:
    plain: dict[str, str]
    fair: dict[str, str]
    exceptions: dict[str, str]
    #: per mode, the messages its test processes sent: {"fair": n, "broker": m}
    sent: Mapping[str, Counter[str]] = field(default_factory=dict)

    @property
    def regressions(self) -> list[str]:
        """Passed plain, did not pass fair (whether listed as an exception or not)."""
        return sorted(t for t, o in self.plain.items()
                      if o == PASSED and self.fair.get(t) != PASSED)

    @property
    def unexplained(self) -> list[str]:
        return [t for t in self.regressions if covered(t, self.exceptions) is None]

    @property
    def problems(self) -> list[str]:
        """Why the comparison fails, beyond unexplained regressions."""
        found = []
        if len(self.exceptions) > MAX_EXCEPTIONS:
            found.append(f"docs/compatibility.md lists {len(self.exceptions)} exceptions; at "
                         f"most {MAX_EXCEPTIONS} are allowed")
        found += [f"exception {t} has no reason" for t, r in self.exceptions.items() if not r]
        if not self.plain or not self.fair:
            found.append("a run reported no tests")
        fair_sent = self.sent.get("fair", Counter())["fair"]
        plain_sent = self.sent.get("plain", Counter())["fair"]
        if self.sent and not fair_sent:
            found.append("the fair run sent no task through the fair store: it was not fair")
        if plain_sent:
            found.append(f"the plain run sent {plain_sent} tasks through the fair store")
        return found

    @property
    def ok(self) -> bool:
        return not self.unexplained and not self.problems

    def rows(self) -> list[tuple[str, int, int, int]]:
        """Per test file and in total: tests, passed plain, passed fair."""
        files: dict[str, Counter[str]] = {}
        for test_id in sorted(set(self.plain) | set(self.fair)):
            counts = files.setdefault(test_id.split("::", 1)[0], Counter())
            counts["tests"] += 1
            counts["plain"] += self.plain.get(test_id) == PASSED
            counts["fair"] += self.fair.get(test_id) == PASSED
        rows = [(name, c["tests"], c["plain"], c["fair"]) for name, c in files.items()]
        rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows),
                     sum(r[3] for r in rows)))
        return rows

    def render(self) -> str:
        lines = ["| file | tests | passed plain | passed fair |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {tests} | {plain} | {fair} |"
                  for name, tests, plain, fair in self.rows()]
        for mode, sent in self.sent.items():
            lines.append(f"{mode} run: the test processes sent {sent['fair']} messages through "
                         f"the fair store and {sent['broker']} through the broker")
        listed = [t for t in self.regressions if t not in self.unexplained]
        lines.append(f"passed plain but not fair: {len(self.regressions)} "
                     f"({len(listed)} listed exceptions)")
        lines += [f"  listed: {t} ({self.fair.get(t, 'not run')})" for t in listed]
        lines += [f"  REGRESSION: {t} ({self.fair.get(t, 'not run')})" for t in self.unexplained]
        stale = [e for e in self.exceptions if not any(
            covered(t, {e: ""}) for t in self.regressions)]
        lines += [f"  note: listed exception {e} passes fair now (or did not pass plain)"
                  for e in stale]
        gained = sorted(t for t, o in self.fair.items()
                        if o == PASSED and self.plain.get(t) != PASSED)
        lines += [f"  passed fair but not plain: {t} ({self.plain.get(t, 'not run')})"
                  for t in gained]
        lines += [f"FAIL: {p}" for p in self.problems]
        lines.append("compat: OK" if self.ok else "compat: FAILED")
        return "\n".join(lines)


def compare(reports: Mapping[str, Sequence[Path]], doc: Path,
            stats: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> Report:
    """Compare the ``plain`` and ``fair`` JUnit reports (each mode's shards); ``stats`` are the
    plugin's ``--compat-stats`` files, read."""
    sent = {mode: sum((Counter(s.get("published") or {}) for s in shards), Counter())
            for mode, shards in (stats or {}).items()}
    return Report(read_junit(reports["plain"]), read_junit(reports["fair"]),
                  read_exceptions(doc), sent)


if __name__ == "__main__":
    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".compat/runs")
    doc_path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/compatibility.md")
    result = compare(
        {mode: sorted(runs.glob(f"{mode}-*.xml")) for mode in ("plain", "fair")}, doc_path,
        {mode: [json.loads(p.read_text()) for p in sorted(runs.glob(f"{mode}-*.json"))]
         for mode in ("plain", "fair")})
    print(result.render())
    sys.exit(0 if result.ok else 1)
