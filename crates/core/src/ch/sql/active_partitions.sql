-- The active partitions of some of our tables in the current database; the code fills in the
-- quoted table names.
SELECT table, partition, partition_id FROM system.parts
WHERE database = currentDatabase() AND active AND table IN ({tables})
GROUP BY table, partition, partition_id ORDER BY table, partition_id
