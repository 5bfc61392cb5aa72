"""A dead letter as a person reads it: the stored letter (records.DeadRecord) with the gaps
filled from the job's kept message (its task, account, business key and arguments)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...envelope import Envelope, MalformedEnvelopeError
from ...protocol import ACCOUNT_HEADER, job_key_of
from ...redaction import redact_arguments
from .records import DeadRecord


@dataclass
class DeadLetter:
    job_id: str
    reason: str
    at: float
    task: str | None = None
    account: str | None = None
    job_key: str | None = None
    queue: str | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    deliveries: int = 0
    error: str | None = None
    traceback: str | None = None
    first_failure: float | None = None
    envelope: str = ""
    resendable: bool = True  # False when the message could not be read as the task's JSON
    raw: str = field(default="", repr=False)  # as the store holds it, to put it back

    @classmethod
    def from_json(cls, raw: str | bytes) -> DeadLetter:
        """Read a dead letter; fill gaps from the kept message. Letters written before the
        record was kept opaque hold its fields at the top level, and are read too."""
        stored = DeadRecord.parse(raw)
        record = stored.record
        letter = cls(job_id=stored.job_id, reason=stored.reason or
                     record.get("reason") or "unknown", at=stored.at,
                     raw=raw if isinstance(raw, str) else raw.decode())
        for name in ("task", "account", "job_key", "queue", "error", "traceback"):
            if isinstance(record.get(name), str):
                setattr(letter, name, record[name])
        letter.envelope = stored.envelope
        letter.attempts = int(record.get("attempts") or 0)
        letter.resendable = record.get("replayable", True) is not False
        letter.deliveries = stored.deliveries
        if record.get("first_failure"):
            letter.first_failure = float(record["first_failure"])
        if isinstance(record.get("args"), list):
            letter.args = record["args"]
        if isinstance(record.get("kwargs"), dict):
            letter.kwargs = record["kwargs"]
        if stored.meta is not None and letter.queue is None:
            letter.queue = stored.meta.queue
        if letter.envelope:
            letter._fill_from_envelope()
        return letter

    def _fill_from_envelope(self) -> None:
        try:
            envelope = Envelope.from_json(self.envelope)
            body = json.loads(envelope.body)
        except (MalformedEnvelopeError, ValueError):
            return  # a malformed message: kept as it is, nothing to read from it
        self.task = self.task or envelope.task_name
        self.account = self.account or envelope.headers.get(ACCOUNT_HEADER)
        self.job_key = self.job_key or job_key_of(envelope.headers)
        if isinstance(body, list) and len(body) >= 2:
            # the message as it was sent wins: the worker's record went through its pool
            self.args = body[0] if isinstance(body[0], list) else self.args
            self.kwargs = body[1] if isinstance(body[1], dict) else self.kwargs

    @property
    def replayable(self) -> bool:
        return self.task is not None and self.resendable

    def redacted(self, fields: Iterable[str]) -> dict[str, Any]:
        """What support may see: the named keyword arguments (and dict keys) masked."""
        return redact_arguments(self.args, self.kwargs, fields)
