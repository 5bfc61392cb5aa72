-- bury: a running job failed for good (permanent, or out of attempts); keep it as a dead letter.
-- The job stays leased: the worker's ack, which follows, settles it and finds its key freed.
-- Its markers stay, so a replay first asks the task whether the side effect already happened.
-- KEYS: global keys only.
-- ARGV: [1] job_id, [2] the dead letter (JSON object: task, account, job_key, args, attempts,
--       reason, error, traceback, first_failure, ...).
-- Returns 1.
local job_id = ARGV[1]
local record = cjson.decode(ARGV[2])
store_dead(job_id, record, now_seconds())
if type(record.job_key) == 'string' then
  free_job_key(record.job_key, job_id)
end
return 1
