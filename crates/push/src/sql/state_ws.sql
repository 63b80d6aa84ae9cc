-- What a WebSocket round starts from, in one statement (one snapshot): the ingest watermark, the
-- subscription index's version, and the reorgs recorded after this lane's last one (the newest
-- id, the lowest common ancestor among them and its hash). `pmwctl diag` counts its calls in
-- pg_stat_statements by the marker comment.
SELECT /* pmw:push_round */ (SELECT block_number FROM ingest_cursor WHERE id = 1),
       (SELECT seq FROM subs_version WHERE id = 1),
       (SELECT max(id) FROM reorgs WHERE id > $1),
       (SELECT min(ancestor) FROM reorgs WHERE id > $1),
       (SELECT block_hash FROM chain_blocks
        WHERE block_number = (SELECT min(ancestor) FROM reorgs WHERE id > $1))
