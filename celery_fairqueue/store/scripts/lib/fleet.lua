-- The registry of live workers (writers/fleet.py).

-- Drop the registry entries not renewed in time, so a dead worker vanishes by itself.
local function sweep_registry(now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', K_WORKERS, gone)
    redis.call('HDEL', K_WORKERINFO, gone)
  end
end

-- A worker's entry in the registry of live workers, renewed for ttl seconds (negative: it
-- leaves).
local function renew_registration(id, info, ttl, now)
  if ttl < 0 then
    redis.call('ZREM', K_WORKERS, id)
    redis.call('HDEL', K_WORKERINFO, id)
  else
    redis.call('ZADD', K_WORKERS, now + ttl, id)
    redis.call('HSET', K_WORKERINFO, id, string.format('%.6f', now) .. ' ' .. info)
  end
end
