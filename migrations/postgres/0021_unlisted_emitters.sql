-- Unlisted emitters (issue 45 item 4): contracts that emitted a log with the topic0 of a
-- Polymarket fill or match event (`OrderFilled` or `OrdersMatched`, V1 or V2 ABI) while not in
-- pmw-live's exchange list. Anyone can emit a look-alike event, so such logs are never decoded
-- into trades and never delivered; the sighting is recorded here (off the block commit, in
-- batches) so an operator can check the contract and add it to the list
-- (docs/OPERATIONS.md, "Unlisted emitters"; docs/EXCHANGES.md).
--
-- `events` counts the logs pmw-live saw at ingest; `audit_events` those the completeness audit
-- found in finalized blocks (the same logs may be in both). `listed_ms` is set when pmw-live
-- starts with the address in its exchange list (the warning stops); a later sighting while it
-- is not listed clears it again. A sighting in a block later reorganised away stays recorded:
-- this is what was seen, not a ledger fact.
CREATE TABLE unlisted_emitters (
    address       text   PRIMARY KEY CHECK (address ~ '^0x[0-9a-f]{40}$'),
    first_block   bigint NOT NULL,
    last_block    bigint NOT NULL,
    events        bigint NOT NULL DEFAULT 0,
    audit_events  bigint NOT NULL DEFAULT 0,
    first_tx      text   NOT NULL,
    first_seen_ms bigint NOT NULL,
    last_seen_ms  bigint NOT NULL,
    listed_ms     bigint
);
CREATE INDEX unlisted_emitters_open ON unlisted_emitters (last_seen_ms) WHERE listed_ms IS NULL;
