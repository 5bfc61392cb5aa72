-- register_worker: a worker's entry in the registry of live workers (see renew_registration).
-- KEYS: global keys only.
-- ARGV: [1] worker id (its lease token), [2] JSON of name, queues, slots, [3] seconds the
--       registration lives without another beat, or a negative number to leave the registry.
-- Returns the heartbeat's time (Redis server time).
-- include: keys fleet
local now = now_seconds()
sweep_registry(now)
renew_registration(ARGV[1], ARGV[2], tonumber(ARGV[3]), now)
return string.format('%.6f', now)
