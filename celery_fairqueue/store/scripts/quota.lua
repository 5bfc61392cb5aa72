-- quota: a queue's shared limit in a sharded store (set_queue_limit), kept at the store's home.
-- An account lives on one shard and a queue spans them all, and no claim sees two shards at
-- once (on a cluster they are on other nodes): so a worker takes a grant here before it
-- claims, and its claims lease at most that many of the queue's jobs, on whichever shards
-- (granted_quota in lib/limits.lua). What it decides, per queue the worker asks of:
--   how many jobs the worker may lease now, its grant: as many as it wants, up to the tokens
--     of the queue's bucket (bucket_level in lib/limits.lua: the bucket a store of one shard
--     keeps, so a reshard keeps its level) and the room under the queue's concurrency;
--   who runs how many of the queue's jobs: each worker reports its running jobs of the queue
--     at every call (``held``), which replaces what it reported before, so a count never
--     drifts; the jobs a store of one shard leased before a reshard count at the home as they
--     did (qk.running '*'); a dead worker's count is forgotten with its registration
--     (release_quota_holder in lib/fleet.lua);
--   what a grant its claim did not use gives back (``back``: tokens, to the bucket);
--   when a short grant's queue has its next token, and whether its time keeper is called for
--     it (a worker that keeps no time arms no timer, as a claim of one shard calls it).
-- Waiting accounts keep their turns on their shards, and the workers choose shards by their
-- runnable weights (shards/chooser.py): the fair order decides who gets the next token.
-- KEYS: global keys, then the keys of each queue asked about (at the home).
-- ARGV: [1] the worker's token, [2] "1" when it keeps the queues' time, then per queue: jobs
--       wanted, its running jobs of the queue now, the grant it gives back.
-- Returns per queue: the grant (-1: the queue has no shared limit, its claims take none), and
-- seconds until its next token when the grant is short of what was wanted by its rate ("-1":
-- none, or short by its concurrency: a job's end brings its worker back).
-- include: keys limits rotation
local token, keeps_time = ARGV[1], ARGV[2] == '1'
local now = now_seconds()
local out = {}
for i = 1, queue_count() do
  local qk = queue_keys(i)
  local a = 3 + (i - 1) * 3
  local want, held, back = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local field = queue_limit_field(qk.name)
  local packed = redis.call('HGET', K_LIMITS, field)
  if not packed then
    out[#out + 1], out[#out + 2] = -1, '-1'
  else
    local rate, burst, cap = split_limit(packed)
    local grant, holder, total = want, qk.name .. ' ' .. token, 0
    if cap > 0 then  -- counted only under a concurrency (a rate alone: 3 commands a call)
      local counts = redis.call('HMGET', K_QUOTAS, qk.name, holder)
      total = tonumber(counts[1] or '0') - tonumber(counts[2] or '0') + held
      grant = math.max(0, math.min(grant, cap - total - hget_number(qk.running, '*')))
    end
    local wake = '-1'
    if rate > 0 then
      local level = math.min(burst, bucket_level(redis.call('HGET', K_BUCKETS, field), rate,
                                                 burst, now) + back)
      grant = math.max(0, math.min(grant, math.floor(level)))
      level = level - grant
      if grant < want and level < 1 then
        local due = now + (1 - level) / rate
        wake = string.format('%.6f', due - now)
        if not keeps_time then
          call_keeper(qk, due)
        end
      end
      redis.call('HSET', K_BUCKETS, field, bucket_text(level, now))
    end
    if cap > 0 then
      redis.call('HSET', K_QUOTAS, qk.name, total + grant, holder, held + grant)
    end
    out[#out + 1], out[#out + 2] = grant, wake
  end
end
return out
