-- The event stream: a state transition for the recorder (readers/events.py).

local EVENTS_MAXLEN = 1000000

-- Record a state transition for the recorder (events.py), only once a recorder has created the
-- stream: with no recorder nothing piles up. The caller says whether it saw the stream
-- (RECORDING, from the prologue, asked every few seconds): then the event goes straight in
-- (NOMKSTREAM: a stream deleted since is not made again); else the stream is asked for once
-- per call, which is cheaper than an event of a dozen fields written for nothing.
-- Fields alternate name, value.
local recording = nil
local function emit(...)
  if recording == nil then
    recording = RECORDING or redis.call('EXISTS', K_EVENTS) == 1
  end
  if recording then
    redis.call('XADD', K_EVENTS, 'NOMKSTREAM', 'MAXLEN', '~', EVENTS_MAXLEN, '*', ...)
  end
end
