-- move_weigh: a store of one shard that a reshard moves to more keeps each queue's runnable
-- weight from now on (lib/rotation.lua): once every process runs the sharded scripts, the
-- reshard counts it afresh on the home shard, for the claims that took it up while some
-- processes still ran the scripts of one shard (store/shards/reshard.py).
-- KEYS: global keys.
-- ARGV: none.
-- Returns how many queues it weighed.
-- include: keys rotation
local queues = redis.call('SMEMBERS', K_QUEUES)
for _, name in ipairs(queues) do
  weigh_rotation(queue_named(name))
end
return #queues
