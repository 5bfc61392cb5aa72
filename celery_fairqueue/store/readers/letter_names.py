"""What a person calls a dead letter, resolved to the ids the store keeps it under.

A dead letter is kept under its delivery id: ``<task id>:<retries>``, or
``<task id>~<n>:<retries>`` for the n-th ``Task.replace`` of a task. People have other names
at hand: the Celery task id (from a result, a log line or the database) and the worker log's
``task.name[<task id>]``. Every command that names dead letters (``dlq show``, ``replay`` and
``purge`` of both command lines, the admin's dead-letter actions and the console's links) goes
through :func:`resolve_letter`, so every one of them takes every form.

A name is read in up to three forms: exactly as given; without surrounding white space; and
as the log form ``name[<id>]`` (or ``name[<id>]:``), split at the first ``[`` (task names are
dotted Python paths, while the id inside may hold anything, brackets included). Each form is
tried as a letter id first, then each as a task id; the first that names any letter wins.

A task id names every letter of the task: its deliveries' letters (retries) and its
replacements' (``~n``). There is usually one; :func:`resolve_letter` returns them all, oldest
delivery first, and the caller decides (``show`` shows each; ``replay`` and ``purge`` refuse
an ambiguous name and list the letter ids to choose from, since replaying a task and its
replacement would run the work twice).

The lookup is bounded: one ``HMGET`` of the forms as letter ids, then one per form over the
deliveries a retry policy can make (:data:`RETRIES`) at each replacement depth
(:data:`REPLACEMENTS`); never a scan of the dead letters. In a store of shards each is one
pipeline of an ``HMGET`` per shard.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from ...protocol import delivery_id
from ..connection.door import wire

__all__ = ["REPLACEMENTS", "RETRIES", "name_forms", "resolve_letter"]

#: Deliveries of one task looked at: retry policies stop long before (the default at 8).
RETRIES = 256
#: ``Task.replace`` depths looked at (0: not a replacement).
REPLACEMENTS = 4
#: ``task.name[<task id>]`` with an optional colon, as Celery's worker log lines name a task.
LOGGED_TASK = re.compile(r"^([^\[\]\s]*)\[(.*)\]:?$", re.DOTALL)


def name_forms(name: str) -> list[str]:
    """The ids a name may stand for, in the order they are tried (see the module's doc)."""
    stripped = name.strip()
    logged = LOGGED_TASK.match(stripped)
    forms = [name, stripped] + ([logged.group(2)] if logged and logged.group(2) else [])
    return [form for form in dict.fromkeys(forms) if form]


def _deliveries(task_id: str) -> Iterator[str]:
    for replaced in range(REPLACEMENTS):
        for retries in range(RETRIES):
            yield delivery_id(task_id, retries, replaced)


def _stored(field: bytes) -> str:
    """A hash field as the store's client hands it back (UTF-8, surrogates escaped)."""
    return field.decode("utf-8", "surrogateescape")


def resolve_letter(client: Any, dead_keys: Sequence[str], name: str
                   ) -> list[tuple[str, str]]:
    """``(letter id, stored letter)`` of every dead letter ``name`` stands for, oldest
    delivery first; empty when none does (it was replayed or purged, or never died).
    ``dead_keys``: the dead-letter hash of each shard of the store, asked in one pipeline (a
    task's letters are all on its account's shard, which its name does not tell)."""
    forms = name_forms(name)
    exact = [wire(form) for form in forms]
    for field, raw in _held(client, dead_keys, exact):
        return [(_stored(field), raw)]  # a letter id names that one letter
    for form in forms:
        found = [(_stored(f), raw) for f, raw in _held(
            client, dead_keys, [wire(d) for d in _deliveries(form)])]
        if found:
            return found
    return []


def _held(client: Any, dead_keys: Sequence[str], fields: list[bytes]
          ) -> list[tuple[bytes, Any]]:
    """The ``fields`` some dead-letter hash holds, with their letters, in the order of
    ``fields`` (one shard holds a field: the shard of its account)."""
    pipe = client.pipeline(transaction=False)
    for key in dead_keys:
        pipe.hmget(key, fields)
    held: dict[int, Any] = {}
    for raws in pipe.execute():
        held.update((n, raw) for n, raw in enumerate(raws) if raw is not None)
    return [(fields[n], held[n]) for n in sorted(held)]
