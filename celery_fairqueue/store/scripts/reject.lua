-- reject: the worker refuses a leased job for good (undecodable, unknown task); dead-letter it.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] reason.
-- Returns 1, or 0 when the lease was no longer this worker's.
-- include: keys leases
local job_id, token, reason = ARGV[1], ARGV[2], ARGV[3]
local job = leased_job(job_id, token)
if not job then
  return 0
end
release_lease(queue_keys(1), job_id, job)
dead_letter(job_id, job, reason, now_seconds())
return 1
