-- upgrade: adopt the idempotency records of the layout before job records into key
-- strings, a batch a call, then delete them and that layout's leftovers that hold no job; only
-- while that layout holds no job (its workers drained it first: see store/writers/upgrade.py).
-- KEYS: global keys, then the keys of the layout before records (keys.Keys.legacy): meta (hash
--       job_id -> "queue account seq job_key[ expires]", its jobs), markers (hash business key
--       -> marker JSON), done (sorted set business key -> time its job finished), jobkeys (hash
--       business key -> the job holding it), then seq, pending, deliveries and owners.
-- ARGV: [1] done-key retention in seconds, [2] batch size, [3] the HSCAN cursor of markers ("0"
--       at first, then as returned).
-- The business keys in those records are encoded already: they are used as they are.
-- A key done within the retention gets its string for the rest of the retention: its old marker
-- (done; or started, when its job failed: the side effect may have begun), else a done marker
-- of the job that held it, from when it finished; older ones are dropped, as trim_done did. A
-- started marker of a key not done (a dead letter's) gets its string with no time to live, as a
-- dead letter's key keeps it. A string this version wrote stays, unless only pending: a job
-- enqueued during the drain waits with the key; then the old done marker answers its claim (it
-- does not run again), and an old started marker makes the key started for it (its task asks
-- whether the side effect happened), as enqueue.lua does when a job takes a key over.
-- Returns {-1, jobs, 0} while the old layout holds jobs (nothing is changed), {0, cursor,
-- adopted} while there is more (call again with the cursor), {1, '0', adopted} once the old
-- records are gone; ``adopted``: the key strings this call wrote.
-- include: keys records
local OLD_META, OLD_MARKERS = KEYS[NGLOBAL + 1], KEYS[NGLOBAL + 2]
local OLD_DONE, OLD_JOBKEYS = KEYS[NGLOBAL + 3], KEYS[NGLOBAL + 4]
local retention, batch, cursor = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local jobs = redis.call('HLEN', OLD_META)
if jobs > 0 then
  return {-1, jobs, 0}
end

local function adopt(job_key, marker, ttl_ms)
  local key = key_of(job_key)
  local current = redis.call('GET', key)
  if current then
    if marker_state(current) ~= 'pending' then
      return 0
    end
    if marker_state(marker) == 'started' then
      marker, ttl_ms = make_marker('started', marker_holder(current) or ''), nil
    end
  end
  if ttl_ms then
    redis.call('SET', key, marker, 'PX', ttl_ms)
  else
    redis.call('SET', key, marker)
  end
  return 1
end

local now = now_seconds()
local adopted = 0
local done = redis.call('ZRANGE', OLD_DONE, 0, batch - 1, 'WITHSCORES')
for i = 1, #done, 2 do
  local job_key, at = done[i], tonumber(done[i + 1])
  local old = redis.call('HGET', OLD_MARKERS, job_key)
  local holder = redis.call('HGET', OLD_JOBKEYS, job_key)
  redis.call('ZREM', OLD_DONE, job_key)
  redis.call('HDEL', OLD_MARKERS, job_key)
  redis.call('HDEL', OLD_JOBKEYS, job_key)
  local left_ms = math.floor((at + retention - now) * 1000)
  if left_ms > 0 then
    local state = marker_state(old)
    if state ~= 'done' and state ~= 'started' then
      old = make_marker('done', holder or '', nil, string.format('%.6f', at))
    end
    adopted = adopted + adopt(job_key, old, left_ms)
  end
end
if #done > 0 then
  return {0, cursor, adopted}
end

-- the markers left are of keys not done: started ones are kept, done ones were outside the
-- done set (the old layout deduped on that set alone)
local scan = redis.call('HSCAN', OLD_MARKERS, cursor, 'COUNT', batch)
local entries = scan[2]
for i = 1, #entries, 2 do
  redis.call('HDEL', OLD_MARKERS, entries[i])
  if marker_state(entries[i + 1]) == 'started' then
    adopted = adopted + adopt(entries[i], entries[i + 1], nil)
  end
end
if scan[1] ~= '0' then
  return {0, scan[1], adopted}
end
redis.call('DEL', unpack(KEYS, NGLOBAL + 2))
return {1, '0', adopted}
