-- cancel: take a job that waits in the store (ready, deferred with its account, or
-- delayed) out of it for good, as a revoke does; a leased (running) job is left to Celery's
-- revoke in its worker.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id.
-- Returns 1 cancelled, 0 not in the store, 2 leased (running).
local job_id = ARGV[1]
local meta = redis.call('HGET', K_META, job_id)
if not meta then
  return 0
end
if redis.call('ZSCORE', K_LEASES, job_id) then
  return 2
end
local _, account, seq, job_key = split_meta(meta)
local qk = queue_keys(1)
if not take_delayed(qk, account, job_id) and
    redis.call('ZREM', qk.ready, ready_member(account, seq, job_id)) == 1 then
  -- the rotation drops the account by itself once it finds nothing ready (see claim)
  if redis.call('HINCRBY', qk.nready, account, -1) <= 0 then
    redis.call('HDEL', qk.nready, account)
  end
  redis.call('ZREM', qk.waiting, job_id)
end
free_job_key(job_key, job_id)
forget_job(job_id)
redis.call('HINCRBY', K_STATS, 'cancelled', 1)
emit('e', 'cancelled', 'job', job_id, 'at', now_seconds())
return 1
