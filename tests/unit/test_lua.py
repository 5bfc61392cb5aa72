"""Each script is passed only the keys it touches, read off its source, and is built from the
library files it includes (store/connection/lua.py)."""

import re

import pytest

from celery_fairqueue.store.connection.door import SCRIPT_NAMES
from celery_fairqueue.store.connection.lua import (
    LIBRARY_END,
    SCRIPTS,
    ScriptError,
    check_included,
    includes,
    library,
    load_script,
    lua_name,
)
from celery_fairqueue.store.formats.keys import GLOBAL_KEY_NAMES


def test_a_claim_of_one_queue_passes_its_queue_and_only_the_global_keys_it_touches():
    claim = load_script("claim")
    assert len(claim.global_keys) < len(GLOBAL_KEY_NAMES)
    assert {"workers", "worker_info", "instance", "queues"}.isdisjoint(claim.global_keys)
    assert {"records", "leases", "limits", "buckets"} <= set(claim.global_keys)
    assert claim.events


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_key_a_script_names_is_bound_and_the_others_are_nil(name):
    script = load_script(name)
    prologue = script.source.split("\n", 1)[0]
    names, values = (side.split(", ") for side in prologue.removeprefix("local ").split(" = "))
    bound = {key for key, value in zip(names, values, strict=True) if value != "nil"}
    assert bound == {lua_name(key) for key in script.global_keys}
    body = script.source.split(LIBRARY_END, 1)[1]
    assert set(re.findall(r"\bK_[A-Z]+\b", body)) - {"K_EVENTS"} <= bound


def test_a_script_that_uses_a_library_helper_it_does_not_include_is_refused(tmp_path):
    """Lua would read a helper of a library file the script does not include as an undefined
    global, and fail only when that line runs; the loader refuses it when it builds it."""
    with pytest.raises(ScriptError, match=r"join_rotation of lib/rotation\.lua"):
        check_included("bad", "-- include: keys\njoin_rotation(qk, account)\n", ["keys"])
    check_included("good", "-- join_rotation(qk) in a comment only\n", ["keys"])


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_names_the_library_files_it_calls(name):
    """The '-- include:' line of each script lists every library file whose helpers it calls
    itself, so a reader of the script sees where each helper lives."""
    body = (SCRIPTS / f"{name}.lua").read_text()
    calls = set(re.findall(r"\b(\w+)\(", re.sub(r"--[^\n]*", "", body)))
    used = {lib for lib, text in library().items()
            if calls & set(re.findall(r"^local function (\w+)\(", text, re.M))}
    assert used <= set(includes(body))
