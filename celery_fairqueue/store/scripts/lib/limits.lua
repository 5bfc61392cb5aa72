-- Limits and buckets: where a limit is decided. A packed limit (limits.AccountLimit.pack), an
-- account's token bucket (formats/records.py's Bucket), and the two checks the claim asks of
-- them: is the window open (window_wake), is there a token (take_token: the refill, the check
-- and the take). claim.lua asks them in turn and decides what a "no" does (defer, hold).
-- include: keys

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

-- The window's answer at ``now``: nil while it is open, else when it opens next.
local function window_wake(windows, now)
  if windows == '-' then return nil end
  for open, close in string.gmatch(windows, '([%d%.]+),([%d%.]+)') do
    if now < tonumber(open) then return tonumber(open) end
    if now < tonumber(close) then return nil end
  end
  return now + 60  -- every window is past: closed until a worker refreshes the schedule
end

-- The bucket's refill, check and take at ``now`` (``rate`` tokens a second up to ``burst``; a
-- bucket never seen is full): nil when a token was taken, else when the next token will be
-- there; and, when the token taken was the last one, when the next will be there.
local function take_token(account, rate, burst, now)
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
