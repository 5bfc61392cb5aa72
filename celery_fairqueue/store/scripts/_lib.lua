-- Helpers shared by every script: lua.py prepends this file to each script when it loads it,
-- after a prologue that binds the K_* names of the global keys (keys.GLOBAL_KEY_NAMES) the
-- script touches, itself or through these helpers, and NGLOBAL, their number.
--
-- KEYS (every script): those global keys, then 13 keys per fair queue in the order of
-- keys.QUEUE_KEY_NAMES: ring, state, ready, nready, deferred, delayed, running, waiting, started,
-- ndelayed, deferrals, tags, finish; then, for a script that emits events, the event stream
-- (K_EVENTS).
-- Account ids and queue names arrive percent-encoded (no spaces, no "|", no braces).
-- All times are Redis server time, so workers with skewed clocks agree on leases and buckets.

local NQKEYS = 13
local EVENTS_MAXLEN = 1000000

-- Redis's clock, read once per script run; now_text() is it as a script argument (a Lua number
-- would be formatted again by every command that takes it).
local clock, clock_text, clock_micros = nil, nil, nil
local function now_seconds()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) + tonumber(t[2]) / 1000000
    clock_micros = tonumber(t[1]) * 1000000 + tonumber(t[2])  -- exact: below 2^53
  end
  return clock
end

local function now_text()
  if not clock_text then
    clock_text = string.format('%.6f', now_seconds())
  end
  return clock_text
end

local function queue_count()
  return (#KEYS - NGLOBAL - (K_EVENTS and 1 or 0)) / NQKEYS
end

-- Record a state transition for the recorder (events.py), only once a recorder has created the
-- stream: with no recorder nothing piles up. Fields alternate name, value.
local recording = nil
local function emit(...)
  if recording == nil then
    recording = redis.call('EXISTS', K_EVENTS) == 1
  end
  if recording then
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*', ...)
  end
end

local function queue_keys(i)
  local b = NGLOBAL + (i - 1) * NQKEYS
  return {ring = KEYS[b + 1], state = KEYS[b + 2], ready = KEYS[b + 3], nready = KEYS[b + 4],
          deferred = KEYS[b + 5], delayed = KEYS[b + 6], running = KEYS[b + 7],
          waiting = KEYS[b + 8], started = KEYS[b + 9], ndelayed = KEYS[b + 10],
          deferrals = KEYS[b + 11], tags = KEYS[b + 12], finish = KEYS[b + 13],
          name = string.match(KEYS[b + 1], ':q:([^:]+):ring$'),
          wake = (string.gsub(KEYS[b + 1], 'ring$', 'wake'))}
end

-- The stored formats, each read and built by one helper here (records.py is their Python
-- codec; keep the two in step).

-- meta is "queue account seq job_key" (job_key "-" when the job has none), then " expires"
-- (epoch seconds) for a job sent with Celery's ``expires`` (records.JobMeta)
local function split_meta(meta)
  local queue, account, seq, job_key, expires = string.match(meta, '^(%S+) (%S+) (%S+) (%S+) ?(%S*)$')
  return queue, account, seq, job_key, tonumber(expires)
end

-- ``expires`` is the text of the epoch seconds, or '' for none.
local function make_meta(queue, account, seq, job_key, expires)
  return queue .. ' ' .. account .. ' ' .. seq .. ' ' .. job_key ..
         (expires ~= '' and (' ' .. expires) or '')
end

-- A ready member is "account|seq|job_id" (records.ReadyMember): lex order gives each account a
-- FIFO range; the job id is last and may hold "|" itself.
local function ready_member(account, seq, job_id)
  return account .. '|' .. seq .. '|' .. job_id
end

-- The ZRANGEBYLEX bounds of one account's members ("}" sorts right after "|").
local function member_range(account)
  return '[' .. account .. '|', '(' .. account .. '}'
end

local function split_member(member)
  return string.match(member, '^([^|]*)|([^|]*)|(.*)$')
end

-- A rotation member (QueueKeys.tags) is "stamp account": the stamp orders accounts of equal
-- virtual tags by when they got it, first come first served, as the ring did before weights.
-- It is Redis time in microseconds (9 digits) and a count within the script (2 digits), in
-- base 62 with digits in ASCII order, so that lex order is time order (until the year 2398);
-- short, as every account waiting in a queue has one.
local DIGITS62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
local stamps = 0

local function base62(n, width)
  local out = ''
  for _ = 1, width do
    local d = n % 62
    out = string.sub(DIGITS62, d + 1, d + 1) .. out
    n = (n - d) / 62
  end
  return out
end

local function rotation_member(account)
  now_seconds()
  stamps = stamps + 1
  return base62(clock_micros, 9) .. base62(stamps, 2) .. ' ' .. account
end

local function split_rotation_member(member)
  return string.match(member, '^%w+ (%S+)$')
end

-- A packed limit is "rate burst concurrency windows weight" (limits.AccountLimit.pack): rate in
-- jobs/s (0 = none), windows "-" or "open,close;open,close" in epoch seconds, computed ahead by
-- limits.py in the account's zone. A limit packed before weights existed has no weight: 1.
local function split_limit(packed)
  local rate, burst, cap, windows, weight =
    string.match(packed, '^(%S+) (%S+) (%S+) (%S+) ?(%S*)$')
  return tonumber(rate), tonumber(burst), tonumber(cap), windows, tonumber(weight) or 1
end

-- An account's token bucket is "tokens updated_at" (records.Bucket); nil, nil when it has none.
local function read_bucket(account)
  local bucket = redis.call('HGET', K_BUCKETS, account)
  if not bucket then
    return nil, nil
  end
  local tokens, updated = string.match(bucket, '^(%S+) (%S+)$')
  return tonumber(tokens), tonumber(updated)
end

local function write_bucket(account, tokens, updated)
  redis.call('HSET', K_BUCKETS, account, string.format('%.17g %.17g', tokens, updated))
end

local function hget_number(key, field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

-- The rotation is start-time fair queueing over virtual time: qk.tags holds the accounts that
-- may run now, each scored by its virtual start tag, and the claim serves the lowest and moves
-- it on by VIRTUAL_TURN / weight (claim.lua). Tags are whole numbers, so they add up exactly
-- (a double holds every integer below 2^53); reap.lua shifts them back when they grow large.
local VIRTUAL_TURN = 1000000

-- The account joins the rotation at its floor, the lowest tag there; but no earlier than the
-- tag it left with when it ran out of jobs (qk.finish), so an account that comes and goes
-- neither banks turns nor jumps ahead. An empty rotation starts virtual time again at 0: no
-- account waits, so no tag means anything (claim.lua forgets the finish tags too when it finds
-- the rotation empty). ``front``: one unit ahead of the floor (a deferred account whose token
-- is there: a later turn would waste it). When the rotation was empty, the queue's idle
-- workers are woken on its channel (worker/wakeups.py) instead of finding the work at their
-- next poll.
-- A claim sets held_wakes to a table: the queues whose rotation it filled wait there, and it
-- wakes the idle workers at its end only if it leaves them work (a claim that promotes a
-- deferred account and takes its job itself woke every idle worker for nothing: each token of
-- a rate-limited account cost a claim per idle worker).
local held_wakes = nil

local function join_rotation(qk, account, front)
  local head = redis.call('ZRANGE', qk.tags, 0, 0, 'WITHSCORES')
  local tag = tonumber(head[2] or '0')
  if front then
    tag = tag - 1
  end
  if not head[1] then
    redis.call('DEL', qk.finish)
    if held_wakes then
      held_wakes[qk.wake] = qk
    else
      redis.call('PUBLISH', qk.wake, 'ready')
    end
  else
    local left = redis.call('ZSCORE', qk.finish, account)
    if left then
      redis.call('ZREM', qk.finish, account)
      tag = math.max(tag, tonumber(left))
    end
  end
  redis.call('ZADD', qk.tags, tag, rotation_member(account))
end

-- Upgrade: the accounts a store written before weights left in its ring list join the
-- rotation (the claim, when its rotation is empty, and the reaper call this).
local function adopt_ring(qk, batch)
  for _, account in ipairs(redis.call('LPOP', qk.ring, batch) or {}) do
    join_rotation(qk, account)
  end
end

-- Back into the rotation if it has ready jobs, else out of the queue's state entirely. An account
-- whose deferral ended goes to the front: it waited for its token, and a later turn would waste it.
local function rotate_in_or_forget(qk, account, front)
  redis.call('HDEL', qk.deferrals, account)
  if hget_number(qk.nready, account) > 0 then
    redis.call('HSET', qk.state, account, 'r')
    join_rotation(qk, account, front)
  else
    redis.call('HDEL', qk.state, account)
  end
end

local function hincr_or_drop(key, field, by)
  if redis.call('HINCRBY', key, field, by) <= 0 then
    redis.call('HDEL', key, field)
  end
end

-- A job joins its account's FIFO (ordered by seq); the account joins the rotation unless it is
-- already there, deferred by its limit (or at its concurrency cap) or paused by an operator.
-- ``since`` (default now) is when it became ready, kept in waiting for the oldest waiting age.
local function make_ready(qk, account, seq, job_id, since)
  redis.call('ZADD', qk.ready, 0, ready_member(account, seq, job_id))
  redis.call('HINCRBY', qk.nready, account, 1)
  redis.call('ZADD', qk.waiting, 'NX', since or now_text(), job_id)
  if not redis.call('HGET', qk.state, account) then
    redis.call('HSET', qk.state, account, 'r')
    join_rotation(qk, account)
  end
end

-- A leased job of the account stopped running; an account waiting on its cap may go again.
local function release_running(qk, account)
  if redis.call('HINCRBY', qk.running, account, -1) <= 0 then
    redis.call('HDEL', qk.running, account)
  end
  if redis.call('HGET', qk.state, account) == 'c' then
    rotate_in_or_forget(qk, account)
  end
end

-- A job waits for its time (eta, countdown, backoff); ndelayed counts it for its account. When
-- it is now the first due, idle workers are woken to learn when to claim next.
local function make_delayed(qk, account, job_id, due)
  if redis.call('ZADD', qk.delayed, due, job_id) == 1 then
    redis.call('HINCRBY', qk.ndelayed, account, 1)
  end
  if redis.call('ZRANGE', qk.delayed, 0, 0)[1] == job_id then
    redis.call('PUBLISH', qk.wake, 'due')
  end
end

-- Take a job out of the delayed set; false when it was not there.
local function take_delayed(qk, account, job_id)
  if redis.call('ZREM', qk.delayed, job_id) == 0 then
    return false
  end
  hincr_or_drop(qk.ndelayed, account, -1)
  return true
end

-- The operator pause of the account in this queue (see keys.Keys.pauses), or false.
-- While no pause exists at all (the usual case) one HLEN per script answers for every account.
local any_pause = nil
local function operator_paused(qk, account)
  if any_pause == nil then
    any_pause = redis.call('HLEN', K_PAUSES) > 0
  end
  if not any_pause then
    return false
  end
  local own, all = unpack(redis.call('HMGET', K_PAUSES, 'a:' .. account .. ':' .. qk.name,
                                     'a:' .. account .. ':*'))
  return own or all
end

-- Whether an operator paused the whole queue.
local function queue_paused(qk)
  if any_pause == nil then
    any_pause = redis.call('HLEN', K_PAUSES) > 0
  end
  return any_pause and redis.call('HEXISTS', K_PAUSES, 'q:' .. qk.name) == 1
end

local function drop_lease(job_id)
  redis.call('ZREM', K_LEASES, job_id)
  redis.call('HDEL', K_OWNERS, job_id)
end

-- The worker holding a job's lease lets go of it (ack, requeue, reject, give back): false when
-- the lease is no longer its own (it expired and was reaped). ``qk`` defaults to the first queue.
local function release_lease(job_id, token, account, qk)
  if redis.call('HGET', K_OWNERS, job_id) ~= token then
    return false
  end
  drop_lease(job_id)
  qk = qk or queue_keys(1)
  redis.call('HDEL', qk.started, job_id)
  release_running(qk, account)
  return true
end

-- The idempotency marker of a business key (JSON, see task.py), decoded; nil when there is none
-- or it cannot be read.
local function read_marker(job_key)
  local raw = redis.call('HGET', K_MARKERS, job_key)
  if not raw then
    return nil, nil
  end
  local ok, marker = pcall(cjson.decode, raw)
  return raw, (ok and type(marker) == 'table') and marker or nil
end

-- Write a key's marker (records.Marker), the one writer of markers: JSON state, job_id, at, and
-- external_id when ``external`` (a JSON string literal made by records.marker_external_id, so
-- Python's own escapes survive byte for byte) is given.
local function write_marker(job_key, state, job_id, external)
  local tail = (external and external ~= '') and (',"external_id":' .. external) or ''
  redis.call('HSET', K_MARKERS, job_key, '{"state":"' .. state .. '","job_id":' ..
             cjson.encode(job_id) .. ',"at":' .. now_text() .. tail .. '}')
end

-- The claim hands a job with a business key to a worker: unless the key is done already, its
-- started marker is written here, before the side effect can begin. Returns the marker as it
-- was ('' when none), for the task to decide whether to run or to reconcile.
local function mark_started(job_key, job_id)
  local raw, marker = read_marker(job_key)
  if not (marker and marker.state == 'done') then
    write_marker(job_key, 'started', job_id)
  end
  return raw or ''
end

-- The job's side effect happened: its key is done, from now (a done marker the task wrote
-- itself, with the external id, stays). Returns the external id, or nil.
local function mark_done(job_key, job_id)
  redis.call('ZADD', K_DONE, now_text(), job_key)
  local _, marker = read_marker(job_key)
  if marker and marker.state == 'done' then
    return type(marker.external_id) == 'string' and marker.external_id or nil
  end
  write_marker(job_key, 'done', job_id)
  return nil
end

-- Forget a job for good. Callers have taken it out of ready (and waiting), delayed and its
-- lease already; the console's readers skip an entry whose job is gone, should one stay.
-- ``meta`` is the job's meta when the caller read it already.
local function forget_job(job_id, meta)
  meta = meta or redis.call('HGET', K_META, job_id)
  if meta then
    local _, account = split_meta(meta)
    hincr_or_drop(K_PENDING, account, -1)
  end
  redis.call('HDEL', K_JOBS, job_id)
  redis.call('HDEL', K_META, job_id)
  redis.call('HDEL', K_DELIVERIES, job_id)
end

-- A dead job's business key is free again, so the fixed job can be replayed or enqueued anew.
local function free_job_key(job_key, job_id)
  if job_key and job_key ~= '-' and job_key ~= '' and
      redis.call('HGET', K_JOBKEYS, job_key) == job_id then
    redis.call('HDEL', K_JOBKEYS, job_key)
  end
end

-- Store a dead letter: a JSON object whose Lua-made fields are plain numbers and strings, and
-- whose message ("envelope") and the worker's record ("record", JSON made by Python) are kept as
-- opaque strings, byte for byte: re-encoding them with cjson would corrupt big integers, floats,
-- empty lists and escapes.
local function store_dead(job_id, reason, record, now)
  emit('e', 'dead', 'job', job_id, 'at', now, 'reason', reason)
  local letter = cjson.encode({
    job_id = job_id, at = now, reason = reason, record = record or '',
    envelope = redis.call('HGET', K_JOBS, job_id) or '',
    meta = redis.call('HGET', K_META, job_id) or '',
    deliveries = hget_number(K_DELIVERIES, job_id),
  })
  -- a job buried again (its worker died before the ack, and it failed again) counts once
  if redis.call('HSET', K_DEAD, job_id, letter) == 1 then
    redis.call('HINCRBY', K_STATS, 'dead', 1)
  end
  redis.call('ZADD', K_DEADINDEX, now, job_id)
end

-- Keep the message with its reason, and forget the job.
local function dead_letter(job_id, reason, now)
  local meta = redis.call('HGET', K_META, job_id)
  store_dead(job_id, reason, nil, now)
  if meta then
    local _, _, _, job_key = split_meta(meta)
    free_job_key(job_key, job_id)
  end
  forget_job(job_id)
end

-- The worker finished a job (``succeeded``, or failed, or handed over to a retry): release its
-- lease and forget it. A success marks its business key done first, even when the lease was lost
-- (the side effect happened), and is recorded as ``succeeded`` (which says acked too). Returns
-- false when the lease was no longer this worker's (it expired and was reaped). The caller
-- counts the acked jobs in K_STATS (a claim, once for all it carries).
local function ack_job(qk, job_id, token, account, job_key, succeeded)
  local meta = redis.call('HGET', K_META, job_id)
  if meta then  -- the store's own record wins over the worker's
    job_key = select(4, split_meta(meta))
  end
  local external_id = nil
  if succeeded and job_key ~= '-' then
    external_id = mark_done(job_key, job_id)
  end
  if succeeded then
    if external_id then
      emit('e', 'succeeded', 'job', job_id, 'at', now_text(), 'ext', external_id)
    else
      emit('e', 'succeeded', 'job', job_id, 'at', now_text())
    end
  end
  if not release_lease(job_id, token, account, qk) then
    return false
  end
  -- a failure handed to its retry re-pointed the key to the retry's delivery: not done yet
  if not succeeded and job_key ~= '-' and redis.call('HGET', K_JOBKEYS, job_key) == job_id then
    redis.call('ZADD', K_DONE, now_text(), job_key)
  end
  forget_job(job_id, meta)
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
    if redis.call('HGET', K_OWNERS, job_id) == token then
      redis.call('ZADD', K_LEASES, 'XX', deadline, job_id)
    else
      lost[#lost + 1] = job_id
    end
  end
  return lost
end

-- Drop the registry entries not renewed in time, so a dead worker vanishes by itself.
local function sweep_registry(now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', K_WORKERS, gone)
    redis.call('HDEL', K_WORKERINFO, gone)
  end
end

-- A worker's entry in the registry of live workers, renewed for ttl seconds (negative: it
-- leaves).
local function renew_registration(id, info, ttl, now)
  if ttl < 0 then
    redis.call('ZREM', K_WORKERS, id)
    redis.call('HDEL', K_WORKERINFO, id)
  else
    redis.call('ZADD', K_WORKERS, now + ttl, id)
    redis.call('HSET', K_WORKERINFO, id, string.format('%.6f', now) .. ' ' .. info)
  end
end

-- ---- end of _lib.lua ----
