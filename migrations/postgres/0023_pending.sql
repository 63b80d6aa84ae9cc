-- The pending tier's life (#43, docs/SETTLEMENT.md): settlement transactions pmw-live's mempool
-- watcher saw in a provider's pool before any block mined them, the fills their calldata names,
-- and an append-only event log the push lane will read. A pending fill ends exactly one way:
-- `confirmed` (paired with its ledger row in the block commit's transaction), or voided as
-- `reverted`, `replaced`, `dropped` or `expired` (by the watcher's resolution on each new head,
-- guarded by `status = 'open'`).

-- One row per settlement transaction seen pending and not mined when it was recorded.
CREATE TABLE pending_txs (
    tx_hash       text    PRIMARY KEY,
    sender        text    NOT NULL,
    nonce         bigint  NOT NULL,
    -- The contract the transaction calls (an exchange, or a fee module proxying to one).
    target        text    NOT NULL,
    first_seen_ms bigint  NOT NULL,
    -- Provider name -> the first time (ms) that provider announced the transaction.
    seen_by       jsonb   NOT NULL,
    -- The ingest watermark when it was recorded: the expiry bound counts from here.
    seen_block    bigint  NOT NULL,
    -- The first watermark at which no provider's pool had it any more (the dropped grace).
    gone_block    bigint,
    status        text    NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'confirmed', 'reverted', 'replaced', 'dropped', 'expired')),
    status_block  bigint,
    status_ms     bigint
);
CREATE INDEX pending_txs_open ON pending_txs (seen_block) WHERE status = 'open';

-- One row per fill a pending settlement names, in the order the exchange emits them.
CREATE TABLE pending_fills (
    id               bigserial PRIMARY KEY,
    tx_hash          text     NOT NULL REFERENCES pending_txs (tx_hash),
    fill_index       integer  NOT NULL,
    order_hash       text     NOT NULL,
    maker            text     NOT NULL,
    taker            text     NOT NULL,
    token_id         text     NOT NULL,
    -- 0 BUY, 1 SELL, as in the ledger.
    side             smallint NOT NULL,
    -- What the calldata says, in the ledger's decimal text (6 decimals): `making` is exact (the
    -- call's fill amount, in the order's maker asset); `taking` is the order's price applied.
    making           text     NOT NULL,
    taking           text     NOT NULL,
    exchange         text     NOT NULL,
    status           text     NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'confirmed', 'reverted', 'replaced', 'dropped', 'expired')),
    -- The seq of the ledger row that confirmed it (ledger's index `ledger_seq`).
    confirmed_ledger bigint,
    UNIQUE (tx_hash, fill_index)
);
-- The block commit looks open fills up by order hash; with none open it reads one index page.
CREATE INDEX pending_fills_open ON pending_fills (order_hash) WHERE status = 'open';

-- Append-only: what the pending tier announces. `pending` when a fill is recorded, `void` (with
-- its reason) when it ends without confirming. A confirmation is the ledger row's pending_id.
CREATE TABLE pending_events (
    id         bigserial PRIMARY KEY,
    fill_id    bigint NOT NULL REFERENCES pending_fills (id),
    kind       text   NOT NULL CHECK (kind IN ('pending', 'void')),
    reason     text   CHECK (reason IN ('reverted', 'replaced', 'dropped', 'expired')),
    created_ms bigint NOT NULL,
    CHECK ((kind = 'void') = (reason IS NOT NULL))
);

-- Each statement that appends events wakes the readers of `pmw_pending` (pmw_core::channels)
-- with the highest id it appended (none for a statement that appended nothing); delivered when
-- the transaction commits.
CREATE FUNCTION pmw_pending_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pmw_pending', m::text)
    FROM (SELECT max(id) AS m FROM appended) a WHERE m IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER pending_events_notify AFTER INSERT ON pending_events
REFERENCING NEW TABLE AS appended
FOR EACH STATEMENT EXECUTE FUNCTION pmw_pending_notify();

-- The pending fill a ledger row confirmed (set when the row is inserted, in the block's commit).
ALTER TABLE ledger ADD COLUMN pending_id bigint;

-- The views' columns were fixed when 0017 created them: re-expand them with pending_id.
CREATE OR REPLACE VIEW ledger_latest AS
SELECT l.*
FROM ledger l
WHERE NOT EXISTS (SELECT 1 FROM ledger n
                  WHERE n.block_number = l.block_number AND n.log_index = l.log_index
                    AND n.block_hash = l.block_hash AND n.version > l.version);

CREATE OR REPLACE VIEW ledger_visible AS
SELECT l.*
FROM ledger_latest l
WHERE l.retracted = 0
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = l.block_number AND c.block_hash <> l.block_hash);

-- Pairs a block's new trades with open pending fills, for live's commit statement
-- (crates/live/src/sql/commit_block.sql), which calls it once the ledger_head row lock is its
-- own. VOLATILE on purpose: its statements take a fresh snapshot, so a pending fill recorded
-- while the commit waited for that lock (the recorder holds it FOR SHARE) is seen and paired.
-- A trade pairs with an open fill of the same order hash and the same transaction, else (a
-- settlement re-sent under a new hash) of the same order hash and the same making amount; each
-- trade with at most one fill, each fill with at most one trade. The paired fills and their
-- transactions become `confirmed`. Returns per paired trade its position in `trades` (1-based),
-- the fill's id, and whether the calldata's taking amount differs from the log's.
CREATE FUNCTION pmw_pending_confirm(trades jsonb, base bigint, block bigint, now_ms bigint)
RETURNS TABLE (n bigint, pending_id bigint, mismatch boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pending_fills WHERE status = 'open') THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH t AS (
        SELECT r.n, r.tx_hash, r.order_hash,
               CASE WHEN r.side = 0 THEN r.collateral ELSE r.shares END AS making,
               CASE WHEN r.side = 0 THEN r.shares ELSE r.collateral END AS taking
        FROM ROWS FROM (jsonb_to_recordset(trades) AS (tx_hash text, order_hash text,
                        side smallint, shares text, collateral text))
             WITH ORDINALITY AS r (tx_hash, order_hash, side, shares, collateral, n)
    ), cand AS (
        SELECT t.n, f.id, f.tx_hash = t.tx_hash AS same_tx, f.taking <> t.taking AS differs
        FROM t JOIN pending_fills f
          ON f.order_hash = t.order_hash AND f.status = 'open'
         AND (f.tx_hash = t.tx_hash OR f.making = t.making)
    ), per_trade AS (
        SELECT DISTINCT ON (c.n) c.n, c.id, c.differs
        FROM cand c ORDER BY c.n, c.same_tx DESC, c.id
    ), pairs AS (
        SELECT DISTINCT ON (p.id) p.n, p.id, p.differs
        FROM per_trade p ORDER BY p.id, p.n
    ), fills AS (
        UPDATE pending_fills f
        SET status = 'confirmed', confirmed_ledger = base + p.n
        FROM pairs p
        WHERE f.id = p.id AND f.status = 'open'
        RETURNING f.id, f.tx_hash
    ), txs AS (
        UPDATE pending_txs x
        SET status = 'confirmed', status_block = block, status_ms = now_ms
        WHERE x.tx_hash IN (SELECT fills.tx_hash FROM fills) AND x.status = 'open'
        RETURNING 1
    )
    SELECT p.n, p.id, p.differs
    FROM pairs p JOIN fills ON fills.id = p.id;
END
$$;
