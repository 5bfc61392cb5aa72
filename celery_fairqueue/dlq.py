"""The dead-letter queue: jobs that failed for good, with why, kept to be listed and replayed.

A dead letter is written by the worker when a job's failure is permanent or its attempts are
used up, and by the fair store when a job cannot be run at all (malformed, unknown task, poison).
Replaying sends the same task with the same arguments (so the same business key) as a new job,
with its attempts starting again from one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from .envelope import Envelope, MalformedEnvelopeError
from .errors import FairqueueError
from .keys import decode_id
from .publish import get_store
from .redaction import redact_arguments
from .task import is_fair

PAGE = 500  # dead letters read per round trip


class DeadLetterNotFound(FairqueueError, KeyError):
    """No dead letter has that id (it was replayed or purged already)."""


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

    @classmethod
    def from_json(cls, raw: str | bytes) -> DeadLetter:
        """Read any of the store's dead-letter shapes; fill gaps from the kept message."""
        data = json.loads(raw)
        letter = cls(job_id=data["job_id"], reason=data.get("reason", "unknown"),
                     at=float(data.get("at", 0)))
        for name in ("task", "account", "job_key", "queue", "error", "traceback", "envelope"):
            if isinstance(data.get(name), str):
                setattr(letter, name, data[name])
        for name in ("attempts", "deliveries"):
            setattr(letter, name, int(data.get(name) or 0))
        if data.get("first_failure"):
            letter.first_failure = float(data["first_failure"])
        if isinstance(data.get("args"), list):
            letter.args = data["args"]
        if isinstance(data.get("kwargs"), dict):
            letter.kwargs = data["kwargs"]
        meta = data.get("meta") or ""
        if meta and letter.queue is None:
            letter.queue = decode_id(meta.split(" ")[0])
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
        self.account = self.account or envelope.headers.get("fairqueue_account")
        self.job_key = self.job_key or envelope.headers.get("job_key")
        if isinstance(body, list) and len(body) >= 2 and not self.args and not self.kwargs:
            self.args = body[0] if isinstance(body[0], list) else []
            self.kwargs = body[1] if isinstance(body[1], dict) else {}

    @property
    def replayable(self) -> bool:
        return self.task is not None

    def redacted(self, fields: Iterable[str]) -> dict[str, Any]:
        """What support may see: the named keyword arguments (and dict keys) masked."""
        return redact_arguments(self.args, self.kwargs, fields)


class DeadLetters:
    """List, show, replay and purge the dead letters of an app's fair store."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.store = get_store(app)
        self.keys = self.store.keys

    def count(self) -> int:
        return int(self.store.client.zcard(self.keys.dead_index))

    def list(self, *, account: str | None = None, task: str | None = None,
             reason: str | None = None, since: float | None = None, until: float | None = None,
             limit: int = 100) -> list[DeadLetter]:
        """Newest first; ``reason`` matches a part of the reason, case-insensitively."""
        found: list[DeadLetter] = []
        start = 0
        while True:
            chunk: list[str] = self.store.client.zrevrangebyscore(  # type: ignore[assignment]
                self.keys.dead_index, "+inf" if until is None else until,
                "-inf" if since is None else since, start=start, num=PAGE)
            if not chunk:
                return found
            start += PAGE
            for raw in self.store.client.hmget(self.keys.dead, chunk):
                if raw is None:
                    continue
                letter = DeadLetter.from_json(raw)
                if account is not None and letter.account != account:
                    continue
                if task is not None and letter.task != task:
                    continue
                if reason is not None and reason.lower() not in letter.reason.lower():
                    continue
                found.append(letter)
                if len(found) >= limit:
                    return found

    def get(self, job_id: str) -> DeadLetter:
        raw = self.store.client.hget(self.keys.dead, job_id)
        if raw is None:
            raise DeadLetterNotFound(f"no dead letter {job_id!r}")
        return DeadLetter.from_json(raw)

    def replay(self, job_id: str) -> AsyncResult:
        """Run a dead job again, as a new job with the same task, arguments and business key.

        The dead letter is taken first, so two replays at once run the job once; if sending
        fails, it is put back.
        """
        client = self.store.client
        raw = client.hget(self.keys.dead, job_id)
        if raw is None or not client.hdel(self.keys.dead, job_id):
            raise DeadLetterNotFound(f"no dead letter {job_id!r} (replayed or purged already)")
        letter = DeadLetter.from_json(raw)
        try:
            if not letter.replayable:
                raise FairqueueError(f"dead letter {job_id!r} has no readable task to replay: "
                                     f"{letter.reason}")
            options: dict[str, Any] = {}
            if letter.queue:
                options["queue"] = letter.queue
            if letter.account is not None and is_fair(self.app.tasks.get(letter.task)):
                options["account"] = letter.account
            result = self.app.send_task(letter.task, args=letter.args, kwargs=letter.kwargs,
                                        **options)
        except BaseException:
            client.hset(self.keys.dead, job_id, raw)
            raise
        client.zrem(self.keys.dead_index, job_id)
        client.hincrby(self.keys.stats, "replayed", 1)
        return result

    def purge(self, job_ids: Sequence[str] | None = None, *,
              older_than: float | None = None) -> int:
        """Delete the given dead letters, or those that died before ``older_than``."""
        client = self.store.client
        ids: Sequence[str] = job_ids if job_ids is not None else client.zrangebyscore(
            self.keys.dead_index, "-inf",
            "+inf" if older_than is None else older_than)  # type: ignore[assignment]
        purged = 0
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            keys = [DeadLetter.from_json(raw).job_key
                    for raw in client.hmget(self.keys.dead, chunk) if raw]
            pipe = client.pipeline()
            pipe.hdel(self.keys.dead, *chunk)
            pipe.zrem(self.keys.dead_index, *chunk)
            if any(keys):
                pipe.hdel(self.keys.markers, *[k for k in keys if k])
            purged += pipe.execute()[0]
        return purged
