-- move_drop: a reshard (store/shards/reshard.py) drops from the shard an account moves to the copied
-- jobs that left the old shard before move_out (cancelled, expired): still paused there, none
-- of them ran. A pending marker they held goes with them (free_key).
-- KEYS: global keys.
-- ARGV: the job ids.
-- Returns how many it dropped.
-- include: keys records markers rotation
local dropped = 0
for _, job_id in ipairs(ARGV) do
  local job = read_job(job_id)
  if job then
    local qk = queue_named(job.queue)
    redis.call('ZREM', fifo_key(qk, job.account), ready_member(job.seq, job_id))
    take_delayed(qk, job.account, job_id)
    free_key(job.job_key, job_id)
    redis.call('HDEL', K_RECORDS, job_id)
    dropped = dropped + 1
  end
end
if dropped > 0 then
  redis.call('HINCRBY', K_STATS, 'moved_out', dropped)  -- (shard.py's stats)
end
return dropped
