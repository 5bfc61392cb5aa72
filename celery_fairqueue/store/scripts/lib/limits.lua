-- Limits and buckets: where a limit is decided. A packed limit (limits.AccountLimit.pack), an
-- account's token buckets (formats/records.py's Bucket), which limits bind an account in a
-- queue (binding_limits: its own across queues or the store's default, with its own in the
-- queue or the queue's default), and the checks the claim asks of them: is the window open
-- (window_wake), is there a token (take_token: the refill, the check and the take).
-- claim.lua asks them in turn and decides what a "no" does (defer, hold).
-- include: keys

-- A packed limit is "rate burst concurrency windows weight" (limits.AccountLimit.pack): rate in
-- jobs/s (0 = none), windows "-" or "open,close;open,close" in epoch seconds, computed ahead by
-- limits.py in the account's zone. A limit packed before weights existed has no weight: 1.
local function split_limit(packed)
  local rate, burst, cap, windows, weight =
    string.match(packed, '^(%S+) (%S+) (%S+) (%S+) ?(%S*)$')
  return tonumber(rate), tonumber(burst), tonumber(cap), windows, tonumber(weight) or 1
end

-- The field of an account's limit and bucket in one queue, or (account '*') of the queue's
-- default limit (keys.in_queue_field): encoded names, so ':' and '*' only separate.
local function in_queue_field(queue, account)
  return 'q:' .. queue .. ':' .. account
end

-- The field of a queue's shared limit and of the bucket its accounts share
-- (keys.queue_limit_field).
local function queue_limit_field(queue)
  return 'Q:' .. queue
end

-- A queue's shared limit (set_queue_limit), packed as an account's is: its rate, burst and
-- concurrency (0: none) and its bucket's field; ``running``, the queue's jobs running now
-- (qk.running['*']), is read when first asked (quota_full), after the claim's acks settled.
local function queue_quota(qk, packed)
  local rate, burst, cap = split_limit(packed)
  return {rate = rate, burst = burst, cap = cap, field = queue_limit_field(qk.name)}
end

-- A queue's shared limit in a sharded store: kept at the store's home (quota.lua), where the
-- worker takes a grant of jobs before it claims on a shard; the claim leases at most ``grant``
-- of the queue's jobs (``used`` counts them), and a shard's copy of the limit only says that
-- one is set. No grant brought (the worker did not know of the limit): none runs, and the
-- claim asks the worker to take one (``asked``, claim.lua).
local function granted_quota(grant)
  return {grant = grant or 0, asked = grant == nil, used = 0}
end

-- Whether the queue runs as many jobs as its shared concurrency allows (in a sharded store:
-- as its grant allows).
local function quota_full(qk)
  local quota = qk.quota
  if quota and quota.grant then
    return quota.used >= quota.grant
  end
  if not quota or quota.cap <= 0 then
    return false
  end
  quota.running = quota.running or hget_number(qk.running, '*')
  return quota.running >= quota.cap
end

-- A limit stored in ``field`` (packed for the claim, and as configured for the readers), or
-- dropped (``packed`` ''); its bucket starts full either way (apply_limit.lua, queue_limit.lua).
local function write_limit(field, packed, config)
  if packed == '' then
    redis.call('HDEL', K_LIMITS, field)
    redis.call('HDEL', K_LIMITCONFIG, field)
  else
    redis.call('HSET', K_LIMITS, field, packed)
    redis.call('HSET', K_LIMITCONFIG, field, config)
  end
  redis.call('HDEL', K_BUCKETS, field)
end

-- The window's answer at ``now``: nil while it is open, else when it opens next.
local function window_wake(windows, now)
  if windows == '-' then return nil end
  for open, close in string.gmatch(windows, '([%d%.]+),([%d%.]+)') do
    if now < tonumber(open) then return tonumber(open) end
    if now < tonumber(close) then return nil end
  end
  return now + 60  -- every window is past: closed until a worker refreshes the schedule
end

-- The limits that bind ``account`` in queue ``qk`` at ``now``, as one: ``packed``, its own
-- across its queues (else the store's default), and ``here``, its own in this queue (else the
-- queue's default; nil: none), as claim.lua read them (limits_of). Returns {weight (the
-- store-wide limit's), cap (the smaller, 0: none), wake (the later window's opening, nil:
-- open), buckets (field, rate, burst, shared) to take a token from}: the queue's shared bucket
-- last, when the queue has a shared rate (qk.quota).
local function binding_limits(qk, account, packed, here, now)
  local rate, burst, cap, windows, weight = split_limit(packed)
  local limit = {weight = weight, cap = cap, wake = window_wake(windows, now), buckets = {}}
  if rate > 0 then
    limit.buckets[1] = {account, rate, burst}
  end
  if here then
    local q_rate, q_burst, q_cap, q_windows = split_limit(here)
    if q_cap > 0 and (cap == 0 or q_cap < cap) then
      limit.cap = q_cap
    end
    local q_wake = window_wake(q_windows, now)
    if q_wake and (limit.wake == nil or q_wake > limit.wake) then
      limit.wake = q_wake
    end
    if q_rate > 0 then
      limit.buckets[#limit.buckets + 1] = {in_queue_field(qk.name, account), q_rate, q_burst}
    end
  end
  if qk.quota and (qk.quota.rate or 0) > 0 then
    limit.buckets[#limit.buckets + 1] = {qk.quota.field, qk.quota.rate, qk.quota.burst, true}
  end
  return limit
end

-- A token bucket is "tokens updated_at" (records.Bucket): its level at ``now``, refilled at
-- ``rate`` a second up to ``burst``; a bucket never written is full.
local function bucket_level(stored, rate, burst, now)
  if not stored then
    return burst
  end
  local tokens, updated = string.match(stored, '^(%S+) (%S+)$')
  return math.min(burst, tonumber(tokens) + math.max(0, now - tonumber(updated)) * rate)
end

-- A bucket as stored: ``tokens`` at ``now`` (records.Bucket; read back by bucket_level).
local function bucket_text(tokens, now)
  return string.format('%.17g %.17g', tokens, now)
end

-- The buckets' refill, check and take at ``now`` (``buckets`` as binding_limits returns them):
-- a token is taken from every one of them or from none. Returns nil when taken, else when
-- every bucket will have a token again; when a token taken was the last of the account's own
-- buckets, when they will all have one again (a queue's shared bucket running dry holds no
-- account back: the queue waits); and whether a shared bucket was short. One HMGET and one
-- HSET, however many buckets.
local function take_token(buckets, now)
  if #buckets == 0 then return nil, nil end
  local fields, levels = {}, {}
  for n, bucket in ipairs(buckets) do
    fields[n] = bucket[1]
  end
  local stored = redis.call('HMGET', K_BUCKETS, unpack(fields))
  local wake, next_token, shared_short = nil, nil, false
  for n, bucket in ipairs(buckets) do
    levels[n] = bucket_level(stored[n], bucket[2], bucket[3], now)
    if levels[n] < 1 then
      wake = math.max(wake or now, now + (1 - levels[n]) / bucket[2])
      shared_short = shared_short or bucket[4] == true
    end
  end
  local writes = {}
  for n, bucket in ipairs(buckets) do
    local tokens = levels[n]
    if not wake then
      tokens = tokens - 1
      if tokens < 1 and not bucket[4] then
        next_token = math.max(next_token or now, now + (1 - tokens) / bucket[2])
      end
    end
    writes[#writes + 1] = bucket[1]
    writes[#writes + 1] = bucket_text(tokens, now)
  end
  redis.call('HSET', K_BUCKETS, unpack(writes))
  return wake, next_token, shared_short
end
