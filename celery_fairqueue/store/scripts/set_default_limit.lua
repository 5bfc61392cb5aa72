-- set_default_limit: the store's one default limit, for accounts without their own. The first
-- worker sets it from its settings (ARGV[3] "1": only while the store has none, SET NX); an
-- operator changes it (`fairqueue limits --default`, celery_fairqueue.set_default_limit). The
-- claim reads the packed form (limits field "*") instead of a worker's own setting. A change
-- counts what every account runs again (recount_running), so a default cap counts it now.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the limit as configured (JSON), [2] packed (limits.AccountLimit.pack),
--       [3] "1" to set it only when the store has none.
-- Returns the default as the store holds it after the call (JSON).
-- include: keys leases
local existing = redis.call('GET', K_DEFAULTLIMIT)
if existing and ARGV[3] == '1' then
  return existing
end
redis.call('SET', K_DEFAULTLIMIT, ARGV[1])
redis.call('HSET', K_LIMITS, '*', ARGV[2])
recount_running(nil, queue_positions())
return ARGV[1]
