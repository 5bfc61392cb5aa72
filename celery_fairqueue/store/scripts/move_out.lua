-- move_out: a reshard (store/shards/reshard.py) takes an account off the shard it left, once move_in
-- copied it: the copied jobs go, and, when nothing changed here since the copy (a new job, a
-- marker or a limit written since), the copied state goes too and the account is marked moved
-- ("m n"): from then on this shard's enqueue sends its producers to shard n.
-- KEYS: global keys.
-- ARGV: [1] the account (encoded), [2] the shard it moved to, then three counted sections: the
--       job ids copied; the hash fields copied (key name after the tag, field, value as copied);
--       the strings copied (key name, value as copied); the sorted set members copied (key
--       name, member).
-- Returns {1 moved, or 0 copy again, the copied job ids no longer here (to drop on shard n)}.
-- include: keys records rotation
local tag = string.sub(K_RECORDS, 1, -8)
local account, to = ARGV[1], ARGV[2]
local at = 3
local function section(width)
  local entries = {}
  local count = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, count do
    entries[#entries + 1] = {ARGV[at], ARGV[at + 1], ARGV[at + 2]}
    at = at + width
  end
  return entries
end
local jobs, fields, strings, members = section(1), section(3), section(2), section(2)

local vanished = {}
for _, entry in ipairs(jobs) do
  local job_id = entry[1]
  local job = read_job(job_id)
  if job then
    local qk = queue_named(job.queue)
    redis.call('ZREM', fifo_key(qk, job.account), ready_member(job.seq, job_id))
    take_delayed(qk, job.account, job_id)
    redis.call('HDEL', K_RECORDS, job_id)
    redis.call('HINCRBY', K_STATS, 'moved_out', 1)  -- (shard.py's stats)
  else
    vanished[#vanished + 1] = job_id
  end
end

local changed = false
for _, entry in ipairs(fields) do
  changed = changed or redis.call('HGET', tag .. entry[1], entry[2]) ~= entry[3]
end
for _, entry in ipairs(strings) do
  changed = changed or redis.call('GET', tag .. entry[1]) ~= entry[2]
end
local queues = redis.call('SMEMBERS', K_QUEUES)
for _, name in ipairs(queues) do
  local qk = queue_named(name)
  changed = changed or has_ready(qk, account) or redis.call('HEXISTS', qk.ndelayed, account) == 1
end
if changed then
  return {0, vanished}
end

for _, entry in ipairs(fields) do
  redis.call('HDEL', tag .. entry[1], entry[2])
end
for _, entry in ipairs(strings) do
  redis.call('DEL', tag .. entry[1])
end
for _, entry in ipairs(members) do
  redis.call('ZREM', tag .. entry[1], entry[2])
end
for _, name in ipairs(queues) do
  local qk = queue_named(name)
  -- one still in the rotation leaves it at the claim that finds it without jobs
  if redis.call('HGET', qk.state, account) ~= 'r' then
    redis.call('HDEL', qk.state, account)
  end
  redis.call('HDEL', qk.deferrals, account)
  redis.call('HDEL', qk.running, account)
  redis.call('ZREM', qk.deferred, account)
  redis.call('ZREM', qk.finish, account)
end
redis.call('HDEL', K_PAUSES, 'a:' .. account .. ':*')
redis.call('HSET', tag .. 'moved', account, 'm ' .. to)
return {1, vanished}
