-- pmw:market_names: the resolved market names of the tokens in $1.
SELECT token_id, question, outcome, slug, condition_id, event_slug FROM market_names
WHERE token_id = ANY($1) AND status = 'resolved'
