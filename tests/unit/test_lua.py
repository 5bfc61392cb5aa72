"""Each script is passed only the keys it touches, read off its source (store/lua.py)."""

import re

import pytest

from celery_fairqueue.store.door import SCRIPT_NAMES
from celery_fairqueue.store.keys import GLOBAL_KEY_NAMES
from celery_fairqueue.store.lua import load_script, lua_name


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
    body = script.source.split("-- ---- end of _lib.lua ----", 1)[1]
    assert set(re.findall(r"\bK_[A-Z]+\b", body)) - {"K_EVENTS"} <= bound
