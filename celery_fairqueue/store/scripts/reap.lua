-- reap: return jobs whose lease expired (their worker died or hung) to ready, in FIFO place,
-- and drop the registrations of workers that stopped beating.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] batch size, [2..] encoded names of the queues, in the order of their keys.
-- Returns the number of jobs returned to ready.
local batch = tonumber(ARGV[1])
local now = now_seconds()
sweep_registry(now)
local index = {}
for i = 1, queue_count() do
  index[ARGV[i + 1]] = i
end
local reaped = 0
for _, job_id in ipairs(redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now, 'LIMIT', 0, batch)) do
  local meta = redis.call('HGET', K_META, job_id)
  if not meta then
    drop_lease(job_id)
  else
    local queue, account, seq = split_meta(meta)
    local i = index[queue]
    if i then
      local qk = queue_keys(i)
      drop_lease(job_id)
      redis.call('HDEL', qk.started, job_id)
      release_running(qk, account)
      make_ready(qk, account, seq, job_id)
      emit('e', 'requeued', 'job', job_id, 'at', now, 'reason', 'lease expired')
      reaped = reaped + 1
    end
  end
end
if reaped > 0 then
  redis.call('HINCRBY', K_STATS, 'reaped', reaped)
end
return reaped
