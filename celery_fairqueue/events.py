"""The event stream: every state transition of a fair job, for the recorder to store.

Transitions are appended to the Redis stream ``{prefix}:events`` by the store's scripts
(``enqueued``, ``promoted`` (a delayed job became ready), ``running``, ``requeued``, ``acked``,
``dead``, ``account_deferred``, ``account_ready``) and by the task itself (``succeeded``,
``failed``, ``retrying``), only once a recorder has created the stream, so nothing piles up
where nobody records. The recorder reads it through a consumer group and acknowledges what it
has written, so a recorder (or database) that is down catches up where it stopped. Fields:

===========  =================================================================================
``e``        the event type
``job``      delivery id, ``<task id>:<retries>`` (job events)
``q``, ``a`` queue and account, percent-encoded (``enqueued`` and account events)
``k``        business job key, or ``-`` (``enqueued``)
``t``        task name (``enqueued``)
``at``       when, in Redis server time (epoch seconds)
``due``      when the job (or the account's jobs) will be ready (``enqueued``, deferrals,
             ``retrying``)
``reason``   why (``dead``, ``failed``, ``retrying``, a reaped ``requeued``)
``err``      the exception, ``Type: message`` (``failed``, ``retrying``)
``ext``      the external id recorded with the done marker (``succeeded``)
``worker``   the worker's lease token (``running``)
===========  =================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from .keys import decode_id
from .store import FairStore, task_id_of

RECORDER_GROUP = "fairqueue-recorder"


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    fields: dict[str, str]

    @property
    def job_id(self) -> str | None:
        return self.fields.get("job") or None

    @property
    def task_id(self) -> str | None:
        return task_id_of(self.job_id) if self.job_id else None

    @property
    def attempt(self) -> int:
        """1 for the first delivery of a job, 2 for its first retry, ..."""
        return int(self.job_id.rsplit(":", 1)[1]) + 1 if self.job_id else 0

    @property
    def at(self) -> float:
        return float(self.fields.get("at") or 0)

    @property
    def due(self) -> float | None:
        return float(self.fields["due"]) if self.fields.get("due") else None

    @property
    def queue(self) -> str | None:
        return decode_id(self.fields["q"]) if self.fields.get("q") else None

    @property
    def account(self) -> str | None:
        return decode_id(self.fields["a"]) if self.fields.get("a") else None

    @property
    def job_key(self) -> str | None:
        key = self.fields.get("k")
        return key if key and key != "-" else None


class EventReader:
    """A consumer of the event stream in the recorder's group."""

    def __init__(self, store: FairStore, consumer: str, group: str = RECORDER_GROUP) -> None:
        self.store = store
        self.client: redis.Redis = store.client
        self.stream = store.keys.events
        self.group = group
        self.consumer = consumer

    def ensure_group(self) -> None:
        """Create the stream and the group; from then on transitions are recorded."""
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, count: int = 500, block_ms: int = 1000) -> list[Event]:
        """Events not yet acknowledged: first this consumer's pending ones, then new ones."""
        for start in ("0", ">"):
            reply: Any = self.client.xreadgroup(self.group, self.consumer, {self.stream: start},
                                                count=count, block=None if start == "0"
                                                else block_ms)
            entries = reply[0][1] if reply else []
            events = [Event(id=entry_id, type=fields.get("e", ""), fields=fields)
                      for entry_id, fields in entries if fields]
            if events:
                return events
        return []

    def ack(self, events: list[Event]) -> None:
        """The events are in the database: drop them from the stream."""
        if events:
            ids = [event.id for event in events]
            pipe = self.client.pipeline()
            pipe.xack(self.stream, self.group, *ids)
            pipe.xdel(self.stream, *ids)
            pipe.execute()

    def backlog(self) -> int:
        """Events written and not yet recorded."""
        return int(self.client.xlen(self.stream))
