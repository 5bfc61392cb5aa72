-- Keys and members: the clock, a queue's keys, a ready member's place in its account's FIFO,
-- a business key's string (formats/keys.py and formats/records.py's ReadyMember).
--
-- The library: connection/lua.py builds each script from the library files it includes
-- (its '-- include:' line, and theirs, in their order of need), keeping only the helpers it
-- calls, after a prologue that binds the K_* names of the global keys
-- (keys.GLOBAL_KEY_NAMES) the script touches, itself or through these helpers, and NGLOBAL,
-- their number.
--
-- KEYS (every script): those global keys, then one key per fair queue, its state key, from
-- which queue_keys builds the queue's other keys (keys.QUEUE_KEY_NAMES); then, for a script
-- that emits events, the event stream (K_EVENTS).
-- Account ids, queue names and business keys arrive percent-encoded (no spaces, no "|", no
-- braces, no newline).
-- All times are Redis server time, so workers with skewed clocks agree on leases and buckets.
--
-- The layout is lean: a job is one record, written at enqueue and once per
-- transition; a business key is one string, its marker; no script keeps a count that the
-- console can derive when it asks (ready jobs per account, the oldest waiting, running since).

local NQKEYS = 1

-- Redis's clock, read once per script run; now_text() is it as a script argument (a Lua number
-- would be formatted again by every command that takes it).
local clock, clock_text, clock_micros = nil, nil, nil
local function now_seconds()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) + tonumber(t[2]) / 1000000
    clock_micros = tonumber(t[1]) * 1000000 + tonumber(t[2])  -- exact: below 2^53
  end
  return clock
end

local function now_text()
  if not clock_text then
    clock_text = string.format('%.6f', now_seconds())
  end
  return clock_text
end

local function queue_count()
  return (#KEYS - NGLOBAL - (K_EVENTS and 1 or 0)) / NQKEYS
end

-- A queue's keys: the scripts receive its state key, and build the others from it, under the
-- same hash tag (so in the same slot): keys.QueueKeys names them, in keys.QUEUE_KEY_NAMES.
-- Each is made on its first use: an enqueue needs two or three of the eleven, and building a
-- string costs a script call more than the command that uses it. A field of another name is
-- the script's own (claim.lua notes a queue's next due times on it).
local queue_key_made = nil
local function queue_keys(i)
  if not queue_key_made then
    local named = {ready = true, deferred = true, delayed = true, running = true,
                   ndelayed = true, deferrals = true, tags = true, finish = true,
                   weight = true, bell = true, clock = true, keeper = true}
    queue_key_made = {__index = function(qk, field)
      local key = nil
      if named[field] then
        key = qk.base .. field
      elseif field == 'name' then
        key = string.match(qk.state, ':queue:([^:]+):state$')
      end
      if key then
        rawset(qk, field, key)
      end
      return key
    end}
  end
  local state = KEYS[NGLOBAL + i]
  return setmetatable({state = state, base = string.sub(state, 1, -6)}, queue_key_made)
end

-- A queue's keys by its encoded name, under the records key's tag (for the scripts of a reshard,
-- which learn a job's queue from its record).
local function queue_named(name)
  local base = string.sub(K_RECORDS, 1, -8) .. 'queue:' .. name .. ':'
  return {base = base, state = base .. 'state', ready = base .. 'ready',
          deferred = base .. 'deferred',
          delayed = base .. 'delayed', running = base .. 'running',
          ndelayed = base .. 'ndelayed', deferrals = base .. 'deferrals', tags = base .. 'tags',
          finish = base .. 'finish', weight = base .. 'weight', name = name,
          bell = base .. 'bell', clock = base .. 'clock'}
end

-- Each queue's position in KEYS, by its encoded name (a job's record names its queue).
local function queue_positions()
  local index = {}
  for i = 1, queue_count() do
    index[queue_keys(i).name] = i
  end
  return index
end

-- A job's place in its account's FIFO: its priority digit (0 first), then the microsecond it
-- became ready (Redis time, 16 digits; ``micros`` defaults to now), so lex order is priority,
-- then arrival, and the console reads how long the head has waited off its seq.
local function ready_seq(priority, micros)
  if not micros then
    now_seconds()
    micros = clock_micros
  end
  return priority .. string.format('%016d', micros)
end

-- An account's FIFO in a queue (QueueKeys.fifo): a sorted set of its own, score 0, members
-- "seq|job_id" (records.ReadyMember), so lex order is seq order; the job id is last and may hold
-- "|" itself. Small, it is a listpack; its backlog is its ZCARD; Redis drops it when it empties.
local function fifo_key(qk, account)
  return qk.base .. 'f:' .. account
end

local function ready_member(seq, job_id)
  return seq .. '|' .. job_id
end

-- A ready member's seq and job id.
local function split_member(member)
  return string.match(member, '^([^|]*)|(.*)$')
end

-- The layout before per-account FIFOs (format 1): one sorted set a queue (qk.ready), members
-- "account|seq|job_id", an account's FIFO its lex range. Written by a producer while the store
-- is still at format 1 (MODE: a rolling deploy, before `fairqueue upgrade`), read by the
-- upgrade (upgrade_fifo.lua).
local function legacy_member(account, seq, job_id)
  return account .. '|' .. seq .. '|' .. job_id
end

-- Where a ready job waits: its account's FIFO and its member there (format 1: the queue's set).
local function ready_place(qk, account, seq, job_id)
  if FORMAT1 then
    return qk.ready, legacy_member(account, seq, job_id)
  end
  return fifo_key(qk, account), ready_member(seq, job_id)
end

-- A format-1 ready member's account, seq and job id.
local function split_legacy_member(member)
  return string.match(member, '^([^|]*)|([^|]*)|(.*)$')
end

local function legacy_range(account)
  return '[' .. account .. '|', '(' .. account .. '}'
end

local function hget_number(key, field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

-- The string of a business key (keys.Keys.job_key), under the records key's hash tag.
local function key_of(job_key)
  return string.sub(K_RECORDS, 1, -8) .. 'key:' .. job_key
end

local function hincr_or_drop(key, field, by)
  if redis.call('HINCRBY', key, field, by) <= 0 then
    redis.call('HDEL', key, field)
  end
end
