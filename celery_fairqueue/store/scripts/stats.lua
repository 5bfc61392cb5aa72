-- stats: the store's counters (Keys.stats) and the number of jobs it holds, read at once, so
-- that the deliveries ever stored (shard.py's stats: those held and those that left) never
-- count a job twice or miss one that left between two reads.
-- KEYS: global keys.
-- Returns {jobs held, the counters as HGETALL gives them}.
-- include: keys
return {redis.call('HLEN', K_RECORDS), redis.call('HGETALL', K_STATS)}
