-- purge_dead: delete dead letters for good, with the idempotency markers that belong to them.
-- A marker is the letter's when a delivery of the same task wrote it; a marker of the same
-- business key written by a newer job (replayed or enqueued anew) stays, or that job's crash
-- safety would be lost with it.
-- KEYS: global keys only.
-- ARGV: [1] n, then n dead letter ids, then the n business keys of those letters ("-": none).
-- Returns the number of letters deleted.
-- include: keys records
local n = tonumber(ARGV[1])
local purged = 0
local function task_of(id)
  return string.match(id, '^(.*):%d+$') or id
end
for i = 2, n + 1 do
  local job_id, job_key = ARGV[i], ARGV[i + n]
  if redis.call('HDEL', K_DEAD, job_id) == 1 then
    purged = purged + 1
  end
  redis.call('ZREM', K_DEADINDEX, job_id)
  if job_key ~= '-' then
    local key = key_of(job_key)
    local holder = marker_holder(redis.call('GET', key) or '')
    if type(holder) == 'string' and task_of(holder) == task_of(job_id) then
      redis.call('DEL', key)
    end
  end
end
return purged
