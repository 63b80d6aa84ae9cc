-- Record token ids seen for the first time as pending names, due now: $1 = token ids,
-- $2 = now (ms). Ids already recorded are left as they are.
INSERT INTO market_names (token_id, status, next_attempt_ms, first_seen_ms)
SELECT unnest($1::text[]), 'pending', $2, $2 ON CONFLICT (token_id) DO NOTHING
