-- The pending names due for a Gamma lookup, most overdue first: $1 = now (ms), $2 = batch size.
SELECT token_id, attempts FROM market_names WHERE status = 'pending' AND next_attempt_ms <= $1
ORDER BY next_attempt_ms LIMIT $2
