-- mark: write a business key's idempotency marker outside a claim (a task that reconciles, or
-- records its external id, or runs outside the fair store), in one atomic step; the claim and
-- its acks write theirs through the same helpers (make_marker in lib/records.lua).
-- KEYS: global keys only.
-- ARGV: [1] business key as stored (encoded), [2] job_id, [3] "started" or "done", [4] the
--       external id as a JSON string literal, or "" (records.marker_external_id), [5] done-key
--       retention in seconds, [6] "1": leave a done marker as it is (a late ack forwarded
--       to the shard its account moved to, where a later run may have marked it done already,
--       with its external id).
-- A done marker is kept for the retention from now.
-- Returns 1, or 0 when [6] left a done marker as it was.
-- include: keys records
local job_key, job_id, state, external = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key = key_of(job_key)
local old = redis.call('GET', key)
if ARGV[6] == '1' and marker_state(old) == 'done' then
  return 0
end
-- the marker keeps the account the enqueue and the claim wrote in it (for a reshard)
local account = marker_account(old)
if state == 'done' then
  redis.call('SET', key, make_marker('done', job_id, external, nil, account), 'PX',
             retention_ms(tonumber(ARGV[5])))
else
  redis.call('SET', key, make_marker(state, job_id, external, nil, account))
end
return 1
