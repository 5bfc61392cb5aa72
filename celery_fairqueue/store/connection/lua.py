"""The store's Lua scripts as Redis runs them, each passed only the keys it touches.

A script is ``scripts/<name>.lua`` after the library files it includes (``scripts/lib/*.lua``,
named on its ``-- include:`` line; a library file names those it needs the same way), in their
order of need, opened by a prologue that binds the ``K_*`` names of the global keys the script
touches (the others stay nil). Which ones those are is read off the source: the ``K_*`` names in
the script and in every library helper it calls, directly or through another helper. So a new
helper or a new key needs no list kept by hand, and a key a script does not use is never sent
(a claim of one queue passes its queue's keys and a dozen global ones, not every key of the
store). Of the library only the helpers the script calls are kept; a script that uses a name of
a library file it does not include is refused when it is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..formats.keys import GLOBAL_KEY_NAMES

_HELPER = re.compile(r"^local function (\w+)\(.*?^end$", re.M | re.S)
_CALL = re.compile(r"\b(\w+)\(")
_KEY = re.compile(r"\bK_([A-Z]+)\b")


def lua_name(key_name: str) -> str:
    """The Lua name of a global key: ``job_keys`` is ``K_JOBKEYS``."""
    return "K_" + key_name.replace("_", "").upper()


@dataclass(frozen=True)
class ScriptSource:
    source: str
    global_keys: tuple[str, ...]  # Keys attribute names, in the order of KEYS
    events: bool  # the event stream is passed last, and whether it is recorded is the last ARGV


#: The folder of the scripts, beside the store's rooms (store/scripts).
SCRIPTS = resources.files("celery_fairqueue.store") / "scripts"
#: The line between the library and the script's own body in a built script.
LIBRARY_END = "-- ---- end of the library ----"
_INCLUDE = re.compile(r"^-- include:(.*)$", re.M)
_DECLARED = re.compile(r"^local (?:function )?(\w+)", re.M)
_COMMENT = re.compile(r"--[^\n]*")


class ScriptError(Exception):
    """A script names a library file that does not exist, or uses one it does not include."""


def _read(name: str) -> str:
    return (SCRIPTS / f"{name}.lua").read_text()


def includes(text: str) -> list[str]:
    """The library files a script or library file names on its ``-- include:`` line."""
    return [name for line in _INCLUDE.findall(text) for name in line.split()]


@cache
def library() -> dict[str, str]:
    """Each library file's source, by name (``lib/keys.lua`` is ``keys``)."""
    return {path.name.removesuffix(".lua"): path.read_text()
            for path in (SCRIPTS / "lib").iterdir() if path.name.endswith(".lua")}


def _in_need_order(names: list[str], script: str) -> list[str]:
    """``names`` and the library files they need, each after those it needs."""
    lib, ordered = library(), []

    def visit(name: str) -> None:
        if name not in lib:
            raise ScriptError(f"{script}.lua includes lib/{name}.lua, which does not exist")
        if name not in ordered:
            for needed in includes(lib[name]):
                visit(needed)
            ordered.append(name)

    for name in names:
        visit(name)
    return ordered


def check_included(script: str, body: str, included: list[str]) -> None:
    """Refuse a script that uses a helper or variable of a library file it does not include
    (Lua would read it as an undefined global, nil, only when the line runs)."""
    used = set(re.findall(r"\b(\w+)\b", _COMMENT.sub("", body)))
    for name, text in library().items():
        if name not in included and (missed := used & set(_DECLARED.findall(text))):
            raise ScriptError(f"{script}.lua uses {', '.join(sorted(missed))} of "
                              f"lib/{name}.lua; name it on its '-- include:' line")


def _touched(body: str, helpers: dict[str, str]) -> tuple[set[str], set[str]]:
    """The ``K_*`` names ``body`` uses, itself or through the helpers it calls; and those
    helpers."""
    seen: set[str] = set()
    pending = [body]
    names: set[str] = set()
    while pending:
        text = pending.pop()
        names |= {"K_" + key for key in _KEY.findall(text)}
        for called in set(_CALL.findall(text)) & helpers.keys() - seen:
            seen.add(called)
            pending.append(helpers[called])
    return names, seen


def _kept(text: str, called: set[str]) -> str:
    """A library file with only the helpers in ``called``: Redis runs a script's whole source
    on every call, so a helper defined for nothing costs every call its closure."""
    return _HELPER.sub(lambda match: match.group(0) if match.group(1) in called else "", text)


@cache
def load_script(name: str) -> ScriptSource:
    body = _read(name)
    included = _in_need_order(includes(body), name)
    check_included(name, body, included)
    sources = [library()[lib] for lib in included]
    helpers = {match.group(1): match.group(0) for text in sources
               for match in _HELPER.finditer(text)}
    touched, called = _touched(body, helpers)
    used = tuple(key for key in GLOBAL_KEY_NAMES if lua_name(key) in touched)
    events = "K_EVENTS" in touched
    # a script that changes a rotation must know whether to keep its weight (MODE)
    assert events or "join_rotation" not in called, f"{name}.lua: no MODE"
    position = {key: n + 1 for n, key in enumerate(used)}
    prologue = "\n".join([
        "local " + ", ".join(lua_name(key) for key in GLOBAL_KEY_NAMES) + " = " + ", ".join(
            f"KEYS[{position[key]}]" if key in position else "nil" for key in GLOBAL_KEY_NAMES),
        f"local NGLOBAL = {len(used)}",
        f"local K_EVENTS = {'KEYS[#KEYS]' if events else 'nil'}",
        # the caller's mode, its last argument (StoreDoor.mode): whether a recorder listens,
        # whether the store has shards (the rotations keep their runnable weight)
        "local MODE = " + ("table.remove(ARGV)" if events else "'00'"),
        "local RECORDING = " + ("string.sub(MODE, 1, 1) == '1'" if events else "nil"),
        "local SHARDED = string.sub(MODE, 2, 2) == '1'",
        # a producer's while the store is still at format 1 (upgrade_fifo.lua; keys.lua)
        "local FORMAT1 = string.sub(MODE, 3, 3) == '1'",
        "",
    ])
    kept = "".join(_kept(text, called) for text in sources)
    return ScriptSource(prologue + kept + LIBRARY_END + "\n" + body, used, events)
