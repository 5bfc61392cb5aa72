-- heartbeat: a worker's beat, in one call: extend the leases of the jobs it still owns, renew its
-- registration among the live workers and read the store's instance id (created on first use).
-- KEYS: global keys only.
-- ARGV: [1] owner token (also the worker's id in the registry), [2] lease seconds, [3] JSON of
--       name, queues, slots ("": leases only), [4] seconds the registration lives without another beat,
--       [5] an instance id to create should there be none, [6..] job ids.
-- Returns {the ids whose lease this worker no longer owns (they were reaped), the store's
-- instance id, the number of registered workers}.
-- include: keys leases fleet
local lost = extend_leases(ARGV[1], tonumber(ARGV[2]), 6)
if ARGV[3] ~= '' then  -- "": a shard other than the home one (store/shards/sharded.py)
  renew_registration(ARGV[1], ARGV[3], tonumber(ARGV[4]), now_seconds())
end
local instance = redis.call('SET', K_INSTANCE, ARGV[5], 'NX', 'GET') or ARGV[5]
return {lost, instance, redis.call('ZCARD', K_WORKERS)}
