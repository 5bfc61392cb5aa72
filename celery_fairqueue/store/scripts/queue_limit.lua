-- queue_limit: a limit a queue holds changes, in one step: the queue's shared limit (all its
-- accounts together, set_queue_limit: keys.queue_limit_field, its bucket starting full) or its
-- default for accounts without their own limit in it (set_default_limit(queue=...):
-- keys.in_queue_field). Kept beside the accounts' limits, so the claim reads it in the HMGET it
-- makes anyway; what runs is counted again (recount_running), so a concurrency set now counts
-- the jobs already running. The queue becomes a known queue of the shard.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the field, [2] the limit packed (limits.AccountLimit.pack) or "" to drop it,
--       [3] the limit as configured (JSON), [4] the queue (encoded).
-- Returns 1.
-- include: keys leases
local field = ARGV[1]
redis.call('SADD', K_QUEUES, ARGV[4])
if ARGV[2] == '' then
  redis.call('HDEL', K_LIMITS, field)
  redis.call('HDEL', K_LIMITCONFIG, field)
else
  redis.call('HSET', K_LIMITS, field, ARGV[2])
  redis.call('HSET', K_LIMITCONFIG, field, ARGV[3])
end
redis.call('HDEL', K_BUCKETS, field)
recount_running(nil, queue_positions())
return 1
