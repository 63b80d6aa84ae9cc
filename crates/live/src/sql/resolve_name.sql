-- Store a name Gamma resolved: $1 = token id, $2..$7 = the market's fields, $8 = now (ms),
-- $9 = the slug of the market's event.
UPDATE market_names SET status = 'resolved', question = $2, condition_id = $3, slug = $4,
    outcome = $5, outcome_index = $6, neg_risk = $7, resolved_ms = $8, attempts = attempts + 1,
    event_slug = $9
WHERE token_id = $1
