"""``celery -A proj fairqueue reshard --to N``: move a store of S shards to N > S, live.

The store's home records its number of shards (``Keys.shard_count``); a reshard writes
``"S>N"`` there first, and ``N`` once every account that must move has moved. Every worker and
producer reads it and follows (layout.py, sharded.py): while it reads ``"S>N"``, it finds an
account by S, follows the forwarding of one that moved (the old shard's enqueue answers "moved
to n") and claims from all N shards; a store of one shard takes the sharded scripts' mode. No
account moves before every process that may still act on the old layout has read the move
(fleet_wait.py): the reshard says which did not, after ``--timeout``.

Growing only ever moves an account from an old shard to a new one (jump hash, shards.py), so the
old shards are drained one after the other, a chunk of accounts at a time (account_move.py says
how one account moves and why no job is lost, duplicated, or run while half-moved). Everything
is idempotent: killed at any point, a rerun finishes the move; a rerun of a finished one does
nothing. What a move costs is a few round trips per account and a SCAN of the old shards' key
strings (the business-key markers, which name their account) per chunk: see
docs/deployment.md ("Resharding").
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from ...errors import FairqueueError
from ...settings import FairqueueSettings
from ..connection.connect import AnyClient
from ..formats.dead_letter import DeadLetter
from ..formats.keys import (
    DEFAULT_LIMIT_FIELD,
    IN_QUEUE_PREFIX,
    QUEUE_LIMIT_PREFIX,
    Keys,
    decode_id,
    encode_id,
    is_account_field,
    parse_in_queue_field,
)
from ..formats.records import JobRecord, marker_account
from .account_move import AccountMover, text
from .fleet_wait import wait_for_fleet
from .placement import account_shard
from .shard import FairStore

#: Accounts frozen, drained and moved together: their jobs wait while their chunk moves.
CHUNK = 500
#: Waited once the fleet has read the move, before any account moves (calls already under way).
SETTLE_MARGIN = 5.0
#: How long the old shards keep forwarding the accounts that moved, after the move (at least):
#: a process that has not re-read the store's number of shards yet still asks them.
FORWARD_SECONDS = 3600.0
SCAN_COUNT = 1000


class ReshardError(FairqueueError):
    """The reshard cannot be made (shrinking, another one under way)."""


@dataclass(frozen=True)
class ReshardReport:
    old: int
    new: int
    accounts: int  # accounts moved by this run
    jobs: int  # waiting jobs moved by this run
    seconds: float
    done_before: bool = False  # the store had N shards already: nothing to do


def read_layout(client: AnyClient, home: Keys) -> tuple[int, int | None]:
    """The store's (S, N) while a move runs, else (S, None)."""
    held = text(client.get(home.shard_count)) or "1"
    old, _, new = held.partition(">")
    return int(old), int(new) if new else None


class Resharder:
    """Moves the store of ``settings`` to ``to`` shards; ``say`` reports progress."""

    def __init__(self, settings: FairqueueSettings, to: int, *, settle: float | None = None,
                 timeout: float | None = None,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.to = to
        self.say = say
        self.settings = dataclasses.replace(settings, shards=max(to, settings.shards, 2))
        self.home = FairStore.from_settings(self.settings)
        self.client = self.home.client
        self.keys = Keys(settings.key_prefix)
        self.settle = SETTLE_MARGIN if settle is None else settle
        self.timeout = (2 * settings.shards_check_interval + SETTLE_MARGIN if timeout is None
                        else timeout)

    def run(self) -> ReshardReport:
        started = time.monotonic()
        old, moving = read_layout(self.client, self.keys)
        if moving is None and old == self.to:
            return ReshardReport(old, self.to, 0, 0, 0.0, done_before=True)
        if moving is not None and moving != self.to:
            raise ReshardError(f"a reshard from {old} to {moving} shards is under way: finish "
                               f"it first (`fairqueue reshard --to {moving}`)")
        _, layout_format = self.home.read_layout(f"reshard:{os.getpid()}", "fairqueue reshard",
                                                 1.0)
        if layout_format != "2":
            raise ReshardError("the store's layout is not at format 2 yet: run `fairqueue "
                               "upgrade` first (docs/deployment.md)")
        if self.to < old:
            raise ReshardError(f"the store has {old} shards: a reshard only adds shards (to "
                               f"shrink it, drain it into a new store of {self.to})")
        shards = [FairStore(self.client, Keys(self.keys.prefix, n), self.settings)
                  for n in range(self.to)]
        mover = AccountMover(shards)
        self._announce(old, mover)
        self._copy_store_wide(shards, old)
        for shard in range(old):
            while self._drain(mover, old, shard):
                pass  # again: accounts frozen by their enqueues while it ran
            self._thaw_moved(mover, shard)
        self._finish(old)
        return ReshardReport(old, self.to, mover.moved_accounts, mover.moved_jobs,
                             time.monotonic() - started)

    def _announce(self, old: int, mover: AccountMover) -> None:
        """``"S>N"`` in the store's home, then wait until no worker or producer may act on the
        old layout (fleet_wait.py). The old shards' forwarding of an earlier move is kept for
        the whole of this one. A store of one shard kept no runnable weights: they are
        counted once every process runs the sharded scripts."""
        layout = f"{old}>{self.to}"
        self.client.set(self.keys.shard_count, layout)
        for shard in range(old):
            self.client.persist(Keys(self.keys.prefix, shard).moved)
        self.say(f"moving from {old} to {self.to} shards")
        behind = wait_for_fleet(self.client, self.keys, layout, timeout=self.timeout,
                                margin=self.settle, server_time=self.home.server_time,
                                say=self.say)
        if behind:
            raise ReshardError(
                f"{len(behind)} worker(s) or producer(s) did not read the move within "
                f"{self.timeout:.0f} s, so no account moved: {'; '.join(behind[:20])}. Run the "
                f"reshard again once they have (each reads the store's layout every "
                f"fairqueue_shards_check_interval; a longer one needs a longer --timeout), "
                f"or stop them.")
        if old == 1:
            mover.weigh(0)

    def _copy_store_wide(self, shards: list[FairStore], old: int) -> None:
        """What every shard keeps a copy of, to the new shards: the store's default limit, the
        queues' defaults and shared limits (for their claims; the home keeps a shared limit's
        bucket and counts, quota.py) and the queues' operator pauses; and the home's
        event stream and its consumer groups, so that a recorder misses no event of a job on a
        new shard (the scripts record only into a stream that exists)."""
        home = shards[0].keys
        default = self.client.hget(home.limits, DEFAULT_LIMIT_FIELD)
        # the queues' defaults for their accounts, packed and as configured
        queue_defaults = {key: {text(name): text(raw) for name, raw in self.client.hscan_iter(
                                    getattr(home, key), match=IN_QUEUE_PREFIX + "*",
                                    count=SCAN_COUNT)
                                if (scope := parse_in_queue_field(text(name))) and scope[1] is None}
                          for key in ("limits", "limit_config")}
        for key, fields in queue_defaults.items():
            fields.update({text(name): text(raw) for name, raw in self.client.hscan_iter(
                getattr(home, key), match=QUEUE_LIMIT_PREFIX + "*", count=SCAN_COUNT)})
        pauses = {name: raw for name, raw in self._hash(home.pauses).items()
                  if name.startswith("q:")}
        groups = [text(group["name"]) for group in self.client.xinfo_groups(home.events)
                  ] if self.client.exists(home.events) else []
        for shard in shards[old:]:
            if default is not None:
                self.client.hset(shard.keys.limits, DEFAULT_LIMIT_FIELD, default)
            for key, fields in queue_defaults.items():
                if fields:
                    self.client.hset(getattr(shard.keys, key), mapping=fields)  # type: ignore[arg-type]
            if pauses:
                self.client.hset(shard.keys.pauses, mapping=pauses)  # type: ignore[arg-type]
            for group in groups:
                try:
                    self.client.xgroup_create(shard.keys.events, group, id="0", mkstream=True)
                except FairqueueError as exc:
                    if "BUSYGROUP" not in str(exc):  # made by the run this one finishes: fine
                        raise

    def _finish(self, old: int) -> None:
        """Every account moved: the store has N shards. The old shards keep forwarding the
        moved accounts for a while (FORWARD_SECONDS, or ten check intervals)."""
        self.client.set(self.keys.shard_count, str(self.to))
        keep_ms = int(max(FORWARD_SECONDS, 10 * self.settings.shards_check_interval) * 1000)
        for shard in range(old):
            self.client.pexpire(Keys(self.keys.prefix, shard).moved, keep_ms)

    def _drain(self, mover: AccountMover, old: int, shard: int) -> int:
        """One pass over old shard ``shard``: move every account it holds anything of whose new
        shard is another, a chunk at a time; returns how many it found."""
        store = mover.shards[shard]
        markers, orphans = self._markers(store)
        moved = {account: int(state[2:]) for account, state
                 in self._hash(store.keys.moved).items() if state.startswith("m ")}
        targets = {account: to for account in self._accounts(store) | markers.keys()
                   if account not in moved
                   and (to := account_shard(decode_id(account), self.to)) != shard}
        letters = self._letters(store, targets.keys() | moved.keys())
        for account, to in moved.items():  # moved at an enqueue, or its last jobs ran late
            mover.copy_late(to, mover.read_strings(shard, markers.get(account, [])),
                            letters.get(account, []))
            self._drop_letters(store, letters.get(account, []))
        accounts = sorted(targets)
        for start in range(0, len(accounts), CHUNK):
            chunk = {account: targets[account] for account in accounts[start:start + CHUNK]}
            mover.freeze(shard, chunk)
            self._wait_unleased(store, chunk)
            markers, orphans = self._markers(store)  # with those its last jobs wrote
            delayed = self._delayed(store)
            for account, to in chunk.items():
                mover.move(shard, to, account, delayed, markers.get(account, ()),
                           letters.get(account, ()))
            self.say(f"shard {shard}: {min(start + CHUNK, len(accounts))} of {len(accounts)} "
                     f"accounts moved")
        late = [entry for entry in mover.read_strings(shard, orphans) if entry[2] != "0"]
        for to in range(old, self.to):
            mover.copy_late(to, late)
        return len(accounts)

    def _accounts(self, store: FairStore) -> set[str]:
        """The encoded accounts ``store`` holds anything of but markers (jobs, limits, buckets,
        pauses, a move begun or done)."""
        keys = store.keys
        found: set[str] = set()
        for _, record in self.client.hscan_iter(keys.records, count=SCAN_COUNT):
            found.add(encode_id(JobRecord.parse(record).account))
        for key in (keys.limits, keys.limit_config, keys.buckets, keys.moved):
            for name, _ in self.client.hscan_iter(key, count=SCAN_COUNT):
                scope = parse_in_queue_field(name)
                if is_account_field(name):
                    found.add(name)
                elif scope is not None and scope[1] is not None:  # its limit in one queue
                    found.add(encode_id(scope[1]))
        for name, _ in self.client.hscan_iter(keys.pauses, count=SCAN_COUNT):
            if name.startswith("a:"):
                found.add(name.split(":")[1])
        return found

    def _drop_letters(self, store: FairStore, letters: list[tuple[str, str, float]]) -> None:
        """Dead letters copied to an account's new shard, off its old one."""
        if letters:
            self.client.hdel(store.keys.dead, *(job_id for job_id, _, _ in letters))
            self.client.zrem(store.keys.dead_index, *(job_id for job_id, _, _ in letters))

    def _letters(self, store: FairStore, targets: Collection[str]
                 ) -> dict[str, list[tuple[str, str, float]]]:
        """The dead letters of the encoded accounts ``targets``, by account."""
        found: dict[str, list[tuple[str, str, float]]] = {}
        for job_id, raw in self.client.hscan_iter(store.keys.dead, count=SCAN_COUNT):
            account = DeadLetter.from_json(raw).account
            if account is not None and encode_id(account) in targets:
                at = self.client.zscore(store.keys.dead_index, job_id) or 0.0
                found.setdefault(encode_id(account), []).append((job_id, raw, at))
        return found

    def _wait_unleased(self, store: FairStore, chunk: dict[str, int]) -> None:
        """Until no job of the frozen ``chunk`` is leased on ``store``: they settle there."""
        while True:
            running = {encode_id(job.account) for _, job in store.leased()} & chunk.keys()
            if not running:
                return
            time.sleep(0.05)

    def _markers(self, store: FairStore) -> tuple[dict[str, list[str]], list[str]]:
        """The key strings (business-key markers) of ``store``, by the encoded account each
        names, and those that name none (written before markers did: their done ones are
        copied to every new shard)."""
        tag = store.keys.tag + ":"
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", tag) + "key:*"
        names = list(self.client.scan_at(store.keys.records, match=pattern, count=SCAN_COUNT))
        mine: dict[str, list[str]] = {}
        orphans: list[str] = []
        for start in range(0, len(names), SCAN_COUNT):
            part = names[start:start + SCAN_COUNT]
            for name, raw in zip(part, self.client.mget(part), strict=True):
                account = marker_account(text(raw))
                if account is not None:
                    mine.setdefault(account, []).append(name.removeprefix(tag))
                elif raw is not None:
                    orphans.append(name.removeprefix(tag))
        return mine, orphans

    def _delayed(self, store: FairStore) -> dict[str, tuple[str, float]]:
        """Every delayed job of ``store``: job id -> (its account, encoded; its due time)."""
        due: dict[str, float] = {}
        for queue in store.known_queues():
            delayed: list[tuple[str, float]] = self.client.zrange(  # type: ignore[assignment]
                store.keys.queue(queue).delayed, 0, -1, withscores=True)
            due.update(delayed)
        ids = list(due)
        found: dict[str, tuple[str, float]] = {}
        for start in range(0, len(ids), SCAN_COUNT):
            part = ids[start:start + SCAN_COUNT]
            for job_id, record in zip(part, self.client.hmget(store.keys.records, part),
                                      strict=True):
                if record is not None:
                    found[job_id] = (encode_id(JobRecord.parse(record).account), due[job_id])
        return found

    def _thaw_moved(self, mover: AccountMover, shard: int) -> None:
        """Thaw on its new shard every account marked moved on ``shard`` (a rerun after a kill
        between a move's steps 3 and 4 finds one still paused there)."""
        for account, state in self._hash(mover.shards[shard].keys.moved).items():
            if state.startswith("m "):
                mover.thaw(int(state[2:]), account)


    def _hash(self, key: str) -> dict[str, str]:
        return {text(name): text(value) for name, value in self.client.hgetall(key).items()}


def describe(report: ReshardReport) -> Iterable[str]:
    """The CLI's lines about a reshard."""
    if report.done_before:
        yield f"the store has {report.new} shards already: nothing to move"
        return
    yield (f"moved the store from {report.old} to {report.new} shards: {report.accounts} "
           f"accounts and {report.jobs} waiting jobs in {report.seconds:.1f} s")
