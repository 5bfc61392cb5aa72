-- claim: settle the jobs the worker finished, then lease up to N jobs, one account at a time in
-- rotation, skipping accounts over a limit. One call per turn of the worker: its acks ride along.
-- What it decides, one line a decision (and where the rule lives):
--   which acks settled and which leases were lost (ack_job, lib/leases.lua);
--   which delayed jobs and deferred accounts are due now (promote, here);
--   whose turn it is: the lowest virtual tag of the rotation, start-time fair queueing
--     (join_rotation, next_tag, take_head in lib/rotation.lua);
--   whether a job past Celery's expires is dropped (claim_from, here);
--   whether an operator's pause holds the account or the queue, or a provider's "slow down"
--     defers it or skips the queue until it ends (operator_paused, queue_paused, slowed_until
--     in lib/rotation.lua; held by enqueue.lua with the retry that got it);
--   which limits bind the account in the queue: its own or the store's default, with its own
--     in the queue or the queue's default (binding_limits in lib/limits.lua);
--   whether they let it run: window, concurrency cap, a token from each bucket (window_wake
--     and take_token in lib/limits.lua); what a "no" does: deferred until when, or held at
--     its cap, and why (defer, hold_at_cap, record_deferral, here);
--   whether the queue's shared limit lets it run (queue_quota, quota_full and the shared
--     bucket in take_token, lib/limits.lua; in a sharded store the grant the worker took at
--     the home, granted_quota, quota.lua); a "no" stops the queue for this claim, the
--     account keeping its turn (wait_for_quota, here);
--   whether a job is poison (delivered too often) and dead-lettered (dead_letter, lib/leases.lua);
--   when the worker should ask again, and whether to ring the doorbell for another worker.
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
--       key as stored ("-": none), "1" if it succeeded (see ack_job in lib/leases.lua);
--       then per queue claimed from, in a sharded store: the grant of its shared limit the
--       worker took at the home (quota.lua), "-" when it took none.
-- Returns a flat list: seconds until the next deferred account or delayed job is due (-1: none),
-- the list of acked job ids whose lease was lost, the runnable weight of the queues claimed from
-- (in a sharded store, else 0: see join_rotation), per queue claimed from how many jobs of its
-- grant the claim leased (-1: the queue has a shared limit and the worker brought no grant,
-- so it takes one and asks again at once) and the weight of the queue if it waits for its next
-- grant (0: it does not; a store of one shard lists neither), then per job: queue index,
-- job_id, envelope,
-- deliveries, account, business key as stored, and its idempotency marker as it was before
-- this claim wrote the started one ('' when none). A job whose Celery ``expires`` has passed
-- is dropped from the store when it comes up, before any limit is asked (it takes no slot and
-- no token), and listed the same way with its queue index negated, for the worker to record as
-- revoked.
-- Cost: O(log n) per job or skipped account (rotation pops, hash fields, its FIFO's head); no
-- scans.
-- A leased job of an account without a limit of its own, with a business key and the event
-- stream on: 9 commands (ZPOPMIN of the rotation, ZPOPMIN of its account's FIFO and ZADD of the
-- next job back (none for an account's last), HGET and HSET of its record, ZADD of its
-- account's next turn, ZADD of its lease, SET of its marker, XADD); an ack riding along 3 to 5
-- (HGET and HDEL of its record, ZREM of its lease; after a success, SET of the key's done
-- marker and XADD). An account with a concurrency cap adds its running count to both. A queue
-- with a shared rate adds its bucket's HMGET and HSET (an account's own buckets ride in the
-- same two), a shared concurrency the queue's running count.
-- include: keys events records markers limits rotation leases
local want, lease, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local batch, max_skips, max_deliveries = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local nq, retention = tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_seconds()
local keeps_time = ARGV[11] == '1'
local grants = {}  -- each claimed queue's grant of its shared limit (sharded: quota.lua)
for i = 1, nq do
  grants[i] = tonumber(ARGV[13 + tonumber(ARGV[12]) * 4 + i - 1] or '-')
end
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

-- The limits stored for ``account`` in queue ``qk``, packed: its own, else the store's one
-- default limit (set_default_limit.lua), not this worker's own setting; and its own in the
-- queue, else the queue's default (nil: none). The first account to come up reads them in one
-- HMGET with the default and the shared limit of each queue claimed from (queue_limit.lua;
-- a claim that finds no account reads nothing); whether any account has a limit of its own
-- (fields beyond those) is asked at the second: while none has, no other account's is asked.
local default_limit, own_limits, stored_default, shared_limits = nil, nil, nil, 0
local function limits_of(qk, account)
  local own, own_here, default_here
  if default_limit == nil then
    local fields = {account, in_queue_field(qk.name, account), in_queue_field(qk.name, '*'), '*'}
    for n = 1, nq do
      fields[#fields + 1] = queue_limit_field(queues[n].name)
    end
    local held = redis.call('HMGET', K_LIMITS, unpack(fields))
    own, own_here, default_here, stored_default = held[1], held[2], held[3], held[4]
    default_limit = stored_default or ARGV[4]
    for n = 1, nq do
      if held[4 + n] then
        shared_limits = shared_limits + 1
      end
      if SHARDED and (held[4 + n] or grants[n]) then
        queues[n].quota = granted_quota(grants[n])
      elseif held[4 + n] then
        queues[n].quota = queue_quota(queues[n], held[4 + n])
      end
    end
    return own or default_limit, own_here or default_here or nil
  end
  if own_limits == nil then
    own_limits = redis.call('HLEN', K_LIMITS) > (stored_default and 1 or 0) + shared_limits
  end
  if not own_limits then
    return default_limit, nil
  end
  own, own_here, default_here = unpack(redis.call('HMGET', K_LIMITS, account,
    in_queue_field(qk.name, account), in_queue_field(qk.name, '*')))
  return own or default_limit, own_here or default_here or nil
end

-- The claim skips the account: the one place that decides why (DeferReason: rate_limited,
-- window_closed, concurrency_cap, slowed) and until when ('-': until a job of it ends), and
-- records it (records.Deferral) for the console and the CLI; cleared when the account rotates
-- in again.
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
  redis.call('HINCRBY', K_STATS, 'deferred_' .. reason, 1)  -- by reason, for the metric
  emit('e', 'account_deferred', 'q', qk.name, 'a', account, 'at', now, 'due', wake)
end

-- The account runs as many jobs as its cap allows: out of the rotation until one ends
-- (release_running in lib/leases.lua brings it back).
local function hold_at_cap(qk, account)
  redis.call('HSET', qk.state, account, 'c')
  record_deferral(qk, account, 'concurrency_cap', nil)
  redis.call('HINCRBY', K_STATS, 'capped', 1)
end

-- The queue waits: nothing more of it in this claim, and no ring for another worker; at
-- ``due`` (nil: when a job's end brings the worker that ran it back) the claim returns (or the
-- time keeper is called, as for a deferral). Its provider asked it to slow down (queue_paused),
-- or it is at its shared limit (wait_for_quota).
local function queue_waits(qk, due)
  if due and not keeps_time and due < math.min(qk.next_deferred or math.huge,
                                               qk.next_delayed or math.huge) then
    call_keeper(qk, due)
  end
  qk.next_deferred = due and math.min(qk.next_deferred or due, due) or qk.next_deferred
end

-- The queue is at its shared limit (set_queue_limit): it waits (queue_waits) until its next
-- token is there, at its rate; at its concurrency, until a job's end. The waiting accounts
-- keep their tags: the fair order decides who gets the next token.
local function wait_for_quota(qk, due)
  queue_waits(qk, due)
  redis.call('HINCRBY', K_STATS, 'deferred_queue_quota', 1)
end

-- Try the account at the head of the rotation (its virtual tag ``tag`` and the weight it joined
-- with, just popped): returns
-- job_id, envelope, deliveries, business key, marker or nil; or job_id, envelope, 'expired' for
-- an expired job it dropped. Every nil leaves the account out of the rotation.
local function claim_from(qk, account, tag, joined_weight)
  local head, more, keep = pop_head(qk, account)  -- keep: a head not taken goes back
  if not head then
    redis.call('HDEL', qk.state, account)
    redis.call('HDEL', qk.deferrals, account)
    return nil
  end
  local job_id = select(2, split_member(head))
  local job = read_job(job_id)
  -- past Celery's expires: out of the store (its account keeps its tag: nothing ran)
  if job and job.expires and job.expires <= now then
    take_head(qk, account, more, tag, nil, joined_weight)
    free_key(job.job_key, job_id)
    redis.call('HDEL', K_RECORDS, job_id)
    redis.call('HINCRBY', K_STATS, 'expired', 1)
    emit('e', 'expired', 'job', job_id, 'at', now)
    return job_id, job.envelope, 'expired'
  end
  -- an operator's pause: out of the rotation, its jobs stay ready until resume.lua
  local paused, slowed = operator_paused(qk, account)
  if paused then
    redis.call('HSET', qk.state, account, 'o')
    redis.call('HDEL', qk.deferrals, account)
    return keep(nil)
  end
  -- the provider asked the account to slow down (enqueue.lua held it with a retry): deferred
  -- until then, no token taken (its bucket holds at most its burst when the pause ends)
  if slowed then
    defer(qk, account, 'slowed', slowed)
    return keep(nil)
  end
  local packed, here = limits_of(qk, account)
  if quota_full(qk) then
    return keep(nil, nil, 'quota')  -- the queue runs all it may: the account keeps its turn
  end
  local limit = binding_limits(qk, account, packed, here, now)
  if limit.wake then
    defer(qk, account, 'window_closed', limit.wake)
    return keep(nil)
  end
  local cap = limit.cap
  local running = cap > 0 and hget_number(qk.running, account) or 0
  if cap > 0 and running >= cap then
    hold_at_cap(qk, account)
    return keep(nil)
  end
  local wake, next_token, shared_short = take_token(limit.buckets, now)
  if shared_short then
    return keep(nil, wake, 'quota')  -- the queue waits for its next token; the account keeps its
                                     -- turn
  elseif wake then
    defer(qk, account, 'rate_limited', wake)
    return keep(nil)
  end

  if qk.quota and qk.quota.grant then qk.quota.used = qk.quota.used + 1 end  -- of its grant
  local capped = cap > 0 and running + 1 >= cap
  local held = more and (next_token or capped)
  take_head(qk, account, more, next_tag(tag, limit.weight), held, limit.weight)
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
  local counted = cap > 0 and 'c' or '-'  -- what its release counts down (release_running)
  if cap > 0 then
    redis.call('HINCRBY', qk.running, account, 1)  -- for its cap
  end
  if qk.quota and (qk.quota.cap or 0) > 0 then
    redis.call('HINCRBY', qk.running, '*', 1)  -- for the queue's shared concurrency
    qk.quota.running = qk.quota.running + 1
    counted = cap > 0 and 'b' or 'q'
  end
  redis.call('ZADD', K_LEASES, now + lease, job_id)
  job.owner, job.started, job.capped = token, now_text(), counted
  write_job(job_id, job)
  emit('e', 'running', 'job', job_id, 'at', now_text(), 'worker', token)
  local marker = job.job_key ~= '-' and mark_started(job.job_key, job_id, job.account) or ''
  return job_id, job.envelope, job.deliveries, job.job_key, marker
end

local out, claimed, skips, live, empty = {-1, lost, 0, {}, {}}, 0, 0, nq, {}
for i = 1, nq do
  promote(queue_at(i))
  queues[i].weight_change, queues[i].finished = 0, {}
  local paused, slowed = queue_paused(queues[i])
  if paused or slowed then
    empty[i] = true  -- paused by an operator, or slowed down by its provider: jobs stay ready
    live = live - 1
    if slowed and not paused then
      queue_waits(queues[i], slowed)  -- the worker (or the time keeper) comes back then
      redis.call('HINCRBY', K_STATS, 'deferred_slowed', 1)  -- by reason, for the metric
    end
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
      if deliveries == 'quota' then
        redis.call('ZADD', qk.tags, tag, popped[1])  -- back, at the tag it had
        qk.weight_change = qk.weight_change + joined_weight
        wait_for_quota(qk, envelope)
        empty[i], qk.waits = true, true  -- nothing more of it, no ring; its weight waits too
        live = live - 1
      elseif deliveries == 'expired' then
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
-- what the queues claimed from can run now, by weight, for the worker's choice of a shard; a
-- queue waiting for its shared limit's next grant apart (it runs when the worker has one)
if SHARDED then
  local runnable = 0
  for n = 1, nq do
    out[5][n] = 0
    -- an empty rotation's weight is none, whatever it says (join_rotation)
    if not empty[n] or queues[n].waits then
      local weight = redis.call('INCRBY', queues[n].weight, queues[n].weight_change)
      if weight <= 0 then  -- none kept yet (a store of one shard, moving)
        weight = weigh_rotation(queues[n])
      end
      if queues[n].waits then out[5][n] = weight else runnable = runnable + weight end
    end
  end
  out[3] = runnable
end
-- how much of each grant was used. Ask again at once, not a poll later, when stopped by
-- max_skips with accounts still in rotation, or with a grant to take (none was brought)
local ask_again = claimed < want and live > 0 and skips > max_skips
for n = 1, SHARDED and nq or 0 do
  local quota = queues[n].quota
  out[4][n] = quota and quota.grant and (quota.asked and -1 or quota.used) or 0
  ask_again = ask_again or (quota and quota.asked) or false
end
if ask_again then
  out[1] = '0'
end
return out
