-- read_layout: a worker's or producer's reading of the store's number of shards, on the store's
-- home, recorded with the time until which the process may go on without reading it again: a
-- reshard waits for every process that may still act on the old number (store/shards/fleet_wait.py).
-- KEYS: global keys.
-- ARGV: [1] process id, [2] its name (role, host, pid), [3] its fairqueue_shards, which a store
--       that records no number takes when it holds no job (else it is a store of one shard, as
--       every store was before shards), [4] seconds until the process reads the number again.
--       [5] "2": the process knows the layout formats (format_upgrade.py), and its reading of
--       the format is recorded too (absent: a process of a version before them).
-- Returns the layout, "S" or "S>N" while a reshard moves the store from S to N shards, and the
-- format of the layout: "2", "1" or "1>2" (Keys.layout_format).
-- include: keys fleet
local now = now_seconds()
local held = redis.call('GET', K_SHARDCOUNT)
-- Whether an earlier version (format 1) may still act on the store: one of its processes
-- still reads it (earlier_version_reads), or the store holds what only it wrote (a queue's
-- ready set here, or shards, whose ready sets a call at the home cannot see). Asked once, when
-- the store records no format yet; its delayed, leased and dead jobs, and its markers, are the
-- same in format 2.
local function written_before()
  if (held and held ~= '1') or earlier_version_reads() then
    return true
  end
  for _, name in ipairs(redis.call('SMEMBERS', K_QUEUES)) do
    if redis.call('EXISTS', queue_named(name).ready) == 1 then
      return true
    end
  end
  return false
end

local format = redis.call('GET', K_LAYOUTFORMAT)
if not format then
  format = written_before() and '1' or '2'
  redis.call('SET', K_LAYOUTFORMAT, format)
end
if not held then
  held = (ARGV[3] == '1' or redis.call('HLEN', K_RECORDS) == 0) and ARGV[3] or '1'
  redis.call('SET', K_SHARDCOUNT, held)
end
-- the readings that lapsed: a few a call, so the registry never grows with a fleet's churn
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_LAYOUTREADERS, '-inf', now, 'LIMIT', 0, 10)) do
  redis.call('ZREM', K_LAYOUTREADERS, gone)
  redis.call('HDEL', K_LAYOUTSEEN, gone)
  redis.call('HDEL', K_FORMATSEEN, gone)
end
redis.call('ZADD', K_LAYOUTREADERS, now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', K_LAYOUTSEEN, ARGV[1], held .. ' ' .. string.format('%.6f', now) .. ' ' .. ARGV[2])
if ARGV[5] then
  redis.call('HSET', K_FORMATSEEN, ARGV[1], format)
end
return {held, format}
