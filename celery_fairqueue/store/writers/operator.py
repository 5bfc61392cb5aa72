"""The operator's controls of the fair store: pause and resume, cancel, run a delayed job now,
purge, account limits and the default limit, and taking, putting back and purging dead letters;
one method per Lua script like the rest of the store.

An operator pause is not a limit: a limit defers an account (its jobs get a later ready time
and the claim wakes it when its token or window comes), a pause only takes the account (or the
queue) out of the rotation until someone resumes it; its jobs stay ready, in their FIFO place,
and no attempt is charged.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import AccountMovingError
from ...limits import AccountLimit
from ...protocol import delivery_id
from ..connection.door import StoreDoor
from ..formats.keys import (
    DEFAULT_LIMIT_FIELD,
    IN_QUEUE_PREFIX,
    QUEUE_LIMIT_PREFIX,
    QueueKeys,
    decode_id,
    encode_id,
    in_queue_field,
    is_account_field,
    is_slow_down_field,
    parse_in_queue_field,
    queue_limit_field,
)
from ..formats.records import JobRecord, LegacyMember, member_job_id
from .jobs import AccountMoved

#: Retries of one task whose deliveries cancel and run_now look through.
MAX_DELIVERY_LOOKUP = 4096
#: Longest ``by`` and ``reason`` of a pause kept (the rest is cut), so a pause stays small.
MAX_PAUSE_TEXT = 1000


@dataclass(frozen=True)
class OperatorPause:
    """An operator's pause: of ``account`` in ``queue``, of ``account`` in every queue
    (``queue`` None), or of the whole ``queue`` (``account`` None)."""

    account: str | None
    queue: str | None
    by: str  # who paused ("" when not given)
    at: float  # Redis server time of the pause
    reason: str  # why ("" when not given)
    moving_to: int | None = None  # the reshard's own pause: the shard the account moves to

    @property
    def scope(self) -> str:
        """``"queue"``, ``"account"`` (in one queue) or ``"account_everywhere"``."""
        if self.account is None:
            return "queue"
        return "account" if self.queue is not None else "account_everywhere"



def paused_accounts(pauses: Sequence[OperatorPause], queue: str) -> int:
    """Accounts an operator paused in ``queue``, or in every queue (the status, the console
    and the metrics count these)."""
    return len({p.account for p in pauses
                if p.account is not None and p.queue in (None, queue)})



def pause_field(account: str | None, queue: str | None) -> str:
    """The field of a pause in ``Keys.pauses``: ids encoded, so ``:`` and ``*`` cannot occur
    in them and every field parses back to one pause."""
    if account is None and queue is None:
        raise ValueError("pause or resume needs an account, a queue, or both")
    if account is None:
        return f"q:{encode_id(str(queue))}"
    return f"a:{encode_id(str(account))}:{encode_id(str(queue)) if queue is not None else '*'}"



def parse_pause(field: str, raw: str) -> OperatorPause:
    """The pause stored at ``field`` (see :func:`pause_field`)."""
    data = json.loads(raw)
    kind, _, rest = field.partition(":")
    account: str | None
    queue: str | None
    if kind == "q":
        account, queue = None, decode_id(rest)
    else:
        encoded_account, _, encoded_queue = rest.partition(":")
        account = decode_id(encoded_account)
        queue = None if encoded_queue == "*" else decode_id(encoded_queue)
    moving_to = data.get("reshard")
    return OperatorPause(account=account, queue=queue, by=str(data.get("by") or ""),
                         at=float(data.get("at") or 0.0), reason=str(data.get("reason") or ""),
                         moving_to=int(moving_to) if moving_to is not None else None)



def unless_moving(reply: Any, account: str | None, doing: str) -> Any:
    """A script's reply, unless it says a reshard is moving the account (pause.lua,
    resume.lua, apply_limit.lua: ``[state, shard]``): while it moves, AccountMovingError; once
    it moved away from this shard, AccountMoved (the sharded store asks its new shard)."""
    if not isinstance(reply, list):
        return reply
    state, shard = str(reply[0]), int(reply[1])
    if state == "m":
        raise AccountMoved(shard)
    raise AccountMovingError(
        f"cannot {doing} account {account!r} now: `fairqueue reshard` is moving it to shard "
        f"{shard}; try again once its move ends (seconds for a chunk of accounts)")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value



class Operator(StoreDoor):
    """Pause and resume, cancel, run now, purge, limits and dead letters."""

    def default_limit(self) -> AccountLimit | None:
        """The store's default limit (for accounts without their own), or None while no worker
        or operator has set one."""
        raw = self.client.get(self.keys.default_limit)
        return AccountLimit.from_json(raw) if raw else None

    def set_default_limit(self, limit: AccountLimit, *, only_if_unset: bool = False
                          ) -> AccountLimit:
        """Make ``limit`` the store's default, which every worker's claim applies from its next
        call; ``only_if_unset`` (a worker starting): only when the store has none. Returns the
        default the store holds now."""
        queues = self.known_queues()
        raw = self._run("set_default_limit", [self.keys.queue(q) for q in queues], [
            limit.to_json(), limit.pack(self.server_time()), "1" if only_if_unset else "0"])
        return AccountLimit.from_json(raw)

    def set_limit(self, account: str, limit: AccountLimit, queue: str | None = None) -> None:
        """Store an account's limit (across its queues, or in ``queue`` only); it applies from
        the next claim, deferred or not."""
        self._apply_limit(account, limit.pack(self.server_time()), limit.to_json(), queue)

    def clear_limit(self, account: str, queue: str | None = None) -> None:
        """Drop an account's own limit (in ``queue``); the default limit applies again."""
        self._apply_limit(account, "", "", queue)

    def _apply_limit(self, account: str, packed: str, config: str, queue: str | None) -> None:
        """Store (``packed`` "": drop) an account's own limit and apply it now
        (apply_limit.lua)."""
        encoded = encode_id(account)
        field = encoded if queue is None else in_queue_field(queue, account)
        queues = self.known_queues()
        unless_moving(self._run("apply_limit", [self.keys.queue(q) for q in queues],
                                [encoded, packed, config, field,
                                 "" if queue is None else encode_id(queue)]),
                      account, "change the limit of")

    def set_queue_default_limit(self, queue: str, limit: AccountLimit | None) -> None:
        """The default limit of ``queue``'s accounts that have no limit of their own in it
        (None: drop it); the claim applies it from its next call."""
        self._queue_limit(queue, in_queue_field(queue, None), limit)

    def set_queue_limit(self, queue: str, limit: AccountLimit | None) -> None:
        """``queue``'s shared limit, all its accounts together (None: drop it); the claim
        applies it from its next call."""
        self._queue_limit(queue, queue_limit_field(queue), limit)

    def _queue_limit(self, queue: str, field: str, limit: AccountLimit | None) -> None:
        self._run("queue_limit", [self.keys.queue(q) for q in self.known_queues()], [
            field, limit.pack(self.server_time()) if limit else "",
            limit.to_json() if limit else "", encode_id(queue), "1" if self.sharded else "0"])

    def queue_limits(self) -> Iterator[tuple[str, AccountLimit]]:
        """``(queue, its shared limit)`` of every queue that has one."""
        for field, raw in self.client.hscan_iter(self.keys.limit_config,
                                                 match=QUEUE_LIMIT_PREFIX + "*", count=500):
            yield decode_id(_text(field)[len(QUEUE_LIMIT_PREFIX):]), AccountLimit.from_json(raw)

    def queue_limit(self, queue: str) -> AccountLimit | None:
        """``queue``'s shared limit, or None."""
        raw = self.client.hget(self.keys.limit_config, queue_limit_field(queue))
        return AccountLimit.from_json(raw) if raw else None

    def limits(self) -> Iterator[tuple[str, AccountLimit]]:
        """Every account's own limit across its queues, as set (``set_account_limit`` or the
        admin)."""
        for encoded, raw in self.client.hscan_iter(self.keys.limit_config, count=500):
            if is_account_field(_text(encoded)):
                yield decode_id(encoded), AccountLimit.from_json(raw)

    def limits_in_queues(self) -> Iterator[tuple[str, str | None, AccountLimit]]:
        """``(queue, account, limit)`` of every limit in one queue: an account's own, or the
        queue's default (``account`` None)."""
        for field, raw in self.client.hscan_iter(self.keys.limit_config,
                                                 match=IN_QUEUE_PREFIX + "*", count=500):
            scope = parse_in_queue_field(_text(field))
            if scope is not None:
                yield scope[0], scope[1], AccountLimit.from_json(raw)

    def get_limit(self, account: str, queue: str | None = None) -> AccountLimit | None:
        """The account's own limit (in ``queue``), or None."""
        field = encode_id(account) if queue is None else in_queue_field(queue, account)
        raw = self.client.hget(self.keys.limit_config, field)
        return AccountLimit.from_json(raw) if raw else None

    def queue_default_limit(self, queue: str) -> AccountLimit | None:
        """The default limit of ``queue``'s accounts, or None."""
        raw = self.client.hget(self.keys.limit_config, in_queue_field(queue, None))
        return AccountLimit.from_json(raw) if raw else None

    def refresh_windows(self) -> int:
        """Recompute the window schedules of accounts that have one, and of the store's default
        limit and the queues' (they run a week ahead)."""
        now = self.server_time()
        refreshed = 0
        default = self.default_limit()
        if default is not None and default.window:
            self.client.hset(self.keys.limits, DEFAULT_LIMIT_FIELD, default.pack(now))
            refreshed += 1
        scoped = [(encode_id(account), limit) for account, limit in self.limits()]
        scoped += [(in_queue_field(queue, account), limit)
                   for queue, account, limit in self.limits_in_queues()]
        for field, limit in scoped:
            if limit.window:
                self.client.hset(self.keys.limits, field, limit.pack(now))
                refreshed += 1
        return refreshed

    def deliveries_of(self, task_id: str) -> Iterator[tuple[str, str]]:
        """``(delivery id, queue)`` of each stored delivery of a Celery task (``id:0``,
        ``id:1``, ...; earlier ones are forgotten), looked up in pages until a page holds none
        after one that did. A delivery id (``id:retries``, as the store, ``fairqueue jobs`` and
        the dead letters name jobs) that is stored is taken as it is."""
        if ":" in task_id:
            record = self.client.hget(self.keys.records, task_id)
            if record:
                yield task_id, JobRecord.parse(record).queue
                return
        seen = False
        for start in range(0, MAX_DELIVERY_LOOKUP, 64):
            ids = [delivery_id(task_id, n) for n in range(start, start + 64)]
            records = self.client.hmget(self.keys.records, ids)
            found = [(job_id, raw) for job_id, raw in zip(ids, records, strict=True) if raw]
            for job_id, raw in found:
                yield job_id, JobRecord.parse(raw).queue
            if seen and not found:
                return
            seen = seen or bool(found)

    def cancel(self, task_id: str) -> list[str]:
        """Take the waiting deliveries of a Celery task out of the store (a revoke); returns
        the delivery ids cancelled. A running one stays: Celery's revoke stops it in its worker.
        See :meth:`deliveries_of` for the ids it takes."""
        return [job_id for job_id, queue in list(self.deliveries_of(task_id))
                if self._run("cancel", [self.keys.queue(queue)], [job_id]) == 1]

    def purge(self, queues: Sequence[str] | None = None, batch: int = 1000,
              on_taken: Callable[[list[str]], None] | None = None) -> int:
        """Take every waiting job (ready, deferred or delayed) of ``queues`` (default: all)
        out of the store, as ``celery purge`` discards a broker queue's messages; running jobs
        stay. Returns how many it took; a job enqueued meanwhile may stay (call it again).
        ``on_taken`` is called with the delivery ids of each batch taken."""
        taken = 0
        for queue in list(queues or self.known_queues()):
            qk = self.keys.queue(queue)
            while True:
                delayed: list[str] = self.client.zrange(  # type: ignore[assignment]
                    qk.delayed, 0, batch - 1)
                now = self._cancel_all(qk, delayed, batch, on_taken)
                if now == 0:  # nothing left, or only entries no script can take
                    break
                taken += now
            taken += self._purge_ready(qk, batch, on_taken)
            taken += self._purge_legacy(qk, batch, on_taken)
        return taken

    def _purge_ready(self, qk: QueueKeys, batch: int,
                     on_taken: Callable[[list[str]], None] | None) -> int:
        """:meth:`purge`'s ready jobs of one queue. They lie in one FIFO per account, and the
        accounts that may have some are the fields of its state hash, read ``batch`` a page. A
        page's FIFOs share ``batch`` jobs a round trip, again for those whose share came back
        full (an account of a million jobs among small ones: one job each, then the whole
        share), so a round trip holds about ``batch`` jobs, not ``batch`` for each account."""
        taken = 0
        accounts = (name for name, _ in self.client.hscan_iter(qk.state, count=batch))
        while left := list(itertools.islice(accounts, batch)):
            while left:
                share = max(1, batch // len(left))
                pipe = self.client.pipeline(transaction=False)
                for account in left:
                    pipe.zrange(qk.fifo(account), 0, share - 1)
                heads = pipe.execute()
                ids = [member_job_id(member) for head in heads for member in head]
                now = self._cancel_all(qk, ids, batch, on_taken)
                if now == 0:  # nothing left, or only entries no script can take
                    break
                taken += now
                left = [account for account, head in zip(left, heads, strict=True)
                        if len(head) == share]
        return taken

    def _purge_legacy(self, qk: QueueKeys, batch: int,
                      on_taken: Callable[[list[str]], None] | None) -> int:
        """:meth:`purge`'s ready jobs of one queue still in format 1's set (before ``fairqueue
        upgrade``, or written since by an earlier producer), ``batch`` a round trip. It pages
        on past the last member read: a cancel at format 2 leaves the member for the claim or
        the reaper to drop, so the set's head is no cursor."""
        taken, low = 0, "-"
        while True:
            page: list[str] = self.client.zrangebylex(  # type: ignore[assignment]
                qk.ready, low, "+", 0, batch)
            if not page:
                return taken
            ids = [LegacyMember.parse(member).ready.job_id for member in page]
            taken += self._cancel_all(qk, ids, batch, on_taken)
            low = f"({page[-1]}"

    def _cancel_all(self, qk: QueueKeys, ids: Sequence[str], batch: int,
                    on_taken: Callable[[list[str]], None] | None) -> int:
        """Cancel the jobs ``ids`` of a queue, ``batch`` a round trip; how many it took (one
        settled or taken meanwhile is not)."""
        done = self._run_many("cancel", (([qk], [job_id]) for job_id in ids), batch)
        gone = [job_id for job_id, cancelled in zip(ids, done, strict=True) if cancelled == 1]
        if gone and on_taken is not None:
            on_taken(gone)
        return len(gone)

    def run_now(self, task_id: str) -> list[str]:
        """Make the delayed deliveries of a task ready now; returns the delivery ids moved.
        They queue behind their account's limits and pauses like any ready job."""
        return [job_id for job_id, queue in list(self.deliveries_of(task_id))
                if self._run("run_now", [self.keys.queue(queue)], [job_id]) == 1]

    def take_dead(self, job_id: str) -> str | None:
        """Take a dead letter out of the queue to replay it; None when a replay or purge at
        the same time took it first."""
        [taken] = self._run("take_dead", [], [job_id])
        return str(taken) if taken else None

    def restore_dead(self, job_id: str, letter: str, at: float) -> None:
        """Put back a letter :meth:`take_dead` took (its replay could not be sent)."""
        self._run("restore_dead", [], [job_id, letter, at])

    def purge_dead(self, job_ids: Sequence[str], job_keys: Sequence[str]) -> int:
        """Delete these dead letters with the markers their own jobs wrote (``job_keys``: the
        letters' encoded business keys, "-" for none); returns how many were deleted."""
        return int(self._run("purge_dead", [], [len(job_ids), *job_ids, *job_keys]))

    def pause(self, account: str | None = None, queue: str | None = None, *, by: str = "",
              reason: str = "") -> OperatorPause:
        """Pause ``account`` (in ``queue``, or in every queue) or the whole ``queue``; the
        claim skips it from its next call. Pausing what is paused keeps the first pause."""
        field = pause_field(account, queue)
        encoded = encode_id(str(account)) if account is not None else ""
        raw = self._run("pause", [], [field, str(by)[:MAX_PAUSE_TEXT],
                                      str(reason)[:MAX_PAUSE_TEXT], encoded])
        return parse_pause(field, unless_moving(raw, account, "pause"))

    def resume(self, account: str | None = None, queue: str | None = None, *,
               thaw: bool = False) -> bool:
        """End the pause of exactly this scope; False when there was none. The account rejoins
        the rotation wherever no other pause (of it everywhere, or in that queue) holds it.
        ``thaw``: the reshard ends its own pause of an account on its new shard."""
        field = pause_field(account, queue)
        encoded = encode_id(str(account)) if account is not None else ""
        queues = self.known_queues()
        raw = self._run("resume", [self.keys.queue(q) for q in queues],
                        [field, encoded, "1" if thaw else "0"])
        return bool(unless_moving(raw, account, "resume"))

    def pauses(self, limit: int = 10_000) -> list[OperatorPause]:
        """Every operator pause (up to ``limit``), oldest first."""
        found = []
        for field, raw in self.client.hscan_iter(self.keys.pauses, count=500):
            if is_slow_down_field(_text(field)):  # a provider's, not an operator's
                continue
            found.append(parse_pause(_text(field), _text(raw)))
            if len(found) >= limit:
                break
        return sorted(found, key=lambda p: (p.at, p.queue or "", p.account or ""))
