-- requeue: the worker gives a leased job back (worker lost, shutdown); it keeps its FIFO place.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token.
-- Returns 1, or 0 when the lease was no longer this worker's.
-- include: keys events records rotation leases
local job_id, token = ARGV[1], ARGV[2]
local job = leased_job(job_id, token)
if not job then
  return 0
end
local qk = queue_keys(1)
release_lease(qk, job_id, job)
write_job(job_id, job)
make_ready(qk, job.account, job.seq, job_id)
redis.call('HINCRBY', K_STATS, 'requeued', 1)
emit('e', 'requeued', 'job', job_id, 'at', now_seconds())
return 1
