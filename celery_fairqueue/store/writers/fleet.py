"""The fleet: the registry of live workers and their heartbeat, which extends the leases of the
jobs they run. The decisions are the scripts': a lease's renewal in ``heartbeat.lua``, the
return of expired leases in ``reap.lua``, a registration in ``register_worker.lua``, every
process's reading of the store's number of shards in ``read_layout.lua``. An idle worker's wait
for work is readers/doorbell.py."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..connection.door import StoreDoor

#: A worker's registration outlives its last heartbeat by this many heartbeat intervals.
REGISTRY_BEATS = 3
#: A queue's time keeper keeps it this many heartbeat intervals after its last beat: a keeper
#: that dies is replaced by another worker's beat within that, plus one interval.
KEEPER_BEATS = 2



@dataclass(frozen=True)
class WorkerRegistration:
    """What a worker tells the registry about itself on each heartbeat."""

    name: str  # its Celery hostname (celery@host)
    queues: Sequence[str]
    slots: int  # pool size: jobs it can run at once
    started: float = 0.0  # when it started (epoch seconds, its own clock)
    succeeded: int = 0  # fair jobs it ran that succeeded, since it started
    failed: int = 0  # fair jobs it ran that failed (to a retry or a dead letter)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "queues": list(self.queues), "slots": self.slots,
                           "started": self.started, "succeeded": self.succeeded,
                           "failed": self.failed})



@dataclass(frozen=True)
class Beat:
    """What a worker's heartbeat learns: the leases it lost, the store's instance id (a new
    one means Redis lost the data), how many workers are registered and the queues whose time
    it keeps (see heartbeat.lua)."""

    lost: list[str]
    instance: str
    live_workers: int
    keeps: list[str] = field(default_factory=list)
    #: Redis's clock less this process's (``time.time()``), seconds, as the beat saw it: the
    #: time keeper's calls carry due times on Redis's clock (worker/doorbell.py)
    clock_offset: float = 0.0



class Fleet(StoreDoor):
    """Register, beat and unregister workers."""

    def registry_ttl(self) -> float:
        return REGISTRY_BEATS * self.settings.heartbeat_interval

    def register_worker(self, worker_id: str, registration: WorkerRegistration) -> float:
        """Register (or renew) a live worker; returns the heartbeat's server time."""
        return float(self._run("register_worker", [], [worker_id, registration.to_json(),
                                                       self.registry_ttl()]))

    def unregister_worker(self, worker_id: str) -> None:
        """Leave the registry (a worker shutting down)."""
        self._run("register_worker", [], [worker_id, "", -1])

    def heartbeat(self, worker_id: str, registration: WorkerRegistration,
                  job_ids: Sequence[str]) -> list[str]:
        """Extend the leases of ``job_ids`` this worker owns and renew its registration;
        returns the ids whose lease it lost."""
        return self.beat(worker_id, registration, job_ids).lost

    def beat(self, worker_id: str, registration: WorkerRegistration | None,
             job_ids: Sequence[str], *, keeping: bool = True) -> Beat:
        """:meth:`heartbeat`, also reading the store's instance id and the number of live
        workers, and keeping the time of the registration's queues that no other worker keeps
        (``keeping`` False: giving up those it keeps): a worker's whole beat in one round
        trip. No ``registration``: the leases only (a shard other than the home one, which
        holds the registry and the keepers)."""
        queues = list(registration.queues) if registration is not None else []
        keeper_ms = int(KEEPER_BEATS * self.settings.heartbeat_interval * 1000) if keeping else 0
        sent = time.time()
        lost, instance, workers, kept, now = self._run(
            "heartbeat", [self.keys.queue(queue) for queue in queues], [
                worker_id, self.settings.lease_seconds,
                registration.to_json() if registration is not None else "",
                self.registry_ttl(), uuid.uuid4().hex, keeper_ms, *job_ids])
        return Beat(lost=list(lost), instance=str(instance), live_workers=int(workers),
                    keeps=[queues[int(n) - 1] for n in kept],
                    clock_offset=float(now) - (sent + time.time()) / 2)

    def read_layout(self, process_id: str, name: str, seconds: float) -> tuple[str, str]:
        """The store's layout as its home records it (``"S"``, or ``"S>N"`` while a reshard
        moves it) and its format (``"2"``, ``"1"``, ``"1>2"``: Keys.layout_format), read by
        process ``process_id`` (``name``: what a reshard or an upgrade that waits for it calls
        it), who reads them again within ``seconds`` (read_layout.lua)."""
        layout, layout_format = self._run("read_layout", [], [
            process_id, name, self.settings.shards, seconds, 2], within=True)
        return str(layout), str(layout_format)
