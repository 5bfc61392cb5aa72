"""The Redis key layout of the fair store.

Every key shares one hash tag, so each Lua script touches a single Redis Cluster slot. Every key
is named here; a script receives in ``KEYS`` the global keys it touches and one key per queue
(its state key), and builds the rest under the same tag, so in the same slot (a script may
touch any key of its slot): a queue's other keys (``queue_keys`` in ``lib/keys.lua``), and the
string of a business key (:meth:`Keys.job_key`, ``key_of``), which the claim only learns from
the job it leases. Per-account state lives in hash fields and sorted-set
members rather than in per-account keys, which keeps the key set fixed. Account ids, queue
names and business keys are percent-encoded before they reach Redis: the encoded form uses only
``[A-Za-z0-9_.~%-]``, so it can never contain the ``|`` and space separators the scripts split
on, a brace that would change the hash tag, or a newline (see protocol.encode_id).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ...protocol import MAX_ID_LENGTH, NO_JOB_KEY, decode_id, encode_id
from .tags import shard_tag

__all__ = ["MAX_ID_LENGTH", "Keys", "QueueKeys", "decode_id", "encode_id", "encode_job_key",
           "in_queue_field", "is_account_field", "parse_in_queue_field", "queue_limit_field"]


def encode_job_key(job_key: str | None) -> str:
    """A business key as the scripts hold it (in a record, in its key string): encoded, or
    "-"."""
    return encode_id(job_key) if job_key else NO_JOB_KEY

def in_queue_field(queue: str, account: str | None) -> str:
    """The field of an account's limit (and bucket) in ``queue``, or of the queue's default
    limit for accounts (``account`` None); lib/limits.lua's ``in_queue_field`` builds the same
    from the encoded names."""
    return f"{IN_QUEUE_PREFIX}{encode_id(queue)}:{'*' if account is None else encode_id(account)}"


def queue_limit_field(queue: str) -> str:
    """The field of ``queue``'s shared limit (and of its bucket); claim.lua reads it with the
    store's default limit, in one HMGET."""
    return f"{QUEUE_LIMIT_PREFIX}{encode_id(queue)}"


def slow_down_field(account: str | None, queue: str) -> str:
    """The field in ``Keys.pauses`` of a provider's "slow down" of ``account`` in ``queue``, or
    of the whole ``queue`` (``account`` None); lib/rotation.lua's ``slow_down_field`` builds the
    same from the encoded names."""
    if account is None:
        return f"{QUEUE_SLOW_DOWN_PREFIX}{encode_id(queue)}"
    return f"{SLOW_DOWN_PREFIX}{encode_id(account)}:{encode_id(queue)}"


def is_slow_down_field(field: str) -> bool:
    """Whether a field of ``Keys.pauses`` is a provider's slow-down, not an operator's pause."""
    return field.startswith((SLOW_DOWN_PREFIX, QUEUE_SLOW_DOWN_PREFIX))


def is_account_field(field: str) -> bool:
    """Whether a field of the limits' hashes is an account's own limit across its queues (an
    encoded account), not the store's default, an in-queue limit or a queue's shared one."""
    return field != DEFAULT_LIMIT_FIELD and ":" not in field


def parse_in_queue_field(field: str) -> tuple[str, str | None] | None:
    """``(queue, account or None for the queue's default)`` of an in-queue field, decoded;
    None for a field of the store-wide scope (an encoded account, or ``*``)."""
    if not field.startswith(IN_QUEUE_PREFIX):
        return None
    queue, _, account = field[len(IN_QUEUE_PREFIX):].partition(":")
    return decode_id(queue), None if account == "*" else decode_id(account)


#: The store's global keys (Keys attributes), in the order a script receives those it touches.
GLOBAL_KEY_NAMES = ("records", "leases", "limits", "buckets", "queues", "stats", "dead",
                    "dead_index", "pauses", "workers", "worker_info", "instance",
                    "default_limit", "limit_config", "shard_count", "layout_readers",
                    "layout_seen", "quotas", "layout_format", "format_seen")
#: The field of Keys.limits that holds the store's default limit, packed: an encoded account
#: id never is "*" (encode_id escapes it).
DEFAULT_LIMIT_FIELD = "*"
#: The prefix of a limit's field (in Keys.limits, Keys.limit_config, Keys.buckets) that holds
#: an account's limit in one queue, or the queue's default: ``q:<queue>:<account>`` and
#: ``q:<queue>:*``, both encoded, so ``:`` and ``*`` occur in them only as separators.
IN_QUEUE_PREFIX = "q:"
#: The prefix of the field of a queue's shared limit (all its accounts together) and of its
#: bucket: ``Q:<queue>`` (queue_limit_field).
QUEUE_LIMIT_PREFIX = "Q:"
#: The prefixes of a provider's slow-down in Keys.pauses: ``s:<account>:<queue>`` holds an
#: account in one queue, ``S:<queue>`` a whole queue (slow_down_field).
SLOW_DOWN_PREFIX = "s:"
QUEUE_SLOW_DOWN_PREFIX = "S:"
QUEUE_KEY_NAMES = ("state", "ready", "deferred", "delayed", "running", "ndelayed", "deferrals",
                   "tags", "finish", "weight")
#: The keys of the layout before records: a store holding jobs in them must be
#: drained by the version that wrote them (see Keys.legacy_jobs and docs/deployment.md); its
#: idempotency records (marker JSON by key, done time by key, job id by key) are adopted into
#: key strings, and they and the leftovers that hold no job are deleted (store/writers/upgrade.py).
LEGACY_JOB_KEY = "meta"
LEGACY_IDEMPOTENCY_KEYS = ("markers", "done", "jobkeys")
LEGACY_LEFTOVER_KEYS = ("seq", "pending", "deliveries", "owners")
MAX_CACHED_QUEUES = 1024  # Keys.queue's made QueueKeys, by queue name


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one fair queue, in the order the scripts expect them. What the console
    counts (ready jobs per account, the oldest waiting, running since) is read off these and
    the job records when it asks; no script keeps a count for it."""

    state: str  # hash account -> r (in the rotation, tags) | p (deferred by its rate or
    #             window) | c (deferred at its concurrency cap) | o (paused by an operator; see
    #             Keys.pauses); the codes are states.STATE_CODES. An account with ready jobs
    #             has a state; one without has none (or keeps p/c/o until the claim finds it
    #             empty)
    ready: str  # the layout before per-account FIFOs (format 1): one sorted set, score 0,
    #             members "account|seq|job_id" (records.LegacyMember); moved into the FIFOs
    #             by the upgrade (upgrade_fifo.lua), adopted by the claim and the reaper, and
    #             counted beside the FIFOs by the readers until then
    deferred: str  # sorted set account -> time its limit lets it run again
    delayed: str  # sorted set job_id -> due time (eta, countdown, retry backoff)
    running: str  # hash account -> jobs leased and not settled (its concurrency cap)
    ndelayed: str  # hash account -> number of delayed jobs
    deferrals: str  # hash account -> why the claim deferred it and until when (records.Deferral)
    tags: str  # sorted set "stamp account" -> virtual start tag: the rotation (start-time fair
    #           queueing, claim.lua); the accounts whose state is r
    finish: str  # sorted set account -> virtual tag it left the rotation with when it ran out
    #             of ready jobs: it rejoins no earlier; trimmed by reap, emptied with the
    #             rotation (virtual time starts again at 0 when no account waits)
    weight: str  # in a sharded store: the summed weights of the accounts in the rotation (its
    #             runnable weight, which the claim returns; see join_rotation)

    @cached_property
    def keys(self) -> tuple[str, ...]:
        """What the scripts receive of the queue (KEYS after the global ones): its state key,
        from which ``queue_keys`` in lib/keys.lua builds the others, under the same hash tag. Each
        key is one more argument to pack and parse on every call: an enqueue passed 9 of them."""
        return (self.state,)

    def fifo(self, account: str) -> str:
        """Sorted set: one account's ready jobs in the queue (``account`` encoded, as the
        store's hashes name it), score 0, members ``"seq|job_id"`` (records.ReadyMember), so
        lex order is its FIFO: priority digit, then the microsecond the job became ready. Small
        enough for Redis's listpack encoding; the account's backlog is its ZCARD, and Redis
        drops it when it empties. The accounts with ready jobs are among ``state``'s fields."""
        return self.state.removesuffix("state") + "f:" + account

    @property
    def bell(self) -> str:
        """Sorted set: the queue's doorbell on this shard. Idle workers block on it (BZPOPMIN);
        a script that leaves work nobody claims adds one ring, so Redis wakes exactly one of
        them (lib/rotation.lua ``ring``; worker/doorbell.py)."""
        return self.state.removesuffix("state") + "bell"

    @property
    def clock(self) -> str:
        """Sorted set: the time keeper's doorbell on this shard: rung when a due time comes
        before every other one the queue had (a delayed job, a deferred account), so the keeper arms
        its timer for it (lib/rotation.lua ``call_keeper``)."""
        return self.state.removesuffix("state") + "clock"

    @property
    def keeper(self) -> str:
        """String, on the home shard: the token of the worker that keeps the queue's time (a
        lease renewed by its heartbeat: heartbeat.lua); the others arm no timer."""
        return self.state.removesuffix("state") + "keeper"


class Keys:
    """All key names of one shard of the store ``prefix``, e.g. ``{fairqueue}:records``: shard
    0, the store's home, under the prefix itself (see shards.py)."""

    def __init__(self, prefix: str = "fairqueue", shard: int = 0) -> None:
        if not prefix or any(c in prefix for c in "{}\n\r "):
            raise ValueError(
                f"fairqueue_key_prefix {prefix!r} must be non-empty, no braces or spaces")
        self.prefix = prefix
        self.shard = shard
        self.tag = "{" + shard_tag(prefix, shard) + "}"
        self._queues: dict[str, QueueKeys] = {}

    def _key(self, name: str) -> str:
        return f"{self.tag}:{name}"

    @cached_property
    def records(self) -> str:
        """Hash job_id -> the job's record: its header line and its Celery message
        (records.JobRecord), written at enqueue and once per transition."""
        return self._key("records")

    def job_key(self, stored_key: str) -> str:
        """The string of a business key (encoded, see encode_job_key): the idempotency marker
        of the job holding it (records.Marker), pending, started or done; a finished job's
        expires after ``fairqueue_job_retention``."""
        return self._key("key:" + stored_key)

    @cached_property
    def leases(self) -> str:
        """Sorted set job_id -> lease deadline (Redis server time)."""
        return self._key("leased")

    @cached_property
    def limits(self) -> str:
        """Hash account -> packed limit (see limits.AccountLimit.pack); field "*" is the
        store's default limit (DEFAULT_LIMIT_FIELD), which the claim reads; ``q:<queue>:<account>``
        an account's limit in one queue, ``q:<queue>:*`` the queue's default for accounts
        (in_queue_field); ``Q:<queue>`` the queue's shared limit (queue_limit_field)."""
        return self._key("limits")

    @cached_property
    def default_limit(self) -> str:
        """The store's default limit as configured (JSON): set by the first worker, or by an
        operator; every worker and the console use it."""
        return self._key("defaultlimit")

    @cached_property
    def limit_config(self) -> str:
        """Hash account -> the limit as configured (JSON), for display and window refresh;
        the in-queue fields as in :attr:`limits`."""
        return self._key("limitconf")

    @cached_property
    def buckets(self) -> str:
        """Hash account -> "tokens updated_at" of its token bucket; ``q:<queue>:<account>``
        its bucket in one queue (in_queue_field); ``Q:<queue>`` the bucket a queue's accounts
        share (queue_limit_field)."""
        return self._key("buckets")

    @cached_property
    def quotas(self) -> str:
        """Hash, at a sharded store's home: ``<queue>`` -> the queue's jobs running under its
        shared limit, ``<queue> <worker token>`` -> that worker's share of them, as it last
        reported (scripts/quota.lua)."""
        return self._key("quotas")

    @cached_property
    def queues(self) -> str:
        """Set of encoded names of queues that have ever held a fair job."""
        return self._key("queues")

    @cached_property
    def dead(self) -> str:
        """Hash job_id -> dead letter (JSON: reason, envelope, meta)."""
        return self._key("dead")

    @cached_property
    def dead_index(self) -> str:
        """Sorted set job_id -> time it was dead-lettered."""
        return self._key("deadindex")

    @cached_property
    def events(self) -> str:
        """Stream of state transitions, read by the recorder; written only once it exists."""
        return self._key("events")

    @cached_property
    def recorder_lock(self) -> str:
        """The lock of the recorder that leads (events are applied by one at a time)."""
        return self._key("recorder")

    @cached_property
    def recorders(self) -> str:
        """Sorted set of the live recorders: name -> when its registration ends."""
        return self._key("recorders")

    @cached_property
    def instance(self) -> str:
        """A random id written once: if it changes or vanishes, Redis lost the store's data."""
        return self._key("instance")

    @cached_property
    def stats(self) -> str:
        """Hash of counters: enqueued, claimed, deferred, requeued, reaped, dead."""
        return self._key("stats")

    @cached_property
    def pauses(self) -> str:
        """Hash of operator pauses -> JSON (by, at, reason): field ``q:<queue>`` pauses a queue,
        ``a:<account>:<queue>`` an account in one queue, ``a:<account>:*`` in every queue; and
        of a provider's slow-downs -> "ends cause job" (records.SlowDownHold): field
        ``s:<account>:<queue>`` holds an account in one queue, ``S:<queue>`` a queue."""
        return self._key("pauses")

    @cached_property
    def workers(self) -> str:
        """Sorted set worker id -> time its registration expires unless it beats again."""
        return self._key("workers")

    @cached_property
    def worker_info(self) -> str:
        """Hash worker id -> "heartbeat JSON" (name, queues, slots) of a live worker."""
        return self._key("workerinfo")

    @cached_property
    def shard_count(self) -> str:
        """The number of shards the store is laid out in (``fairqueue_shards``), on its home
        shard: written by the first worker or producer, changed only by a reshard, which holds
        ``"S>N"`` in it while it moves the store from S to N shards."""
        return self._key("shards")

    @cached_property
    def layout_readers(self) -> str:
        """Sorted set, on the home shard: process id -> the Redis time until which the worker
        or producer may go on with its last reading of ``shard_count`` (read_layout.lua)."""
        return self._key("layoutreaders")

    @cached_property
    def layout_format(self) -> str:
        """String, on the home shard: the format of the store's layout, ``"2"`` (each account's
        FIFO a key of its own, QueueKeys.fifo), ``"1"`` (one ready set a queue, written by
        an earlier version), or ``"1>2"`` while ``fairqueue upgrade`` converts it
        (store/shards/format_upgrade.py). A new store takes "2" at its first reading."""
        return self._key("format")

    @cached_property
    def format_seen(self) -> str:
        """Hash, on the home shard: process id -> the layout format it last read (beside
        ``layout_seen``); a process of an earlier version has none (format_upgrade.py)."""
        return self._key("formatseen")

    @cached_property
    def layout_seen(self) -> str:
        """Hash, on the home shard: process id -> ``"layout time name"``, what it last read of
        ``shard_count``, when, and who it is (a reshard waits for every live one to read the
        move; store/shards/fleet_wait.py)."""
        return self._key("layoutseen")

    @cached_property
    def moved(self) -> str:
        """Hash account -> ``"f n"`` (frozen here, moving to shard n) or ``"m n"`` (moved to
        shard n: this shard's enqueue sends the producer there), written by a reshard."""
        return self._key("moved")

    @cached_property
    def legacy_jobs(self) -> str:
        """The job meta hash of the layout before records: jobs in it are drained by the
        version that stored them (a worker of this one refuses to start while it holds any)."""
        return self._key(LEGACY_JOB_KEY)

    @cached_property
    def legacy(self) -> tuple[str, ...]:
        """The keys of the layout before records that upgrade.lua reads and deletes, in the
        order it receives them after its global keys: the job meta hash, the idempotency
        records, the leftovers."""
        return tuple(self._key(name) for name in (LEGACY_JOB_KEY, *LEGACY_IDEMPOTENCY_KEYS,
                                                  *LEGACY_LEFTOVER_KEYS))

    def queue(self, name: str) -> QueueKeys:
        """The keys of the fair queue called ``name`` (a Celery queue name); made once per
        name, as every enqueue and claim asks for them."""
        made = self._queues.get(name)
        if made is None:
            base = f"{self.tag}:queue:{encode_id(name)}"
            made = QueueKeys(*(f"{base}:{part}" for part in QUEUE_KEY_NAMES))
            if len(self._queues) >= MAX_CACHED_QUEUES:  # names from callers: keep it bounded
                self._queues.clear()
            self._queues[name] = made
        return made
