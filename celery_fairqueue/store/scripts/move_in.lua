-- move_in: a reshard (store/shards/reshard.py) copies an account's waiting jobs and its state to the
-- shard it moves to. Idempotent: a rerun copies the same again. The copied reshard pause holds
-- the account here until move_out has taken its jobs off the old shard (then it is resumed).
-- KEYS: global keys.
-- ARGV: [1] the account (encoded), [2] "1": a late copy to an account that runs here already
--       (what is here wins: HSETNX, SET NX), then four counted sections, each a count and its
--       entries: hash fields (key name after the tag, field, value), first, so the pause is
--       there before any job; jobs (job id, record, due time or "" when ready); sorted set
--       members (key name, member, score); strings (key name, value, ms to live or 0).
-- Returns the number of jobs it stored anew.
-- include: keys records rotation
local tag = string.sub(K_RECORDS, 1, -8)
local account, late = ARGV[1], ARGV[2] == '1'
local at, stored = 3, 0
local function section(width, each)
  local count = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, count do
    each(ARGV[at], ARGV[at + 1], ARGV[at + 2])
    at = at + width
  end
end

section(3, function(name, field, value)
  redis.call(late and 'HSETNX' or 'HSET', tag .. name, field, value)
end)
-- a record as the old shard's scripts made it (make_record), copied byte for byte; a copy made
-- before (a rerun, the job promoted on the old shard since) is taken out of its place first, so
-- the job waits in one place only: ready, or delayed
section(3, function(moved_id, record, due)
  local job = split_record(record)
  local held = read_job(moved_id)
  if held and late then
    return
  elseif held then
    local before = queue_named(held.queue)
    redis.call('ZREM', fifo_key(before, account), ready_member(held.seq, moved_id))
    take_delayed(before, account, moved_id)
  else
    stored = stored + 1
  end
  redis.call('HSET', K_RECORDS, moved_id, record)
  local qk = queue_named(job.queue)
  redis.call('SADD', K_QUEUES, job.queue)
  if due ~= '' then
    if redis.call('ZADD', qk.delayed, due, moved_id) == 1 then
      redis.call('HINCRBY', qk.ndelayed, account, 1)
    end
  else
    redis.call('ZADD', fifo_key(qk, account), 0, ready_member(job.seq, moved_id))
    redis.call('HSETNX', qk.state, account, 'o')  -- paused (see resume.lua)
  end
end)
section(3, function(name, member, score)
  redis.call('ZADD', tag .. name, score, member)
end)
section(3, function(name, value, ttl)
  if late and ttl ~= '0' then
    redis.call('SET', tag .. name, value, 'NX', 'PX', ttl)
  elseif late then
    redis.call('SET', tag .. name, value, 'NX')
  elseif ttl ~= '0' then
    redis.call('SET', tag .. name, value, 'PX', ttl)
  else
    redis.call('SET', tag .. name, value)
  end
end)
if stored > 0 then
  redis.call('HINCRBY', K_STATS, 'moved_in', stored)  -- (shard.py's stats)
end
return stored
