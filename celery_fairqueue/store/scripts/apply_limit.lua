-- apply_limit: an account's limit changes, in one step: it is stored (or dropped), the account's
-- deferral ends in every queue so the new limit applies now, and what it runs is counted
-- again, so a concurrency cap set now counts it (recount_running).
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] account (encoded), [2] its limit packed (limits.AccountLimit.pack) or "" to drop its
--       own limit, [3] the limit as configured (JSON), [4] the field the limit is stored in:
--       the account (its limit across its queues) or keys.in_queue_field (its limit in one
--       queue); its bucket there starts full; [5] that queue (encoded), or "": it becomes a
--       known queue of the shard (K_QUEUES), so a reshard moves the limit with the account.
-- Returns the number of queues where the account was deferred; for an account a reshard is
-- moving, {'f' or 'm', the shard it moves to}, and nothing changed (account_in_move).
-- include: keys limits rotation leases shards
local account = ARGV[1]
local moving, to = account_in_move(account)
if moving then
  return {moving, to}
end
local woken, field = 0, ARGV[4]
if ARGV[5] ~= '' then
  redis.call('SADD', K_QUEUES, ARGV[5])
end
write_limit(field, ARGV[2], ARGV[3])
recount_running(account, queue_positions())
for i = 1, queue_count() do
  local qk = queue_keys(i)
  local state = redis.call('HGET', qk.state, account)
  if state == 'p' or state == 'c' then
    redis.call('ZREM', qk.deferred, account)
    rotate_in_or_forget(qk, account)
    woken = woken + 1
  end
end
return woken
