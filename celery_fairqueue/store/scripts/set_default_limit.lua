-- set_default_limit: the store's one default limit, for accounts without their own. The first
-- worker sets it from its settings (ARGV[3] "1": only while the store has none, SET NX); an
-- operator changes it (`fairqueue limits --default`, celery_fairqueue.set_default_limit). The
-- claim reads the packed form (limits field "*") instead of a worker's own setting. A change
-- counts what every account runs again (recount_running), so a default cap counts it now.
-- A queue's default for accounts without their own limit in it (ARGV[4], keys.in_queue_field)
-- is kept beside the accounts' limits, its configuration in the limits' configurations.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the limit as configured (JSON), [2] packed (limits.AccountLimit.pack; "": drop a
--       queue's default), [3] "1" to set it only when the store has none, [4] "*" (the store's
--       default) or a queue's default field, [5] that queue (encoded): a known queue of the
--       shard (K_QUEUES) from now on.
-- Returns the default as the store holds it after the call (JSON).
-- include: keys leases
if ARGV[4] ~= '*' then
  redis.call('SADD', K_QUEUES, ARGV[5])
  if ARGV[2] == '' then
    redis.call('HDEL', K_LIMITS, ARGV[4])
    redis.call('HDEL', K_LIMITCONFIG, ARGV[4])
  else
    redis.call('HSET', K_LIMITS, ARGV[4], ARGV[2])
    redis.call('HSET', K_LIMITCONFIG, ARGV[4], ARGV[1])
  end
  recount_running(nil, queue_positions())
  return ARGV[1]
end
local existing = redis.call('GET', K_DEFAULTLIMIT)
if existing and ARGV[3] == '1' then
  return existing
end
redis.call('SET', K_DEFAULTLIMIT, ARGV[1])
redis.call('HSET', K_LIMITS, '*', ARGV[2])
recount_running(nil, queue_positions())
return ARGV[1]
