-- enqueue: store one job, ready now or delayed, deduplicated by delivery id and business key.
-- KEYS: global keys, then the keys of the job's queue.
-- ARGV: [1] job_id (task id ":" retries), [2] account, [3] queue (both encoded),
--       [4] the job's record before its seq (records.new_record_parts), [5] due time (epoch seconds, 0 = now), [6] business job key
--       or "-", [7] "1" for a new job (deduped on its business key, bounded by [11] and [12]),
--       "0" for the next delivery of a stored job (a retry: never refused), [8] task name and
--       [9] redacted arguments (JSON), for the event only, [10] the id of the dead letter this
--       job replays, or "": the letter leaves the dead-letter queue with the store of its
--       replay, in one step, [11] most ready jobs of one account, and most ready and delayed
--       ones for a delayed job (0: no bound), [12] most jobs in the store (0: no bound), [13]
--       the job's priority, one digit, 0 first (Celery's priority as the Redis transport reads
--       it): the first digit of its place in the account's FIFO, so it orders jobs within the
--       account, [14] the job's record after its seq (the message too; its header holds when
--       the job expires, Celery's ``expires``, which the claim reads: it drops the job then,
--       without a slot or a token), [15] the producer's deadline (epoch
--       seconds on Redis's clock; "" or absent: none): a call that runs later stores nothing
--       (it still says whether the delivery is stored: the producer's check), since its
--       producer has raised or will (store/connection/deadline.py), [16] while a reshard moves the store,
--       the shard the account moves to, else "" or absent (see below), [17] in a bulk
--       enqueue, the most rings the queue's doorbell holds after this job is ready (its place
--       in the batch, at most the fleet's size: each job wakes one more idle worker), else ""
--       or absent (a single enqueue rings when the rotation was empty: join_rotation), [18] for
--       a retry whose failure said "slow down", the scope it holds: 'a' the account in the
--       queue, 'q' the queue (else "" or absent), [19] for how many seconds, [20] the cause
--       (429, SlowDown, ...) and [21] the job's task id, both encoded (see slow_down).
-- Returns {status, job_id}: status 1 ready, 2 delayed, 0 already stored (job_id is the existing
-- one), 3 the dead letter to replay is gone (replayed or purged already), 4 the account has
-- [11] waiting jobs, 5 the store holds [12] jobs, 6 past the producer's deadline, 7 the
-- account moved to the shard whose index is job_id (a reshard); nothing is stored for 3 to 7.
-- Cost, a new job with a business key into an account with ready jobs: 6 commands (TIME,
-- HSETNX, SET, ZCARD of its FIFO for the bound (none without one), ZADD, and XADD or, when the
-- caller has not seen the recorder's stream, EXISTS); in a sharded store, one more (HGET of
-- the moved accounts). No counter: the jobs ever stored are derived (shard.py's stats).
-- include: keys events records rotation shards
-- The producer builds what it can (the record but its seq, the encoded names): the script
-- reads Redis's clock, checks and writes.
local job_id, account, queue = ARGV[1], ARGV[2], ARGV[3]
local due, job_key, dedupe = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local replays, max_ready, max_jobs = ARGV[10], tonumber(ARGV[11]), tonumber(ARGV[12])
local qk = queue_keys(1)
local now = now_seconds()
local deadline = tonumber(ARGV[15] or '')
local seq = ready_seq(ARGV[13])

local function stored_or(status)
  if redis.call('HEXISTS', K_RECORDS, job_id) == 1 then
    return {0, job_id}
  end
  return {status, ''}
end
if deadline and now > deadline then
  return stored_or(6)
end
-- a reshard (store/shards/reshard.py): an account moved away from this shard is enqueued on the shard
-- it moved to (status 7, that shard's index). While the store moves, the caller says where the
-- account goes ([16]): one that holds nothing here that the job depends on (ready or delayed
-- jobs in any queue, jobs running under a cap, the job's own delivery or business key, a limit
-- or a bucket (across its queues or in one), a pause or a provider's slow-down) moves there
-- at once, marked moved (its other done markers and dead letters follow with the reshard); one that does is frozen here (freeze_account), and moved with this
-- job by the reshard.
-- The account's ready jobs in the queue ``of``: its FIFO's length (format 1: its range).
local function ready_count(of)
  if FORMAT1 then
    return redis.call('ZLEXCOUNT', of.ready, legacy_range(account))
  end
  return redis.call('ZCARD', fifo_key(of, account))
end

if SHARDED then
  -- Whether the account holds anything here that this job depends on (see above): defined
  -- here, as a store of one shard need not make it on every call.
  local function holds_here(tag)
    if redis.call('HEXISTS', K_RECORDS, job_id) == 1 or
        (job_key ~= '-' and redis.call('EXISTS', key_of(job_key)) == 1) or
        redis.call('HEXISTS', K_LIMITS, account) == 1 or
        redis.call('HEXISTS', tag .. 'buckets', account) == 1 then
      return true
    end
    if redis.call('HLEN', tag .. 'pauses') > 0 and
        (redis.call('HEXISTS', tag .. 'pauses', 'a:' .. account .. ':*') == 1 or
         redis.call('HEXISTS', tag .. 'pauses', 'a:' .. account .. ':' .. queue) == 1 or
         redis.call('HEXISTS', tag .. 'pauses', 's:' .. account .. ':' .. queue) == 1) then
      return true
    end
    for _, name in ipairs(redis.call('SMEMBERS', K_QUEUES)) do
      local other = queue_named(name)
      if ready_count(other) > 0 or
          redis.call('HEXISTS', other.ndelayed, account) == 1 or
          redis.call('HEXISTS', other.running, account) == 1 or
          redis.call('HEXISTS', K_LIMITS, 'q:' .. name .. ':' .. account) == 1 or
          redis.call('HEXISTS', tag .. 'buckets', 'q:' .. name .. ':' .. account) == 1 then
        return true
      end
    end
    return false
  end
  local tag = string.sub(K_RECORDS, 1, -8)
  local moved = redis.call('HGET', tag .. 'moved', account)
  local target = ARGV[16] or ''
  if moved and string.sub(moved, 1, 2) == 'm ' then
    return {7, string.sub(moved, 3)}
  end
  if not moved and target ~= '' then
    if not holds_here(tag) then
      redis.call('HSET', tag .. 'moved', account, 'm ' .. target)
      return {7, target}
    end
    freeze_account(account, target)
  end
end
if replays ~= '' and redis.call('HEXISTS', K_DEAD, replays) == 0 then
  return stored_or(3)
end
-- the record, written once: also the check that the delivery is not stored already
if redis.call('HSETNX', K_RECORDS, job_id, make_new_record(ARGV[4], seq, ARGV[14])) == 0 then
  return {0, job_id}
end
-- a retry whose failure said "slow down" (slowdown.py): its scope waits as long, from now
if (ARGV[18] or '') ~= '' then
  slow_down(slow_down_field(ARGV[18] == 'a' and account or nil, queue),
            now + tonumber(ARGV[19]), ARGV[20], ARGV[21])
end

-- the dead letter is answered by the job already holding its key, or by the job stored here
local function take_letter()
  if replays ~= '' then
    redis.call('HDEL', K_DEAD, replays)
    redis.call('ZREM', K_DEADINDEX, replays)
    redis.call('HINCRBY', K_STATS, 'replayed', 1)
  end
end

local function refuse(status, existing)
  redis.call('HDEL', K_RECORDS, job_id)
  return {status, existing or ''}
end

-- the key's marker before this job took it over (false: this job made it), for a refusal
local taken_over = nil
if job_key ~= '-' then
  local key = key_of(job_key)
  local owner = SHARDED and account or nil  -- see make_marker
  local pending = make_marker('pending', job_id, nil, nil, owner)
  taken_over = false
  if dedupe ~= '1' or not redis.call('SET', key, pending, 'NX') then
    -- the key is held (a retry re-points it): by a job still in the store (not one a task has
    -- dead-lettered already, whose ack is still on its way), or by a job that finished within
    -- the retention (its string has a time to live): the job is that one
    local old = redis.call('GET', key)
    taken_over = old
    local holder = old and marker_holder(old)
    if dedupe == '1' and holder and holder ~= job_id and
        ((redis.call('HEXISTS', K_RECORDS, holder) == 1 and
          redis.call('HEXISTS', K_DEAD, holder) == 0) or redis.call('PTTL', key) > 0) then
      take_letter()
      return refuse(0, holder)
    end
    -- a started marker stays started (a retry, a replay: the side effect may have begun)
    redis.call('SET', key, marker_state(old) == 'started' and
                           make_marker('started', job_id, nil, nil, owner) or pending)
  end
end
-- the account's ready jobs before this one, for the bound (none asked without one)
local before = (dedupe == '1' and max_ready > 0) and ready_count(qk) or nil
if dedupe == '1' then
  -- a delayed job counts the account's delayed ones too (a running job holds a slot: bounded)
  local pending = (before or 0) + (due > now and hget_number(qk.ndelayed, account) or 0)
  local refused = (max_ready > 0 and pending >= max_ready and 4) or
                  (max_jobs > 0 and redis.call('HLEN', K_RECORDS) > max_jobs and 5)
  if refused then
    if taken_over then
      redis.call('SET', key_of(job_key), taken_over)
    elseif taken_over == false then
      redis.call('DEL', key_of(job_key))
    end
    return refuse(refused, '')
  end
end
take_letter()
emit('e', 'enqueued', 'job', job_id, 'q', queue, 'a', account, 'k', job_key, 't', ARGV[8],
     'args', ARGV[9], 'at', now_text(), 'due', due > now and ARGV[5] or now_text())
-- the store's known queues: named by a job that may be the first of its queue (a delayed one, or
-- one whose account joins the rotation), not by every job of a backlog
if due > now then
  redis.call('SADD', K_QUEUES, queue)
  make_delayed(qk, account, job_id, due)
  return {2, job_id}
end
if make_ready(qk, account, seq, job_id, not (before and before > 0)) then
  redis.call('SADD', K_QUEUES, queue)
end
if (ARGV[17] or '') ~= '' then  -- a bulk enqueue's job: a ring for each worker it can feed
  ring(qk, tonumber(ARGV[17]))
end
return {1, job_id}
