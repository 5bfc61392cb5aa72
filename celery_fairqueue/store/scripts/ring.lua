-- ring: ring the doorbell of each queue whose rotation holds accounts that may run now, up to
-- ARGV[1] pending rings (lib/rotation.lua ``ring``). A bulk enqueue calls it after its batch,
-- with as many rings as workers it can feed (one script call per job rings once at most);
-- the time keeper calls it with 1 as its sweep, for a ring that was lost (a worker killed
-- right after it took one, Redis restarted between a ring and its BZPOPMIN).
-- KEYS: global keys (none), then the keys of each queue.
-- ARGV: [1] the most rings each queue's doorbell holds after the call.
-- Returns the number of queues with work.
-- include: keys rotation
local with_work = 0
for i = 1, queue_count() do
  local qk = queue_keys(i)
  if redis.call('ZCARD', qk.tags) > 0 then
    ring(qk, tonumber(ARGV[1]))
    with_work = with_work + 1
  end
end
return with_work
