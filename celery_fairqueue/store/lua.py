"""The store's Lua scripts as Redis runs them, each passed only the keys it touches.

A script is ``scripts/_lib.lua`` followed by ``scripts/<name>.lua``, opened by a prologue that
binds the ``K_*`` names of the global keys the script touches (the others stay nil). Which ones
those are is read off the source: the ``K_*`` names in the script and in every helper of
``_lib.lua`` it calls, directly or through another helper. So a new helper or a new key needs no
list kept by hand, and a key a script does not use is never sent (a claim of one queue passes
its queue's keys and a dozen global ones, not every key of the store). Of ``_lib.lua`` only
the helpers the script calls are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .keys import GLOBAL_KEY_NAMES

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


def _read(name: str) -> str:
    return (resources.files(__package__) / "scripts" / f"{name}.lua").read_text()


@cache
def _helpers() -> dict[str, str]:
    return {match.group(1): match.group(0) for match in _HELPER.finditer(_read("_lib"))}


def _touched(body: str) -> tuple[set[str], set[str]]:
    """The ``K_*`` names ``body`` uses, itself or through the helpers it calls; and those
    helpers."""
    helpers = _helpers()
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


def _lib_for(called: set[str]) -> str:
    """``_lib.lua`` with only the helpers in ``called``: Redis runs a script's whole source on
    every call, so a helper defined for nothing costs every call its closure."""
    return _HELPER.sub(lambda match: match.group(0) if match.group(1) in called else "",
                       _read("_lib"))


@cache
def load_script(name: str) -> ScriptSource:
    body = _read(name)
    touched, called = _touched(body)
    used = tuple(key for key in GLOBAL_KEY_NAMES if lua_name(key) in touched)
    events = "K_EVENTS" in touched
    # a script that changes a rotation must know whether to keep its weight (MODE)
    assert events or not {"join_rotation", "wake_queue"} & called, f"{name}.lua: no MODE"
    position = {key: n + 1 for n, key in enumerate(used)}
    prologue = "\n".join([
        "local " + ", ".join(lua_name(key) for key in GLOBAL_KEY_NAMES) + " = " + ", ".join(
            f"KEYS[{position[key]}]" if key in position else "nil" for key in GLOBAL_KEY_NAMES),
        f"local NGLOBAL = {len(used)}",
        f"local K_EVENTS = {'KEYS[#KEYS]' if events else 'nil'}",
        # the caller's mode, its last argument (StoreDoor.mode): whether a recorder listens,
        # whether the store has shards (the rotations keep their runnable weight) and whether
        # it is a cluster's (wake-ups on sharded pub/sub)
        "local MODE = " + ("table.remove(ARGV)" if events else "'000'"),
        "local RECORDING = " + ("string.sub(MODE, 1, 1) == '1'" if events else "nil"),
        "local SHARDED, SPUBLISHING = string.sub(MODE, 2, 2) == '1', "
        "string.sub(MODE, 3, 3) == '1'",
        "",
    ])
    return ScriptSource(prologue + _lib_for(called) + "\n" + body, used, events)
