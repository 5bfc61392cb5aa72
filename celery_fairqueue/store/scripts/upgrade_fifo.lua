-- upgrade_fifo: convert a batch of a queue's ready set of format 1 (one sorted set a queue,
-- members "account|seq|job_id": legacy_member in lib/keys.lua) into its accounts' FIFOs of format
-- 2 (QueueKeys.fifo, members "seq|job_id"), taking the batch out of the old set; while the store
-- is at "1>2", so nothing adds to the old set any more (store/shards/format_upgrade.py). The
-- accounts' states and rotation are the same in both formats: only where the jobs wait changes.
-- A job already in its FIFO (a rerun after a kill) is written again, the same member: no change.
-- KEYS: global keys, then the queue's keys.
-- ARGV: [1] most members a call converts (each call stays short: Redis runs nothing else meanwhile).
-- Returns {members converted, members left in the old set}.
-- include: keys
local qk = queue_keys(1)
local batch = redis.call('ZRANGE', qk.ready, 0, tonumber(ARGV[1]) - 1)
for _, member in ipairs(batch) do
  local account, seq, job_id = split_legacy_member(member)
  redis.call('ZADD', fifo_key(qk, account), 0, ready_member(seq, job_id))
end
if #batch > 0 then
  redis.call('ZREM', qk.ready, unpack(batch))
end
return {#batch, redis.call('ZCARD', qk.ready)}
