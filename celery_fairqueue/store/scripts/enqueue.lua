-- enqueue: store one job, ready now or delayed, deduplicated by delivery id and business key.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id (task id ":" retries), [2] account, [3] queue (both encoded),
--       [4] envelope (JSON message), [5] due time (epoch seconds, 0 = now), [6] business job key
--       or "-", [7] "1" for a new job (deduped on its business key, bounded by [12] and [13]),
--       "0" for the next delivery of a stored job (a retry: never refused), [8] done-key
--       retention in seconds, [9] task name and [10] redacted arguments (JSON), for the event
--       only, [11] the id of the dead letter this job replays, or "": the letter leaves the
--       dead-letter queue with the store of its replay, in one step, [12] most pending jobs of
--       one account (0: no bound), [13] most jobs in the store (0: no bound), [14] the job's
--       priority, one digit, 0 first (Celery's priority as the Redis transport reads it): the
--       first digit of its place in the account's FIFO, so it orders jobs within the account,
--       [15] when the job expires (epoch seconds, Celery's ``expires``) or "": the claim drops
--       it then, without a slot or a token, [16] the producer's deadline (epoch seconds on
--       Redis's clock; "" or absent: none): a call that runs later stores nothing (it still
--       says whether the delivery is stored: the producer's check), since its producer has
--       raised or will (store/deadline.py).
-- Returns {status, job_id}: status 1 ready, 2 delayed, 0 already stored (job_id is the existing
-- one), 3 the dead letter to replay is gone (replayed or purged already), 4 the account has
-- [12] pending jobs, 5 the store holds [13] jobs, 6 past the producer's deadline; nothing is
-- stored for 3, 4, 5 and 6.
local job_id, account, queue, envelope = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local due, job_key, dedupe, retention = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local replays, max_pending, max_jobs = ARGV[11], tonumber(ARGV[12]), tonumber(ARGV[13])
local qk = queue_keys(1)
local now = now_seconds()
local deadline = tonumber(ARGV[16] or '')

if redis.call('HEXISTS', K_META, job_id) == 1 then
  return {0, job_id}
end
if deadline and now > deadline then
  return {6, ''}
end
if replays ~= '' and redis.call('HEXISTS', K_DEAD, replays) == 0 then
  return {3, ''}
end

-- the dead letter is answered by the job already holding its key, or by the job stored here
local function take_letter()
  if replays ~= '' then
    redis.call('HDEL', K_DEAD, replays)
    redis.call('ZREM', K_DEADINDEX, replays)
    redis.call('HINCRBY', K_STATS, 'replayed', 1)
  end
end

if job_key ~= '-' and dedupe == '1' then
  local existing = redis.call('HGET', K_JOBKEYS, job_key)
  if existing then
    local done_at = redis.call('ZSCORE', K_DONE, job_key)
    if (done_at and tonumber(done_at) >= now - retention) or
        (not done_at and redis.call('HEXISTS', K_META, existing) == 1) then
      take_letter()
      return {0, existing}
    end
  end
end
-- the account's pending jobs, this one counted: a refused job takes its count back
local pending = redis.call('HINCRBY', K_PENDING, account, 1)
if dedupe == '1' then
  local refused = (max_pending > 0 and pending > max_pending and 4) or
                  (max_jobs > 0 and redis.call('HLEN', K_META) >= max_jobs and 5)
  if refused then
    hincr_or_drop(K_PENDING, account, -1)
    return {refused, ''}
  end
end
take_letter()
if job_key ~= '-' then
  redis.call('HSET', K_JOBKEYS, job_key, job_id)
  redis.call('ZREM', K_DONE, job_key)
end

local seq = ARGV[14] .. string.format('%015d', redis.call('INCR', K_SEQ))
redis.call('HSET', K_JOBS, job_id, envelope)
redis.call('HSET', K_META, job_id, make_meta(queue, account, seq, job_key, ARGV[15]))
redis.call('SADD', K_QUEUES, queue)
redis.call('HINCRBY', K_STATS, 'enqueued', 1)
emit('e', 'enqueued', 'job', job_id, 'q', queue, 'a', account, 'k', job_key, 't', ARGV[9],
     'args', ARGV[10], 'at', now_text(), 'due', due > now and ARGV[5] or now_text())
if due > now then
  make_delayed(qk, account, job_id, due)
  return {2, job_id}
end
make_ready(qk, account, seq, job_id)
return {1, job_id}
