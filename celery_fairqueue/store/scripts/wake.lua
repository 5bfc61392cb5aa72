-- wake: an account's limit changed; end its deferral in every queue so the new limit applies now.
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] account (encoded).
-- Returns the number of queues where the account was deferred.
local account = ARGV[1]
local woken = 0
redis.call('HDEL', K_BUCKETS, account)
for i = 1, queue_count() do
  local qk = queue_keys(i)
  if redis.call('HGET', qk.state, account) == 'p' then
    redis.call('ZREM', qk.deferred, account)
    rotate_in_or_forget(qk, account)
    woken = woken + 1
  end
end
return woken
