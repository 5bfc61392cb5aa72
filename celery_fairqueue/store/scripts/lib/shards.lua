-- A reshard's freeze of an account on the shard it leaves, and what an operator's change of a
-- moving account meets (shards/reshard.py).
-- include: keys

-- A reshard (store/shards/reshard.py) freezes an account on the shard it leaves: marked frozen in the
-- moved hash ("f n": moving to shard n) and paused in every queue by a pause of the reshard's
-- own, so the claim leaves it (and its jobs) alone; an operator's pause of it in every queue is
-- kept inside that one, and put back on the new shard. Its enqueues are still stored here, and
-- moved with the rest. An account moved already ("m n") is left as it is.
local function freeze_account(account, to)
  local tag = string.sub(K_RECORDS, 1, -8)
  local state = redis.call('HGET', tag .. 'moved', account)
  if state and string.sub(state, 1, 2) == 'm ' then
    return false
  end
  redis.call('HSET', tag .. 'moved', account, 'f ' .. to)
  local field = 'a:' .. account .. ':*'
  local held = redis.call('HGET', tag .. 'pauses', field)
  local ok, decoded = pcall(cjson.decode, held or '')
  if not (ok and type(decoded) == 'table' and decoded.reshard) then
    redis.call('HSET', tag .. 'pauses', field, cjson.encode({
      by = 'fairqueue reshard', at = now_seconds(), reason = 'moving to shard ' .. to,
      reshard = tonumber(to), saved = held or nil}))
  end
  return true
end

-- Whether a reshard is moving ``account`` (encoded): 'f' and the shard it moves to while it is
-- frozen on the shard it leaves, or copied to the one it joins and not thawed there yet (the
-- reshard's own pause stands in its field of every queue); 'm' and the shard it went to once it
-- moved away from this one; nil otherwise. An operator's pause, resume or limit change of a
-- moving account is refused (a copy made before it would carry the old value over, and a
-- resume would lift the reshard's freeze: its jobs would run while half-moved); of a moved
-- one, it is sent on to its new shard (shards/sharded.py).
local function account_in_move(account)
  local tag = string.sub(K_RECORDS, 1, -8)
  local moved = redis.call('HGET', tag .. 'moved', account)
  if moved then
    return string.sub(moved, 1, 1), string.sub(moved, 3)
  end
  local held = redis.call('HGET', tag .. 'pauses', 'a:' .. account .. ':*')
  local ok, decoded = pcall(cjson.decode, held or '')
  if ok and type(decoded) == 'table' and decoded.reshard then
    return 'f', tostring(decoded.reshard)
  end
  return nil
end
