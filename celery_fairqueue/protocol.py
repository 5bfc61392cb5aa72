"""The wire vocabulary: message headers, delivery ids and the events of the event stream.

Everything that two sides must spell alike lives here: the publish path and the worker (headers),
the store and the recorder (delivery ids, event fields), the Lua scripts and the Python side of
the event stream (event types and field names). Nothing here talks to Redis.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast
from urllib.parse import quote, unquote

#: Longest account id or queue name the store accepts, in UTF-8 bytes: the Job table's account
#: column holds it whole, and its index entries stay under PostgreSQL's btree limit.
MAX_ID_LENGTH = 1024

#: Header holding a fair job's account (Celery puts it on ``task.request``).
ACCOUNT_HEADER = "fairqueue_account"
#: Header holding a job's business key; ``task.request.job_key`` mirrors it while the task runs.
JOB_KEY_HEADER = "fairqueue_job_key"
#: The key header's name before it had the prefix: messages stored then are still read.
LEGACY_JOB_KEY_HEADER = "job_key"
#: Header holding when a job first failed, kept across its retries for the dead letter.
FIRST_FAILURE_HEADER = "fairqueue_first_failure"
#: Header set on a job the claim dropped past its ``expires``: its request records it revoked.
EXPIRED_HEADER = "fairqueue_expired"
#: Header set on every job a worker claims from the fair store: its lease's ticket (see
#: LeaseTicket).
LEASE_HEADER = "fairqueue_lease"
#: ``apply_async`` option carrying a job's business key as stored (a retry's, a replay's), used
#: as it is; a user's ``job_key=`` option is scoped by task and account first.
STORED_JOB_KEY_OPTION = "fairqueue_job_key"
#: ``apply_async`` option of a retry whose failure said "slow down": (scope, seconds, cause),
#: which the store holds with the retry (slowdown.py); never a message property.
SLOW_DOWN_OPTION = "fairqueue_slow_down"
#: What the store and its events hold where a job has no business key.
NO_JOB_KEY = "-"

# Set by the publish path: the job that an apply_async in this context actually stored or reused.
last_enqueued_task_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fairqueue_last_enqueued_task_id", default=None)


def normalize_id(value: str) -> str:
    """An id as it comes back from JSON (every header and record is JSON): a high surrogate
    followed by a low one is the one character they stand for. Normalising first keeps a split
    pair from becoming another account after a retry or a replay."""
    if value.isascii():
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


#: The characters ``quote(value, safe="")`` leaves as they are (RFC 3986's unreserved).
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]+")


def encode_id(value: str) -> str:
    """Percent-encode an account id or queue name for the store and its events.

    The encoded form uses only ``[A-Za-z0-9_.~%-]``: never the ``|`` and space separators the
    scripts split on, a brace that would change the hash tag, or a newline.
    """
    if not isinstance(value, str):
        raise TypeError(f"expected a str id, got {type(value).__name__}")
    if len(value) <= MAX_ID_LENGTH and _UNRESERVED.fullmatch(value):
        return value  # what quote leaves as it is: most ids, at every enqueue
    if not value:
        raise ValueError("an account id or queue name cannot be empty")
    value = normalize_id(value)
    # a lone surrogate (os.fsdecode of a non-UTF-8 name) is kept, not refused: surrogatepass
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_LENGTH:
        raise ValueError(f"id of {size} bytes is over the {MAX_ID_LENGTH} allowed")
    return quote(value, safe="", errors="surrogatepass")


def decode_id(encoded: str | bytes) -> str:
    """Invert :func:`encode_id`."""
    if isinstance(encoded, bytes):
        encoded = encoded.decode("ascii")
    return unquote(encoded, errors="surrogatepass")


def job_key_of(headers: Mapping[str, Any] | Any) -> str | None:
    """The business key in a message's headers (a mapping) or a task request (attributes)."""
    get = headers.get if isinstance(headers, Mapping) else (
        lambda name: getattr(headers, name, None))
    return get(JOB_KEY_HEADER) or get(LEGACY_JOB_KEY_HEADER) or None


def delivery_id(task_id: str, retries: int, replaced: int = 0) -> str:
    """The store's id of one delivery: Celery reuses the task id on retry, so add the count;
    and ``Task.replace`` gives the replacement the replaced task's id while that one still
    runs, so a replacement (its ``replaced_task_nesting``) is marked too: ``<id>~<n>:<retries>``.
    """
    return f"{task_id}~{replaced}:{retries}" if replaced else f"{task_id}:{retries}"


_REPLACED = re.compile(r"^(.+)~\d+$")


def parse_delivery_id(job_id: str) -> tuple[str, int]:
    """``(task id, retries)`` of a delivery id; a bare task id is its first delivery."""
    task_id, _, retries = job_id.rpartition(":")
    if not task_id or not retries.removeprefix("-").isdigit():
        return job_id, 0
    replaced = _REPLACED.match(task_id) if "~" in task_id else None
    return (replaced.group(1) if replaced else task_id), int(retries)


def delivery_of(request_or_headers: Any) -> str:
    """The delivery id of a message's headers (a mapping) or of a running task's request."""
    get = request_or_headers.get if isinstance(request_or_headers, Mapping) else (
        lambda name: getattr(request_or_headers, name, None))
    retries, replaced = get("retries"), get("replaced_task_nesting")
    return delivery_id(str(get("id") or ""),
                       retries if isinstance(retries, int) and retries > 0 else 0,
                       replaced if isinstance(replaced, int) and replaced > 0 else 0)


def task_id_of(job_id: str) -> str:
    """The Celery task id of a delivery id (or of a bare task id, which it returns)."""
    return parse_delivery_id(job_id)[0]


def is_fair(task: Any) -> bool:
    """Whether ``task`` is fair-queued (a FairTask), without importing the task classes.
    Celery's own tasks (``celery.chord_unlock``, ``celery.ping``, ...) stay on the broker even
    when ``task_cls`` makes every task of an app a FairTask."""
    return getattr(task, "fair_queued", False) is True and not str(
        getattr(task, "name", "")).startswith("celery.")


@dataclass(frozen=True)
class LeaseTicket:
    """What a task learns of its lease, in its message's :data:`LEASE_HEADER`: the business
    key's marker as the claim found it (JSON, "" when none; the claim wrote the started one),
    and whether the ack after the run marks the key done and records the success (else, a task
    acked before it runs, the task does both itself)."""

    marker: str
    ack_marks_done: bool

    def header(self) -> dict[str, Any]:
        return {"marker": self.marker, "ack_marks_done": self.ack_marks_done}

    @classmethod
    def of(cls, request: Any) -> LeaseTicket | None:
        """The ticket of the delivery a task runs, or None when it was not claimed from the
        fair store (a broker message, ``apply``)."""
        header = getattr(request, LEASE_HEADER, None)
        if not isinstance(header, Mapping):
            return None
        return cls(marker=str(header.get("marker") or ""),
                   ack_marks_done=bool(header.get("ack_marks_done")))


# -- the event stream ---------------------------------------------------------------------------

class EventType:
    """The transitions in the event stream. The store's scripts write the first group, the task
    the second; the recorder applies both."""

    ENQUEUED = "enqueued"
    PROMOTED = "promoted"  # a delayed job became ready
    RUNNING = "running"
    REQUEUED = "requeued"
    ACKED = "acked"  # settled without success (a failure, a retry handed over); a success
    #               is one "succeeded" event, written by the ack itself
    DEAD = "dead"
    ACCOUNT_DEFERRED = "account_deferred"
    ACCOUNT_READY = "account_ready"
    CANCELLED = "cancelled"  # taken out of the store waiting (revoked, or cancel())
    EXPIRED = "expired"  # dropped by the claim, past Celery's ``expires``
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYING = "retrying"


#: Field names of an event, as the scripts write them (short: the stream holds millions).
EVENT_FIELDS = {
    "type": "e",  # the event type
    "job": "job",  # delivery id (job events)
    "queue": "q",  # queue, percent-encoded (enqueued and account events)
    "account": "a",  # account, percent-encoded (enqueued and account events)
    "job_key": "k",  # business key or NO_JOB_KEY (enqueued)
    "task": "t",  # task name (enqueued)
    "args": "args",  # the arguments by name, redacted, as JSON (enqueued)
    "at": "at",  # when, in Redis server time (epoch seconds)
    "due": "due",  # when the job (or the account's jobs) will be ready
    "reason": "reason",  # why (dead, failed, retrying, a reaped requeued)
    "error": "err",  # the exception, "Type: message" (failed, retrying)
    "external_id": "ext",  # the external id recorded with the done marker (succeeded)
    "worker": "worker",  # the worker's lease token (running)
}


def event_fields(type: str, **fields: Any) -> list[str]:
    """The flat ``[name, value, ...]`` list of one task-side event, None values left out.

    The store's ``emit`` script adds ``at`` in server time.
    """
    flat = [EVENT_FIELDS["type"], type]
    for name, value in fields.items():
        if value is not None:
            flat += [EVENT_FIELDS[name], str(value)]
    return flat


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


T = TypeVar("T")


class parsed(Generic[T]):
    """A property of an event computed on first read and then a plain attribute (the
    recorder reads each of thousands of events' fields several times; functools'
    cached_property takes a lock on every first read)."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.name = compute.__name__

    def __get__(self, event: Any, owner: Any = None) -> T:
        if event is None:
            return cast(T, self)
        value = event.__dict__[self.name] = self.compute(event)
        return value


@dataclass(frozen=True)
class Event:
    """One entry of the event stream, read with typed accessors."""

    id: str
    type: str
    fields: dict[str, str]
    stream: str = ""  # the stream it was read from (a store of shards has one per shard)

    @classmethod
    def from_entry(cls, entry_id: str, fields: dict[str, str], stream: str = "") -> Event:
        return cls(id=entry_id, type=fields.get(EVENT_FIELDS["type"], ""), fields=fields,
                   stream=stream)

    def _text(self, name: str) -> str:
        return self.fields.get(EVENT_FIELDS[name]) or ""

    @parsed
    def job_id(self) -> str | None:
        return self._text("job") or None

    @parsed
    def delivery(self) -> tuple[str | None, int]:
        """(task id, retries) of a job event's delivery; (None, 0) for an account event."""
        return parse_delivery_id(self.job_id) if self.job_id else (None, 0)

    @property
    def task_id(self) -> str | None:
        return self.delivery[0]

    @property
    def retries(self) -> int:
        """0 for the first delivery of a job, 1 for its first retry, ..."""
        return self.delivery[1]

    @parsed
    def attempt(self) -> int:
        """1 for the first delivery of a job, 2 for its first retry, ..."""
        return self.retries + 1 if self.job_id else 0

    @parsed
    def at(self) -> float:
        return _number(self._text("at")) or 0.0

    @parsed
    def due(self) -> float | None:
        return _number(self._text("due"))

    @parsed
    def queue(self) -> str | None:
        return decode_id(self._text("queue")) or None

    @parsed
    def account(self) -> str | None:
        return decode_id(self._text("account")) or None

    @parsed
    def job_key(self) -> str | None:
        key = self._text("job_key")
        return decode_id(key) if key and key != NO_JOB_KEY else None

    @property
    def task(self) -> str:
        return self._text("task")

    @property
    def args(self) -> str:
        return self._text("args")

    @property
    def reason(self) -> str:
        return self._text("reason")

    @property
    def error(self) -> str:
        return self._text("error")

    @property
    def external_id(self) -> str:
        return self._text("external_id")

    @property
    def worker(self) -> str:
        return self._text("worker")
