-- pmw:cancel_ended_pending: `pending` webhook deliveries not sent yet whose fill has ended
-- (confirmed: its trade may be on its way; or voided) are cancelled (state failed, last_error
-- "cancelled: …"): a `pending` never arrives after its `trade` or `void`. The dispatcher's claim
-- passes them over meanwhile (claim_deliveries.sql). Fenced like every write of a leader (slot
-- $1, epoch $2); $3 now. A delivery's id names its fill (`msg_pending-<fill id>_<endpoint>_pending`).
-- Returns the rows cancelled.
WITH fence AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE) AS ok
)
UPDATE webhook_deliveries d
SET state = 'failed', last_error = 'cancelled: the pending fill ended before delivery', done_ms = $3
WHERE d.state = 'pending' AND d.kind = 'pending' AND (SELECT ok FROM fence)
  AND NOT EXISTS (SELECT 1 FROM pending_fills f
                  WHERE f.id = substring(d.id FROM '^msg_pending-([0-9]+)_')::bigint
                    AND f.status = 'open')
