-- The rotation and its weights: which accounts may run now, in start-time fair queueing over
-- virtual time, and the pick's step (next_tag, take_head: claim.lua pops the lowest tag and
-- asks the limits); ready and delayed jobs, operator pauses.
-- include: keys limits records

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

-- A queue's runnable weight counted afresh: the weights its accounts joined the rotation with.
-- A store of one shard keeps none, so when a reshard moves it its claims count it once
-- (claim.lua), and the reshard again once every process runs the sharded scripts (move_weigh.lua).
local function weigh_rotation(qk)
  local weight = 0
  for _, member in ipairs(redis.call('ZRANGE', qk.tags, 0, -1)) do
    local _, joined = split_rotation_member(member)
    weight = weight + joined
  end
  redis.call('SET', qk.weight, weight)
  return weight
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
-- is there: a later turn would waste it). When the rotation was empty, the queue's doorbell
-- rings (ring, below) instead of the work waiting for a worker's poll; a claim rings at its
-- end instead, and only if it leaves work (claim.lua: a claim that promotes a deferred account
-- and takes its job itself wakes nobody).
local claiming = false

-- The weight of an account (its own limit's, or the store's default limit's).
local function account_weight(account)
  local own, default = unpack(redis.call('HMGET', K_LIMITS, account, '*'))
  local packed = own or default
  return packed and select(5, split_limit(packed)) or 1
end

-- Ring the queue's doorbell (QueueKeys.bell): idle workers block on it with BZPOPMIN, so Redis
-- hands each ring to exactly one of them (worker/doorbell.py). It holds at most ``rings``
-- (default 1) rings, the members "1" to "rings", and one ZADD NX tops it up to that (a ring
-- nobody has taken yet wakes a worker already); the worker it wakes rings again when its claim
-- leaves work (a chain, not a broadcast). BullMQ's marker key is the same idea.
local function ring(qk, rings)
  local members = {}
  for n = 1, rings or 1 do
    members[#members + 1] = 0
    members[#members + 1] = n
  end
  redis.call('ZADD', qk.bell, 'NX', unpack(members))
end

-- Tell the queue's time keeper (QueueKeys.clock) that a due time (``due``, on Redis's clock)
-- came before all the others it knew of: it arms its timer for it (worker/doorbell.py). One
-- pending call is enough, holding the earliest of the due times it was made for (LT).
local function call_keeper(qk, due)
  redis.call('ZADD', qk.clock, 'LT', due, 1)
end

-- In a sharded store the rotation keeps its runnable weight (qk.weight: the sum of the weights
-- its accounts joined with), which each claim returns: the workers choose a shard by it
-- (store/shards/sharded.py), so that an account's share does not depend on how crowded its shard is.
-- It is exact while the rotation holds an account; a claim that empties the rotation leaves it
-- as it is (none is runnable, whatever it says), and the first account to join sets it afresh.
local function join_rotation(qk, account, front)
  local head = redis.call('ZRANGE', qk.tags, 0, 0, 'WITHSCORES')
  local tag = tonumber(head[2] or '0')
  if front then
    tag = tag - 1
  end
  if not head[1] then  -- qk.finish is empty too: the claim that emptied the rotation saw to it
    if not claiming then
      ring(qk)
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
    redis.call(head[1] and 'INCRBY' or 'SET', qk.weight, weight)
    if not head[1] then
      qk.weight_change = 0  -- a claim under way counts its changes from this exact weight on
    end
  end
  redis.call('ZADD', qk.tags, tag, rotation_member(account, weight))
end

-- Format-1 members of the queue's set (legacy_member) join their accounts' FIFOs, those whose
-- job still waits there (its record names that account and seq: a member left behind by a
-- cancel or a promotion is dropped), and leave the set. Returns how many joined.
local function adopt_legacy(qk, members)
  local joined = 0
  for _, member in ipairs(members) do
    local account, seq, job_id = split_legacy_member(member)
    local job = read_job(job_id)
    if job and job.account == account and job.seq == seq then
      redis.call('ZADD', fifo_key(qk, account), 0, ready_member(seq, job_id))
      joined = joined + 1
    end
  end
  if #members > 0 then
    redis.call('ZREM', qk.ready, unpack(members))
  end
  return joined
end

-- The account's jobs still in the queue's format-1 set join its FIFO (a batch): the upgrade has
-- not reached them yet, or a producer of an earlier version wrote them after the store left
-- format 1. Whether any did; one command when none wait there, the usual case.
local function adopt_account(qk, account)
  local low, high = legacy_range(account)
  return adopt_legacy(qk, redis.call('ZRANGEBYLEX', qk.ready, low, high, 'LIMIT', 0, 500)) > 0
end

-- The jobs left in the queue's set of format 1 once the store left it (a producer of an earlier
-- version that the upgrade did not see wrote them: format_upgrade.py) join their accounts'
-- FIFOs, a batch, and accounts without a state the rotation: a job is never left where no
-- claim looks (reap.lua).
local function adopt_stranded(qk, batch)
  local members = redis.call('ZRANGE', qk.ready, 0, batch - 1)
  adopt_legacy(qk, members)
  local seen = {}
  for _, member in ipairs(members) do
    local account = split_legacy_member(member)
    if not seen[account] and redis.call('EXISTS', fifo_key(qk, account)) == 1 and
        redis.call('HSETNX', qk.state, account, 'r') == 1 then
      join_rotation(qk, account)
    end
    seen[account] = true
  end
end

-- Whether the account has ready jobs in the queue (at format 1, in the queue's set).
local function has_ready(qk, account)
  if FORMAT1 then
    local low, high = legacy_range(account)
    return redis.call('ZRANGEBYLEX', qk.ready, low, high, 'LIMIT', 0, 1)[1] ~= nil
  end
  return redis.call('EXISTS', fifo_key(qk, account)) == 1 or adopt_account(qk, account)
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

-- A job joins its account's FIFO (ordered by seq); the account joins the rotation unless it is
-- already there, deferred by its limit (or at its concurrency cap) or paused by an operator.
-- ``alone``: false when the caller knows the account had ready jobs in the queue (so it has a
-- state already, and nothing more is asked). Returns whether the account joined.
local function make_ready(qk, account, seq, job_id, alone)
  local key, member = ready_place(qk, account, seq, job_id)
  redis.call('ZADD', key, 0, member)
  if alone ~= false and redis.call('HSETNX', qk.state, account, 'r') == 1 then
    join_rotation(qk, account)
    return true
  end
  return false
end

-- A job waits for its time (eta, countdown, backoff); ndelayed counts it for its account. When
-- it is now the first due, the queue's time keeper is called to claim then.
local function make_delayed(qk, account, job_id, due)
  if redis.call('ZADD', qk.delayed, due, job_id) == 1 then
    redis.call('HINCRBY', qk.ndelayed, account, 1)
  end
  if redis.call('ZRANGE', qk.delayed, 0, 0)[1] == job_id then
    call_keeper(qk, due)
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

-- A provider's "slow down" (slowdown.py) is held in the pauses hash, beside the operators'
-- pauses, where the claim looks already (no command more while none is held): field
-- 's:<account>:<queue>' holds the account's jobs in one queue, 'S:<queue>' the whole queue
-- (keys.slow_down_field); its value is "ends cause job" (records.SlowDownHold).
local function slow_down_field(account, queue)
  return account and ('s:' .. account .. ':' .. queue) or ('S:' .. queue)
end

-- Hold the scope at ``field`` until ``ends``: a later answer extends the pause (and names its
-- own cause and job), never shortens it.
local function slow_down(field, ends, cause, job)
  local held = redis.call('HGET', K_PAUSES, field)
  if held and tonumber(string.match(held, '^(%S+)')) >= ends then
    return
  end
  redis.call('HSET', K_PAUSES, field, string.format('%.6f', ends) .. ' ' .. cause .. ' ' .. job)
end

-- When the slow-down ``held`` at ``field`` ends; nil when there is none, or it is over (its
-- field goes, so the pauses hash empties again).
local function slowed_until(field, held)
  if not held then
    return nil
  end
  local ends = tonumber(string.match(held, '^(%S+)'))
  if ends > now_seconds() then
    return ends
  end
  redis.call('HDEL', K_PAUSES, field)
  return nil
end

-- The operator pause of the account in this queue (see keys.Keys.pauses), or false; and until
-- when a provider's slow-down holds it in this queue (nil: none).
-- While no pause exists at all (the usual case) one HLEN per script answers for every account.
local any_pause = nil
local function operator_paused(qk, account)
  if any_pause == nil then
    any_pause = redis.call('HLEN', K_PAUSES) > 0
  end
  if not any_pause then
    return false
  end
  local slowed = slow_down_field(account, qk.name)
  local own, all, held = unpack(redis.call('HMGET', K_PAUSES, 'a:' .. account .. ':' .. qk.name,
                                           'a:' .. account .. ':*', slowed))
  return own or all, slowed_until(slowed, held)
end

-- Whether an operator paused the whole queue; and until when a provider's slow-down holds it
-- (nil: none).
local function queue_paused(qk)
  if any_pause == nil then
    any_pause = redis.call('HLEN', K_PAUSES) > 0
  end
  if not any_pause then
    return false
  end
  local slowed = slow_down_field(nil, qk.name)
  local paused, held = unpack(redis.call('HMGET', K_PAUSES, 'q:' .. qk.name, slowed))
  return paused ~= false, slowed_until(slowed, held)
end

-- The virtual tag an account served at ``tag`` moves on to: one turn over its weight.
local function next_tag(tag, weight)
  return tag + math.floor(VIRTUAL_TURN / weight + 0.5)
end

-- The account's head job leaves its FIFO (the claim takes it, mostly) and the next one stays:
-- popping two and putting the second back costs an account's last job one command. Returns the
-- head (nil: none is ready), whether more wait, and a function that puts the head back where
-- it was (a head the claim does not take keeps its place) and returns its arguments. An empty
-- FIFO takes the account's jobs left in format 1's set first (adopt_account).
local function pop_head(qk, account)
  local fifo = fifo_key(qk, account)
  local heads = redis.call('ZPOPMIN', fifo, 2)
  if not heads[1] and adopt_account(qk, account) then
    heads = redis.call('ZPOPMIN', fifo, 2)
  end
  if heads[3] then
    redis.call('ZADD', fifo, 0, heads[3])
  end
  return heads[1], heads[3] ~= nil, function(...)
    redis.call('ZADD', fifo, 0, heads[1])
    return ...
  end
end

-- The account's head job has left its FIFO (pop_head); the account goes on in the rotation at
-- ``tag`` if it has ``more``, else leaves it and remembers ``tag`` (finish: join_rotation; written
-- when the claim ends, in one ZADD, and not at all when the claim finds the rotation empty, which
-- forgets the finish tags: see leave_tags). ``held``: this job took the account to its limit (its
-- last token, its last slot under the cap): it leaves the rotation now, remembering ``tag`` too,
-- and the caller defers it; left in, it would come up at its next turn only to be skipped, a wasted
-- step of every claim per job of it. ``qk.weight_change`` is the claim's running sum of the
-- rotation's weight change.
local function take_head(qk, account, more, tag, held, weight)
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
