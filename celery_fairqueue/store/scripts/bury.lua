-- bury: a running job failed for good (permanent, or out of attempts); keep it as a dead letter.
-- The job stays leased: the worker's ack, which follows, settles it and finds its key freed.
-- Its markers stay, so a replay first asks the task whether the side effect already happened.
-- KEYS: global keys only.
-- ARGV: [1] job_id, [2] reason, [3] business job key or "-", [4] the worker's record (JSON made
--       by Python: task, account, args, kwargs, attempts, error, traceback, ...), kept as is.
-- Returns 1.
local job_id, reason, job_key, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
store_dead(job_id, reason, record, now_seconds())
free_job_key(job_key, job_id)
return 1
