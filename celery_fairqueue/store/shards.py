"""Where an account lives in a store of S shards (``fairqueue_shards``), and each shard's tag.

Every key of one shard shares its hash tag, so each script stays in one Redis Cluster slot;
the shards' tags are chosen so that their slots are spread evenly over the slot space, and a
cluster's primaries (which own contiguous, about equal ranges of slots) hold about S / N
shards each. Shard 0 is the store's home: its tag is the key prefix itself, the one tag of an
unsharded store, so S = 1 is today's layout and what is truly store-wide (the worker registry,
the store's S, the default limit as configured, the queues' operator pauses) lives there.

An account's shard is a jump consistent hash of its id (Lamping and Veach, 2014): stable,
uniform, and going from S to S' > S moves only the accounts that must move (1 - S / S').
"""

from __future__ import annotations

import hashlib
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from ..settings import MAX_SHARDS

#: Bits of a shard index reversed to place it in the slot space (MAX_SHARDS = 2 ** SPREAD_BITS).
SPREAD_BITS = MAX_SHARDS.bit_length() - 1
#: Slots around its place where a shard's tag may land.
SPREAD_WIDTH = REDIS_CLUSTER_HASH_SLOTS // MAX_SHARDS


def jump_hash(key: int, buckets: int) -> int:
    """The bucket in ``range(buckets)`` of a 64-bit ``key`` (jump consistent hash)."""
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        candidate = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket


def account_shard(account: str, shards: int) -> int:
    """The shard of ``account`` in a store of ``shards`` shards."""
    if shards == 1:
        return 0
    digest = hashlib.blake2b(account.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return jump_hash(int.from_bytes(digest, "big"), shards)


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
