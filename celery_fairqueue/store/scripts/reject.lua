-- reject: the worker refuses a leased job for good (undecodable, unknown task); dead-letter it.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] account (encoded), [4] reason.
-- Returns 1, or 0 when the lease was no longer this worker's.
local job_id, token, account, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not release_lease(job_id, token, account) then
  return 0
end
dead_letter(job_id, reason, now_seconds())
return 1
