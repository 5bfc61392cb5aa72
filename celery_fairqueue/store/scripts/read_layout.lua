-- read_layout: a worker's or producer's reading of the store's number of shards, on the store's
-- home, recorded with the time until which the process may go on without reading it again: a
-- reshard waits for every process that may still act on the old number (store/shards/fleet_wait.py).
-- KEYS: global keys.
-- ARGV: [1] process id, [2] its name (role, host, pid), [3] its fairqueue_shards, which a store
--       that records no number takes when it holds no job (else it is a store of one shard, as
--       every store was before shards), [4] seconds until the process reads the number again.
-- Returns the layout: "S", or "S>N" while a reshard moves the store from S to N shards.
-- include: keys
local now = now_seconds()
local held = redis.call('GET', K_SHARDCOUNT)
if not held then
  held = (ARGV[3] == '1' or redis.call('HLEN', K_RECORDS) == 0) and ARGV[3] or '1'
  redis.call('SET', K_SHARDCOUNT, held)
end
-- the readings that lapsed: a few a call, so the registry never grows with a fleet's churn
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_LAYOUTREADERS, '-inf', now, 'LIMIT', 0, 10)) do
  redis.call('ZREM', K_LAYOUTREADERS, gone)
  redis.call('HDEL', K_LAYOUTSEEN, gone)
end
redis.call('ZADD', K_LAYOUTREADERS, now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', K_LAYOUTSEEN, ARGV[1], held .. ' ' .. string.format('%.6f', now) .. ' ' .. ARGV[2])
return held
