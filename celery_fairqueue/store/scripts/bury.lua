-- bury: a running job failed for good (permanent, or out of attempts); keep it as a dead letter.
-- The job stays leased: the worker's ack, which follows, settles it. Its key's marker stays, so
-- a replay first asks the task whether the side effect already happened, and the key is free
-- for it: held by no job in the store, it is taken over by the next job of the key (enqueue).
-- KEYS: global keys only.
-- ARGV: [1] job_id, [2] reason, [3] the worker's record (JSON made by Python: task, account,
--       args, kwargs, attempts, error, traceback, ...), kept as is.
-- Returns 1.
-- include: keys records leases
local job_id, reason, record = ARGV[1], ARGV[2], ARGV[3]
store_dead(job_id, reason, record, now_seconds(), read_job(job_id))
return 1
