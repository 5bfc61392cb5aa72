-- heartbeat: a worker's beat, in one call: extend the leases of the jobs it still owns, renew its
-- registration among the live workers, keep the time of its queues (keep_time in lib/fleet.lua)
-- and read the store's instance id (created on first use).
-- KEYS: global keys, then the keys of the worker's queues (on the home shard; none: it keeps
--       no time, as on the other shards of a sharded store).
-- ARGV: [1] owner token (also the worker's id in the registry), [2] lease seconds, [3] JSON of
--       name, queues, slots ("": leases only), [4] seconds the registration lives without another beat,
--       [5] an instance id to create should there be none, [6] milliseconds the worker keeps a
--       queue's time without another beat (0: it gives the time up), [7..] job ids.
-- Returns {the ids whose lease this worker no longer owns (they were reaped), the store's
-- instance id, the number of registered workers, the indexes of the queues whose time it keeps,
-- Redis's clock (epoch seconds, as text): the keeper's timers for its calls are on it}.
-- include: keys leases fleet
local lost = extend_leases(ARGV[1], tonumber(ARGV[2]), 7)
if ARGV[3] ~= '' then  -- "": a shard other than the home one (store/shards/sharded.py)
  renew_registration(ARGV[1], ARGV[3], tonumber(ARGV[4]), now_seconds())
end
local kept = keep_time(ARGV[1], tonumber(ARGV[6]))
local instance = redis.call('SET', K_INSTANCE, ARGV[5], 'NX', 'GET') or ARGV[5]
return {lost, instance, redis.call('ZCARD', K_WORKERS), kept, now_text()}
