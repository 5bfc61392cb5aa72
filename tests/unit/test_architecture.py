"""The architecture, checked: the store is the one door to Redis, at the bottom of the import
graph, in rooms that import only the rooms below them; no import circles anywhere (in the
package, the tests and the benches, between files, whether the import sits at the top of a
module, in a function or under TYPE_CHECKING); small modules and Lua files; one event
vocabulary for Lua and Python."""

import ast
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import celery_fairqueue
from celery_fairqueue.protocol import EVENT_FIELDS, EventType

PACKAGE = Path(celery_fairqueue.__file__).parent
ROOT = PACKAGE.parent
SCRIPTS = PACKAGE / "store" / "scripts"
LIBRARY = SCRIPTS / "lib"
MAX_LINES = 450
#: The store's rooms, each allowed to import those before it (their docstrings say so).
ROOMS = ("formats", "connection", "writers", "shards", "readers")


def modules(*tops: str) -> dict[str, Path]:
    """Every module under the top-level packages ``tops``, by dotted name."""
    found = {}
    for top in tops or ("celery_fairqueue",):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ``known`` that ``name`` imports anywhere: at module level, in a function, or
    under TYPE_CHECKING (a circle hidden in a function or a type check is still a circle)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module or ""]).strip(".")
            else:
                module = node.module or ""
            found |= {m for m in [module, *(f"{module}.{a.name}" for a in node.names)]
                      if m in known}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    return found - {name}


def import_graph(*tops: str) -> dict[str, set[str]]:
    """Who imports whom, leaving out a package's import of its own modules (a re-export)."""
    known = modules(*tops)
    return {name: {d for d in imports_of(name, path, known) if not d.startswith(name + ".")}
            for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    """The check below cannot pass by looking away: a lazy import that closes a circle is
    found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from .other import g\n")
    known = {"pkg.lazy": module, "pkg.other": tmp_path / "other.py"}
    assert imports_of("pkg.lazy", module, known) == {"pkg.other"}


def test_no_import_circles_in_the_package_the_tests_or_the_benches():
    assert circles(import_graph("celery_fairqueue", "tests", "bench")) == []


def test_the_store_is_at_the_bottom_of_the_package():
    above = {"task", "publish", "install", "cli", "reports", "worker", "metrics", "beat",
             "contrib"}
    store_imports = {d for n, deps in import_graph().items()
                     if n.startswith("celery_fairqueue.store") for d in deps
                     if not d.startswith("celery_fairqueue.store")}
    assert not {d for d in store_imports if d.split(".")[1] in above}


def room_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["celery_fairqueue", "store"] else None


def test_each_room_of_the_store_imports_only_the_rooms_its_docstring_names():
    """Each room's ``__init__`` docstring says what it may import; the imports agree, and the
    rooms stack (formats < connection < writers < shards < readers): no circle between rooms."""
    allowed = {}
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((PACKAGE / "store" / room / "__init__.py").read_text()))
        match = re.search(r"^May import: (.*)\.$", doc or "", re.M)
        assert match, f"store/{room}/__init__.py says nothing of what it may import"
        named = set() if match.group(1) == "nothing else of the store" else {
            r.strip() for r in match.group(1).split(",")}
        assert named == set(ROOMS[:ROOMS.index(room)]), room
        allowed[room] = named
    crossing = sorted(f"{name} -> {dep}" for name, deps in import_graph().items()
                      if (room := room_of(name)) for dep in deps
                      if (other := room_of(dep)) and other != room and other not in allowed[room])
    assert crossing == []
    loose = sorted(p.name for p in (PACKAGE / "store").glob("*.py") if p.name != "__init__.py")
    assert loose == [], "every store module lives in a room"


DJANGO = "celery_fairqueue.contrib.django"
#: The Django app's rooms, and what of the app's other rooms and the admin each may import.
DJANGO_ROOMS = {"recording": set(), "console": {f"{DJANGO}.recording.dead_letters"}}
#: What the app keeps at its top, where Django and its users look for it (apps, models,
#: migrations, admin, management commands, the worker step and the tasks), and the paths of
#: modules that moved into a room, kept as deprecated aliases.
DJANGO_TOP = {"apps", "checks", "columns", "conf", "metrics_view", "models", "tasks", "worker"}
DJANGO_MOVED = {"overview", "pruner", "queries", "recorder"}


def django_room_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[3] if len(parts) > 3 and ".".join(parts[:3]) == DJANGO else None


def test_the_django_apps_rooms_import_only_what_their_docstrings_allow():
    """recording/ (the writes of the rows) imports nothing of the console or the admin; the
    console imports nothing of the admin and of the recording only the dead letters' writes;
    the admin (the face) may import both. Each room's ``__init__`` says so, and maps its
    modules."""
    for room in DJANGO_ROOMS:
        doc = ast.get_docstring(ast.parse((PACKAGE / "contrib" / "django" / room /
                                           "__init__.py").read_text())) or ""
        assert "May import:" in doc, f"contrib/django/{room} says nothing of what it may import"
        modules_here = {p.stem for p in (PACKAGE / "contrib" / "django" / room).glob("*.py")}
        assert {m for m in modules_here - {"__init__"} if f"``{m}``" not in doc} == set(), room
    crossing = []
    for name, deps in import_graph().items():
        room = django_room_of(name)
        if room not in DJANGO_ROOMS:
            continue
        for dep in deps:
            other = django_room_of(dep)
            if other is None or other == room or other in DJANGO_TOP:
                continue
            if dep not in DJANGO_ROOMS[room]:
                crossing.append(f"{name} -> {dep}")
    assert crossing == []


def test_the_django_app_keeps_at_its_top_only_what_django_and_users_look_for_there():
    loose = {p.stem for p in (PACKAGE / "contrib" / "django").glob("*.py")} - {"__init__"}
    assert loose == DJANGO_TOP | DJANGO_MOVED
    for name in DJANGO_MOVED:
        text = (PACKAGE / "contrib" / "django" / f"{name}.py").read_text()
        assert "DeprecationWarning" in text and len(text.splitlines()) < 20, name


def test_no_module_outside_the_shards_room_branches_on_whether_the_store_is_sharded():
    """Only store/shards compares the number of shards with one or asks for a ShardedStore;
    everything else goes through its interface (store.shards, shard_for, merged.per_shard)."""
    offenders = []
    for name, path in modules().items():
        if name.startswith("celery_fairqueue.store.shards") or name == "celery_fairqueue.settings":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = ast.unparse(node) if isinstance(node, ast.Compare | ast.Call) else ""
            if (isinstance(node, ast.Compare) and "shards" in text
                    and any(isinstance(c, ast.Constant) and c.value == 1
                            for c in [node.left, *node.comparators])) or \
                    (isinstance(node, ast.Call) and "ShardedStore" in text):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


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


def test_no_module_or_lua_file_is_over_450_lines():
    files = [*modules().values(), *SCRIPTS.rglob("*.lua")]
    long = {str(path.relative_to(ROOT)): n for path in files
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _imports_alone(name: str) -> str:
    """'' when ``name`` imports first in a fresh interpreter, else the error. Django's modules
    are imported after django.setup(), as Django imports them."""
    setup = ("import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
             "'tests.django.settings'); django.setup(); ") if ".contrib.django" in name or \
        name.startswith("tests.django") or name.startswith("tests.browser") else ""
    done = subprocess.run([sys.executable, "-c", f"{setup}import {name}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    return "" if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


@pytest.mark.xdist_group("cpu-a")  # keeps a core busy: see tests/harness/parallel.py
@pytest.mark.slow
def test_every_module_of_the_package_imports_first_in_a_fresh_interpreter():
    """An import circle that a lazy import or an ``__init__`` hides fails here: each module is
    the first thing a new interpreter imports."""
    names = sorted(n for n in modules() if ".migrations." not in n)
    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = {n: e for n, e in zip(names, pool.map(_imports_alone, names), strict=True) if e}
    assert errors == {}


def test_lua_and_python_write_the_same_event_vocabulary():
    names = set(EVENT_FIELDS.values())
    types = {v for k, v in vars(EventType).items() if k.isupper()}
    for script in SCRIPTS.rglob("*.lua"):
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
        if name == "celery_fairqueue.store.formats.records":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"split", "rsplit", "partition", "rpartition"}
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in RECORD_SEPARATORS):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_the_lua_side_reads_each_stored_format_in_one_helper():
    """Only the library's helpers take apart a record, a ready member or a bucket, and only
    make_marker (lib/records.lua) makes a marker."""
    for script in SCRIPTS.glob("*.lua"):
        text = script.read_text()
        assert "[^|]" not in text, script.name
        assert "'|'" not in text, script.name
        assert "K_BUCKETS, account" not in text.replace("HDEL', K_BUCKETS", ""), script.name
        assert '{"state":' not in text, script.name
        assert "K_RECORDS, job_id, " not in text or "make_record(" in text or \
            "make_new_record(" in text, script.name
    records = (LIBRARY / "records.lua").read_text()
    assert records.count("""'{"state":"' .. """) == 1  # make_marker
    assert records.count("'\\n'") == 2  # split_record and make_record
    assert (LIBRARY / "keys.lua").read_text().count("[^|]") == 3  # split_(legacy_)member
    others = [p for p in LIBRARY.glob("*.lua") if p.name not in {"records.lua", "keys.lua"}]
    assert not [p.name for p in others if "[^|]" in p.read_text() or '{"state":' in p.read_text()]


def test_no_class_leaves_a_method_to_another_with_a_not_implemented_stub():
    """Classes compose (StoreInspector holds a ConsoleReader) instead of mixins whose stubs
    raise NotImplementedError for a sibling class to fill in."""
    offenders = [f"{name}:{node.lineno}" for name, path in modules().items()
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Raise) and node.exc is not None
                 and "NotImplementedError" in ast.unparse(node.exc)]
    assert offenders == []
