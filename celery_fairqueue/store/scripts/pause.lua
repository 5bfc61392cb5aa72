-- pause: an operator pauses an account (in one queue or in all) or a whole queue. The claim
-- skips it from its next call on; its jobs stay ready (not deferred, no attempt charged).
-- KEYS: global keys only.
-- ARGV: [1] the pause's field in pauses (see keys.Keys.pauses), [2] who paused, [3] why.
-- Returns the pause as stored (JSON with by, at in Redis server time, reason); pausing again
-- keeps the first pause's author and time.
-- include: keys
local field, by, reason = ARGV[1], ARGV[2], ARGV[3]
local existing = redis.call('HGET', K_PAUSES, field)
if existing then
  return existing
end
local now = now_seconds()
local pause = cjson.encode({by = by, at = now, reason = reason})
redis.call('HSET', K_PAUSES, field, pause)
redis.call('HINCRBY', K_STATS, 'paused', 1)
return pause
