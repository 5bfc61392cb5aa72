-- slow_down: hold a queue on this shard as a retry's enqueue held it on its account's shard: a
-- queue's "slow down" on a sharded store reaches every shard before the worker acks the job
-- that got it (shard.py's FairStore.enqueue).
-- KEYS: global keys only.
-- ARGV: [1] the hold's field in pauses (keys.slow_down_field), [2] seconds from now, [3] the
--       cause and [4] the job's task id, both encoded.
-- Returns 1.
-- include: keys rotation
slow_down(ARGV[1], now_seconds() + tonumber(ARGV[2]), ARGV[3], ARGV[4])
return 1
