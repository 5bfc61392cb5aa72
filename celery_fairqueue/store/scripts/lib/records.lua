-- The stored formats of a job and of a business key's marker, each read and built by one
-- helper here (formats/records.py is their Python codec; keep the two in step).
-- include: keys

-- A job's record (records.JobRecord): a header line "queue account seq job_key expires
-- deliveries owner started capped" ("-" for none), a newline, then the Celery message. seq is
-- its place in its account's FIFO (see ready_seq); owner, started and capped say who leases
-- it, since when, and whether its account had a concurrency cap then.
local function split_record(record)
  if not record then
    return nil
  end
  local newline = string.find(record, '\n', 1, true)
  if not newline then
    return nil
  end
  local queue, account, seq, job_key, expires, deliveries, owner, started, capped =
    string.match(string.sub(record, 1, newline - 1),
                 '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  if not queue then
    return nil
  end
  return {queue = queue, account = account, seq = seq, job_key = job_key,
          expires_text = expires, expires = tonumber(expires), deliveries = tonumber(deliveries),
          owner = owner, started = started, capped = capped,
          envelope = string.sub(record, newline + 1)}
end

local function make_header(job)
  return job.queue .. ' ' .. job.account .. ' ' .. job.seq .. ' ' .. job.job_key .. ' ' ..
         job.expires_text .. ' ' .. job.deliveries .. ' ' .. job.owner .. ' ' .. job.started ..
         ' ' .. job.capped
end

local function make_record(job)
  return make_header(job) .. '\n' .. job.envelope
end

-- A new job's record from the producer's parts (records.new_record_parts): the header before
-- its seq, and after it (the message too); the seq alone is made here, off Redis's clock.
local function make_new_record(head, seq, tail)
  return head .. seq .. tail
end

local function read_job(job_id)
  return split_record(redis.call('HGET', K_RECORDS, job_id))
end

local function write_job(job_id, job)
  redis.call('HSET', K_RECORDS, job_id, make_record(job))
end

-- A business key's marker (records.Marker) is "p account|job_id" while pending (a job holds the key
-- and has not started; the account named as below; JSON before format 2), else JSON: "started" (a
-- delivery was handed to a worker: the side effect may have begun) or "done"; the job holding it;
-- when; and external_id when ``external`` (a JSON string literal made by
-- records.marker_external_id, so Python's own escapes survive byte for byte) is given. A finished
-- job's marker expires after the retention: a key string with a time to live is a finished job's,
-- one without is held by a job in the store. ``at`` (text) defaults to now (upgrade.lua gives
-- the time a job of the layout before records finished).
-- ``account`` (encoded) is the account of the job: a key string's name does not say it, and a
-- reshard (store/shards/reshard.py) moves an account's markers with it (bytes only, no command).
-- A marker names its account (for a reshard to find it) only in a sharded store: 20 bytes a key
-- that a store of one shard does not need (a reshard copies an unnamed done marker everywhere).
local function make_marker(state, job_id, external, at, account)
  if state == 'pending' and not FORMAT1 then  -- short: one is held by every waiting job
    return 'p ' .. (account or '') .. '|' .. job_id
  end
  local tail = (external and external ~= '') and (',"external_id":' .. external) or ''
  local owner = account and (',"account":"' .. account .. '"') or ''
  return '{"state":"' .. state .. '","job_id":' .. cjson.encode(job_id) .. ',"at":' ..
         (at or now_text()) .. owner .. tail .. '}'
end

-- The account (encoded) a marker names, or nil (a marker written before they named it).
local function marker_account(marker)
  local short = string.match(marker or '', '^p ([^|]*)|')
  if short then
    return short ~= '' and short or nil
  end
  local ok, decoded = pcall(cjson.decode, marker or '')
  return ok and type(decoded) == 'table' and type(decoded.account) == 'string' and
         decoded.account or nil
end

local function marker_state(marker)
  if marker and string.sub(marker, 1, 2) == 'p ' then
    return 'pending'
  end
  return marker and string.match(marker, '^{"state":"(%a+)"')
end

local function marker_holder(marker)
  local short = string.match(marker, '^p [^|]*|(.*)$')
  if short then
    return short
  end
  local ok, decoded = pcall(cjson.decode, marker)
  return ok and type(decoded) == 'table' and decoded.job_id or nil
end

local function retention_ms(retention)
  return math.max(1, math.floor(retention * 1000))
end
