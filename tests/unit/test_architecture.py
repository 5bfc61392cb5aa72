"""The architecture, checked: the store is the one door to Redis, at the bottom of the import
graph; no import circles; small modules; one event vocabulary for Lua and Python."""

import ast
import re
from pathlib import Path

import celery_fairqueue
from celery_fairqueue.protocol import EVENT_FIELDS, EventType

PACKAGE = Path(celery_fairqueue.__file__).parent
MAX_LINES = 450


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Package modules that ``name`` imports at module level (TYPE_CHECKING blocks aside)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join([*base, node.module or ""]).strip(".") if node.level else (
                node.module or "")
            found |= {m for m in [module, *(f"{module}.{a.name}" for a in node.names)]
                      if m in known}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    return found - {name}


def test_only_the_store_imports_redis():
    offenders = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n == "redis" or n.startswith("redis.") for n in names) and \
                    not name.startswith("celery_fairqueue.store"):
                offenders.append(name)
    assert offenders == []


def test_no_import_circles_and_the_store_is_at_the_bottom():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}

    def is_package_edge(a: str, b: str) -> bool:  # a package re-exporting its own modules
        return b.startswith(a + ".")

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [d for d in graph[start] if not is_package_edge(start, d)]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += [d for d in graph[node] if not is_package_edge(node, d)]
        return False

    circles = sorted(name for name in graph if reaches(name, name))
    assert circles == []
    above = {"task", "publish", "install", "cli", "reports", "worker", "metrics", "beat",
             "contrib"}
    store_imports = {d for n, deps in graph.items() if n.startswith("celery_fairqueue.store")
                     for d in deps if not d.startswith("celery_fairqueue.store")}
    assert not {d for d in store_imports if d.split(".")[1] in above}


def test_no_module_is_over_450_lines():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_lua_and_python_write_the_same_event_vocabulary():
    names = set(EVENT_FIELDS.values())
    types = {v for k, v in vars(EventType).items() if k.isupper()}
    for script in (PACKAGE / "store" / "scripts").glob("*.lua"):
        for call in re.findall(r"emit\(([^)]*)\)", script.read_text()):
            words = re.findall(r"'([a-z_]+)'", call)
            fields, values = words[0::2], words[1::2]
            assert set(fields) <= names, (script.name, call)
            if fields and fields[0] == "e":
                assert values[0] in types, (script.name, call)


#: Separators of the stored string formats (records.py); splitting on one is parsing a record.
RECORD_SEPARATORS = {" ", "|"}


def test_only_the_codec_splits_a_stored_string():
    """records.py is the one codec of what the store holds: no other module takes a stored
    string apart on its separators (meta, ready members, buckets, worker entries)."""
    offenders = []
    for name, path in modules().items():
        if name == "celery_fairqueue.store.records":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"split", "rsplit", "partition", "rpartition"}
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in RECORD_SEPARATORS):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_the_lua_side_reads_each_stored_format_in_one_helper():
    """Only _lib.lua's helpers take apart a record, a ready member or a bucket, and only
    make_marker makes a marker."""
    scripts = PACKAGE / "store" / "scripts"
    for script in scripts.glob("*.lua"):
        text = script.read_text()
        if script.name != "_lib.lua":
            assert "[^|]" not in text, script.name
            assert "'|'" not in text, script.name
            assert "K_BUCKETS, account" not in text.replace("HDEL', K_BUCKETS", ""), script.name
            assert '{"state":' not in text, script.name
            assert "K_RECORDS, job_id, " not in text or "make_record(" in text, script.name
    lib = (scripts / "_lib.lua").read_text()
    assert lib.count("""'{"state":"' .. """) == 1  # make_marker
    assert lib.count("'\\n'") == 2  # split_record and make_record
    assert lib.count("[^|]") == 2  # split_member's one pattern


def test_no_class_leaves_a_method_to_another_with_a_not_implemented_stub():
    """Classes compose (StoreInspector holds a ConsoleReader) instead of mixins whose stubs
    raise NotImplementedError for a sibling class to fill in."""
    offenders = [f"{name}:{node.lineno}" for name, path in modules().items()
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Raise) and node.exc is not None
                 and "NotImplementedError" in ast.unparse(node.exc)]
    assert offenders == []
