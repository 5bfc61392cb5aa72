-- Settling a lease: the job a worker holds, released, acked, dead-lettered or extended
-- (writers/leases.py is the Python side).
-- include: keys events records markers rotation

-- What a leased job was counted in (its record's ``capped``): '-' nothing, 'c' its account's
-- running jobs in the queue (qk.running[account], for its cap), 'q' the queue's running jobs
-- (qk.running['*'], for the queue's shared concurrency, set_queue_limit), 'b' both.
local function counted_for_account(capped)
  return capped == 'c' or capped == 'b'
end

local function counted_for_queue(capped)
  return capped == 'q' or capped == 'b'
end

-- A leased job of the account stopped running: its counts go down (the console counts the
-- jobs of accounts without a cap off the lease set). An account waiting on its cap may go again.
local function release_running(qk, account, capped)
  if counted_for_queue(capped) then
    hincr_or_drop(qk.running, '*', -1)
  end
  if counted_for_account(capped) then
    hincr_or_drop(qk.running, account, -1)
    if redis.call('HGET', qk.state, account) == 'c' then
      rotate_in_or_forget(qk, account)
    end
  end
end

-- A limit changed (``account``'s, or a store-wide one: nil): count the leased jobs concerned
-- again, every one of them counted and flagged, so that a cap set now counts what runs
-- already, exactly, and each job's release takes its count back: for the account's cap (of
-- ``account``, or of every account), and for nil also the queues' shared count ('*'). O(leased
-- jobs): as many as the workers' slots. ``index``: queue name -> its position in KEYS.
local function recount_running(account, index)
  local counts = {}
  for _, job_id in ipairs(redis.call('ZRANGE', K_LEASES, 0, -1)) do
    local job = read_job(job_id)
    local i = job and job.owner ~= '-' and index[job.queue]
    if i and (account == nil or job.account == account) then
      local flag = (account == nil or counted_for_queue(job.capped)) and 'b' or 'c'
      if job.capped ~= flag then
        job.capped = flag
        write_job(job_id, job)
      end
      counts[i] = counts[i] or {}
      counts[i][job.account] = (counts[i][job.account] or 0) + 1
      if account == nil then
        counts[i]['*'] = (counts[i]['*'] or 0) + 1
      end
    end
  end
  for i = 1, queue_count() do
    local qk = queue_keys(i)
    if account ~= nil then
      redis.call('HDEL', qk.running, account)
    else
      redis.call('DEL', qk.running)
    end
    for name, count in pairs(counts[i] or {}) do
      redis.call('HSET', qk.running, name, count)
    end
  end
end

-- The job, read, when the worker ``token`` holds its lease; nil when the lease is no longer its
-- own (it expired and was reaped) or the job is gone.
local function leased_job(job_id, token)
  local job = read_job(job_id)
  if job and job.owner == token then
    return job
  end
  return nil
end

-- The worker holding a job's lease lets go of it (ack, requeue, reject, give back): the job's
-- record no longer names an owner (the caller writes or forgets it), and its slot is free.
local function release_lease(qk, job_id, job)
  redis.call('ZREM', K_LEASES, job_id)
  release_running(qk, job.account, job.capped)
  job.owner, job.started, job.capped = '-', '-', '-'
end

-- Store a dead letter: a JSON object whose Lua-made fields are plain numbers and strings, and
-- whose message ("envelope") and the worker's record ("record", JSON made by Python) are kept as
-- opaque strings, byte for byte: re-encoding them with cjson would corrupt big integers, floats,
-- empty lists and escapes. ``meta`` is the job's header line (records.JobRecord).
local function store_dead(job_id, reason, record, now, job)
  emit('e', 'dead', 'job', job_id, 'at', now, 'reason', reason)
  local header = ''
  if job then
    header = make_header({queue = job.queue, account = job.account, seq = job.seq,
                          job_key = job.job_key, expires_text = job.expires_text,
                          deliveries = job.deliveries, owner = '-', started = '-',
                          capped = '-'})
  end
  local letter = cjson.encode({
    job_id = job_id, at = now, reason = reason, record = record or '',
    envelope = job and job.envelope or '', meta = header,
    deliveries = job and job.deliveries or 0,
  })
  -- a job buried again (its worker died before the ack, and it failed again) counts once
  if redis.call('HSET', K_DEAD, job_id, letter) == 1 then
    redis.call('HINCRBY', K_STATS, 'dead', 1)
  end
  redis.call('ZADD', K_DEADINDEX, now, job_id)
end

-- Keep the message with its reason, and forget the job. Its key's marker stays, held by no job
-- in the store: a replay of the letter takes it over and, finding it started, asks the task
-- whether the side effect already happened.
local function dead_letter(job_id, job, reason, now)
  store_dead(job_id, reason, nil, now, job)
  if redis.call('HDEL', K_RECORDS, job_id) == 1 then
    redis.call('HINCRBY', K_STATS, 'poisoned', 1)  -- left the store (shard.py's stats)
  end
end

-- The worker finished a job (``succeeded``, or failed, or handed over to a retry): release its
-- lease and forget it. A success marks its business key done first, even when the lease was lost
-- (the side effect happened), and is recorded as ``succeeded`` (which says acked too); a
-- failure leaves the key's marker as it is, kept for the retention like a done one (unless a
-- retry of the job holds the key now). Returns false when the lease was no longer this
-- worker's (it expired and was reaped). The caller counts the acked jobs in K_STATS (a claim,
-- once for all it carries). ``job_key`` is the worker's copy: the record's wins.
local function ack_job(qk, job_id, token, job_key, succeeded, retention)
  local job = read_job(job_id)
  if job then
    job_key = job.job_key
  end
  local external_id = nil
  if succeeded and job_key ~= '-' then
    external_id = mark_done(job_key, job_id, retention, job and job.account)
  end
  if succeeded then
    if external_id then
      emit('e', 'succeeded', 'job', job_id, 'at', now_text(), 'ext', external_id)
    else
      emit('e', 'succeeded', 'job', job_id, 'at', now_text())
    end
  end
  if not job or job.owner ~= token then
    return false
  end
  release_lease(qk, job_id, job)
  redis.call('HDEL', K_RECORDS, job_id)
  if not succeeded and job_key ~= '-' then
    local key = key_of(job_key)
    -- finished: kept for the retention, unless a retry holds it now or the job is a dead
    -- letter (its replay takes the key over, and asks the task first: see bury.lua)
    if marker_holder(redis.call('GET', key) or '') == job_id and
        redis.call('HEXISTS', K_DEAD, job_id) == 0 then
      redis.call('PEXPIRE', key, retention_ms(retention))
    end
  end
  if not succeeded then
    emit('e', 'acked', 'job', job_id, 'at', now_text())
  end
  return true
end

-- Push back the lease deadline of each job in ARGV[first..] this worker (token) still owns;
-- returns the ids whose lease it lost (they were reaped).
local function extend_leases(token, lease, first)
  local deadline = now_seconds() + lease
  local lost = {}
  for n = first, #ARGV do
    local job_id = ARGV[n]
    if leased_job(job_id, token) then
      redis.call('ZADD', K_LEASES, 'XX', deadline, job_id)
    else
      lost[#lost + 1] = job_id
    end
  end
  return lost
end
