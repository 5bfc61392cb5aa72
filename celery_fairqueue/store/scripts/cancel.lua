-- cancel: take a job that waits in the store (ready, deferred with its account, or
-- delayed) out of it for good, as a revoke does; a leased (running) job is left to Celery's
-- revoke in its worker.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id.
-- Returns 1 cancelled, 0 not in the store, 2 leased (running).
-- include: keys events records markers rotation
local job_id = ARGV[1]
local job = read_job(job_id)
if not job then
  return 0
end
if job.owner ~= '-' then
  return 2
end
local qk = queue_keys(1)
if not take_delayed(qk, job.account, job_id) then
  -- the rotation drops the account by itself once it finds nothing ready (see claim)
  redis.call('ZREM', ready_place(qk, job.account, job.seq, job_id))
end
free_key(job.job_key, job_id)
redis.call('HDEL', K_RECORDS, job_id)
redis.call('HINCRBY', K_STATS, 'cancelled', 1)
emit('e', 'cancelled', 'job', job_id, 'at', now_seconds())
return 1
