-- claim: settle the jobs the worker finished, then lease up to N jobs, one account at a time in
-- rotation, skipping accounts over a limit. One call per turn of the worker: its acks ride along.
-- The rotation is start-time fair queueing (join_rotation in lib/rotation.lua): the account with the
-- lowest virtual tag goes next, and its tag moves on by VIRTUAL_TURN / weight, so backlogged
-- accounts get turns in proportion to their weights (all weights 1: plain round robin, ties
-- taken in account order). An account deferred by its limit or paused gives its turn away and
-- rejoins at the floor when it may run again: no share is owed to it afterwards.
-- KEYS: global keys, then the keys of each queue the worker consumes, then of the queues only
--       its acks are from (a queue it stopped consuming).
-- ARGV: [1] jobs wanted, [2] lease seconds, [3] owner token, [4] the default limit (packed) to
--       use only while the store holds none (it holds one once a worker ran: limits field "*"),
--       [5] promotion batch, [6] most accounts skipped in one call, [7] most deliveries before
--       a job is dead-lettered as poison, [8] index of the queue to start with (1-based),
--       [9] how many of the queues to claim from, [10] done-key retention in seconds, [11] "1"
--       when the worker keeps the queues' time (it arms its own timer for the next due time:
--       a deferral calls no keeper), [12] n acks, then n times: queue index, job_id, business
--       key as stored ("-": none), "1" if it succeeded (see ack_job in lib/leases.lua).
-- Returns a flat list: seconds until the next deferred account or delayed job is due (-1: none),
-- the list of acked job ids whose lease was lost, the runnable weight of the queues claimed from
-- (in a sharded store, else 0: see join_rotation), then per job: queue index, job_id, envelope,
-- deliveries, account, business key as stored, and its idempotency marker as it was before
-- this claim wrote the started one ('' when none). A job whose Celery ``expires`` has passed
-- is dropped from the store when it comes up, before any limit is asked (it takes no slot and
-- no token), and listed the same way with its queue index negated, for the worker to record as
-- revoked.
-- Cost: O(log n) per job or skipped account (rotation pops, hash fields, one lex range); no scans.
-- A leased job of an account without a limit of its own, with a business key and the event
-- stream on: 9 commands (ZPOPMIN, ZRANGEBYLEX, HGET and HSET of its record, ZREM, ZADD of its
-- account's next turn, ZADD of its lease, SET of its marker, XADD); an ack riding along 3 to 5
-- (HGET and HDEL of its record, ZREM of its lease; after a success, SET of the key's done
-- marker and XADD). An account with a concurrency cap adds its running count to both.
-- include: keys events records markers limits rotation leases
local want, lease, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local batch, max_skips, max_deliveries = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local nq, retention = tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_seconds()
local keeps_time = ARGV[11] == '1'
claiming = true  -- see join_rotation: this claim rings at its end, if it leaves work

-- each queue's keys (queue_keys), made once per call
local queues = {}
local function queue_at(i)
  queues[i] = queues[i] or queue_keys(i)
  return queues[i]
end

local lost, acked = {}, 0
for n = 0, tonumber(ARGV[12]) - 1 do
  local a = 13 + n * 4
  if ack_job(queue_at(tonumber(ARGV[a])), ARGV[a + 1], token, ARGV[a + 2], ARGV[a + 3] == '1',
             retention) then
    acked = acked + 1
  else
    lost[#lost + 1] = ARGV[a + 1]
  end
end
if acked > 0 then
  redis.call('HINCRBY', K_STATS, 'acked', acked)
end

-- The earliest score of a sorted set (a due time), or nil when it is empty.
local function first_due(key)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
  return head and tonumber(head)
end

-- A due job joins its account's FIFO at the time it became due (its new seq, written to its
-- record), so it waits behind the jobs that were ready before it, and its wait counts from then.
local function promote_job(qk, job_id, due)
  redis.call('ZREM', qk.delayed, job_id)
  local job = read_job(job_id)
  if job then
    hincr_or_drop(qk.ndelayed, job.account, -1)
    job.seq = ready_seq(string.sub(job.seq, 1, 1), math.floor(due * 1000000))
    write_job(job_id, job)
    make_ready(qk, job.account, job.seq, job_id)
    emit('e', 'promoted', 'job', job_id, 'at', now)
  end
end

local function promote_account(qk, account)
  redis.call('ZREM', qk.deferred, account)
  rotate_in_or_forget(qk, account, true)
  emit('e', 'account_ready', 'q', qk.name, 'a', account, 'at', now)
end

-- What is due in a sorted set of due times (delayed jobs, deferred accounts) is promoted, up to
-- a batch; returns the next due time after them, or nil. Its first two entries are read: when
-- only the first is due (a trickle), that read is all it takes.
local function promote_due(qk, key, promote_one)
  local head = redis.call('ZRANGE', key, 0, 1, 'WITHSCORES')
  local first, second = tonumber(head[2]), tonumber(head[4])
  if not first or first > now then
    return first
  end
  if not second or second > now then
    promote_one(qk, head[1], first)
    return second
  end
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, batch)
  for n = 1, #due, 2 do
    promote_one(qk, due[n], tonumber(due[n + 1]))
  end
  return first_due(key)
end

-- Due delayed jobs become ready; accounts whose deferral is over rejoin the rotation. The next
-- due time of each set is kept on qk, and the claim returns the earlier; a deferral the claim
-- itself makes lowers it (see defer).
local function promote(qk)
  qk.next_delayed = promote_due(qk, qk.delayed, promote_job)
  qk.next_deferred = promote_due(qk, qk.deferred, promote_account)
end

-- The account's limit, packed: its own, else the store's one default limit
-- (set_default_limit.lua), not this worker's own setting. The first account to come up reads
-- both in one HMGET (a claim that finds no account reads nothing); whether any account has a
-- limit of its own (the default is field "*") is asked at the second: while none has, no other
-- account's is asked.
local default_limit, own_limits, stored_default = nil, nil, nil
local function limit_of(account)
  if default_limit == nil then
    local own
    own, stored_default = unpack(redis.call('HMGET', K_LIMITS, account, '*'))
    default_limit = stored_default or ARGV[4]
    return own or default_limit
  end
  if own_limits == nil then
    own_limits = redis.call('HLEN', K_LIMITS) > (stored_default and 1 or 0)
  end
  return own_limits and redis.call('HGET', K_LIMITS, account) or default_limit
end

-- nil while the window is open, else when it opens next.
local function window_wake(windows)
  if windows == '-' then return nil end
  for open, close in string.gmatch(windows, '([%d%.]+),([%d%.]+)') do
    if now < tonumber(open) then return tonumber(open) end
    if now < tonumber(close) then return nil end
  end
  return now + 60  -- every window is past: closed until a worker refreshes the schedule
end

-- nil when a token was taken, else when the next token will be there; and, when the token
-- taken was the last one, when the next will be there.
local function take_token(account, rate, burst)
  if rate <= 0 then return nil, nil end
  local tokens, updated = read_bucket(account)
  tokens, updated = tokens or burst, updated or now
  tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
  local wake, next_token = nil, nil
  if tokens < 1 then
    wake = now + (1 - tokens) / rate
  else
    tokens = tokens - 1
    if tokens < 1 then
      next_token = now + (1 - tokens) / rate
    end
  end
  write_bucket(account, tokens, now)
  return wake, next_token
end

-- The claim skips the account: the one place that decides why (DeferReason: rate_limited,
-- window_closed, concurrency_cap) and until when ('-': until a job of it ends), and records it
-- (records.Deferral) for the console and the CLI; cleared when the account rotates in again.
local function record_deferral(qk, account, reason, due)
  redis.call('HSET', qk.deferrals, account,
             reason .. ' ' .. (due and string.format('%.6f', due) or '-'))
end

-- A deferral due before every due time the queue had calls its time keeper (unless this worker
-- keeps the time: it arms its own timer from what the claim returns).
local function defer(qk, account, reason, wake)
  record_deferral(qk, account, reason, wake)
  redis.call('HSET', qk.state, account, 'p')
  redis.call('ZADD', qk.deferred, wake, account)
  if not keeps_time and wake < math.min(qk.next_deferred or math.huge,
                                        qk.next_delayed or math.huge) then
    call_keeper(qk, wake)
  end
  qk.next_deferred = math.min(qk.next_deferred or wake, wake)
  redis.call('HINCRBY', K_STATS, 'deferred', 1)
  emit('e', 'account_deferred', 'q', qk.name, 'a', account, 'at', now, 'due', wake)
end

-- The account runs as many jobs as its cap allows: out of the rotation until one ends
-- (release_running in lib/leases.lua brings it back).
local function hold_at_cap(qk, account)
  redis.call('HSET', qk.state, account, 'c')
  record_deferral(qk, account, 'concurrency_cap', nil)
  redis.call('HINCRBY', K_STATS, 'capped', 1)
end

-- The virtual tag an account served at ``tag`` moves on to: one turn over its weight.
local function next_tag(tag, weight)
  return tag + math.floor(VIRTUAL_TURN / weight + 0.5)
end

-- The account's head job leaves ready; the account goes on in the rotation at ``tag`` if it has
-- ``more``, else leaves it and remembers ``tag`` (finish: join_rotation; written when the claim
-- ends, in one ZADD, and not at all when the claim finds the rotation empty, which forgets the
-- finish tags: see leave_tags). ``held``: this job took
-- the account to its limit (its last token, its last slot under the cap): it leaves the
-- rotation now, remembering ``tag`` too, and the caller defers it; left in, it would come up
-- at its next turn only to be skipped, a wasted step of every claim per job of it.
local function take_head(qk, account, head, more, tag, held, weight)
  redis.call('ZREM', qk.ready, head)
  if more then
    if held then
      redis.call('ZADD', qk.finish, tag, account)
    else
      redis.call('ZADD', qk.tags, tag, rotation_member(account, weight))
      qk.weight_change = qk.weight_change + weight
    end
  else
    redis.call('HDEL', qk.state, account)
    qk.finished[#qk.finished + 1] = tag
    qk.finished[#qk.finished + 1] = account
  end
end

-- The finish tags of the accounts that left the rotation in this claim; when the claim found
-- the rotation empty, none: no account waits, so virtual time starts again at the next to join
-- (join_rotation), and no tag is left behind meanwhile.
local function leave_tags(qk)
  if qk.drained then
    redis.call('DEL', qk.finish)
  elseif #qk.finished > 0 then
    redis.call('ZADD', qk.finish, unpack(qk.finished))
  end
end

-- Try the account at the head of the rotation (its virtual tag ``tag`` and the weight it joined
-- with, just popped): returns
-- job_id, envelope, deliveries, business key, marker or nil; or job_id, envelope, 'expired' for
-- an expired job it dropped. Every nil leaves the account out of the rotation.
local function claim_from(qk, account, tag, joined_weight)
  local low, high = member_range(account)
  local heads = redis.call('ZRANGEBYLEX', qk.ready, low, high, 'LIMIT', 0, 2)
  local head, more = heads[1], heads[2] ~= nil
  if not head then
    redis.call('HDEL', qk.state, account)
    redis.call('HDEL', qk.deferrals, account)
    return nil
  end
  local job_id = select(3, split_member(head))
  local job = read_job(job_id)
  -- past Celery's expires: out of the store (its account keeps its tag: nothing ran)
  if job and job.expires and job.expires <= now then
    take_head(qk, account, head, more, tag, nil, joined_weight)
    free_key(job.job_key, job_id)
    redis.call('HDEL', K_RECORDS, job_id)
    redis.call('HINCRBY', K_STATS, 'expired', 1)
    emit('e', 'expired', 'job', job_id, 'at', now)
    return job_id, job.envelope, 'expired'
  end
  -- an operator's pause: out of the rotation, its jobs stay ready until resume.lua
  if operator_paused(qk, account) then
    redis.call('HSET', qk.state, account, 'o')
    redis.call('HDEL', qk.deferrals, account)
    return nil
  end
  local rate, burst, cap, windows, weight =
    split_limit(limit_of(account))
  local wake = window_wake(windows)
  if wake then
    defer(qk, account, 'window_closed', wake)
    return nil
  end
  local running = cap > 0 and hget_number(qk.running, account) or 0
  if cap > 0 and running >= cap then
    hold_at_cap(qk, account)
    return nil
  end
  local next_token
  wake, next_token = take_token(account, rate, burst)
  if wake then
    defer(qk, account, 'rate_limited', wake)
    return nil
  end

  local capped = cap > 0 and running + 1 >= cap
  local held = more and (next_token or capped)
  take_head(qk, account, head, more, next_tag(tag, weight), held, weight)
  local poison = nil
  if not job then
    poison = 'the stored message is missing'
  else
    job.deliveries = job.deliveries + 1
    if job.deliveries > max_deliveries then
      poison = 'handed to a worker ' .. (job.deliveries - 1) ..
               ' times without being settled (poison message or crashing worker)'
    end
  end
  if poison then
    dead_letter(job_id, job, poison, now)
    if held then
      join_rotation(qk, account)  -- nothing runs: back at the tag it would have had
    end
    return nil
  end
  if held and next_token then
    defer(qk, account, 'rate_limited', next_token)
  elseif held then
    hold_at_cap(qk, account)
  end
  if cap > 0 then
    redis.call('HINCRBY', qk.running, account, 1)  -- for its cap (see release_running)
  end
  redis.call('ZADD', K_LEASES, now + lease, job_id)
  job.owner, job.started, job.capped = token, now_text(), cap > 0 and 'c' or '-'
  write_job(job_id, job)
  emit('e', 'running', 'job', job_id, 'at', now_text(), 'worker', token)
  local marker = job.job_key ~= '-' and mark_started(job.job_key, job_id, job.account) or ''
  return job_id, job.envelope, job.deliveries, job.job_key, marker
end

local out, claimed, skips, live, empty = {-1, lost, 0}, 0, 0, nq, {}
for i = 1, nq do
  promote(queue_at(i))
  queues[i].weight_change, queues[i].finished = 0, {}
  if queue_paused(queues[i]) then
    empty[i] = true  -- paused by an operator: its jobs stay ready
    live = live - 1
  end
end

local i = tonumber(ARGV[8]) - 1
while claimed < want and live > 0 and skips <= max_skips do
  i = i % nq + 1
  if not empty[i] then
    local qk = queues[i]
    local popped = redis.call('ZPOPMIN', qk.tags)
    local account, joined_weight
    if popped[1] then
      account, joined_weight = split_rotation_member(popped[1])
    end
    local tag = tonumber(popped[2])
    if not account then  -- no account waits
      empty[i], qk.drained = true, true
      live = live - 1
    else
      qk.weight_change = qk.weight_change - joined_weight
      local job_id, envelope, deliveries, job_key, marker = claim_from(qk, account, tag,
                                                                       joined_weight)
      if deliveries == 'expired' then
        skips = skips + 1  -- bounded like a skip; the worker records it, nothing runs
        for _, v in ipairs({-i, job_id, envelope, 0, account, '-', ''}) do out[#out + 1] = v end
      elseif job_id then
        claimed = claimed + 1
        for _, v in ipairs({i, job_id, envelope, deliveries, account, job_key, marker}) do
          out[#out + 1] = v
        end
      else
        skips = skips + 1
      end
    end
  end
end
if claimed > 0 then
  redis.call('HINCRBY', K_STATS, 'claimed', claimed)
end
-- tell the worker when to ask again, so a deferred account runs the moment its token is there
local next_due = nil
for n = 1, nq do
  for _, due in pairs({queues[n].next_deferred, queues[n].next_delayed}) do
    next_due = math.min(next_due or due, due)
  end
end
if next_due then
  out[1] = string.format('%.6f', math.max(0, next_due - now))
end
-- a rotation this claim leaves work in (it took all it wanted, or promoted more than it took):
-- the doorbell wakes one more idle worker, who rings again if it leaves work too
for n = 1, nq do
  if not empty[n] then
    if redis.call('ZCARD', queues[n].tags) > 0 then
      ring(queues[n])
    else  -- emptied by its last pop: as good as found empty (leave_tags; join_rotation)
      empty[n], queues[n].drained = true, true
    end
  end
  leave_tags(queues[n])
end
-- what the queues claimed from can run now, by weight, for the worker's choice of a shard
if SHARDED then
  local runnable = 0
  for n = 1, nq do
    if not empty[n] then  -- an empty rotation's weight is none, whatever it says (join_rotation)
      local weight = redis.call('INCRBY', queues[n].weight, queues[n].weight_change)
      if weight <= 0 then  -- none kept yet (a store of one shard, moving)
        weight = weigh_rotation(queues[n])
      end
      runnable = runnable + weight
    end
  end
  out[3] = runnable
end
-- stopped by max_skips with accounts still in rotation: ask again at once, not a poll later
if claimed < want and live > 0 and skips > max_skips then
  out[1] = '0'
end
return out
