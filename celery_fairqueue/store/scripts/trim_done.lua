-- trim_done: forget business keys (and their markers) whose job finished longer ago than the
-- retention.
-- KEYS: global keys only.
-- ARGV: [1] retention seconds, [2] batch size.
-- Returns the number of keys forgotten.
local horizon = now_seconds() - tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', horizon, 'LIMIT', 0, tonumber(ARGV[2]))
for _, job_key in ipairs(expired) do
  redis.call('ZREM', K_DONE, job_key)
  redis.call('HDEL', K_MARKERS, job_key)
  local job_id = redis.call('HGET', K_JOBKEYS, job_key)
  if job_id and redis.call('HEXISTS', K_META, job_id) == 0 then
    redis.call('HDEL', K_JOBKEYS, job_key)
  end
end
return #expired
