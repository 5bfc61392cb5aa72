-- resume: an operator's pause ends; a paused account rejoins the rotation of every queue where
-- no other pause still holds it (a pause of the account in all queues outlives the end of its
-- pause in one queue, and the other way round).
-- KEYS: global keys, then the keys of every known fair queue.
-- ARGV: [1] the pause's field in pauses, [2] the account (encoded), or "" for a queue's pause.
-- Returns 1 when the pause existed, else 0.
-- include: keys rotation
local field, account = ARGV[1], ARGV[2]
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
    wake_queue(queue_keys(i), 'ready')
  end
end
return existed
