-- resume: an operator's pause ends; a paused account rejoins the rotation of every queue where
-- no other pause still holds it (a pause of the account in all queues outlives the end of its
-- pause in one queue, and the other way round).
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the pause's field in pauses, [2] the account (encoded), or "" for a queue's pause,
--       [3] "1" for the reshard's own thaw of an account on its new shard (account_move.py).
-- Returns 1 when the pause existed, else 0. For an account a reshard is moving (and not the
-- reshard's thaw): {'f' or 'm', the shard it moves to}, and the pause stays (account_in_move).
-- include: keys rotation shards
local field, account = ARGV[1], ARGV[2]
if account ~= '' and ARGV[3] ~= '1' then
  local moving, to = account_in_move(account)
  if moving then
    return {moving, to}
  end
end
local existed = redis.call('HDEL', K_PAUSES, field)
if account ~= '' then
  for i = 1, queue_count() do
    local qk = queue_keys(i)
    if redis.call('HGET', qk.state, account) == 'o' and not operator_paused(qk, account) then
      rotate_in_or_forget(qk, account)
    end
  end
else
  -- a queue's pause ends: its rotation never emptied, so its idle workers are woken here
  for i = 1, queue_count() do
    ring(queue_keys(i))
  end
end
return existed
