"""Finding a job by what a person knows of it: its business key's parts, or its arguments.

The query syntax (the console's jobs search, docs/guide.md "Finding a job"): words split on
spaces, where ``name=value`` is an argument. A value is JSON where it parses (``1``, ``true``,
``null``, ``[1,2]``, ``"1"``) and else the text as typed (``intro``); a JSON string in double
quotes may hold spaces (``step="intro email"``).

- ``send_step account=acme lead_id=1 step=intro campaign_rev=3``: a registered task (full or
  last dotted name) whose ``job_key`` names arguments, then the parts: the key is computed as
  the task computes it (:meth:`ReliableTask.business_key`), so the types must be the ones the
  job was enqueued with (``lead_id=1`` is the int, ``lead_id="1"`` the string).
- ``lead_id=1``: a job whose (redacted) argument ``lead_id`` reads ``1``; values compare as
  text, as the jobs list shows them (:func:`argument_line`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from celery import Celery

from .errors import FairqueueError

#: A run of double-quoted JSON strings (spaces kept) and other characters, or any word.
_WORD = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^\s"])+(?=\s|$)|\S+')
_ARGUMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
ACCOUNT = "account"


class SearchQueryError(FairqueueError, ValueError):
    """A search that cannot be answered as typed; the message says what to change."""


class IncompleteKeyError(SearchQueryError):
    """A keyed task's name with words that are not all of its key's parts: the console
    searches the words instead (the task's jobs with those arguments)."""


@dataclass(frozen=True)
class KeySearch:
    """A key computed from a query: the task's full name, the account and the key."""

    task: str
    account: str
    job_key: str


def words(query: str) -> list[str]:
    """The query's words: split on spaces, a double-quoted value kept whole."""
    return _WORD.findall(query)


def argument(word: str) -> tuple[str, str] | None:
    """``(name, value as typed)`` of a ``name=value`` word, else None."""
    found = _ARGUMENT.fullmatch(word)
    return (found.group(1), found.group(2)) if found else None


def typed_value(text: str, name: str = "") -> Any:
    """A value as typed: JSON where it parses, else the text. NaN and infinities are no JSON
    values and no key holds them, so they are refused rather than taken as text."""
    def refuse(constant: str) -> Any:
        raise SearchQueryError(
            f"{name}={text[:40]}: {constant} is not a JSON value and no job key holds it; "
            f'type "{constant}" in double quotes for the text')

    try:
        value = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError:
        if text.startswith('"'):
            raise SearchQueryError(f"{name}={text[:40]}: a double-quoted value must be a JSON "
                                   'string, closed by a " (escape one inside as \\")') from None
        return text
    except SearchQueryError:
        raise
    except ValueError as exc:  # Python's limit on the digits of an int
        raise SearchQueryError(f"{name}: {exc}; no job key holds such a number") from None
    if not _finite(value):
        refuse("Infinity")
    return value


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def shown_value(text: str) -> str:
    """An argument search's value as the jobs list shows it: a double-quoted JSON string is
    its text; anything else is compared as typed."""
    if text.startswith('"'):
        with contextlib.suppress(SearchQueryError):
            value = typed_value(text)
            if isinstance(value, str):
                return value
    return text


def argument_line(name: str, value: Any) -> str:
    """How an argument reads in the jobs list and is searched: ``name=value``, text as it is,
    anything else as compact JSON, on one line."""
    shown = value if isinstance(value, str) else json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return f"{name}={shown}".replace("\r", "\\r").replace("\n", "\\n")


def arguments_text(arguments: dict[str, Any]) -> str:
    """The searchable text of a job's (already redacted) arguments: one line each, with a
    newline before and after every line, so ``\\nname=value\\n`` finds that value exactly."""
    if not arguments:
        return ""
    return "\n" + "\n".join(argument_line(str(k), v) for k, v in arguments.items()) + "\n"


def keyed_tasks(app: Celery) -> dict[str, Any]:
    """The registered tasks whose ``job_key`` names arguments, by full name."""
    found = {}
    for name, task in sorted(app.tasks.items()):
        spec_of = getattr(task, "job_key_spec", None)
        spec = spec_of() if spec_of else None
        if spec is not None and not callable(spec):
            found[name] = task
    return found


def key_parts(task: Any) -> list[str]:
    """The words a key search for ``task`` takes: the account (unless an argument holds it,
    or one of the key's own parts is called so), then the ``job_key`` argument names."""
    spec = list(task.job_key_spec())
    names = [] if task.account_arg in spec or ACCOUNT in _parameters(task) else [ACCOUNT]
    return names + spec


def task_named(app: Celery, name: str) -> Any | None:
    """A keyed task by its full name or its last dotted name; None when there is none."""
    tasks = keyed_tasks(app)
    if name in tasks:
        return tasks[name]
    matches = [task for full, task in tasks.items() if full.rsplit(".", 1)[-1] == name]
    if len(matches) > 1:
        raise SearchQueryError(f"{name!r} names {len(matches)} tasks: type the full name, "
                               f"one of {', '.join(t.name for t in matches)}")
    return matches[0] if matches else None


def key_search(app: Celery, query: str) -> KeySearch | None:
    """The job key a query names (see the module doc), or None when its first word is not a
    keyed task; :class:`IncompleteKeyError` when the other words are not all of the key's
    parts, :class:`SearchQueryError` when a value can be no part of a key."""
    first, *rest = words(query) or [""]
    if argument(first) is not None:
        return None
    task = task_named(app, first)
    if task is None:
        return None
    return _compute(task, rest)


def _parameters(task: Any) -> list[str]:
    return list(inspect.signature(task.run).parameters)


def _compute(task: Any, rest: Iterable[str]) -> KeySearch:
    expected = key_parts(task)
    usage = f"{task.name.rsplit('.', 1)[-1]} " + " ".join(f"{n}=..." for n in expected)
    parts: dict[str, Any] = {}
    for word in rest:
        pair = argument(word)
        if pair is None or pair[0] not in (*expected, ACCOUNT):
            raise IncompleteKeyError(f"task {task.name}: {word[:60]!r} is not one of its key's "
                                   f"parts; search as: {usage}")
        try:
            parts[pair[0]] = typed_value(pair[1], pair[0])
        except SearchQueryError as exc:
            raise SearchQueryError(f"task {task.name}: {exc}") from None
    explicit = parts.pop(ACCOUNT, None) if ACCOUNT not in _parameters(task) else None
    if explicit is not None and task.account_arg:  # account= is the argument that holds it
        parts.setdefault(task.account_arg, explicit)
    missing = [n for n in task.job_key_spec() if n not in parts
               and n not in _defaults(task)]
    if missing:
        raise IncompleteKeyError(f"task {task.name}: the key needs {', '.join(missing)}; "
                               f"search as: {usage}")
    try:
        account = task.account_of((), parts, explicit)
        if account is None and hasattr(task, "resolve_account"):
            raise IncompleteKeyError(f"task {task.name}: the key needs the account; search as: "
                                   f"{usage}")
        key = task.business_key(account, (), parts)
    except SearchQueryError:
        raise
    except (FairqueueError, TypeError, ValueError) as exc:
        raise SearchQueryError(f"task {task.name}: no key from these parts: {exc}") from None
    assert key is not None  # keyed_tasks holds only tasks whose job_key names arguments
    return KeySearch(task.name, account or "", key)


def _defaults(task: Any) -> set[str]:
    return {name for name, p in inspect.signature(task.run).parameters.items()
            if p.default is not inspect.Parameter.empty}


def query_for(task: str, typed: dict[str, str]) -> str:
    """The key search for a form's inputs (one per part, as typed; empty ones left out): a
    value that is JSON is kept compact, any other text becomes a quoted JSON string, so the
    query reads the values exactly as the rule of :func:`typed_value` does."""
    terms = [task]
    for name, text in typed.items():
        text = text.strip()
        if not text:
            continue
        try:
            value = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        except ValueError:  # not JSON (or an int over Python's digit limit): the text
            value = text if text.isprintable() and " " not in text and '"' not in text \
                else json.dumps(text)
        terms.append(f"{name}={value}")
    return " ".join(terms)
