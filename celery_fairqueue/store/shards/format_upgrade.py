"""Upgrading a live store to layout format 2: each account's ready jobs in a key of its own.

Format 1 (every earlier version) kept a queue's ready jobs in one sorted set, members
``"account|seq|job_id"``; format 2 keeps each account's in its own small sorted set
(``QueueKeys.fifo``), a listpack, members ``"seq|job_id"``, and a pending job's business-key
marker short (``"p account|job_id"``; records.Marker reads both forms, so markers are not
rewritten). Everything else (records, rotations, leases, limits) is the same in both.

During a rolling deploy, on a store at "1": producers of this version write as format 1 did,
so the old workers run their jobs; workers of this version claim nothing (they say so once).
``fairqueue upgrade`` then, while everything runs:

1. waits until no process of an earlier version reads the store (each records its readings
   of the layout at the home, read_layout.lua; an earlier version records no format), and
   names them if they stay past ``timeout``: stop them first;
2. sets "1>2" and waits until every live process has read it (fleet_wait.py), and a margin for
   the calls under way: from then on nothing adds to a format-1 ready set;
3. converts each shard's queues in batches of ``batch`` members a script call
   (upgrade_fifo.lua), each a few milliseconds, so Redis never stalls;
4. sets "2": the workers of this version claim from their next call on.

Killed at any point, a rerun takes it up where it stopped (each batch is atomic, and takes what
it converted out of the old set). See docs/deployment.md, "Upgrading the layout to format 2".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import FairqueueError
from ...settings import FairqueueSettings
from ..formats.keys import Keys, decode_id
from .fleet_wait import Reading, wait_for_fleet
from .reshard import SETTLE_MARGIN, read_layout, text
from .shard import FairStore

#: Members a conversion call moves: about 2 ms of Redis each (bench.upgrade measures it).
BATCH = 500


class UpgradeError(FairqueueError):
    """The upgrade cannot run now (old processes still read the store, a reshard is under way)."""


@dataclass(frozen=True)
class UpgradeReport:
    jobs: int  # ready jobs converted by this run
    queues: int  # queues converted, on every shard
    seconds: float
    done_before: bool = False  # the store was at format 2 already


class FormatUpgrader:
    """Upgrades the store of ``settings`` to format 2; ``say`` reports progress."""

    def __init__(self, settings: FairqueueSettings, *, settle: float | None = None,
                 timeout: float | None = None, batch: int = BATCH,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.home = FairStore.from_settings(settings)
        self.client = self.home.client
        self.keys = Keys(settings.key_prefix)
        self.batch = batch
        self.say = say
        self.settle = SETTLE_MARGIN if settle is None else settle
        self.timeout = (2 * settings.shards_check_interval + SETTLE_MARGIN if timeout is None
                        else timeout)
        self.settings = settings

    def run(self) -> UpgradeReport:
        started = time.monotonic()
        # read as a worker does: a store no process of this version read yet takes its format now
        _, held = self.home.read_layout(f"upgrade:{os.getpid()}", "fairqueue upgrade", 1.0)
        if held == "2":
            return UpgradeReport(0, 0, 0.0, done_before=True)
        shards, moving = read_layout(self.client, self.keys)
        if moving is not None:
            raise UpgradeError(f"a reshard from {shards} to {moving} shards is under way: "
                               "finish it with the version that began it first")
        if held == "1":
            self._wait("of an earlier version to stop reading the store",
                       lambda reading: reading.layout_format is None,
                       "of an earlier version still read the store: stop them, then run the "
                       "upgrade again")
            held = self._set_format("1", "1>2")
            if held == "1":
                raise UpgradeError("a worker or producer of an earlier version read the store "
                                   "meanwhile: stop it, then run the upgrade again")
            self.say("the store is at format 1>2: workers of this version wait for the "
                     "conversion")
        self._wait("to read format '1>2'",
                   lambda reading: reading.layout_format not in ("1>2", "2"),
                   "did not read '1>2' yet: run the upgrade again once they have (each reads "
                   "the store every fairqueue_shards_check_interval), or stop them")
        jobs = queues = 0
        for shard in range(shards):
            store = FairStore(self.client, Keys(self.keys.prefix, shard), self.settings)
            for name in sorted(text(raw) for raw in self.client.smembers(store.keys.queues)):
                jobs += self._convert(store, decode_id(name))
                queues += 1
        self._set_format("1>2", "2")  # (or another upgrade run at once set it)
        self.say(f"the store is at format 2: {jobs} ready jobs of {queues} queue(s) converted")
        return UpgradeReport(jobs, queues, time.monotonic() - started)

    def _wait(self, waiting: str, behind_of: Callable[[Reading], bool], refusal: str) -> None:
        behind = wait_for_fleet(self.client, self.keys, "", timeout=self.timeout,
                                margin=self.settle, server_time=self.home.server_time,
                                say=self.say, behind_of=behind_of, waiting=waiting)
        if behind:
            raise UpgradeError(f"{len(behind)} worker(s) or producer(s) {refusal}: "
                               f"{'; '.join(behind[:20])}")

    def _set_format(self, held: str, new: str) -> str:
        """``held`` -> ``new`` in one step (set_format.lua); the format the store holds then."""
        return str(self.home._run("set_format", [], [held, new]))

    def _convert(self, store: FairStore, queue: str) -> int:
        """Convert one queue's format-1 ready set on ``store``, a batch a call; the members it
        took (a member whose job left meanwhile is dropped)."""
        left = start = int(self.client.zcard(store.keys.queue(queue).ready))
        while left:
            left = int(store._run("upgrade_fifo", [store.keys.queue(queue)], [self.batch]))
        return start


def describe(report: UpgradeReport) -> str:
    """The CLIs' line about an upgrade."""
    if report.done_before:
        return "the store is at format 2 already: nothing to do"
    return (f"upgraded the store to format 2: {report.jobs} ready jobs of {report.queues} "
            f"queue(s) converted in {report.seconds:.1f} s")
