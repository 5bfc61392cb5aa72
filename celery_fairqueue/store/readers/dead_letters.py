"""The dead-letter queue: jobs that failed for good, with why, kept to be listed and replayed.

A dead letter is written by the worker when a job's failure is permanent or its attempts are
used up, and by the fair store when a job cannot be run at all (malformed, unknown task, poison).
The job's message and the worker's record are kept as they were sent, so a replay sends exactly
the same task, arguments and business key, as a new job with its attempts starting from one.
"""

from __future__ import annotations

import builtins
import heapq
from collections.abc import Iterator, Sequence
from typing import Any

from celery import Celery
from celery.result import AsyncResult
from kombu.exceptions import OperationalError

from ...errors import (
    AmbiguousDeadLetterError,
    BrokerUnavailableError,
    DeadLetterNotFound,
    FairqueueError,
    ReplayLostError,
)
from ...protocol import (
    STORED_JOB_KEY_OPTION,
    is_fair,
    normalize_id,
)
from ..connection.door import wire
from ..formats.dead_letter import DeadLetter
from ..formats.keys import encode_job_key
from ..shards.merged import held_by, per_shard
from ..shards.opening import store_for
from ..shards.shard import FairStore
from .letter_names import resolve_letter

__all__ = ["DeadLetter", "DeadLetterNotFound", "DeadLetters"]

PAGE = 500  # dead letters read per round trip


class DeadLetters:
    """List, show, replay and purge the dead letters of an app's fair store. A letter lives
    on its account's shard: counts and listings merge the shards', a letter named by its id
    is looked for on each (one pipeline), an account's are read on its shard alone."""

    def __init__(self, app: Celery, store: FairStore | None = None) -> None:
        self.app = app
        self.store = store or store_for(app)
        self.client = self.store.client
        self.keys = self.store.keys

    def count(self, older_than: float | None = None) -> int:
        """How many there are; with ``older_than`` (epoch seconds), how many died before."""
        return sum(count for count, in per_shard(self.store, lambda pipe, shard: (
            pipe.zcard(shard.keys.dead_index) if older_than is None
            else pipe.zcount(shard.keys.dead_index, "-inf", older_than))))

    def ids(self, older_than: float | None = None) -> list[str]:
        """Ids of all dead letters, or of those that died before ``older_than``, oldest
        first."""
        replies = per_shard(self.store, lambda pipe, shard: pipe.zrangebyscore(
            shard.keys.dead_index, "-inf", "+inf" if older_than is None else older_than,
            withscores=True))
        return [job_id for job_id, _ in heapq.merge(
            *(reply for reply, in replies), key=lambda entry: entry[1])]

    def list(self, *, account: str | None = None, task: str | None = None,
             reason: str | None = None, since: float | None = None, until: float | None = None,
             limit: int = 100) -> list[DeadLetter]:
        """Newest first; ``reason`` matches a part of the reason, case-insensitively. An
        account's are read on its shard alone; the others are the shards' merged."""
        account = normalize_id(account) if account is not None else None
        shards = [self.store.shard_for(account)] if account is not None else self.store.shards
        found: list[DeadLetter] = []
        newest = heapq.merge(*(self._newest(shard, since, until) for shard in shards),
                             key=lambda entry: -entry[0])
        for _, raw in newest:
            letter = DeadLetter.from_json(raw)
            if account is not None and letter.account != account:
                continue
            if task is not None and letter.task != task:
                continue
            if reason is not None and reason.lower() not in letter.reason.lower():
                continue
            found.append(letter)
            if len(found) >= limit:
                break
        return found

    @staticmethod
    def _newest(shard: FairStore, since: float | None, until: float | None
                ) -> Iterator[tuple[float, str | bytes]]:
        """``(time, letter)`` of one shard's dead letters, newest first, PAGE a round trip."""
        start = 0
        while True:
            chunk: builtins.list[tuple[str, float]] = shard.client.zrevrangebyscore(  # type: ignore[assignment]
                shard.keys.dead_index, "+inf" if until is None else until,
                "-inf" if since is None else since, start=start, num=PAGE, withscores=True)
            if not chunk:
                return
            start += PAGE
            raws = shard.client.hmget(shard.keys.dead, [job_id for job_id, _ in chunk])
            yield from ((float(at), raw) for (_, at), raw in zip(chunk, raws, strict=True)
                        if raw is not None)

    def _held(self, job_id: str) -> tuple[FairStore, Any]:
        """The shard that keeps the dead letter ``job_id``, with the letter as stored."""
        found = held_by(self.store, lambda shard: shard.keys.dead, wire(job_id))
        if found is None:
            raise DeadLetterNotFound(f"no dead letter {job_id!r}")
        return found

    def get(self, job_id: str) -> DeadLetter:
        """The dead letter kept under exactly this id (``<task id>:<retries>``)."""
        return DeadLetter.from_json(self._held(job_id)[1])

    def _dead_keys(self) -> builtins.list[str]:
        return [shard.keys.dead for shard in self.store.shards]

    def resolve(self, name: str) -> builtins.list[str]:
        """The ids of the dead letters ``name`` stands for (see letter_names.py): its id, the
        Celery task id, or the worker log's ``task.name[<task id>]``; oldest delivery first."""
        return [job_id for job_id, _ in resolve_letter(self.client, self._dead_keys(), name)]

    def named(self, name: str) -> builtins.list[DeadLetter]:
        """The dead letters ``name`` stands for, oldest delivery first (usually one)."""
        found = resolve_letter(self.client, self._dead_keys(), name)
        if not found:
            raise DeadLetterNotFound(f"no dead letter {name!r} (by its id, the task id, or "
                                     "task.name[task id] as the worker logs it)")
        return [DeadLetter.from_json(raw) for _, raw in found]

    def letter_id(self, name: str) -> str:
        """The one dead letter ``name`` stands for, for a change (replay, purge): a task id
        with several letters (a task and its replacement, say) is refused, naming them."""
        ids = self.resolve(name)
        if not ids:
            raise DeadLetterNotFound(f"no dead letter {name!r} (replayed or purged already)")
        if len(ids) > 1:
            raise AmbiguousDeadLetterError(
                f"{name!r} names {len(ids)} dead letters ({', '.join(ids)}): name one by its id")
        return ids[0]

    def replay(self, job_id: str) -> AsyncResult:
        """Run a dead job again, as a new job with the same task, arguments and business key.

        A fair job's letter leaves the queue in the same script that stores its replay, so two
        replays at once (or a replay and a purge) run it once, and a failed send keeps it. Other
        tasks go through the broker: their letter is taken first and put back if sending fails.
        """
        shard, raw = self._held(job_id)
        letter = DeadLetter.from_json(raw)
        if not letter.replayable:
            raise FairqueueError(f"dead letter {job_id!r} has no readable task to replay: "
                                 f"{letter.reason}")
        options: dict[str, Any] = {"queue": letter.queue} if letter.queue else {}
        if is_fair(self.app.tasks.get(letter.task)):
            if letter.account is not None:
                options["account"] = letter.account
            if letter.job_key:  # the same business key, however it was made
                options[STORED_JOB_KEY_OPTION] = letter.job_key
            try:
                return self.app.send_task(letter.task, args=letter.args, kwargs=letter.kwargs,
                                          fairqueue_replays=job_id, **options)
            except ReplayLostError:  # taken meanwhile by another replay or a purge
                raise DeadLetterNotFound(f"no dead letter {job_id!r} (replayed or purged "
                                         "already)") from None
        taken = shard.take_dead(job_id)  # on the shard that holds it, put back there
        if taken is None:
            raise DeadLetterNotFound(f"no dead letter {job_id!r} (replayed or purged already)")
        try:
            result = self.app.send_task(letter.task, args=letter.args, kwargs=letter.kwargs,
                                        **options)
        except BaseException as exc:
            shard.restore_dead(job_id, taken, letter.at)
            if isinstance(exc, OperationalError):  # kombu's word for a broker it cannot reach
                raise BrokerUnavailableError(f"the broker did not take the replay of dead "
                                             f"letter {job_id!r}; it is kept: {exc}") from exc
            raise
        shard.client.hincrby(shard.keys.stats, "replayed", 1)
        return result

    @staticmethod
    def _job_key(raw: str | bytes | None) -> str:
        return encode_job_key(DeadLetter.from_json(raw).job_key if raw else None)

    def purge(self, job_ids: Sequence[str] | None = None, *,
              older_than: float | None = None) -> int:
        """Delete the given dead letters, or those that died before ``older_than``, with the
        idempotency markers their own jobs wrote (not those of a newer job of the same key);
        each on the shard that holds it."""
        ids = list(job_ids) if job_ids is not None else self.ids(older_than)
        return sum(self._purge_page(ids[start:start + PAGE]) for start in range(0, len(ids), PAGE))

    def _purge_page(self, ids: builtins.list[str]) -> int:
        held = per_shard(self.store, lambda pipe, shard: pipe.hmget(shard.keys.dead, ids))
        purged = 0
        for shard, (raws,) in zip(self.store.shards, held, strict=True):
            mine = [(job_id, raw) for job_id, raw in zip(ids, raws, strict=True)
                    if raw is not None]
            if mine:
                purged += shard.purge_dead([job_id for job_id, _ in mine],
                                           [self._job_key(raw) for _, raw in mine])
        return purged
