-- Limits and buckets: a packed limit (limits.AccountLimit.pack) and an account's token bucket
-- (formats/records.py's Bucket). The bucket's decision is claim.lua's.

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
