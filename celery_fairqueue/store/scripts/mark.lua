-- mark: write a business key's idempotency marker outside a claim (a task that reconciles, or
-- records its external id, or runs outside the fair store), in one atomic step; the claim and
-- its acks write theirs through the same helper (write_marker in _lib.lua).
-- KEYS: global keys only.
-- ARGV: [1] business key as stored (encoded), [2] job_id, [3] "started" or "done", [4] the
--       external id as a JSON string literal, or "" (records.marker_external_id).
-- A done marker also records the key as done now (kept for the retention), unless it was
-- already: the first finish counts.
-- Returns 1.
local job_key, job_id, state, external = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
write_marker(job_key, state, job_id, external)
if state == 'done' then
  redis.call('ZADD', K_DONE, 'NX', now_text(), job_key)
end
return 1
