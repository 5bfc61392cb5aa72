-- ack: the worker finished a job (success, failure or handed over to a retry); settle its lease.
-- A worker that is claiming acks with its next claim instead (claim.lua); this is the ack of one
-- that stopped claiming, and of the test runner.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] owner token, [2] done-key retention in seconds, then the job as claim.lua's acks
--       give it: [3] queue index (1), [4] job_id, [5] business key as stored ("-": none),
--       [6] "1" when the task succeeded (its key is marked done), else "0".
-- Returns 1, or 0 when the lease was no longer this worker's (it expired and was reaped).
-- include: keys leases
if not ack_job(queue_keys(tonumber(ARGV[3])), ARGV[4], ARGV[1], ARGV[5], ARGV[6] == '1',
               tonumber(ARGV[2])) then
  return 0
end
redis.call('HINCRBY', K_STATS, 'acked', 1)
return 1
