"""Each shard's hash tag: where the keys of shard ``n`` of a store sit in Redis Cluster's slots.

Every key of one shard shares its hash tag, so each script stays in one Redis Cluster slot;
the shards' tags are chosen so that their slots are spread evenly over the slot space, and a
cluster's primaries (which own contiguous, about equal ranges of slots) hold about S / N
shards each. Shard 0 is the store's home: its tag is the key prefix itself, the one tag of an
unsharded store, so S = 1 is today's layout and what is truly store-wide (the worker registry,
the store's S, the default limit as configured, the queues' operator pauses) lives there.
Which shard an account lives on is decided in store/shards/placement.py.
"""

from __future__ import annotations

from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from ...settings import MAX_SHARDS

#: Bits of a shard index reversed to place it in the slot space (MAX_SHARDS = 2 ** SPREAD_BITS).
SPREAD_BITS = MAX_SHARDS.bit_length() - 1
#: Slots around its place where a shard's tag may land.
SPREAD_WIDTH = REDIS_CLUSTER_HASH_SLOTS // MAX_SHARDS



def _spread(index: int) -> int:
    """Where shard ``index`` sits in the slot space, as a fraction of MAX_SHARDS: its bits
    reversed (the van der Corput sequence), so the first S shards, S a power of two, sit
    evenly spaced, and any S at most twice as close as even."""
    return int(format(index, f"0{SPREAD_BITS}b")[::-1], 2)


@cache
def shard_tag(prefix: str, index: int) -> str:
    """The hash tag (without braces) of shard ``index`` of the store ``prefix``: the prefix for
    shard 0; else ``prefix.index.n`` with the first n whose slot lands at the shard's place,
    counted from shard 0's slot (about MAX_SHARDS tries, done once per shard)."""
    if index == 0:
        return prefix
    home = key_slot(prefix.encode())
    start = (home + _spread(index) * SPREAD_WIDTH) % REDIS_CLUSTER_HASH_SLOTS
    n = 0
    while True:
        tag = f"{prefix}.{index}.{n}"
        if (key_slot(tag.encode()) - start) % REDIS_CLUSTER_HASH_SLOTS < SPREAD_WIDTH:
            return tag
        n += 1
