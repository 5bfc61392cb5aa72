-- run_now: a delayed job (eta, countdown, retry backoff, a given-back job) becomes ready now. It
-- joins its account's FIFO like any ready job, so its account's limits and pauses still apply.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id.
-- Returns 1 made ready, 0 not delayed (ready, running or not in the store).
-- include: keys events records rotation
local job_id = ARGV[1]
local job = read_job(job_id)
if not job then
  return 0
end
local qk = queue_keys(1)
if not take_delayed(qk, job.account, job_id) then
  return 0
end
local now = now_seconds()
job.seq = ready_seq(string.sub(job.seq, 1, 1))
write_job(job_id, job)
make_ready(qk, job.account, job.seq, job_id)
emit('e', 'promoted', 'job', job_id, 'at', now)
return 1
