"""The roles that write, each a mixin over the door of one shard (connection/door.py).

- ``jobs.py``: the hot path: enqueue, claim and settle, one script call each
  (``scripts/enqueue.lua``, ``claim.lua``, ``ack.lua``, ...); the decisions are in the scripts.
- ``leases.py``: the lease, the unit of work a claim returns, and every way it settles.
- ``fleet.py``: the registry of live workers and their heartbeat (``heartbeat.lua`` extends
  the leases, ``reap.lua`` returns the expired ones).
- ``operator.py``: pause and resume, cancel, run now, limits (``apply_limit.lua``), a queue's
  limits (``queue_limit.lua``) and the default limit, dead letters taken, put back and purged.
- ``slow_downs.py``: a provider's "slow down" held on this shard (a queue's copy, an operator's
  lift); the retry's enqueue holds it, the claim honours it.
- ``upgrade.py``: adopting the layout before job records.

May import: formats, connection.
"""
