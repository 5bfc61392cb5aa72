-- The registry of live workers (writers/fleet.py), and the processes' readings of the layout.
-- include: keys

-- Whether a process of an earlier version may still act on the store: one of the readings of
-- the layout (read_layout.lua) has not lapsed and records no format, as only an earlier
-- version's does (store/shards/format_upgrade.py).
local function earlier_version_reads()
  for _, reader in ipairs(redis.call('ZRANGEBYSCORE', K_LAYOUTREADERS, now_seconds(), '+inf')) do
    if not redis.call('HGET', K_FORMATSEEN, reader) then
      return true
    end
  end
  return false
end

-- A worker that left or died runs no job any more: its counts under the queues' shared limits
-- of a sharded store (quota.lua: "<queue> <id>", each queue's total under "<queue>") are
-- taken off. O(fields): the queues with a shared limit times the workers running their jobs,
-- read only when a worker goes.
local function release_quota_holder(id)
  local suffix = ' ' .. id
  local counts = redis.call('HGETALL', K_QUOTAS)
  for n = 1, #counts, 2 do
    if string.sub(counts[n], -#suffix) == suffix then
      local queue = string.sub(counts[n], 1, -#suffix - 1)
      redis.call('HDEL', K_QUOTAS, counts[n])
      hincr_or_drop(K_QUOTAS, queue, -tonumber(counts[n + 1]))
    end
  end
end

-- Drop the registry entries not renewed in time, so a dead worker vanishes by itself.
local function sweep_registry(now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', K_WORKERS, gone)
    redis.call('HDEL', K_WORKERINFO, gone)
    release_quota_holder(gone)
  end
end

-- A worker's entry in the registry of live workers, renewed for ttl seconds (negative: it
-- leaves).
local function renew_registration(id, info, ttl, now)
  if ttl < 0 then
    redis.call('ZREM', K_WORKERS, id)
    redis.call('HDEL', K_WORKERINFO, id)
    release_quota_holder(id)
  else
    redis.call('ZADD', K_WORKERS, now + ttl, id)
    redis.call('HSET', K_WORKERINFO, id, string.format('%.6f', now) .. ' ' .. info)
  end
end

-- The queues whose time worker ``id`` keeps (QueueKeys.keeper, each a lease of ``ms``
-- milliseconds): it renews those it keeps and takes those nobody keeps; ``ms`` 0 gives up
-- those it keeps (a worker shutting down). Returns the indexes of the queues it keeps.
local function keep_time(id, ms)
  local kept = {}
  for i = 1, queue_count() do
    local keeper = queue_keys(i).keeper
    local holder = redis.call('GET', keeper)
    if holder == id then
      if ms > 0 then
        redis.call('PEXPIRE', keeper, ms)
        kept[#kept + 1] = i
      else
        redis.call('DEL', keeper)
      end
    elseif not holder and ms > 0 then
      redis.call('SET', keeper, id, 'PX', ms)
      kept[#kept + 1] = i
    end
  end
  return kept
end
