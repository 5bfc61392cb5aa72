"""The ``fairqueue_*`` settings: declared once, with type, default and meaning; validated early.

They are read from ``app.conf`` (Django: ``CELERY_FAIRQUEUE_*`` through the ``CELERY`` namespace),
e.g. ``app.conf.fairqueue_lease_seconds = 120``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

from celery import Celery

from .errors import ConfigurationError, InvalidLimitError
from .limits import AccountLimit

DAY = 86400.0
#: The statuses of finished jobs that fairqueue_record_retention keeps for a time.
RETAINED_STATUSES = ("succeeded", "revoked", "failed", "dead")
#: Most shards a store may have (store/formats/tags.py spreads up to this many evenly over the
#: slots).
MAX_SHARDS = 1024


def _setting(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


class Options(dict[str, Any]):
    """A read-only dict setting (``fairqueue_redis_transport_options``): the settings are frozen
    and shared, and a dataclass default must be hashable. Shown as a plain dict."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True, default=repr))

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle without item assignment
        return (Options, (dict(self),))

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("fairqueue settings are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    update = pop = popitem = clear = setdefault = _read_only


@dataclass(frozen=True)
class FairqueueSettings:
    redis_url: str | None = _setting(
        None, "Redis of the fair store (redis://, rediss://, unix://, sentinel://, or "
        "redis+cluster:// for Redis Cluster); default: the broker URL when the broker is Redis.")
    redis_transport_options: Mapping[str, Any] = _setting(
        Options(), "Options of a sentinel:// fairqueue_redis_url, as in Celery's "
        "broker_transport_options: master_name (required), sentinel_kwargs (e.g. the sentinels' "
        "password), min_other_sentinels, and the primary's username, password and ssl/ssl_*; "
        "of a redis+cluster:// one, the nodes' username, password and ssl/ssl_*.")
    wait_replicas: int = _setting(
        0, "Replicas that must have each enqueued job before .delay() returns (Redis WAIT, in "
        "producers for up to an eighth of fairqueue_enqueue_timeout; fewer raise "
        "StoreUnavailableError), so an acknowledged job survives a failover. 0: do not wait.")
    key_prefix: str = _setting("fairqueue", "Prefix (and Redis Cluster hash tag) of every key.")
    shards: int = _setting(
        1, "Shards of the store: each account lives on one (a stable hash of its id), each "
        "shard under its own hash tag, so a Redis Cluster spreads them over its primaries. "
        "1: one hash tag, one Redis core. Sets the number of a new store only: every worker "
        "and producer follows the store's, which `celery -A proj fairqueue reshard --to N` "
        "changes with no restart.")
    shards_check_interval: float = _setting(
        60.0, "How often a worker or producer re-reads the store's number of shards, and "
        "follows a reshard (one that has not read a move yet is waited for before any account "
        "moves).")
    lease_seconds: float = _setting(
        60.0, "How long a claimed job stays leased without a heartbeat before it is reaped.")
    heartbeat_interval: float = _setting(
        10.0, "How often a worker extends the leases of the jobs it runs.")
    reap_interval: float = _setting(
        5.0, "How often the workers, together, return expired leases to ready (each of N live "
        "workers every N intervals).")
    poll_interval: float = _setting(
        30.0, "How often an idle worker asks the store for work anyway: the store rings one "
        "idle worker's doorbell the moment work appears, so this is the fallback.")
    claim_batch: int = _setting(64, "Most jobs one claim call leases.")
    enqueue_batch: int = _setting(
        500, "Most jobs a bulk enqueue (a group, a chord's header, chunks, apply_many) sends to "
        "one shard in one round trip, each job its own script call.")
    promote_batch: int = _setting(
        200, "Most due delayed jobs, and paused accounts, one claim call makes ready.")
    max_skips: int = _setting(
        256, "Most over-limit accounts one claim call passes over before it returns.")
    max_deliveries: int = _setting(
        10, "A job handed out this many times without settling is dead-lettered as poison.")
    job_retention: float = _setting(
        86400.0, "Seconds a finished job's business key still dedupes new enqueues.")
    record_retention: Mapping[str, Any] = _setting(
        Options({"succeeded": 7 * DAY, "revoked": 7 * DAY, "failed": 30 * DAY,
                 "dead": 30 * DAY}),
        "Seconds a recorded job (its Job row and attempts, in the Django app) is kept after it "
        "finished, by status: succeeded, revoked, failed, dead; None keeps them for good. The "
        "statuses given replace these defaults (7 days; 30 for failed and dead); a job the "
        "store still holds (waiting, running, or a dead letter) is never deleted.")
    record_prune_batch: int = _setting(
        1000, "Recorded jobs the pruner deletes per transaction (short locks).")
    record_prune_interval: float = _setting(
        300.0, "How often the leading recorder prunes in its idle time, in seconds. 0: never "
        "(prune with `manage.py fairqueue prune` or the prune_records task instead).")
    max_payload_bytes: int = _setting(
        4 * 1024 * 1024, "Largest serialized message a fair job may have: room for a chain to "
        "a chord of some 15,000 tasks (docs/guide.md, \"How large a message may be\").")
    enqueue_timeout: float = _setting(
        5.0, "Most seconds a producer's call to the store takes, retries included, before it "
        "raises StoreUnavailableError (the job may then have been stored: see the guide).")
    max_pending_per_account: int = _setting(
        1_000_000, "Most jobs one account may have waiting in a queue (ready; a delayed job "
        "counts its delayed ones too); an enqueue past it raises BacklogFullError. 0: no "
        "bound.")
    max_pending: int = _setting(
        0, "Most jobs the whole store may hold; an enqueue past it raises BacklogFullError. "
        "0: no bound.")
    max_retry_delay: float = _setting(
        86400.0, "Longest wait before a retry: a longer Retry-After or backoff is cut to it.")
    max_slow_down: float = _setting(
        3600.0, "Longest a \"slow down\" answer (a 429 or 503 with Retry-After, SlowDown) holds "
        "its scope (the account's jobs in the queue, or the queue) and its job back: a longer "
        "Retry-After is cut to it.")
    metrics_top_accounts: int = _setting(
        10, "Accounts per queue, those waiting longest, whose oldest waiting age the metrics "
        "show (fairqueue_account_oldest_waiting_age_seconds): it bounds the series. 0: none.")
    default_account: str | None = _setting(
        None, "Account of a fair job that names none (no account= and no account_arg value); "
        "unset, such a job is refused with MissingAccountError.")
    default_rate: str | None = _setting(None, "Rate of accounts without their own limit.")
    default_burst: float | None = _setting(None, "Burst of accounts without their own limit.")
    default_concurrency: int | None = _setting(
        None, "Concurrency cap of accounts without their own limit.")
    default_window: str | None = _setting(
        None, "Working-hours window of accounts without their own limit.")
    default_tz: str | None = _setting(None, "Time zone of the default window.")

    @classmethod
    def from_app(cls, app: Celery) -> FairqueueSettings:
        """Read and validate the settings of ``app``; raise ConfigurationError naming the key."""
        values: dict[str, Any] = {}
        for spec in fields(cls):
            raw = app.conf.get(f"fairqueue_{spec.name}", spec.default)
            values[spec.name] = _coerce(spec.name, raw, spec.default)
        if values["redis_url"] is None:
            broker = app.conf.broker_url or ""
            if isinstance(broker, str) and broker.startswith(("redis://", "rediss://", "unix://")):
                values["redis_url"] = broker
            else:
                raise ConfigurationError(
                    "fairqueue_redis_url is not set and the broker is not Redis; "
                    "set app.conf.fairqueue_redis_url = 'redis://host:6379/0'"
                )
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if (self.redis_url or "").startswith("sentinel://") and not (
                self.redis_transport_options or {}).get("master_name"):
            raise ConfigurationError(
                "fairqueue_redis_transport_options must give the master_name that the sentinels "
                "monitor when fairqueue_redis_url is sentinel://, e.g. {'master_name': 'mymaster'}")
        for name in ("lease_seconds", "heartbeat_interval", "reap_interval", "poll_interval",
                     "shards_check_interval", "job_retention", "enqueue_timeout",
                     "max_retry_delay", "max_slow_down"):
            if not getattr(self, name) > 0 or getattr(self, name) == float("inf"):
                raise ConfigurationError(f"fairqueue_{name} must be positive and finite")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ConfigurationError(f"fairqueue_shards must be 1 to {MAX_SHARDS}")
        for name in ("claim_batch", "enqueue_batch", "promote_batch", "max_skips", "max_deliveries",
                     "max_payload_bytes"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"fairqueue_{name} must be at least 1")
        if self.wait_replicas < 0:
            raise ConfigurationError("fairqueue_wait_replicas must be 0 (do not wait) or more")
        for name in ("max_pending_per_account", "max_pending", "metrics_top_accounts"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"fairqueue_{name} must be 0 (no bound) or more")
        self._validate_retention()
        if self.heartbeat_interval * 2 > self.lease_seconds:
            raise ConfigurationError(
                f"fairqueue_heartbeat_interval ({self.heartbeat_interval}) must be at most half "
                f"of fairqueue_lease_seconds ({self.lease_seconds}), or leases expire between beats"
            )
        try:
            self.default_limit.validate()
        except InvalidLimitError as exc:
            raise ConfigurationError(f"fairqueue_default_*: {exc}") from None

    def _validate_retention(self) -> None:
        for status, seconds in self.record_retention.items():
            if status not in RETAINED_STATUSES:
                raise ConfigurationError(
                    f"fairqueue_record_retention: {status!r} is not one of "
                    f"{', '.join(RETAINED_STATUSES)}")
            if seconds is not None and (isinstance(seconds, bool) or not isinstance(
                    seconds, int | float) or not 0 < seconds < float("inf")):
                raise ConfigurationError(
                    f"fairqueue_record_retention[{status!r}] must be positive seconds or None")
        if self.record_prune_batch < 1:
            raise ConfigurationError("fairqueue_record_prune_batch must be at least 1")
        if not 0 <= self.record_prune_interval < float("inf"):
            raise ConfigurationError(
                "fairqueue_record_prune_interval must be 0 (never) or positive seconds")

    @property
    def default_limit(self) -> AccountLimit:
        return AccountLimit(
            rate=self.default_rate, burst=self.default_burst,
            concurrency=self.default_concurrency, window=self.default_window, tz=self.default_tz,
        )


def _coerce(name: str, raw: Any, default: Any) -> Any:
    if isinstance(default, Mapping):  # not shown: it may hold passwords
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigurationError(f"fairqueue_{name} must be a dict, not {type(raw).__name__}")
        return Options({**default, **(raw or {})})  # what is given replaces its defaults
    if raw is None:
        return None
    kind = type(default) if default is not None else None
    try:
        if kind is float or name in ("default_burst",):
            return float(raw)
        if kind is int or name in ("default_concurrency",):
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError(raw)
            return int(raw)
    except (TypeError, ValueError):
        raise ConfigurationError(f"fairqueue_{name} = {raw!r} is not a number") from None
    return str(raw)


def settings_for(app: Celery) -> FairqueueSettings:
    """The validated settings of ``app``, read once and kept on it."""
    cached = getattr(app, "_fairqueue_settings", None)
    if cached is None:
        cached = FairqueueSettings.from_app(app)
        app._fairqueue_settings = cached
    return cached
