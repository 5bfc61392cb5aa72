-- restore_dead: put back a dead letter that take_dead took when sending its replay failed.
-- KEYS: global keys only.
-- ARGV: [1] dead letter id, [2] the letter (JSON, as take_dead returned it), [3] when it died.
-- Returns 1.
redis.call('HSET', K_DEAD, ARGV[1], ARGV[2])
redis.call('ZADD', K_DEADINDEX, tonumber(ARGV[3]), ARGV[1])
return 1
