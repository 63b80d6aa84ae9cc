-- The audited ranges of one window [$1, $2) (by audited_ms): how many, the blocks and fills they
-- compared, what was missing and extra, the highest block audited, and the most the audit
-- trailed: blocks behind the ingest watermark and time after the range's last block.
SELECT count(*), coalesce(sum(to_block - from_block + 1), 0)::bigint,
       coalesce(sum(fills_checked), 0)::bigint, coalesce(sum(missing), 0)::bigint,
       coalesce(sum(extra), 0)::bigint, max(to_block), max(head_block - to_block),
       max(audited_ms - to_block_time_ms)
FROM audit_ranges WHERE audited_ms >= $1 AND audited_ms < $2
