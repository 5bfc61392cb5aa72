"""The comparison of ``make compat`` (tools/compat/compare.py): what counts as a regression, and
which listed exceptions excuse one."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_compare",
                                                  ROOT / "tools" / "compat" / "compare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


compare = load_compare()

CASE = '<testcase classname="t.integration.{module}.{cls}" name="{name}" ' \
       'file="t/integration/{module}.py" line="1" time="0.1">{body}</testcase>'


def junit(path: Path, cases: list[tuple[str, str, str, str]]) -> Path:
    body = "".join(CASE.format(module=m, cls=c, name=n, body=b) for m, c, n, b in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}'
                    "</testsuite></testsuites>")
    return path


FAILURE = '<failure message="boom">boom</failure>'
SKIPPED = '<skipped message="no"/>'


def doc(path: Path, *entries: str) -> Path:
    path.write_text("# Compatibility\n\n## Exceptions\n" + "".join(f"{e}\n" for e in entries)
                    + "\n## Other\n- `test_x.py::test_y`: not in the exceptions section\n")
    return path


def test_a_test_that_passes_plain_and_fails_fair_is_a_regression(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_tasks", "test_tasks", "test_a", ""),
                                           ("test_tasks", "test_tasks", "test_b", "")])
    fair = junit(tmp_path / "fair.xml", [("test_tasks", "test_tasks", "test_a", ""),
                                         ("test_tasks", "test_tasks", "test_b", FAILURE)])
    report = compare.compare({"plain": [plain], "fair": [fair]}, doc(tmp_path / "c.md"))
    assert report.unexplained == ["test_tasks.py::test_tasks::test_b"]
    assert not report.ok
    assert report.rows() == [("test_tasks.py", 2, 2, 1), ("total", 2, 2, 1)]
    assert "REGRESSION: test_tasks.py::test_tasks::test_b (failed)" in report.render()


def test_skipped_or_missing_in_the_fair_run_is_a_regression(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_canvas", "test_chord", "test_a", ""),
                                           ("test_canvas", "test_chord", "test_b", "")])
    fair = junit(tmp_path / "fair.xml", [("test_canvas", "test_chord", "test_a", SKIPPED)])
    report = compare.compare({"plain": [plain], "fair": [fair]}, doc(tmp_path / "c.md"))
    assert report.unexplained == ["test_canvas.py::test_chord::test_a",
                                  "test_canvas.py::test_chord::test_b"]


def test_failing_in_both_runs_is_not_a_regression(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_tasks", "test_tasks", "test_a", FAILURE)])
    fair = junit(tmp_path / "fair.xml", [("test_tasks", "test_tasks", "test_a", FAILURE)])
    report = compare.compare({"plain": [plain], "fair": [fair]}, doc(tmp_path / "c.md"))
    assert report.ok
    assert report.rows()[-1] == ("total", 1, 0, 0)


def test_a_failed_subtest_fails_its_test(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_canvas", "test_chord", "test_a", "")])
    fair = junit(tmp_path / "fair.xml", [("test_canvas", "test_chord", "test_a", ""),
                                         ("test_canvas", "test_chord", "test_a", FAILURE),
                                         ("test_canvas", "test_chord", "test_a", "")])
    report = compare.compare({"plain": [plain], "fair": [fair]}, doc(tmp_path / "c.md"))
    assert report.unexplained == ["test_canvas.py::test_chord::test_a"]


def test_shards_are_merged(tmp_path: Path) -> None:
    reports = {mode: [junit(tmp_path / f"{mode}-{i}.xml",
                            [("test_inspect", "test_Inspect", f"test_{i}", "")])
                      for i in range(2)] for mode in ("plain", "fair")}
    report = compare.compare(reports, doc(tmp_path / "c.md"))
    assert report.rows() == [("test_inspect.py", 2, 2, 2), ("total", 2, 2, 2)]


def test_a_listed_exception_excuses_its_test_and_its_parameters(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_inspect", "test_Inspect", "test_scheduled", ""),
                                           ("test_tasks", "test_tasks", "test_p[1]", "")])
    fair = junit(tmp_path / "fair.xml", [
        ("test_inspect", "test_Inspect", "test_scheduled", FAILURE),
        ("test_tasks", "test_tasks", "test_p[1]", FAILURE)])
    listed = doc(tmp_path / "c.md",
                 "- `test_inspect.py::test_Inspect::test_scheduled`: eta jobs wait in Redis",
                 "- `test_tasks.py::test_tasks::test_p`: a design difference")
    report = compare.compare({"plain": [plain], "fair": [fair]}, listed)
    assert report.regressions == ["test_inspect.py::test_Inspect::test_scheduled",
                                  "test_tasks.py::test_tasks::test_p[1]"]
    assert report.unexplained == []
    assert report.ok


@pytest.mark.parametrize("entries, problem", [
    (["- `a.py::t1`: r", "- `a.py::t2`: r", "- `a.py::t3`: r", "- `a.py::t4`: r"],
     "lists 4 exceptions; at most 3"),
    (["- `a.py::t1`:"], "exception a.py::t1 has no reason"),
])
def test_too_many_exceptions_or_one_without_a_reason_fail(
        tmp_path: Path, entries: list[str], problem: str) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_tasks", "test_tasks", "test_a", "")])
    report = compare.compare({"plain": [plain], "fair": [plain]}, doc(tmp_path / "c.md", *entries))
    assert not report.ok
    assert any(problem in p for p in report.problems)


def test_a_fair_run_that_sent_nothing_through_the_store_fails(tmp_path: Path) -> None:
    plain = junit(tmp_path / "plain.xml", [("test_tasks", "test_tasks", "test_a", "")])
    runs = {"plain": [plain], "fair": [plain]}
    unfair = compare.compare(runs, doc(tmp_path / "c.md"),
                             {"plain": [{"published": {"broker": 5}}],
                              "fair": [{"published": {"broker": 5}}]})
    assert not unfair.ok
    fair = compare.compare(runs, doc(tmp_path / "c.md"),
                           {"plain": [{"published": {"broker": 5}}],
                            "fair": [{"published": {"fair": 3, "broker": 1}},
                                     {"published": {"fair": 2}}]})
    assert fair.sent["fair"] == Counter({"fair": 5, "broker": 1})
    assert fair.ok
