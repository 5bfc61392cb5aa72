-- pause: an operator pauses an account (in one queue or in all) or a whole queue. The claim
-- skips it from its next call on; its jobs stay ready (not deferred, no attempt charged).
-- KEYS: global keys only.
-- ARGV: [1] the pause's field in pauses (see keys.Keys.pauses), [2] who paused, [3] why,
--       [4] the account (encoded), or "" for a queue's pause.
-- Returns the pause as stored (JSON with by, at in Redis server time, reason); pausing again
-- keeps the first pause's author and time. For an account a reshard is moving: {'f' or 'm',
-- the shard it moves to} and nothing changed (account_in_move).
-- include: keys shards
local field, by, reason, account = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if account ~= '' then
  local moving, to = account_in_move(account)
  if moving then
    return {moving, to}
  end
end
local existing = redis.call('HGET', K_PAUSES, field)
if existing then
  return existing
end
local now = now_seconds()
local pause = cjson.encode({by = by, at = now, reason = reason})
redis.call('HSET', K_PAUSES, field, pause)
redis.call('HINCRBY', K_STATS, 'paused', 1)
return pause
