-- set_format: the store's layout format moves from ARGV[1] to ARGV[2] (format_upgrade.py), only
-- if it is ARGV[1]: two upgrades run at once never move it back; and to "1>2" only while no
-- live process of an earlier version reads the store (its reading records no format:
-- read_layout.lua), checked in the same step.
-- KEYS: global keys.
-- Returns the format the store holds after the call.
-- include: keys fleet
local held = redis.call('GET', K_LAYOUTFORMAT)
if held ~= ARGV[1] or (ARGV[2] == '1>2' and earlier_version_reads()) then
  return held or ''
end
redis.call('SET', K_LAYOUTFORMAT, ARGV[2])
return ARGV[2]
