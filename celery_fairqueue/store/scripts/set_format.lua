-- set_format: the store's layout format moves from ARGV[1] to ARGV[2] (format_upgrade.py), only
-- if it is ARGV[1]: two upgrades run at once never move it back; and to "1>2" only while no
-- live process of an earlier version reads the store (its reading records no format:
-- read_layout.lua), checked in the same step.
-- KEYS: global keys.
-- Returns the format the store holds after the call.
-- include: keys
local held = redis.call('GET', K_LAYOUTFORMAT)
if held ~= ARGV[1] then
  return held or ''
end
if ARGV[2] == '1>2' then
  for _, reader in ipairs(redis.call('ZRANGEBYSCORE', K_LAYOUTREADERS, now_seconds(), '+inf')) do
    if not redis.call('HGET', K_FORMATSEEN, reader) then
      return held
    end
  end
end
redis.call('SET', K_LAYOUTFORMAT, ARGV[2])
return ARGV[2]
