-- take_dead: take dead letters out of the dead-letter queue, the hash and the index together,
-- to replay them; a letter taken by someone else (a replay or purge at the same time) is gone.
-- KEYS: global keys only.
-- ARGV: dead letter ids (delivery ids).
-- Returns per id the letter (JSON) or false when there is none.
local taken = {}
for i, job_id in ipairs(ARGV) do
  local letter = redis.call('HGET', K_DEAD, job_id)
  if letter then
    redis.call('HDEL', K_DEAD, job_id)
    redis.call('ZREM', K_DEADINDEX, job_id)
  end
  taken[i] = letter or false
end
return taken
