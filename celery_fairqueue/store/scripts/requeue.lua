-- requeue: the worker gives a leased job back (worker lost, shutdown); it keeps its FIFO place.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id, [2] owner token, [3] account (encoded).
-- Returns 1, or 0 when the lease was no longer this worker's.
local job_id, token, account = ARGV[1], ARGV[2], ARGV[3]
if not release_lease(job_id, token, account) then
  return 0
end
local qk = queue_keys(1)
local meta = redis.call('HGET', K_META, job_id)
if not meta then
  return 0
end
local _, _, seq = split_meta(meta)
make_ready(qk, account, seq, job_id)
redis.call('HINCRBY', K_STATS, 'requeued', 1)
emit('e', 'requeued', 'job', job_id, 'at', now_seconds())
return 1
