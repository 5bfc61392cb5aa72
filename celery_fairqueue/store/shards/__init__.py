"""The store as a whole: one shard or S, and moving a store from S shards to more.

The rest of the package sees shards only through this package's interface: ``opening.py``
(``open_store``, ``store_for``: the store, of as many shards as it records), the store's
``shards`` and ``shard_for(account)`` (``shard.py``, ``sharded.py``), ``merged.py`` (the same
reads on every shard in one pipeline), ``fifos.py`` (a queue's ready jobs, read account FIFO
by account FIFO on every shard side by side) and ``placement.py`` (``account_shard``). No
module outside it branches on whether the store is sharded.

- ``shard.py``: ``FairStore``, the writers of one shard as one object.
- ``sharded.py``: ``ShardedStore``, the routing over the store's shards, which follows the
  store's recorded number of shards and a reshard's move (``layout.py``: this process's
  reading of it).
- ``placement.py``: an account's shard (jump consistent hash).
- ``chooser.py``: which shard a worker claims from next (by each shard's runnable weight);
  ``sharded_claim.py``: one claim across the shards, in the chooser's order.
- ``quota.py``: a queue's shared limit, granted at the home to each claim.
- ``reshard.py`` and ``account_move.py``: ``fairqueue reshard --to N``, one account at a time;
  ``fleet_wait.py``: it moves none before every process has read the move.
- ``format_upgrade.py``: ``fairqueue upgrade``, a store of layout format 1 (one ready set a
  queue, an earlier version's) converted live to format 2 (a FIFO an account), once every
  process has read each step (``fleet_wait.py`` too).

May import: formats, connection, writers.
"""
