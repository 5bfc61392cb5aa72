"""Where an account lives in a store of S shards (``fairqueue_shards``): the decision of an
account's shard. Each shard's keys sit under a hash tag of its own (formats/tags.py).

An account's shard is a jump consistent hash of its id (Lamping and Veach, 2014): stable,
uniform, and going from S to S' > S moves only the accounts that must move (1 - S / S').
"""

from __future__ import annotations

import hashlib


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
