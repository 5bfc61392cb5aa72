"""Moving one account from the shard it leaves to the shard it joins (a reshard's step).

A reshard (reshard.py) moves an account from shard ``o`` to shard ``n`` in four steps, each one
script call on one shard, each idempotent, so that a rerun after the reshard was killed at any
point redoes the account from the start and ends in the same place:

1. freeze on ``o`` (move_freeze.lua, for many accounts at once): a pause of the reshard's own
   keeps the claim off the account, whose jobs stay where they are; enqueues are still stored
   on ``o``. The reshard then waits until none of its jobs is leased on ``o``: a running job
   settles where it runs, its done marker written there, and the account's concurrency cap
   never counts jobs on two shards.
2. copy to ``n`` (move_in.lua): its waiting jobs (record, place in the FIFO or the delayed
   set), its limit, token bucket, pauses (the reshard's pause among them: the account is
   paused on ``n`` too), dead letters and business-key markers, with idempotent writes.
3. take off ``o`` (move_out.lua): the copied jobs go; when nothing changed on ``o`` since the
   copy, the rest goes too and the account is marked moved, and from then on ``o``'s enqueue
   sends its producers to ``n``; else the copy is made again (a job enqueued meanwhile). Copied
   jobs no longer on ``o`` (cancelled meanwhile) are dropped on ``n`` (move_drop.lua).
4. thaw on ``n``: the reshard's pause gives way to the operator's own, if it kept one, or the
   account is resumed (resume.lua) and joins the rotations there.

No job runs while it is half-moved: between steps 2 and 4 the account is paused on both shards.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...protocol import NO_JOB_KEY
from ..connection.lua import load_script
from ..formats.keys import decode_id, encode_id, in_queue_field
from ..formats.records import JobRecord, ReadyMember
from .shard import FairStore

#: Environment variable of the tests: ``"K:in"`` or ``"K:out"`` makes the reshard SIGKILL itself
#: after the K-th account's step 2 or step 3 (the crash-safety tests).
KILL_ENV = "FAIRQUEUE_RESHARD_KILL"
#: Copies of one account made before the reshard gives up on it for this pass.
MAX_COPIES = 50
#: The hashes that hold an account's limit, its configuration and its bucket, by field (its
#: encoded id, and keys.in_queue_field for each queue).
LIMIT_HASHES = ("limits", "limit_config", "buckets")
MOVE_SCRIPTS = ("move_freeze", "move_in", "move_out", "move_drop", "move_weigh")


def reshard_pause(raw: str | bytes | None) -> dict[str, object] | None:
    """The reshard's own pause (move_freeze.lua) stored as ``raw``, or None."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("reshard") is not None else None


@dataclass
class AccountState:
    """What one account holds on the shard it leaves, as read for one copy."""

    jobs: list[tuple[str, str, str]] = field(default_factory=list)  # id, record, due or ""
    fields: list[tuple[str, str, str]] = field(default_factory=list)  # hash, field, value
    members: list[tuple[str, str, str]] = field(default_factory=list)  # zset, member, score
    strings: list[tuple[str, str, str]] = field(default_factory=list)  # name, value, ms to live


class AccountMover:
    """The four steps of moving accounts between the shards of one store (``shards``: every
    shard, old and new, as FairStore objects of a sharded store)."""

    def __init__(self, shards: Sequence[FairStore]) -> None:
        self.shards = shards
        self.client = shards[0].client
        self._sources = {name: load_script(name) for name in MOVE_SCRIPTS}
        self._scripts = {name: self.client.register_script(source.source)
                         for name, source in self._sources.items()}
        self.moved_accounts = 0
        self.moved_jobs = 0
        kill = os.environ.get(KILL_ENV, "")
        self._kill_after, _, self._kill_step = kill.partition(":")

    def run(self, name: str, shard: int, args: Iterable[Any]) -> Any:
        keys = [getattr(self.shards[shard].keys, key) for key in self._sources[name].global_keys]
        return self._scripts[name](keys=keys, args=list(args))

    def weigh(self, shard: int) -> None:
        """Count the runnable weight of ``shard``'s queues afresh (move_weigh.lua): a store of
        one shard kept none."""
        self.run("move_weigh", shard, [])

    def freeze(self, shard: int, targets: dict[str, int]) -> None:
        """Step 1 for the encoded accounts of ``targets`` (account -> its new shard)."""
        pairs = [arg for account, to in targets.items() for arg in (account, to)]
        for start in range(0, len(pairs), 200):
            self.run("move_freeze", shard, pairs[start:start + 200])

    def move(self, old: int, new: int, account: str, delayed: dict[str, tuple[str, float]],
             markers: Iterable[str], letters: Iterable[tuple[str, str, float]]) -> None:
        """Steps 2 to 4 for the encoded ``account``; ``delayed``: the old shard's delayed jobs
        (job id -> account, due), ``markers``: the names of the account's key strings found on
        the old shard, ``letters``: its dead letters there (job id, letter, time)."""
        letters = list(letters)
        for _ in range(MAX_COPIES):
            state = self.read(old, account, delayed, markers, letters)
            self.run("move_in", new, [account, "0", *_counted(state.fields), *_counted(state.jobs),
                                      *_counted(state.members), *_counted(state.strings)])
            self._maybe_die("in")
            done, vanished = self.run("move_out", old, [
                account, new, *_counted([(job_id,) for job_id, _, _ in state.jobs]),
                *_counted(state.fields), *_counted([(n, v) for n, v, _ in state.strings]),
                *_counted([(n, m) for n, m, _ in state.members])])
            if vanished:
                self.run("move_drop", new, vanished)
            self.moved_jobs += len(state.jobs) - len(vanished)
            if done:
                break
        else:
            raise RuntimeError(f"account {decode_id(account)!r} kept changing on shard {old}: "
                               f"run the reshard again")
        self._maybe_die("out")
        self.thaw(new, account)
        self.moved_accounts += 1

    def read(self, old: int, account: str, delayed: dict[str, tuple[str, float]],
             markers: Iterable[str], letters: Sequence[tuple[str, str, float]]) -> AccountState:
        """The account's waiting jobs and state on shard ``old``, for one copy."""
        shard = self.shards[old]
        keys = shard.keys
        queues = shard.known_queues()
        # its pauses, and its holds of a provider's slow-down (keys.slow_down_field)
        pause_fields = [f"a:{account}:*"] + [f"{kind}:{account}:{encode_id(q)}" for q in queues
                                            for kind in ("a", "s")]
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:  # its ready jobs: its whole FIFO in each queue
            pipe.zrange(keys.queue(queue).fifo(account), 0, -1)
        # its limit and bucket across its queues, and in each queue (keys.in_queue_field)
        limit_fields = [account] + [in_queue_field(q, decode_id(account)) for q in queues]
        for name in LIMIT_HASHES:
            pipe.hmget(getattr(keys, name), limit_fields)
        pipe.hmget(keys.pauses, pause_fields)
        *readies, limits, configs, buckets, pauses = pipe.execute()
        state = AccountState()
        tag = keys.tag + ":"
        for name, values in zip(LIMIT_HASHES, (limits, configs, buckets), strict=True):
            hash_name = getattr(keys, name).removeprefix(tag)
            state.fields += [(hash_name, field_name, value) for field_name, value
                             in zip(limit_fields, values, strict=True) if value is not None]
        for name, value in zip(pause_fields, pauses, strict=True):
            if value is not None:
                state.fields.append((keys.pauses.removeprefix(tag), name, value))
        for job_id, letter, at in letters:
            state.fields.append((keys.dead.removeprefix(tag), job_id, letter))
            state.members.append((keys.dead_index.removeprefix(tag), job_id, repr(at)))
        job_ids = [ReadyMember.parse(member).job_id for ready in readies for member in ready]
        ready = set(job_ids)
        # delayed as the chunk froze, unless ready now (promoted since): placed once
        due = {job_id: repr(at) for job_id, (owner, at) in delayed.items()
               if owner == account and job_id not in ready}
        job_ids += due
        records = [text(raw) for raw in self.client.hmget(keys.records, job_ids)] \
            if job_ids else []
        names = set(markers)
        for job_id, record in zip(job_ids, records, strict=True):
            if not record:
                continue
            job = JobRecord.parse(record)
            if job.owner is not None:  # leased: it settles on the old shard
                continue
            state.jobs.append((job_id, record, due.get(job_id, "")))
            if job.stored_key != NO_JOB_KEY:
                names.add(f"key:{job.stored_key}")
        state.strings = self.read_strings(old, sorted(names))
        return state

    def read_strings(self, shard: int, names: Sequence[str]) -> list[tuple[str, str, str]]:
        """The key strings ``names`` (after the tag) of ``shard``: name, value, ms to live."""
        tag = self.shards[shard].keys.tag + ":"
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(tag + name)
            pipe.pttl(tag + name)
        read = pipe.execute() if names else []
        return [(name, text(value), str(max(ttl, 0)))
                for name, value, ttl in zip(names, read[::2], read[1::2], strict=True)
                if value is not None and ttl != -2]

    def copy_late(self, new: int, strings: Sequence[tuple[str, str, str]],
                  letters: Sequence[tuple[str, str, float]] = ()) -> None:
        """What an account left on an old shard when it moved there at an enqueue (its done
        markers and dead letters), or wrote there after it moved (a job that ran there settled
        late), and the markers that name no account (written before markers did): copied to
        shard ``new`` unless it holds them already."""
        keys = self.shards[new].keys
        tag = keys.tag + ":"
        fields = [(keys.dead.removeprefix(tag), job_id, letter) for job_id, letter, _ in letters]
        members = [(keys.dead_index.removeprefix(tag), job_id, repr(at))
                   for job_id, _, at in letters]
        if strings or letters:
            self.run("move_in", new, ["", "1", *_counted(fields), 0, *_counted(members),
                                      *_counted(strings)])

    def thaw(self, new: int, account: str) -> None:
        """Step 4: the reshard's pause on shard ``new`` gives way (a no-op when it did)."""
        shard = self.shards[new]
        field = f"a:{account}:*"
        pause = reshard_pause(self.client.hget(shard.keys.pauses, field))
        if pause is None:
            return
        saved = pause.get("saved")
        if isinstance(saved, str):  # the operator's own pause of the account, kept
            self.client.hset(shard.keys.pauses, field, saved)
        else:
            FairStore.resume(shard, decode_id(account), thaw=True)

    def _maybe_die(self, step: str) -> None:
        """The crash-safety tests' kill point (KILL_ENV)."""
        if self._kill_after and step == self._kill_step and \
                self.moved_accounts + 1 >= int(self._kill_after):
            os.kill(os.getpid(), signal.SIGKILL)


def text(value: str | bytes | None) -> str:
    """A value the client read (decoded already, but typed as either; "" for none)."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _counted(entries: Sequence[tuple[object, ...]]) -> list[object]:
    """A script's counted section: the count, then the entries' values in a row."""
    return [len(entries), *(value for entry in entries for value in entry)]
