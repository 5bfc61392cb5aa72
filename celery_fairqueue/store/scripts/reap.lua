-- reap: return jobs whose lease expired (their worker died or hung) to ready, in FIFO place,
-- and drop the registrations of workers that stopped beating; keep each queue's rotation
-- (see tend_rotation); take in the jobs left in a queue's set of layout format 1
-- (adopt_stranded); and forget the provider's slow-downs that are over.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] batch size.
-- Returns the number of jobs returned to ready.
-- include: keys events records rotation leases fleet
local batch = tonumber(ARGV[1])
local now = now_seconds()
sweep_registry(now)
local index = queue_positions()
-- Past this tag the virtual times are shifted back by the floor. A claim moves a tag on by at
-- most VIRTUAL_TURN (1e6) a job, so between two reaps (seconds apart) the tags stay far below
-- 2^53, where doubles stop holding every integer: 2^48 leaves room for 2^32 jobs a reap.
local RENORMALISE_AT = 2 ^ 48

-- The finish tags at or below the floor say nothing any more (join_rotation takes the floor
-- then), so they go, and all of them when the rotation is empty (the claim that empties it
-- forgets them; a claim of an earlier release may not have); and tags past RENORMALISE_AT are
-- shifted back by the floor, order kept. That last one costs
-- O(accounts in the rotation), once in at least 2^28 jobs (2^48 / VIRTUAL_TURN) of a queue
-- that never ran empty (an empty rotation starts again at 0 by itself).
local function tend_rotation(qk)
  local head = redis.call('ZRANGE', qk.tags, 0, 0, 'WITHSCORES')
  if not head[1] then
    redis.call('DEL', qk.finish)
    return
  end
  local floor = tonumber(head[2])
  redis.call('ZREMRANGEBYSCORE', qk.finish, '-inf', floor)
  local top = tonumber(redis.call('ZRANGE', qk.tags, -1, -1, 'WITHSCORES')[2] or '0')
  if top < RENORMALISE_AT then
    return
  end
  for _, key in ipairs({qk.tags, qk.finish}) do
    local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for n = 1, #entries, 2 do
      redis.call('ZADD', key, tonumber(entries[n + 1]) - floor, entries[n])
    end
  end
end

for i = 1, queue_count() do
  local qk = queue_keys(i)
  tend_rotation(qk)
  if not FORMAT1 and redis.call('EXISTS', qk.ready) == 1 then
    adopt_stranded(qk, batch)
  end
end

-- the provider's slow-downs that are over go (a claim drops one when it comes by its scope;
-- an account that never comes back would keep the pauses hash, and each claim, asking)
if redis.call('HLEN', K_PAUSES) > 0 then
  local held = redis.call('HGETALL', K_PAUSES)
  for n = 1, #held, 2 do
    if string.match(held[n], '^[sS]:') then
      slowed_until(held[n], held[n + 1])
    end
  end
end

local reaped = 0
for _, job_id in ipairs(redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now, 'LIMIT', 0, batch)) do
  local job = read_job(job_id)
  local i = job and index[job.queue]
  if not job then
    redis.call('ZREM', K_LEASES, job_id)
  elseif i then
    local qk = queue_keys(i)
    release_lease(qk, job_id, job)
    write_job(job_id, job)
    make_ready(qk, job.account, job.seq, job_id)
    emit('e', 'requeued', 'job', job_id, 'at', now, 'reason', 'lease expired')
    reaped = reaped + 1
  end
end
if reaped > 0 then
  redis.call('HINCRBY', K_STATS, 'reaped', reaped)
end
return reaped
