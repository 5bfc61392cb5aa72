-- extend: heartbeat; push back the lease deadline of each job this worker still owns.
-- KEYS: global keys only.
-- ARGV: [1] owner token, [2] lease seconds, [3..] job ids.
-- Returns the ids whose lease this worker no longer owns (they were reaped).
local token, lease = ARGV[1], tonumber(ARGV[2])
local deadline = now_seconds() + lease
local lost = {}
for n = 3, #ARGV do
  local job_id = ARGV[n]
  if redis.call('HGET', K_OWNERS, job_id) == token then
    redis.call('ZADD', K_LEASES, 'XX', deadline, job_id)
  else
    lost[#lost + 1] = job_id
  end
end
return lost
