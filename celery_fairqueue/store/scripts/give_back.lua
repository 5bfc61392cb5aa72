-- give_back: a leased job whose run could not write to the store (full, read-only, busy) goes
-- back to wait a moment, in its FIFO place once due. The store failed, not the job: the failed
-- delivery does not count toward the poison limit (max deliveries).
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] seconds to wait.
-- Returns 1, or 0 when the lease was no longer this worker's.
-- include: keys events records rotation leases
local job_id, token, wait = ARGV[1], ARGV[2], tonumber(ARGV[3])
local job = leased_job(job_id, token)
if not job then
  return 0
end
local qk = queue_keys(1)
local now = now_seconds()
release_lease(qk, job_id, job)
job.deliveries = math.max(0, job.deliveries - 1)
write_job(job_id, job)
make_delayed(qk, job.account, job_id, now + wait)
redis.call('HINCRBY', K_STATS, 'given_back', 1)
emit('e', 'requeued', 'job', job_id, 'at', now, 'reason', 'the fair store failed; given back')
return 1
