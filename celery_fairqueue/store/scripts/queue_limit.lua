-- queue_limit: a limit a queue holds changes, in one step: the queue's shared limit (all its
-- accounts together, set_queue_limit: keys.queue_limit_field, its bucket starting full) or its
-- default for accounts without their own limit in it (set_default_limit(queue=...):
-- keys.in_queue_field). Kept beside the accounts' limits, so the claim reads it in the HMGET it
-- makes anyway; what runs is counted again (recount_running), so a concurrency set now counts
-- the jobs already running. In a sharded store every shard holds a copy, and the workers
-- count what runs at the home (quota.lua), whose counts of a shared limit dropped go with it.
-- The queue becomes a known queue of the shard.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the field, [2] the limit packed (limits.AccountLimit.pack) or "" to drop it,
--       [3] the limit as configured (JSON), [4] the queue (encoded), [5] "1" in a sharded
--       store.
-- Returns 1.
-- include: keys limits leases
local field = ARGV[1]
redis.call('SADD', K_QUEUES, ARGV[4])
write_limit(field, ARGV[2], ARGV[3])
if ARGV[5] ~= '1' then
  recount_running(nil, queue_positions())
elseif ARGV[2] == '' and field == queue_limit_field(ARGV[4]) then
  local counts = redis.call('HKEYS', K_QUOTAS)
  for _, name in ipairs(counts) do
    if name == ARGV[4] or string.sub(name, 1, #ARGV[4] + 1) == ARGV[4] .. ' ' then
      redis.call('HDEL', K_QUOTAS, name)
    end
  end
end
return 1
