-- pmw:chat_hold: a chat endpoint is rate-limited until $2: its claimed deliveries $1 wait until
-- then (claims released, attempts unchanged: a rate limit is not a failure), with the answer
-- ($3, $4) as their last result, while the epoch ($5) still holds them.
UPDATE webhook_deliveries
SET next_attempt_ms = $2, claimed_epoch = NULL, claimed_ms = NULL, last_status = $3, last_error = $4
WHERE id = ANY ($1) AND state = 'pending' AND claimed_epoch = $5
