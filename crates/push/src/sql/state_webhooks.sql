-- What a webhook round starts from: the same snapshot as a WebSocket round (state_ws.sql). Its
-- extra `lane` column gives it another structure, so pg_stat_statements (which merges
-- statements by structure, not by comment) keeps it apart and `pmwctl diag` counts WebSocket
-- rounds only.
SELECT /* pmw:webhook_round */ (SELECT block_number FROM ingest_cursor WHERE id = 1),
       (SELECT seq FROM subs_version WHERE id = 1),
       (SELECT max(id) FROM reorgs WHERE id > $1),
       (SELECT min(ancestor) FROM reorgs WHERE id > $1),
       (SELECT block_hash FROM chain_blocks
        WHERE block_number = (SELECT min(ancestor) FROM reorgs WHERE id > $1)),
       'webhooks'::text AS lane
