-- heartbeat: a worker's beat, in one call: extend the leases of the jobs it still owns and renew
-- its registration among the live workers.
-- KEYS: global keys only.
-- ARGV: [1] owner token (also the worker's id in the registry), [2] lease seconds, [3] JSON of
--       name, queues, slots, [4] seconds the registration lives without another beat,
--       [5..] job ids.
-- Returns the ids whose lease this worker no longer owns (they were reaped).
local lost = extend_leases(ARGV[1], tonumber(ARGV[2]), 5)
renew_registration(ARGV[1], ARGV[3], tonumber(ARGV[4]), now_seconds())
return lost
