-- The completeness audit for `pmwctl status`: the audited watermark (and when it moved), the
-- ingest watermark, how far behind it the audit is in blocks and in block time, and the audited
-- ranges' sums over the last hour, day, week and 30 days ($1 = now, ms).
SELECT a.block_number, a.updated_ms, i.block_number,
       i.block_number - a.block_number,
       (SELECT hb.block_time_ms FROM chain_blocks hb WHERE hb.block_number = i.block_number)
         - (SELECT ab.block_time_ms FROM chain_blocks ab WHERE ab.block_number = a.block_number),
       w.name, coalesce(r.ranges, 0), coalesce(r.fills, 0), coalesce(r.missing, 0),
       coalesce(r.extra, 0)
FROM audit_cursor a
CROSS JOIN (SELECT block_number FROM ingest_cursor WHERE id = 1) i
CROSS JOIN (VALUES (1, '1h', 3600000::bigint), (2, '24h', 86400000::bigint),
                   (3, '7d', 604800000::bigint), (4, '30d', 2592000000::bigint)) w(ord, name, len)
LEFT JOIN LATERAL (
  SELECT count(*) AS ranges, sum(fills_checked)::bigint AS fills, sum(missing)::bigint AS missing,
         sum(extra)::bigint AS extra
  FROM audit_ranges WHERE audited_ms >= $1 - w.len AND audited_ms <= $1
) r ON true
WHERE a.id = 1
ORDER BY w.ord
