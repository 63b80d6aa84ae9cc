-- Successes, many in one statement; a delivered row keeps no body (migration 0028).
WITH {FENCE}, x AS (
  SELECT * FROM unnest($3::text[], $4::int[], $5::int[], $6::bigint[])
    AS x(id, attempts, status, done_ms)),
d AS (
  UPDATE webhook_deliveries w SET state = 'delivered', attempts = x.attempts,
    next_attempt_ms = x.done_ms, last_status = x.status, last_error = NULL, done_ms = x.done_ms,
    payload = NULL
  FROM x
  WHERE w.id = x.id AND w.claimed_epoch = $2 AND EXISTS (SELECT 1 FROM fence)
  RETURNING w.id)
SELECT (SELECT count(*) FROM fence), coalesce((SELECT array_agg(id) FROM d), ARRAY[]::text[])
