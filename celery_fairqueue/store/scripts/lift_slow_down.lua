-- lift_slow_down: an operator lifts a provider's "slow down" before it ends: the account
-- deferred by it rejoins the queue's rotation at its front now, or the queue's claims go on
-- (its idle workers are woken).
-- KEYS: global keys, then the keys of the queue.
-- ARGV: [1] the hold's field in pauses (keys.slow_down_field), [2] the account (encoded), or ""
--       for a queue's hold.
-- Returns 1 when a slow-down was held, else 0.
-- include: keys events rotation
local field, account = ARGV[1], ARGV[2]
local existed = redis.call('HDEL', K_PAUSES, field)
local qk = queue_keys(1)
if account == '' then
  ring(qk)
elseif string.match(redis.call('HGET', qk.deferrals, account) or '', '^slowed ') then
  redis.call('ZREM', qk.deferred, account)
  rotate_in_or_forget(qk, account, true)
  emit('e', 'account_ready', 'q', qk.name, 'a', account, 'at', now_seconds())
end
return existed
