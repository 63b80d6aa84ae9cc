-- Audit ranges older than the dashboard's longest window (plus margin): $1 = cut-off (ms).
DELETE FROM audit_ranges WHERE audited_ms < $1
