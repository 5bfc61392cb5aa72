-- upgrade_fifo: convert a batch of a queue's ready set of format 1 (one sorted set a queue,
-- members "account|seq|job_id": legacy_member in lib/keys.lua) into its accounts' FIFOs of format
-- 2 (QueueKeys.fifo, members "seq|job_id"), taking the batch out of the old set; while the store
-- is at "1>2", so nothing adds to the old set any more (store/shards/format_upgrade.py). The
-- accounts' states and rotation are the same in both formats: only where the jobs wait changes.
-- A job already in its FIFO (a rerun after a kill) is written again, the same member: no change;
-- a member whose job left meanwhile (cancelled by a process of this version) is dropped.
-- KEYS: global keys, then the queue's keys.
-- ARGV: [1] most members a call converts (each call stays short: Redis runs nothing else
--       meanwhile).
-- Returns the members left in the old set.
-- include: keys rotation
local qk = queue_keys(1)
adopt_legacy(qk, redis.call('ZRANGE', qk.ready, 0, tonumber(ARGV[1]) - 1))
return redis.call('ZCARD', qk.ready)
