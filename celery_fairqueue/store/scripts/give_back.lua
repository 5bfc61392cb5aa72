-- give_back: a leased job whose run could not write to the store (full, read-only, busy) goes
-- back to wait a moment, in its FIFO place once due. The store failed, not the job: the failed
-- delivery does not count toward the poison limit (max deliveries).
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] account (encoded), [4] seconds to wait.
-- Returns 1, or 0 when the lease was no longer this worker's.
local job_id, token, account, wait = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not release_lease(job_id, token, account) then
  return 0
end
local qk = queue_keys(1)
if not redis.call('HGET', K_META, job_id) then
  return 0
end
local now = now_seconds()
redis.call('HINCRBY', K_DELIVERIES, job_id, -1)
make_delayed(qk, account, job_id, now + wait)
redis.call('HINCRBY', K_STATS, 'given_back', 1)
emit('e', 'requeued', 'job', job_id, 'at', now, 'reason', 'the fair store failed; given back')
return 1
