-- Helpers shared by every script: lua.py prepends this file to each script when it loads it,
-- after a prologue that binds the K_* names of the global keys (keys.GLOBAL_KEY_NAMES) the
-- script touches, itself or through these helpers, and NGLOBAL, their number.
--
-- KEYS (every script): those global keys, then one key per fair queue, its state key, from
-- which queue_keys builds the queue's other keys (keys.QUEUE_KEY_NAMES); then, for a script
-- that emits events, the event stream (K_EVENTS).
-- Account ids, queue names and business keys arrive percent-encoded (no spaces, no "|", no
-- braces, no newline).
-- All times are Redis server time, so workers with skewed clocks agree on leases and buckets.
--
-- The layout is lean: a job is one record, written at enqueue and once per
-- transition; a business key is one string, its marker; no script keeps a count that the
-- console can derive when it asks (ready jobs per account, the oldest waiting, running since).

local NQKEYS = 1
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
-- stream: with no recorder nothing piles up. The caller says whether it saw the stream
-- (RECORDING, from the prologue, asked every few seconds): then the event goes straight in
-- (NOMKSTREAM: a stream deleted since is not made again); else the stream is asked for once
-- per call, which is cheaper than an event of a dozen fields written for nothing.
-- Fields alternate name, value.
local recording = nil
local function emit(...)
  if recording == nil then
    recording = RECORDING or redis.call('EXISTS', K_EVENTS) == 1
  end
  if recording then
    redis.call('XADD', K_EVENTS, 'NOMKSTREAM', 'MAXLEN', '~', EVENTS_MAXLEN, '*', ...)
  end
end

-- A queue's keys: the scripts receive its state key, and build the others from it, under the
-- same hash tag (so in the same slot): keys.QueueKeys names them, in keys.QUEUE_KEY_NAMES.
local function queue_keys(i)
  local state = KEYS[NGLOBAL + i]
  local base = string.sub(state, 1, -6)
  return {state = state, ready = base .. 'ready', deferred = base .. 'deferred',
          delayed = base .. 'delayed', running = base .. 'running',
          ndelayed = base .. 'ndelayed', deferrals = base .. 'deferrals', tags = base .. 'tags',
          finish = base .. 'finish', weight = base .. 'weight',
          name = string.match(state, ':queue:([^:]+):state$'),
          wake = base .. 'wake'}
end

-- A queue's keys by its encoded name, under the records key's tag (for the scripts of a reshard,
-- which learn a job's queue from its record).
local function queue_named(name)
  local base = string.sub(K_RECORDS, 1, -8) .. 'queue:' .. name .. ':'
  return {state = base .. 'state', ready = base .. 'ready', deferred = base .. 'deferred',
          delayed = base .. 'delayed', running = base .. 'running',
          ndelayed = base .. 'ndelayed', deferrals = base .. 'deferrals', tags = base .. 'tags',
          finish = base .. 'finish', weight = base .. 'weight', name = name,
          wake = base .. 'wake'}
end

-- A reshard (store/reshard.py) freezes an account on the shard it leaves: marked frozen in the
-- moved hash ("f n": moving to shard n) and paused in every queue by a pause of the reshard's
-- own, so the claim leaves it (and its jobs) alone; an operator's pause of it in every queue is
-- kept inside that one, and put back on the new shard. Its enqueues are still stored here, and
-- moved with the rest. An account moved already ("m n") is left as it is.
local function freeze_account(account, to)
  local tag = string.sub(K_RECORDS, 1, -8)
  local state = redis.call('HGET', tag .. 'moved', account)
  if state and string.sub(state, 1, 2) == 'm ' then
    return false
  end
  redis.call('HSET', tag .. 'moved', account, 'f ' .. to)
  local field = 'a:' .. account .. ':*'
  local held = redis.call('HGET', tag .. 'pauses', field)
  local ok, decoded = pcall(cjson.decode, held or '')
  if not (ok and type(decoded) == 'table' and decoded.reshard) then
    redis.call('HSET', tag .. 'pauses', field, cjson.encode({
      by = 'fairqueue reshard', at = now_seconds(), reason = 'moving to shard ' .. to,
      reshard = tonumber(to), saved = held or nil}))
  end
  return true
end

-- Each queue's position in KEYS, by its encoded name (a job's record names its queue).
local function queue_positions()
  local index = {}
  for i = 1, queue_count() do
    index[queue_keys(i).name] = i
  end
  return index
end

-- The stored formats, each read and built by one helper here (records.py is their Python
-- codec; keep the two in step).

-- A job's record (records.JobRecord): a header line "queue account seq job_key expires
-- deliveries owner started capped" ("-" for none), a newline, then the Celery message. seq is
-- its place in its account's FIFO (see ready_seq); owner, started and capped say who leases
-- it, since when, and whether its account had a concurrency cap then.
local function split_record(record)
  if not record then
    return nil
  end
  local newline = string.find(record, '\n', 1, true)
  if not newline then
    return nil
  end
  local queue, account, seq, job_key, expires, deliveries, owner, started, capped =
    string.match(string.sub(record, 1, newline - 1),
                 '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  if not queue then
    return nil
  end
  return {queue = queue, account = account, seq = seq, job_key = job_key,
          expires_text = expires, expires = tonumber(expires), deliveries = tonumber(deliveries),
          owner = owner, started = started, capped = capped,
          envelope = string.sub(record, newline + 1)}
end

local function make_header(job)
  return job.queue .. ' ' .. job.account .. ' ' .. job.seq .. ' ' .. job.job_key .. ' ' ..
         job.expires_text .. ' ' .. job.deliveries .. ' ' .. job.owner .. ' ' .. job.started ..
         ' ' .. job.capped
end

local function make_record(job)
  return make_header(job) .. '\n' .. job.envelope
end

local function read_job(job_id)
  return split_record(redis.call('HGET', K_RECORDS, job_id))
end

local function write_job(job_id, job)
  redis.call('HSET', K_RECORDS, job_id, make_record(job))
end

-- A job's place in its account's FIFO: its priority digit (0 first), then the microsecond it
-- became ready (Redis time, 16 digits; ``micros`` defaults to now), so lex order is priority,
-- then arrival, and the console reads how long the head has waited off its seq.
local function ready_seq(priority, micros)
  if not micros then
    now_seconds()
    micros = clock_micros
  end
  return priority .. string.format('%016d', micros)
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

-- A rotation member (QueueKeys.tags) is "stamp account", and " weight" after it in a sharded
-- store when the weight is not 1 (see join_rotation): the stamp orders accounts of equal
-- virtual tags by when they got it, first come first served. It is Redis time in microseconds
-- (9 digits) and a count within the script (2 digits), in base 62 with digits in ASCII order,
-- so that lex order is time order (until the year 2398); short, as every account waiting in a
-- queue has one.
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

local function rotation_member(account, weight)
  now_seconds()
  stamps = stamps + 1
  local member = base62(clock_micros, 9) .. base62(stamps, 2) .. ' ' .. account
  return (SHARDED and weight ~= 1) and (member .. ' ' .. weight) or member
end

-- The account and the weight it joined with.
local function split_rotation_member(member)
  local account, weight = string.match(member, '^%w+ (%S+) ?(%d*)$')
  return account, tonumber(weight) or 1
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

-- The string of a business key (keys.Keys.job_key), under the records key's hash tag.
local function key_of(job_key)
  return string.sub(K_RECORDS, 1, -8) .. 'key:' .. job_key
end

-- A business key's marker (records.Marker) is JSON: state "pending" (a job holds the key and
-- has not started), "started" (a delivery was handed to a worker: the side effect may have
-- begun) or "done"; the job holding it; when; and external_id when ``external`` (a JSON string
-- literal made by records.marker_external_id, so Python's own escapes survive byte for byte)
-- is given. A finished job's marker expires after the retention: a key string with a time to
-- live is a finished job's, one without is held by a job in the store. ``at`` (text) defaults
-- to now (upgrade.lua gives the time a job of the layout before records finished).
-- ``account`` (encoded) is the account of the job: a key string's name does not say it, and a
-- reshard (store/reshard.py) moves an account's markers with it (bytes only, no command).
-- A marker names its account (for a reshard to find it) only in a sharded store: 20 bytes a key
-- that a store of one shard does not need (a reshard copies an unnamed done marker everywhere).
local function make_marker(state, job_id, external, at, account)
  local tail = (external and external ~= '') and (',"external_id":' .. external) or ''
  local owner = account and (',"account":"' .. account .. '"') or ''
  return '{"state":"' .. state .. '","job_id":' .. cjson.encode(job_id) .. ',"at":' ..
         (at or now_text()) .. owner .. tail .. '}'
end

-- The account (encoded) a marker names, or nil (a marker written before they named it).
local function marker_account(marker)
  local ok, decoded = pcall(cjson.decode, marker or '')
  return ok and type(decoded) == 'table' and type(decoded.account) == 'string' and
         decoded.account or nil
end

local function marker_state(marker)
  return marker and string.match(marker, '^{"state":"(%a+)"')
end

local function marker_holder(marker)
  local ok, decoded = pcall(cjson.decode, marker)
  return ok and type(decoded) == 'table' and decoded.job_id or nil
end

local function retention_ms(retention)
  return math.max(1, math.floor(retention * 1000))
end

-- The claim hands a job with a business key to a worker: unless the key is done already, its
-- started marker is written here, before the side effect can begin. Returns the marker as it
-- was ('' when none, or only pending), for the task to decide whether to run or to reconcile.
local function mark_started(job_key, job_id, account)
  local key = key_of(job_key)
  local marker = make_marker('started', job_id, nil, nil, SHARDED and account or nil)
  local old = redis.call('SET', key, marker, 'GET')
  local state = marker_state(old)
  if state == 'done' then
    redis.call('SET', key, old, 'KEEPTTL')  -- done stays done (a redelivery finds it)
  end
  if not old or state == 'pending' then
    return ''
  end
  return old
end

-- A job's business key, held by no job any more while only pending (its job left the store
-- without running: cancelled, expired), is free again; a started marker stays (see enqueue).
local function free_key(job_key, job_id)
  if job_key and job_key ~= '-' then
    local key = key_of(job_key)
    local marker = redis.call('GET', key)
    if marker and marker_state(marker) == 'pending' and marker_holder(marker) == job_id then
      redis.call('DEL', key)
    end
  end
end

-- The job's side effect happened: its key is done, from now, for the retention (a done marker
-- the task wrote itself, with the external id, stays). Returns the external id, or nil.
-- ``account``: the job's (nil when its record is gone: the old marker's is kept, if it has one).
local function mark_done(job_key, job_id, retention, account)
  local key = key_of(job_key)
  local old = redis.call('SET', key, make_marker('done', job_id, nil, nil, SHARDED and account or nil), 'PX',
                         retention_ms(retention), 'GET')
  if marker_state(old) == 'done' then
    redis.call('SET', key, old, 'PX', retention_ms(retention))
    local ok, decoded = pcall(cjson.decode, old)
    local external = ok and type(decoded) == 'table' and decoded.external_id
    return type(external) == 'string' and external or nil
  end
  if not account and marker_account(old) then
    redis.call('SET', key, make_marker('done', job_id, nil, nil, marker_account(old)), 'PX',
               retention_ms(retention))
  end
  return nil
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

-- The weight of an account (its own limit's, or the store's default limit's).
local function account_weight(account)
  local packed = redis.call('HGET', K_LIMITS, account) or redis.call('HGET', K_LIMITS, '*')
  return packed and select(5, split_limit(packed)) or 1
end

-- Wake a queue's idle workers (worker/wakeups.py): on its shard's own channel on a cluster
-- (sharded pub/sub: a plain PUBLISH is copied to every node of the cluster).
local function wake_queue(qk, why)
  redis.call(SPUBLISHING and 'SPUBLISH' or 'PUBLISH', qk.wake, why)
end

-- In a sharded store the rotation keeps its runnable weight (qk.weight: the sum of the weights
-- its accounts joined with), which each claim returns: the workers choose a shard by it
-- (store/sharded.py), so that an account's share does not depend on how crowded its shard is.
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
      wake_queue(qk, 'ready')
    end
  else
    local left = redis.call('ZSCORE', qk.finish, account)
    if left then
      redis.call('ZREM', qk.finish, account)
      tag = math.max(tag, tonumber(left))
    end
  end
  local weight = SHARDED and account_weight(account) or 1
  if SHARDED then
    redis.call('INCRBY', qk.weight, weight)
  end
  redis.call('ZADD', qk.tags, tag, rotation_member(account, weight))
end

-- Whether the account has ready jobs in the queue.
local function has_ready(qk, account)
  local low, high = member_range(account)
  return redis.call('ZRANGEBYLEX', qk.ready, low, high, 'LIMIT', 0, 1)[1] ~= nil
end

-- Back into the rotation if it has ready jobs, else out of the queue's state entirely. An account
-- whose deferral ended goes to the front: it waited for its token, and a later turn would waste it.
local function rotate_in_or_forget(qk, account, front)
  redis.call('HDEL', qk.deferrals, account)
  if has_ready(qk, account) then
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
-- ``alone``: the caller knows the account had no ready job in the queue (else it has a state
-- already, and nothing more is asked).
local function make_ready(qk, account, seq, job_id, alone)
  redis.call('ZADD', qk.ready, 0, ready_member(account, seq, job_id))
  if alone ~= false and not redis.call('HGET', qk.state, account) then
    redis.call('HSET', qk.state, account, 'r')
    join_rotation(qk, account)
  end
end

-- A leased job of the account stopped running. Only the jobs of an account with a concurrency
-- cap are counted in qk.running (``capped``: it had one when the job was leased), for its cap;
-- the console counts the others off the lease set. An account waiting on its cap may go again.
local function release_running(qk, account, capped)
  if capped then
    hincr_or_drop(qk.running, account, -1)
    if redis.call('HGET', qk.state, account) == 'c' then
      rotate_in_or_forget(qk, account)
    end
  end
end

-- A limit changed (``account``'s, or the default: nil): count the leased jobs of the accounts
-- concerned again, every one of them counted and flagged, so that a cap set now counts what
-- runs already, exactly, and each job's release takes its count back. O(leased jobs): as many
-- as the workers' slots. ``index``: queue name -> its position in KEYS.
local function recount_running(account, index)
  local counts = {}
  for _, job_id in ipairs(redis.call('ZRANGE', K_LEASES, 0, -1)) do
    local job = read_job(job_id)
    local i = job and job.owner ~= '-' and index[job.queue]
    if i and (account == nil or job.account == account) then
      if job.capped ~= 'c' then
        job.capped = 'c'
        write_job(job_id, job)
      end
      counts[i] = counts[i] or {}
      counts[i][job.account] = (counts[i][job.account] or 0) + 1
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

-- A job waits for its time (eta, countdown, backoff); ndelayed counts it for its account. When
-- it is now the first due, idle workers are woken to learn when to claim next.
local function make_delayed(qk, account, job_id, due)
  if redis.call('ZADD', qk.delayed, due, job_id) == 1 then
    redis.call('HINCRBY', qk.ndelayed, account, 1)
  end
  if redis.call('ZRANGE', qk.delayed, 0, 0)[1] == job_id then
    wake_queue(qk, 'due')
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
  release_running(qk, job.account, job.capped == 'c')
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
  redis.call('HDEL', K_RECORDS, job_id)
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
