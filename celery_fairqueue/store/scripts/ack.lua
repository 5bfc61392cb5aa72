-- ack: the worker finished a job (success, failure or handed over to a retry); settle its lease.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] account (encoded).
-- Returns 1, or 0 when the lease was no longer this worker's (it expired and was reaped).
local job_id, token, account = ARGV[1], ARGV[2], ARGV[3]
if not release_lease(job_id, token, account) then
  return 0
end
local meta = redis.call('HGET', K_META, job_id)
if meta then
  local _, _, _, job_key = split_meta(meta)
  -- a retry re-pointed the key to its own delivery: the job is not done yet
  if job_key ~= '-' and redis.call('HGET', K_JOBKEYS, job_key) == job_id then
    redis.call('ZADD', K_DONE, now_seconds(), job_key)
  end
end
forget_job(job_id)
redis.call('HINCRBY', K_STATS, 'acked', 1)
emit('e', 'acked', 'job', job_id, 'at', now_seconds())
return 1
