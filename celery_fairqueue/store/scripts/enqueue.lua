-- enqueue: store one job, ready now or delayed, deduplicated by delivery id and business key.
-- KEYS: global keys, then the 7 keys of the job's queue.
-- ARGV: [1] job_id (task id ":" retries), [2] account, [3] queue (both encoded),
--       [4] envelope (JSON message), [5] due time (epoch seconds, 0 = now), [6] business job key
--       or "-", [7] "1" to dedupe on the business key, [8] done-key retention in seconds,
--       [9] task name and [10] redacted arguments (JSON), for the event only, [11] the id of the
--       dead letter this job replays, or "": the letter leaves the dead-letter queue with the
--       store of its replay, in one step.
-- Returns {status, job_id}: status 1 ready, 2 delayed, 0 already stored (job_id is the existing
-- one), 3 the dead letter to replay is gone (replayed or purged already): nothing stored.
local job_id, account, queue, envelope = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local due, job_key, dedupe, retention = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local qk = queue_keys(1)
local now = now_seconds()

if redis.call('HEXISTS', K_META, job_id) == 1 then
  return {0, job_id}
end
local replays = ARGV[11] or ''
if replays ~= '' then
  if redis.call('HDEL', K_DEAD, replays) == 0 then
    return {3, ''}
  end
  redis.call('ZREM', K_DEADINDEX, replays)
  redis.call('HINCRBY', K_STATS, 'replayed', 1)
end
if job_key ~= '-' then
  local existing = redis.call('HGET', K_JOBKEYS, job_key)
  if existing and dedupe == '1' then
    local done_at = redis.call('ZSCORE', K_DONE, job_key)
    if done_at then
      if tonumber(done_at) >= now - retention then
        return {0, existing}
      end
    elseif redis.call('HEXISTS', K_META, existing) == 1 then
      return {0, existing}
    end
  end
  redis.call('HSET', K_JOBKEYS, job_key, job_id)
  redis.call('ZREM', K_DONE, job_key)
end

local seq = string.format('%015d', redis.call('INCR', K_SEQ))
redis.call('HSET', K_JOBS, job_id, envelope)
redis.call('HSET', K_META, job_id, queue .. ' ' .. account .. ' ' .. seq .. ' ' .. job_key)
redis.call('SADD', K_QUEUES, queue)
redis.call('HINCRBY', K_STATS, 'enqueued', 1)
emit('e', 'enqueued', 'job', job_id, 'q', queue, 'a', account, 'k', job_key, 't', ARGV[9],
     'args', ARGV[10], 'at', now, 'due', math.max(due, now))
if due > now then
  redis.call('ZADD', qk.delayed, due, job_id)
  return {2, job_id}
end
make_ready(qk, account, seq, job_id)
return {1, job_id}
