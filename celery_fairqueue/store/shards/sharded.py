"""The store as every worker and producer opens it: one FairStore per shard, and the routing.

It has as many shards as the store's home records, read and followed as a reshard moves the
store (layout.py): a store of one shard is its one FairStore's calls, as they are.

Each shard is a whole store under its own hash tag (keys.Keys, shards.py), so every script
still runs on one shard; an account lives on one shard, so its limits stay exact. This object
is the store's home shard (shard 0) as a FairStore, with the calls that span shards routed:
an account's calls to its shard, a job's to the shard that holds it (a lease carries its
shard's store; a lookup by task id asks each shard for the ids, scanning no jobs), what is
store-wide to the home (the worker registry, the store's S, the default limit as set, and a
queue's operator pause, which every shard keeps a copy of for its claim), and the readings of
the whole store summed over the shards. The dead letters and the console read the shards
themselves (dead_letters.py, merged.py).

The workers choose a shard to claim from by its runnable weight, the summed weights of its
accounts that can run now, which every claim returns (chooser.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ...errors import StoreUnavailableError
from ...limits import AccountLimit
from ...protocol import delivery_id
from ...settings import FairqueueSettings
from ..connection.connect import AnyClient
from ..connection.translate import operation
from ..formats.keys import Keys, encode_id
from ..formats.records import JobRecord
from ..writers.fleet import Beat, WorkerRegistration
from ..writers.jobs import AccountMoved, Claim, EnqueueOutcomeOrError, EnqueueResult
from ..writers.leases import Lease
from ..writers.operator import MAX_DELIVERY_LOOKUP, OperatorPause
from .chooser import ShardChooser
from .layout import Layout, LayoutReading
from .merged import summed
from .placement import account_shard
from .quota import SharedQuotas
from .shard import FairStore
from .sharded_claim import ShardedClaim, Shards

T = TypeVar("T")
logger = logging.getLogger("celery_fairqueue")
#: How soon a worker asks again while the store's layout waits for its upgrade (format_ready).
FORMAT_WAIT_SECONDS = 1.0


class ShardedStore(FairStore):
    """The store's shards (``shards``), routed; itself the home shard's FairStore."""

    def __init__(self, client: AnyClient, keys: Keys, settings: FairqueueSettings) -> None:
        super().__init__(client, keys, settings)
        self.shards: list[FairStore] = []
        self._job_shard: dict[str, int] = {}  # leased job id -> its shard (see beat)
        self.quotas = SharedQuotas(self)  # the queues' shared limits, at the home (quota.py)
        self.reading = LayoutReading(settings.shards_check_interval, settings.shards)
        self.layout_format = "2"  # until read (format_ready)
        self._told_format = False
        # until the store's layout is read: the setting's (layout.py)
        self._follow(Layout(settings.shards))

    # -- the store's layout (layout.py), and a reshard's move (reshard.py) ----------------------

    def check_shards(self) -> None:
        """Read the store's layout (every ``fairqueue_shards_check_interval``, or at once
        after a call met a moved account) and follow it: while a reshard moves the store from
        S to N shards, accounts are found by S and the moved ones' forwarding, and claims span
        N shards."""
        if not self.reading.due():
            return
        started = self.reading.started()
        held, layout_format = self.read_layout(self.reading.process_id, self.reading.name,
                                               self.settings.shards_check_interval)
        layout = Layout.parse(held)
        self._follow(layout)
        self._follow_format(layout_format)
        self.reading.done(started, layout)

    def _follow_format(self, layout_format: str) -> None:
        """Write as the store's layout format says (format_upgrade.py): at "1", as earlier
        versions did, for their workers; and claim only at "2" (``format_ready``)."""
        self.layout_format = layout_format
        for store in (self, *self.shards):
            store.set_format1(layout_format == "1")

    def _follow(self, layout: Layout) -> None:
        """Route by ``layout`` (S while it moves), claim from its widest number of shards."""
        self.shard_move = layout.move
        self._route = layout.count
        self._resize(layout.widest)

    def _resize(self, count: int) -> None:
        """Have ``count`` shards, each asked first by the chooser; the scripts' mode follows (a
        store of one shard takes the sharded mode as soon as a move to more is announced)."""
        if count != len(self.shards):
            self.shards = self.shards[:count] + [
                FairStore(self.client, Keys(self.keys.prefix, n), self.settings, home=self,
                          sharded=count > 1) for n in range(len(self.shards), count)]
            self._by_tag = {shard.keys.tag: n for n, shard in enumerate(self.shards)}
            for shard in self.shards:
                shard.set_format1(self.format1)
            self._chooser = ShardChooser(count)
        if self.sharded != (count > 1):
            for store in (self, *self.shards):
                store.set_sharded(count > 1)

    def _grow(self, count: int) -> None:
        """Have ``count`` shards at least: a call met an account that moved to a shard this
        process may not know yet. Not knowing of a move, it reads the store's layout at its
        next call."""
        if self.shard_move is None:
            self.reading.read_now()
        if count > len(self.shards):
            self._resize(count)

    def shard_at(self, n: int) -> FairStore:
        self._grow(n + 1)
        return self.shards[n]

    def shard_for(self, account: str) -> FairStore:
        shard = self.shards[account_shard(account, self._route)]
        if self.shard_move:  # moved already: forwarded by its old shard
            moved = str(self.client.hget(shard.keys.moved, encode_id(account)) or "")
            if moved.startswith("m "):
                self._grow(int(moved[2:]) + 1)
                return self.shards[int(moved[2:])]
        return shard

    def shard_of_key(self, key: str) -> int:
        """The shard a key of this store belongs to, by its hash tag."""
        return self._by_tag[key[:key.index("}") + 1]]

    # -- jobs ------------------------------------------------------------------------------

    def enqueue(self, *, account: str, **job: Any) -> EnqueueResult:
        """Store the job on its account's shard (which this process, should it claim, asks
        next: other processes are woken by the shard's doorbell); while a reshard moves the
        store, on its old shard, told where the account goes (enqueue.lua), or where the old
        shard says it went."""
        with operation("enqueue"):
            self.check_shards()
        shard = account_shard(account, self._route)
        target = account_shard(account, self.shard_move[1]) if self.shard_move else shard
        try:
            result = self.shards[shard].enqueue(account=account, **job,
                                                moving_to=target if target != shard else None)
        except AccountMoved as moved:  # (or moving while this process has not seen it yet)
            self._grow(moved.shard + 1)
            shard = moved.shard
            result = self.shards[shard].enqueue(account=account, **job)
        self._chooser.woken(shard)
        return result

    def enqueue_many(self, jobs: Sequence[dict[str, Any]]) -> list[EnqueueOutcomeOrError]:
        """Store jobs as :meth:`enqueue` does each, in batches of one round trip per shard
        (Jobs.enqueue_many); the jobs of an account a reshard moved are sent on to its new
        shard after the others, in their order."""
        with operation("enqueue"):
            self.check_shards()
        outcomes: list[EnqueueOutcomeOrError | None] = [None] * len(jobs)
        by_shard: dict[int, list[int]] = {}
        for n, job in enumerate(jobs):
            by_shard.setdefault(account_shard(job["account"], self._route), []).append(n)
        moved: dict[int, list[int]] = {}
        for shard, indexes in by_shard.items():
            sent = [dict(jobs[n]) for n in indexes]
            if self.shard_move:  # reshard: tell the old shard where each account goes
                for job in sent:
                    target = account_shard(job["account"], self.shard_move[1])
                    job["moving_to"] = target if target != shard else None
            for n, outcome in zip(indexes, FairStore.enqueue_many(self.shards[shard], sent),
                                  strict=True):
                if isinstance(outcome, AccountMoved):
                    self._grow(outcome.shard + 1)
                    moved.setdefault(outcome.shard, []).append(n)
                else:
                    outcomes[n] = outcome
            self._chooser.woken(shard)
        for shard, indexes in moved.items():
            sent = [jobs[n] for n in indexes]
            for n, outcome in zip(indexes, FairStore.enqueue_many(self.shards[shard], sent),
                                  strict=True):
                outcomes[n] = StoreUnavailableError(
                    "the account moved again during a reshard: not stored, try again"
                ) if isinstance(outcome, AccountMoved) else outcome
            self._chooser.woken(shard)
        done = [outcome for outcome in outcomes if outcome is not None]
        assert len(done) == len(jobs)
        return done

    def claim(self, queues: Sequence[str], want: int, token: str, default_limit: str,
              first: int = 0, acks: Sequence[Lease] = (), *, keeps_time: bool = True,
              tick: bool = False, grants: Sequence[int | None] = ()) -> Claim:
        """Lease up to ``want`` jobs from the shards the chooser names, in turn, and settle
        ``acks`` on their own shards (sharded_claim.py). ``tick`` with no ``want``: the time
        keeper's claim of nothing on each shard whose due time came (Jobs.claim). The grants
        of the queues' shared limits are its own to take (quota.py): ``grants`` is a shard's."""
        self.check_shards()
        if not self.format_ready():  # its acks, if any, are sent again (never dropped)
            return Claim([], next_due=FORMAT_WAIT_SECONDS, unsettled=list(acks))
        if len(self.shards) == 1:  # a store of one shard: its claim, as it is
            return self.shards[0].claim(queues, want, token, default_limit, first, acks,
                                        keeps_time=keeps_time, tick=tick)
        want = min(want, self.settings.claim_batch) if queues else 0
        spans = Shards(self.shards, self._chooser, self._by_tag, self.quotas)
        claim = ShardedClaim(spans, queues, token, default_limit, first, keeps_time).run(
            want, acks, tick)
        for lease in claim.leases:
            self._job_shard[lease.job_id] = self._by_tag[lease.store.keys.tag]
        return claim

    def format_ready(self) -> bool:
        """Whether this process may claim: the store's layout is at format 2. Until then (a
        store an earlier version wrote, its upgrade not run or not finished) a worker of
        this version claims nothing, and says why once (format_upgrade.py); it reads the format
        again meanwhile, at a call that has not just read it (``check_shards`` may have)."""
        if self.layout_format != "2" and self.reading.older_than(FORMAT_WAIT_SECONDS / 2):
            self.reading.read_now()
            self.check_shards()
        if self.layout_format == "2":
            return True
        if not self._told_format:
            self._told_format = True
            logger.warning(
                "fairqueue: the fair store's layout is at format %s (written by an "
                "earlier celery-fairqueue): this worker claims no job until `celery -A proj "
                "fairqueue upgrade` has converted it (docs/deployment.md, \"Upgrading the layout "
                "to format 2\")", self.layout_format)
        return False

    def forget_recording(self) -> None:
        """Every shard asks again whether a recorder listens (each has its own stream)."""
        super().forget_recording()
        for shard in self.shards:
            shard.forget_recording()

    def rescan(self) -> None:
        """The worker's poll: every shard believed empty is asked at its next claim (a ring
        may be lost)."""
        self._chooser.rescan()

    def woken(self, key: str) -> None:
        """A shard's doorbell rang (worker/doorbell.py): ask it next."""
        self._chooser.woken(self.shard_of_key(key))

    def bury(self, job_id: str, reason: str, record: dict[str, Any] | None = None) -> None:
        account = (record or {}).get("account")
        shard = self.shard_for(str(account)) if account is not None else self
        FairStore.bury(shard, job_id, reason, record)

    def reap(self, batch: int = 500) -> int:
        self.check_shards()  # each call that places a ready job writes the store's format
        return sum(FairStore.reap(shard, batch) for shard in self.shards)

    # -- the fleet -------------------------------------------------------------------------

    def beat(self, worker_id: str, registration: WorkerRegistration | None,
             job_ids: Sequence[str], *, keeping: bool = True) -> Beat:
        """The registration and the queues' time keepers renewed at the home shard, each
        leased job's lease on its own (one of unknown shard, on every shard: it is lost where
        none holds it)."""
        known = {job_id: self._job_shard[job_id] for job_id in job_ids
                 if job_id in self._job_shard}
        self._job_shard = known  # the jobs no longer held are forgotten
        self.quotas.still_held(job_ids)
        unknown = [job_id for job_id in job_ids if job_id not in known]
        lost_everywhere: set[str] | None = None
        lost: list[str] = []
        instances: list[str] = []
        live = 0
        keeps: list[str] = []
        offset = 0.0
        for n, shard in enumerate(self.shards):
            mine = [job_id for job_id, at in known.items() if at == n]
            beat = shard.beat(worker_id, registration if n == 0 else None, mine + unknown,
                              keeping=keeping)
            keeps += beat.keeps
            offset = beat.clock_offset if n == 0 else offset  # the home's clock keeps the time
            lost += [job_id for job_id in beat.lost if job_id in known]
            missing = set(beat.lost) & set(unknown)
            lost_everywhere = missing if lost_everywhere is None else lost_everywhere & missing
            instances.append(beat.instance)
            live = live or beat.live_workers
        return Beat(lost=lost + sorted(lost_everywhere or ()), instance=",".join(instances),
                    live_workers=live, keeps=keeps, clock_offset=offset)

    def instance(self) -> str:
        """The shards' instance ids: one of them new means that shard lost its data."""
        return ",".join(FairStore.instance(shard) for shard in self.shards)

    # -- the operator ----------------------------------------------------------------------

    def set_default_limit(self, limit: AccountLimit, *, only_if_unset: bool = False
                          ) -> AccountLimit:
        """Set at the home shard, then copied to every other shard's claim."""
        self.check_shards()
        held = FairStore.set_default_limit(self, limit, only_if_unset=only_if_unset)
        for shard in self.shards[1:]:
            shard.set_default_limit(held)
        return held

    def _on_account_shard(self, account: str, call: Callable[[FairStore], T]) -> T:
        """``call`` on the shard of ``account``; on the shard it moved to when the one this
        process found says a reshard moved it there (it has not re-read the store's shards
        yet). While the account moves, its shard refuses (AccountMovingError)."""
        try:
            return call(self.shard_for(account))
        except AccountMoved as moved:
            self._grow(moved.shard + 1)
            return call(self.shards[moved.shard])

    def set_limit(self, account: str, limit: AccountLimit, queue: str | None = None) -> None:
        self.check_shards()
        self._chooser.forget()
        self._on_account_shard(account, lambda shard: shard.set_limit(account, limit, queue))

    def clear_limit(self, account: str, queue: str | None = None) -> None:
        self.check_shards()
        self._chooser.forget()
        self._on_account_shard(account, lambda shard: shard.clear_limit(account, queue))

    def get_limit(self, account: str, queue: str | None = None) -> AccountLimit | None:
        return self.shard_for(account).get_limit(account, queue)

    def set_queue_default_limit(self, queue: str, limit: AccountLimit | None) -> None:
        """On every shard: each shard's claim reads its own copy."""
        for shard in self.shards:
            FairStore.set_queue_default_limit(shard, queue, limit)

    def set_queue_limit(self, queue: str, limit: AccountLimit | None) -> None:
        """At the home, which grants its jobs (quota.py), then a copy on every other shard,
        by which their claims know that it is set."""
        FairStore.set_queue_limit(self, queue, limit)
        for shard in self.shards[1:]:
            FairStore.set_queue_limit(shard, queue, limit)

    def limits(self) -> Iterator[tuple[str, AccountLimit]]:
        for shard in self.shards:
            yield from FairStore.limits(shard)

    def limits_in_queues(self) -> Iterator[tuple[str, str | None, AccountLimit]]:
        """The accounts' limits in a queue from every shard; the queues' defaults (every shard
        holds a copy) from the home."""
        for n, shard in enumerate(self.shards):
            yield from (row for row in FairStore.limits_in_queues(shard) if row[1] or n == 0)

    def refresh_windows(self) -> int:
        return sum(FairStore.refresh_windows(shard) for shard in self.shards)

    def task_shard(self, task_id: str) -> FairStore | None:
        """The shard that holds the deliveries of a Celery task (all of them on its account's),
        or None: each page of delivery ids (see Operator.deliveries_of) asked of every shard
        in one round trip, scanning no jobs."""
        pages = ([delivery_id(task_id, n) for n in range(start, start + 64)]
                 for start in range(0, MAX_DELIVERY_LOOKUP, 64))
        for ids in itertools.chain([[task_id]] if ":" in task_id else [], pages):
            pipe = self.client.pipeline(transaction=False)
            for shard in self.shards:
                pipe.hmget(shard.keys.records, ids)
            for shard, found in zip(self.shards, pipe.execute(), strict=True):
                if any(found):
                    return shard
        return None

    def deliveries_of(self, task_id: str) -> Iterator[tuple[str, str]]:
        shard = self.task_shard(task_id)
        if shard is not None:
            yield from shard.deliveries_of(task_id)

    def cancel(self, task_id: str) -> list[str]:
        self.check_shards()
        shard = self.task_shard(task_id)
        return shard.cancel(task_id) if shard is not None else []

    def run_now(self, task_id: str) -> list[str]:
        self.check_shards()
        self._chooser.forget()
        shard = self.task_shard(task_id)
        return shard.run_now(task_id) if shard is not None else []

    def purge(self, queues: Sequence[str] | None = None, batch: int = 1000,
              on_taken: Callable[[list[str]], None] | None = None) -> int:
        self.check_shards()
        return sum(FairStore.purge(shard, queues, batch, on_taken) for shard in self.shards)

    def pause(self, account: str | None = None, queue: str | None = None, *, by: str = "",
              reason: str = "") -> OperatorPause:
        """An account's pause on its shard; a queue's at the home shard, then copied to the
        other shards (each claim reads its own shard's)."""
        if account is not None:
            return self._on_account_shard(account, lambda shard: shard.pause(
                account, queue, by=by, reason=reason))
        held = FairStore.pause(self, None, queue, by=by, reason=reason)
        for shard in self.shards[1:]:
            shard.pause(None, queue, by=held.by, reason=held.reason)
        return held

    def resume(self, account: str | None = None, queue: str | None = None, *,
               thaw: bool = False) -> bool:
        self.check_shards()
        self._chooser.forget()
        if account is not None:
            return self._on_account_shard(account, lambda shard: shard.resume(
                account, queue, thaw=thaw))
        existed = FairStore.resume(self, None, queue)
        for shard in self.shards[1:]:
            shard.resume(None, queue)
        return existed

    def pauses(self, limit: int = 10_000) -> list[OperatorPause]:
        """The home shard's pauses and the accounts' pauses of the other shards."""
        found = FairStore.pauses(self, limit)
        for shard in self.shards[1:]:
            found += [pause for pause in FairStore.pauses(shard, limit)
                      if pause.account is not None]
        return sorted(found, key=lambda p: (p.at, p.queue or "", p.account or ""))[:limit]

    # -- readings of the whole store -------------------------------------------------------

    def known_queues(self) -> list[str]:
        return sorted({q for shard in self.shards for q in FairStore.known_queues(shard)})

    def counts(self, queue: str) -> dict[str, int]:
        return summed(FairStore.counts(shard, queue) for shard in self.shards)

    def records(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        found: list[JobRecord | None] = [None] * len(job_ids)
        for shard in self.shards:
            for n, record in enumerate(FairStore.records(shard, job_ids)):
                found[n] = found[n] or record
        return found

    def leased(self) -> list[tuple[str, JobRecord]]:
        return [pair for shard in self.shards for pair in FairStore.leased(shard)]

    def stats(self) -> dict[str, int]:
        return summed(FairStore.stats(shard) for shard in self.shards)

    def clear(self) -> int:
        return sum(FairStore.clear(shard) for shard in self.shards)
