"""What the Job and Attempt columns hold of a value from the fair store, and back.

The store takes any id of at most ``MAX_ID_LENGTH`` UTF-8 bytes, lone surrogates included (a
file name from ``os.fsdecode``), each counted as the 3 bytes of its code point; no database
takes a lone surrogate, and PostgreSQL no NUL. An id column (:data:`ID_FIELDS`) therefore holds
the id in a lossless form that is never longer, in characters, than the id is in bytes, so an
id the store takes fits its ``MAX_ID_LENGTH`` column whole and two distinct ids stay two:

- a NUL is ``␀`` (U+2400), one character for its byte;
- a lone surrogate is ``�`` (U+FFFD) and two digits of its offset in the surrogate block, three
  characters for its three bytes;
- a ``�`` or ``␀`` of the id itself is ``�`` before it, two characters for its three bytes.

Everything else is itself, so the ids of nearly every deployment read as they are. Error texts
(unbounded, shown to people) keep a lone surrogate as its Python escape and lose NULs instead.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import CharField, TextField

from .models import Attempt, Job

MARK = "\ufffd"
NUL_SIGN = "\u2400"
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"
#: Columns that hold ids from the store, in the lossless form.
ID_FIELDS = frozenset({"job_key", "task_id", "delivery_id", "task", "queue", "account",
                       "worker", "external_id"})

_SPECIAL = re.compile("[\x00\ud800-\udfff\ufffd\u2400]")
_ESCAPED = re.compile(f"{MARK}([{MARK}{NUL_SIGN}]|[{re.escape(DIGITS)}]{{2}})|{NUL_SIGN}")


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    if char == "\x00":
        return NUL_SIGN
    if char in (MARK, NUL_SIGN):
        return MARK + char
    offset = ord(char) - 0xD800
    return MARK + DIGITS[offset >> 6] + DIGITS[offset & 63]


def _unescape(found: re.Match[str]) -> str:
    code = found.group(1)
    if code is None:
        return "\x00"
    if len(code) == 1:
        return code
    return chr(0xD800 + (DIGITS.index(code[0]) << 6) + DIGITS.index(code[1]))


def to_column(value: str) -> str:
    """An id as its column holds it (see the module doc); storable, lossless, and at most as
    many characters as the id has UTF-8 bytes."""
    if value.isascii() and "\x00" not in value:
        return value
    return _SPECIAL.sub(_escape, value)


def from_column(text: str) -> str:
    """The id a column's text stands for: inverts :func:`to_column`."""
    if text.isascii():
        return text
    return _ESCAPED.sub(_unescape, text)


def to_text_column(value: str) -> str:
    """An error text as a column holds it: a lone surrogate as its escape, no NUL."""
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode()
    return value.replace("\x00", "")


def _text_fields(model: type[Job] | type[Attempt]) -> list[tuple[str, int | None]]:
    return [(f.attname, f.max_length) for f in model._meta.concrete_fields
            if isinstance(f, CharField | TextField)]


TEXT_FIELDS = {Job: _text_fields(Job), Attempt: _text_fields(Attempt)}


def fit(row: Job | Attempt) -> Any:
    """Make a row's strings storable: ids in their lossless form, error texts readable, both
    cut to their column (only an id the store would refuse, or a long error, is cut)."""
    for name, max_length in TEXT_FIELDS[type(row)]:
        value = getattr(row, name)
        value = to_column(value) if name in ID_FIELDS else to_text_column(value)
        if max_length and len(value) > max_length:
            value = value[:max_length]
        setattr(row, name, value)
    return row


def from_columns(row: Job | Attempt) -> Any:
    """A loaded row with its ids as the store and its events spell them."""
    for name, _ in TEXT_FIELDS[type(row)]:
        if name in ID_FIELDS:
            setattr(row, name, from_column(getattr(row, name)))
    return row
