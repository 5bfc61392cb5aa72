-- The business-key dedupe: the started and done markers of a job's business key, which the
-- enqueue, the claim and the ack write (the Python side reads them in idempotency.py, markers.py).
-- include: keys records

-- The claim hands a job with a business key to a worker: unless the key is done already, its
-- started marker is written here, before the side effect can begin. Returns the marker as it
-- was ('' when none, or only pending), for the task to decide whether to run or to reconcile.
local function mark_started(job_key, job_id, account)
  local key = key_of(job_key)
  local marker = make_marker('started', job_id, nil, nil, SHARDED and account or nil)
  local old = redis.call('SET', key, marker, 'GET')
  local state = marker_state(old)
  if state == 'done' then
    redis.call('SET', key, old, 'KEEPTTL')  -- done stays done (a redelivery finds it)
  end
  if not old or state == 'pending' then
    return ''
  end
  return old
end

-- A job's business key, held by no job any more while only pending (its job left the store
-- without running: cancelled, expired), is free again; a started marker stays (see enqueue).
local function free_key(job_key, job_id)
  if job_key and job_key ~= '-' then
    local key = key_of(job_key)
    local marker = redis.call('GET', key)
    if marker and marker_state(marker) == 'pending' and marker_holder(marker) == job_id then
      redis.call('DEL', key)
    end
  end
end

-- The job's side effect happened: its key is done, from now, for the retention (a done marker
-- the task wrote itself, with the external id, stays). Returns the external id, or nil.
-- ``account``: the job's (nil when its record is gone: the old marker's is kept, if it has one).
local function mark_done(job_key, job_id, retention, account)
  local key = key_of(job_key)
  local old = redis.call('SET', key, make_marker('done', job_id, nil, nil, SHARDED and account or nil), 'PX',
                         retention_ms(retention), 'GET')
  if marker_state(old) == 'done' then
    redis.call('SET', key, old, 'PX', retention_ms(retention))
    local ok, decoded = pcall(cjson.decode, old)
    local external = ok and type(decoded) == 'table' and decoded.external_id
    return type(external) == 'string' and external or nil
  end
  if not account and marker_account(old) then
    redis.call('SET', key, make_marker('done', job_id, nil, nil, marker_account(old)), 'PX',
               retention_ms(retention))
  end
  return nil
end
