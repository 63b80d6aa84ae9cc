-- What the dispatcher scans for: whether the epoch is current, which enabled endpoints have a
-- claimable due delivery (same conditions as claim_deliveries.sql; one probe of the pending
-- index per endpoint, so a scan costs the endpoints, not the backlog), and when the next
-- delivery not due yet falls due (the due index, from $3). The backlog counts are
-- count_deliveries.sql, taken at most once a second.
SELECT EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2),
  coalesce((SELECT array_agg(e.id) FROM webhook_endpoints e
    WHERE e.enabled AND EXISTS (
      SELECT 1 FROM webhook_deliveries d
      WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_ms <= $3
        AND (d.claimed_epoch IS DISTINCT FROM $2 OR d.claimed_ms < $4))), '{}'::bigint[]),
  (SELECT min(d.next_attempt_ms) FROM webhook_deliveries d
   WHERE d.state = 'pending' AND d.next_attempt_ms > $3)
