-- emit: record a transition seen by the task itself (succeeded, failed, retrying) in the event
-- stream, if a recorder has created it.
-- KEYS: global keys, then the event stream.
-- ARGV: field, value, field, value, ... ("at" is added, in server time).
-- Returns 1 when recorded, 0 when no recorder listens.
-- include: keys events
emit('at', now_seconds(), unpack(ARGV))
return recording and 1 or 0
