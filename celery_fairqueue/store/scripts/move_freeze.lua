-- move_freeze: a reshard (store/shards/reshard.py) freezes accounts on the shard they leave
-- (freeze_account in lib/shards.lua).
-- KEYS: global keys.
-- ARGV: pairs: account (encoded), the shard it moves to.
-- Returns how many accounts it froze (one moved already is left as it is).
-- include: shards
local frozen = 0
for n = 1, #ARGV, 2 do
  if freeze_account(ARGV[n], ARGV[n + 1]) then
    frozen = frozen + 1
  end
end
return frozen
