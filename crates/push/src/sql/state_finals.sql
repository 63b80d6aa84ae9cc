-- What a finality round starts from, in one snapshot: the finalized watermark (not the ingest
-- one), the subscription index's version and the reorgs recorded after this lane's last one.
SELECT /* pmw:final_round */ (SELECT block_number FROM finalized_cursor WHERE id = 1),
       (SELECT seq FROM subs_version WHERE id = 1),
       (SELECT max(id) FROM reorgs WHERE id > $1),
       (SELECT min(ancestor) FROM reorgs WHERE id > $1),
       (SELECT block_hash FROM chain_blocks
        WHERE block_number = (SELECT min(ancestor) FROM reorgs WHERE id > $1))
