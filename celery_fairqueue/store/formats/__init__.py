"""The stored formats: what the fair store holds, named and read in one place.

- ``keys.py``: the key layout of a store (and of each shard), every key name.
- ``tags.py``: each shard's hash tag, so that shards spread evenly over a cluster's slots.
- ``records.py``: the one codec of every stored string (job record, ready member, bucket,
  marker, deferral, dead letter); the Lua side reads each in one helper of ``scripts/lib``.
- ``dead_letter.py``: a dead letter as a person reads it.

Pure code: nothing here talks to Redis or decides anything about a job.
May import: nothing else of the store.
"""
