"""The one codec of what the fair store holds: each stored string format, named once.

Every format the scripts write and Python reads (or Python writes and the scripts read) is
parsed and built here and nowhere else in Python; on the Lua side each is read by one helper of
a file of ``scripts/lib/`` (named next to each format below). Account ids, queue names and business
keys are percent-encoded (keys.encode_id) before they reach a stored string, so the space and
``|`` separators can never occur inside a field.

- job record (``Keys.records``), a header line and the message: ``split_record``/``make_record``
- ready member (``QueueKeys.fifo``), ``"seq|job_id"``: ``split_member``/``ready_member``; at
  layout format 1 (``QueueKeys.ready``), ``"account|seq|job_id"``: ``split_legacy_member``
- token bucket (``Keys.buckets``), ``"tokens updated_at"``: ``bucket_level``/``take_token``
- idempotency marker (``Keys.job_key``), ``"p account|job_id"`` while pending, else JSON:
  ``make_marker`` (the one maker)
- dead letter (``Keys.dead``), JSON: ``store_dead`` (the one writer)
- deferral (``QueueKeys.deferral``), ``"reason until"``: ``defer`` in claim.lua (the one writer)
- worker entry (``Keys.worker_info``), ``"heartbeat info_json"``: ``renew_registration``
- layout reading (``Keys.layout_seen``), ``"layout read_at name"``: read_layout.lua (the one
  writer; the name, last, is free text)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...protocol import NO_JOB_KEY, decode_id, encode_id

__all__ = ["Bucket", "DeadRecord", "Deferral", "JobRecord", "LayoutSeen", "LegacyMember", "Marker",
           "ReadyMember", "WorkerEntry", "build_dead_record", "marker_account",
           "marker_external_id", "new_record_parts"]


@dataclass(frozen=True)
class JobRecord:
    """A job as the store holds it, one record (``Keys.records``): a header line, then the
    Celery message. The header is ``"queue account seq job_key expires deliveries owner started
    capped"``, ``-`` for none: its queue and account, its place in its account's FIFO (``seq``:
    the priority digit, then the microsecond it became ready), its business key as stored
    (encoded, or ``-``), Celery's ``expires`` (epoch seconds), how many times it was handed to
    a worker, and while leased, the worker's token, since when, and what it is counted in
    (lib/leases.lua ``counted_for_account``): ``c`` its account's cap, ``q`` its queue's
    shared concurrency, ``b`` both (``capped``: counted for its account's cap). Dead letters
    keep the header line as their ``meta``; a letter from the layout before records holds
    ``"queue account seq job_key[ expires]"`` (read too)."""

    queue: str  # decoded
    account: str  # decoded
    seq: str
    stored_key: str = NO_JOB_KEY
    expires: float | None = None
    deliveries: int = 0
    owner: str | None = None
    started: float | None = None
    capped: bool = False
    envelope: str = ""

    @classmethod
    def parse(cls, raw: str | bytes) -> JobRecord:
        """Read a record as the scripts write it (``make_record``)."""
        text = raw.decode() if isinstance(raw, bytes) else raw
        header, newline, envelope = text.partition("\n")
        if not newline:
            raise ValueError(f"not a job record: {text[:200]!r}")
        return cls.parse_header(header, envelope)

    @classmethod
    def parse_header(cls, header: str, envelope: str = "") -> JobRecord:
        """A header line alone (a dead letter's ``meta``), in either layout."""
        parts = header.split(" ")
        if len(parts) in (4, 5):  # a dead letter of the layout before records
            old_expires = float(parts[4]) if len(parts) == 5 and parts[4] else None
            return cls(decode_id(parts[0]), decode_id(parts[1]), parts[2], parts[3],
                       old_expires)
        if len(parts) != 9:
            raise ValueError(f"not a job record header: {header[:200]!r}")
        queue, account, seq, stored_key, expires, deliveries, owner, started, capped = parts
        return cls(decode_id(queue), decode_id(account), seq, stored_key,
                   None if expires == "-" else float(expires), int(deliveries),
                   None if owner == "-" else owner, None if started == "-" else float(started),
                   capped in ("c", "b"), envelope)

    def build(self) -> str:
        """The record (the scripts build it in ``make_record``; this is for tests and tools
        that write a store by hand)."""
        def text(value: object) -> str:
            return "-" if value is None else str(value)
        expires = "-" if self.expires is None else f"{self.expires:.6f}"
        started = "-" if self.started is None else f"{self.started:.6f}"
        return (f"{encode_id(self.queue)} {encode_id(self.account)} {self.seq} "
                f"{self.stored_key} {expires} {self.deliveries} {text(self.owner)} {started} "
                f"{'c' if self.capped else '-'}\n{self.envelope}")

    @property
    def encoded_account(self) -> str:
        return encode_id(self.account)

    @property
    def leased(self) -> bool:
        return self.owner is not None

    @property
    def ready_since(self) -> float | None:
        """When the job became ready (its seq's time), or None for a seq of the layout before
        records (a counter)."""
        return seq_time(self.seq)


def new_record_parts(queue: str, account: str, stored_key: str, expires: float | None,
                     envelope: str) -> tuple[str, str]:
    """A new job's record as the producer sends it to the enqueue script (queue and account
    encoded): the header before its seq, and the rest after it, the message too. Only the seq
    is Redis's (its clock): ``make_new_record`` puts it between, so the script copies the
    message once and builds no header."""
    expires_text = "-" if expires is None else f"{expires:.6f}"
    return f"{queue} {account} ", f" {stored_key} {expires_text} 0 - - -\n{envelope}"


def seq_time(seq: str) -> float | None:
    """The time in a ready seq (priority digit, then 16 digits of microseconds), or None."""
    if len(seq) != 17 or not seq.isdigit():
        return None
    return int(seq[1:]) / 1e6


def record_account(raw: str | bytes | None) -> str | None:
    """The (decoded) account of a stored record, or None when there is none."""
    return JobRecord.parse(raw).account if raw else None


def record_queue(raw: str | bytes | None) -> str | None:
    """The (decoded) queue of a stored record, or None when there is none."""
    return JobRecord.parse(raw).queue if raw else None


@dataclass(frozen=True)
class ReadyMember:
    """A member of an account's FIFO in a queue (``QueueKeys.fifo``): ``"seq|job_id"``, so lex
    order is the seq's (priority digit first, then when it became ready). The job id
    (``task_id:retries``) is last and kept as it is: it may hold ``|`` itself."""

    seq: str
    job_id: str

    @property
    def ready_since(self) -> float | None:
        """When the job became ready (see seq_time)."""
        return seq_time(self.seq)

    @classmethod
    def parse(cls, raw: str | bytes) -> ReadyMember:
        text = raw.decode() if isinstance(raw, bytes) else raw
        seq, bar, job_id = text.partition("|")
        if not bar:
            raise ValueError(f"not a ready member: {text[:200]!r}")
        return cls(seq, job_id)

    def build(self) -> str:
        return f"{self.seq}|{self.job_id}"


@dataclass(frozen=True)
class LegacyMember:
    """A ready job where layout format 1 keeps it (``QueueKeys.ready``, one set for the whole
    queue): ``"account|seq|job_id"``, the account encoded. Readers count it beside the FIFOs
    until ``fairqueue upgrade`` has moved it into its account's (store/shards/
    format_upgrade.py), or a claim or the reaper adopted one an earlier producer wrote since."""

    encoded_account: str
    ready: ReadyMember

    @classmethod
    def parse(cls, raw: str | bytes) -> LegacyMember:
        text = raw.decode() if isinstance(raw, bytes) else raw
        account, bar, member = text.partition("|")
        if not bar:
            raise ValueError(f"not a format-1 ready member: {text[:200]!r}")
        return cls(account, ReadyMember.parse(member))

    @staticmethod
    def account_range(encoded: str) -> tuple[str, str]:
        """The lex range of an (encoded) account's members (``legacy_range`` in Lua)."""
        return f"[{encoded}|", f"({encoded}}}"


def member_job_id(raw: str | bytes) -> str:
    """The job id of a ready member."""
    return ReadyMember.parse(raw).job_id


@dataclass(frozen=True)
class Bucket:
    """An account's token bucket: tokens left when it was last ``updated`` (server time)."""

    tokens: float
    updated: float

    @classmethod
    def parse(cls, raw: str | bytes) -> Bucket:
        text = raw.decode() if isinstance(raw, bytes) else raw
        tokens, updated = text.split(" ")
        return cls(float(tokens), float(updated))

    def build(self) -> str:
        return f"{self.tokens:.17g} {self.updated:.17g}"

    def tokens_at(self, now: float, rate: float, burst: float) -> float:
        """Tokens at ``now``, refilled at ``rate`` per second up to ``burst``."""
        return min(burst, self.tokens + max(0.0, now - self.updated) * rate)


#: A pending marker is short (make_marker in lib/records.lua): ``"p <account>|<job_id>"``, the
#: account encoded and named only in a sharded store; a started or done one is JSON.
PENDING_MARKER = "p "


def marker_account(raw: str) -> str | None:
    """The encoded account a marker names (make_marker in lib/records.lua), or None."""
    if raw.startswith(PENDING_MARKER):
        return raw[len(PENDING_MARKER):].partition("|")[0] or None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    account = data.get("account") if isinstance(data, dict) else None
    return account if isinstance(account, str) else None


@dataclass(frozen=True)
class Marker:
    """A business key's idempotency marker: ``pending`` while its job waits, ``started`` before
    the side effect, ``done`` after it (with the external system's id when the task recorded
    one)."""

    state: str
    job_id: str
    at: float = 0.0
    external_id: str | None = None

    @classmethod
    def parse(cls, raw: str | bytes) -> Marker:
        text = raw.decode() if isinstance(raw, bytes) else raw
        if text.startswith(PENDING_MARKER):
            return cls(state="pending", job_id=text.partition("|")[2])
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("state"), str):
            raise ValueError("not an idempotency marker")
        external = data.get("external_id")
        return cls(state=data["state"], job_id=str(data.get("job_id") or ""),
                   at=float(data.get("at") or 0.0),
                   external_id=external if isinstance(external, str) else None)

    @classmethod
    def read(cls, raw: str | bytes | None) -> Marker | None:
        """The marker stored as ``raw`` (None, "" or unreadable: none)."""
        if not raw:
            return None
        try:
            return cls.parse(raw)
        except ValueError:
            return None

    @property
    def done(self) -> bool:
        return self.state == "done"


def marker_external_id(external_id: str | None) -> str:
    """The external id as a JSON literal for ``write_marker`` ("" when none): made with Python's
    json, so any string (lone surrogates, quotes, 10 KB) comes back exactly as it was."""
    return "" if external_id is None else json.dumps(str(external_id))


def build_dead_record(record: dict[str, Any] | None) -> str:
    """The worker's record of a dead job (task, account, args, error, ...), as ``store_dead``
    keeps it, opaque: JSON, or "" when there is nothing to keep."""
    fields = {k: v for k, v in (record or {}).items() if v is not None}
    return json.dumps(fields, default=str) if fields else ""


@dataclass(frozen=True)
class DeadRecord:
    """A dead letter as the store holds it: the Lua-made fields, the worker's ``record``
    (decoded), the kept message and the job's record header at the time (``meta``)."""

    job_id: str
    reason: str
    at: float
    record: dict[str, Any]
    envelope: str
    meta: JobRecord | None
    deliveries: int

    @classmethod
    def parse(cls, raw: str | bytes) -> DeadRecord:
        """Letters written before the record was kept opaque hold its fields at the top
        level: those are the record then."""
        data = json.loads(raw)
        record = data
        if isinstance(data.get("record"), str) and data["record"]:
            record = json.loads(data["record"])
        envelope = ""
        for holder in (data, record):  # the store's copy of the message, or a worker's
            if isinstance(holder.get("envelope"), str) and not envelope:
                envelope = holder["envelope"]
        meta_raw = data.get("meta") or ""
        return cls(job_id=data["job_id"], reason=str(data.get("reason") or ""),
                   at=float(data.get("at", 0)), record=record, envelope=envelope,
                   meta=JobRecord.parse_header(meta_raw) if meta_raw else None,
                   deliveries=int(data.get("deliveries") or 0))


@dataclass(frozen=True)
class Deferral:
    """Why the claim last skipped a deferred account, and until when (server time)."""

    reason: str  # a DeferReason value (states.py)
    until: float | None

    @classmethod
    def parse(cls, raw: str | bytes) -> Deferral:
        text = raw.decode() if isinstance(raw, bytes) else raw
        reason, _, until = text.partition(" ")
        return cls(reason, float(until) if until and until != "-" else None)

    def build(self) -> str:
        return f"{self.reason} {'-' if self.until is None else f'{self.until:.6f}'}"


@dataclass(frozen=True)
class SlowDownHold:
    """A provider's "slow down" held on an account in a queue, or on a queue (Keys.pauses,
    lib/rotation.lua's slow_down): until when (server time), what said so (``429``,
    ``SlowDown``, ...) and the task id of the job that got it."""

    account: str | None  # None: the whole queue
    queue: str
    until: float
    cause: str
    job: str

    @classmethod
    def parse(cls, field: str, raw: str | bytes) -> SlowDownHold:
        """The hold stored as ``raw`` at ``field`` (keys.slow_down_field)."""
        text = raw.decode() if isinstance(raw, bytes) else raw
        until, cause, job = [*text.split(" "), "-", "-"][:3]
        kind, _, rest = field.partition(":")
        encoded_account, _, encoded_queue = rest.partition(":") if kind == "s" else ("", "", rest)
        return cls(decode_id(encoded_account) if kind == "s" else None, decode_id(encoded_queue),
                   float(until), decode_id(cause), decode_id(job))

    @property
    def scope(self) -> str:
        """``"account"`` (its jobs in the queue) or ``"queue"``."""
        return "queue" if self.account is None else "account"


@dataclass(frozen=True)
class WorkerEntry:
    """A live worker's registry entry: its last heartbeat and what it told about itself."""

    heartbeat: float
    info: dict[str, Any]

    @classmethod
    def parse(cls, raw: str | bytes) -> WorkerEntry:
        text = raw.decode() if isinstance(raw, bytes) else raw
        beat, _, info = text.partition(" ")
        data = json.loads(info)
        return cls(float(beat), data if isinstance(data, dict) else {})


@dataclass(frozen=True)
class LayoutSeen:
    """A worker's or producer's last reading of the store's layout: what it read (``"S"`` or
    ``"S>N"``), when (Redis time), and its name (role, host, pid)."""

    layout: str
    read_at: float
    name: str

    @classmethod
    def parse(cls, raw: str | bytes) -> LayoutSeen:
        text = raw.decode() if isinstance(raw, bytes) else raw
        layout, _, rest = text.partition(" ")
        read_at, _, name = rest.partition(" ")
        return cls(layout, float(read_at or 0), name)
