-- register_worker: a worker's heartbeat in the registry of live workers; registrations that
-- were not renewed in time are dropped, so a dead worker vanishes without anyone's help.
-- KEYS: global keys only.
-- ARGV: [1] worker id (its lease token), [2] JSON of name, queues, slots, [3] seconds the
--       registration lives without another beat, or a negative number to leave the registry.
-- Returns the heartbeat's time (Redis server time).
local id, info, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_seconds()
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', K_WORKERS, gone)
  redis.call('HDEL', K_WORKERINFO, gone)
end
if ttl < 0 then
  redis.call('ZREM', K_WORKERS, id)
  redis.call('HDEL', K_WORKERINFO, id)
else
  redis.call('ZADD', K_WORKERS, now + ttl, id)
  redis.call('HSET', K_WORKERINFO, id, string.format('%.6f', now) .. ' ' .. info)
end
return string.format('%.6f', now)
