-- Record sightings of unlisted emitters, one row per address ($1..$5 parallel arrays): widen the
-- block span, add the events to `events` ($7 = false, ingest) or `audit_events` ($7 = true, the
-- audit), and clear `listed_ms` (seen while not in the exchange list). $6: now, ms.
INSERT INTO unlisted_emitters AS e
    (address, first_block, last_block, events, audit_events, first_tx, first_seen_ms, last_seen_ms)
SELECT a, f, l, CASE WHEN $7 THEN 0 ELSE n END, CASE WHEN $7 THEN n ELSE 0 END, t, $6, $6
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS u(a, f, l, n, t)
ON CONFLICT (address) DO UPDATE SET
    first_block  = LEAST(e.first_block, EXCLUDED.first_block),
    last_block   = GREATEST(e.last_block, EXCLUDED.last_block),
    events       = e.events + EXCLUDED.events,
    audit_events = e.audit_events + EXCLUDED.audit_events,
    first_tx     = CASE WHEN EXCLUDED.first_block < e.first_block THEN EXCLUDED.first_tx ELSE e.first_tx END,
    last_seen_ms = EXCLUDED.last_seen_ms,
    listed_ms    = NULL
