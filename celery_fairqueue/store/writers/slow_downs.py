"""A provider's "slow down" in the store, one shard's part (slowdown.py tells the whole story):
the holds a shard keeps beside the operators' pauses (``Keys.pauses``, fields
``keys.slow_down_field``), a queue's hold copied to this shard, and an operator's lift.

A retry's enqueue writes an account's hold (and a queue's on the account's shard) in the same
script call that stores the retry (enqueue.lua); the claim defers the account, or skips the
queue, until it ends (lib/rotation.lua). shard.py routes these calls over a sharded store.
"""

from __future__ import annotations

from ..connection.door import StoreDoor
from ..formats.keys import encode_id, is_slow_down_field, slow_down_field
from ..formats.records import SlowDownHold


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class SlowDowns(StoreDoor):
    """This shard's holds of a provider's "slow down"."""

    def slow_downs_here(self) -> list[SlowDownHold]:
        """The holds this shard keeps that have not ended (by its clock)."""
        now = self.server_time()
        holds = [SlowDownHold.parse(_text(field), raw)
                 for field, raw in self.client.hscan_iter(self.keys.pauses, count=500)
                 if is_slow_down_field(_text(field))]
        return [hold for hold in holds if hold.until > now]

    def hold_queue_here(self, queue: str, seconds: float, cause: str, job: str) -> None:
        """Hold ``queue`` on this shard for ``seconds`` (extending, never shortening, a hold
        it has); ``cause`` and ``job`` as encoded for the enqueue (jobs.slow_down_args)."""
        self._run("slow_down", [], [slow_down_field(None, queue), f"{seconds:.6f}", cause, job])

    def lift_slow_down_here(self, account: str | None, queue: str) -> bool:
        """End the hold of ``account`` in ``queue`` (or of ``queue``) on this shard now; False
        when there was none."""
        encoded = encode_id(account) if account is not None else ""
        return bool(self._run("lift_slow_down", [self.keys.queue(queue)],
                              [slow_down_field(account, queue), encoded]))
