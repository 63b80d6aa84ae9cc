-- Market subscriptions (issue 45): an account follows markets, whatever the wallet. One row per
-- market reference as the subscriber named it (a condition id, an outcome token id or an event
-- slug), with what the API resolved it to when the row was written (condition ids and the
-- outcome token ids push matches fills on: the hot path never looks a market up) and the
-- subscription's filter (`pmw_core::filter::FilterSpec`, without `markets`). Writing the table
-- bumps `subs_version` (the statement triggers of 0014's functions), so push and the edges
-- reload their index.
CREATE TABLE market_subscriptions (
    account_id bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    kind       text   NOT NULL CHECK (kind IN ('condition', 'token', 'event')),
    market     text   NOT NULL CHECK (length(market) BETWEEN 1 AND 200),
    label      text   NOT NULL DEFAULT '',
    conditions text[] NOT NULL CHECK (cardinality(conditions) > 0),
    tokens     text[] NOT NULL CHECK (cardinality(tokens) > 0),
    filter     jsonb  CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object'),
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (account_id, kind, market)
);

CREATE TRIGGER market_subscriptions_bump_subs_version_insert AFTER INSERT ON market_subscriptions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_inserted();
CREATE TRIGGER market_subscriptions_bump_subs_version_update AFTER UPDATE ON market_subscriptions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_updated();
CREATE TRIGGER market_subscriptions_bump_subs_version_delete AFTER DELETE ON market_subscriptions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version_deleted();

-- Replays and resumes read a followed market's fills by token from the hot ledger.
CREATE INDEX ledger_token ON ledger (token_id, block_number, log_index);
