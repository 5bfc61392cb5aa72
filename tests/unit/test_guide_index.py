"""The guide's "Where is it decided?" index names a real function or script for each decision:
a reader who follows it lands on the code that decides."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
#: The decisions a newcomer asks about first (issue 32); each must have a row.
DECISIONS = ("the fair pick", "the token bucket", "a lease's renewal", "a lease's reaping",
             "the business-key dedupe", "an account's shard", "a worker's choice of shard",
             "the wake-ups", "the retry verdict", "the translation of Redis errors",
             "the writing of Job rows")


def index_rows() -> dict[str, str]:
    text = GUIDE.read_text()
    table = text.split("### Where is it decided?", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in [row for row in table.splitlines() if row.startswith("|")][2:]:
        decision, where = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[decision] = where
    return rows


def defined_in(path: Path) -> set[str]:
    """The functions and classes (methods included) a Python file defines, or the local
    functions of a Lua file."""
    if path.suffix == ".lua":
        return set(re.findall(r"^local function (\w+)\(", path.read_text(), re.M))
    return {node.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def test_the_index_has_a_row_for_each_decision_a_newcomer_asks_about():
    rows = index_rows()
    assert [d for d in DECISIONS if not any(row.startswith(d) for row in rows)] == []


def test_each_name_the_index_gives_exists_where_it_says():
    missing = []
    for decision, where in index_rows().items():
        named = re.findall(r"`([^`]+)`", where)
        files = [ROOT / n for n in named if n.endswith((".py", ".lua"))]
        names = [n for n in named if not n.endswith((".py", ".lua"))]
        assert files, decision
        missing += [f"{decision}: {f.relative_to(ROOT)}" for f in files if not f.is_file()]
        everything = set().union(*(defined_in(f) for f in files if f.is_file()))
        missing += [f"{decision}: {n}" for n in names if n not in everything]
    assert missing == []


def test_the_index_check_fails_on_a_name_that_does_not_exist(tmp_path):
    """The check above cannot pass by looking away."""
    script = tmp_path / "x.lua"
    script.write_text("local function real(a)\n  return a\nend\n")
    assert defined_in(script) == {"real"}
    assert "made_up" not in defined_in(ROOT / "celery_fairqueue" / "retry.py")


def test_the_bucket_and_the_window_are_decided_in_lib_limits_lua_not_in_claim_lua():
    """A file is named for what it decides (issue 45, item 5): the bucket's refill and check
    and the window's answer live in lib/limits.lua; claim.lua asks them."""
    scripts = ROOT / "celery_fairqueue" / "store" / "scripts"
    assert {"take_token", "window_wake"} <= defined_in(scripts / "lib" / "limits.lua")
    assert {"take_token", "window_wake"}.isdisjoint(defined_in(scripts / "claim.lua"))


def test_the_claim_script_header_lists_what_it_decides():
    header = (ROOT / "celery_fairqueue" / "store" / "scripts" / "claim.lua").read_text()
    header = header.split("-- KEYS:", 1)[0]
    assert "What it decides" in header
    for helper in ("take_token", "window_wake", "join_rotation", "operator_paused", "defer"):
        assert helper in header, helper


def test_the_worker_package_maps_its_modules():
    import celery_fairqueue.worker as worker

    modules = {p.name for p in (ROOT / "celery_fairqueue" / "worker").glob("*.py")}
    assert [m for m in sorted(modules - {"__init__.py"}) if f"``{m}``" not in worker.__doc__] == []
