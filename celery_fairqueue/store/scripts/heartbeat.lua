-- heartbeat: a worker's beat, in one call: extend the leases of the jobs it still owns and renew
-- its registration among the live workers (see register_worker.lua, which this repeats).
-- KEYS: global keys only.
-- ARGV: [1] owner token (also the worker's id in the registry), [2] lease seconds, [3] JSON of
--       name, queues, slots, [4] seconds the registration lives without another beat,
--       [5..] job ids.
-- Returns the ids whose lease this worker no longer owns (they were reaped).
local token, lease, info, ttl = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local now = now_seconds()
local deadline = now + lease
local lost = {}
for n = 5, #ARGV do
  local job_id = ARGV[n]
  if redis.call('HGET', K_OWNERS, job_id) == token then
    redis.call('ZADD', K_LEASES, 'XX', deadline, job_id)
  else
    lost[#lost + 1] = job_id
  end
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', K_WORKERS, gone)
  redis.call('HDEL', K_WORKERINFO, gone)
end
redis.call('ZADD', K_WORKERS, now + ttl, token)
redis.call('HSET', K_WORKERINFO, token, string.format('%.6f', now) .. ' ' .. info)
return lost
