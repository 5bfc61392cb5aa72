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
