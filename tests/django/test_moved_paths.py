"""The modules that moved into the Django app's rooms (recording/, console/) keep their old
import paths, which warn."""

import importlib
import sys

import pytest

DJANGO = "celery_fairqueue.contrib.django"
MOVED = [("recorder", "recording.recorder", "Recorder"),
         ("pruner", "recording.pruner", "Pruner"),
         ("queries", "console.queries", "oldest_ready_age_by_queue"),
         ("overview", "console.overview", "account_overview")]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_path_still_imports_the_same_thing_and_warns(old, new, name):
    sys.modules.pop(f"{DJANGO}.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"{DJANGO}.{old} is deprecated"):
        module = importlib.import_module(f"{DJANGO}.{old}")
    assert getattr(module, name) is getattr(importlib.import_module(f"{DJANGO}.{new}"), name)


def test_the_dead_letters_writes_keep_their_path():
    from celery_fairqueue.contrib.django.recording import record_purge, record_replay
    from celery_fairqueue.contrib.django.recording.dead_letters import record_replay as moved

    assert record_replay is moved and callable(record_purge)
