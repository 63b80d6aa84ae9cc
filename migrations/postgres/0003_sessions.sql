-- WebSocket session limits and revocation.
-- A ticket belongs to the key that issued it: revoking the key (or disabling the account)
-- invalidates its outstanding tickets. Tickets live for seconds; the ones issued before this
-- migration are dropped rather than left without a key.
DELETE FROM ws_tickets;
ALTER TABLE ws_tickets ADD COLUMN key_id bigint NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE;
CREATE INDEX ws_tickets_key ON ws_tickets (key_id);

-- Plan limits as the API last published them (it owns the plan settings and upserts this table
-- at start), so push can cap concurrent WebSocket sessions per account without loading API
-- settings. An account whose plan is not listed gets the default plan's limits.
CREATE TABLE plans (
    name            text    PRIMARY KEY,
    max_ws_sessions integer NOT NULL CHECK (max_ws_sessions >= 0),
    is_default      boolean NOT NULL DEFAULT false,
    updated_ms      bigint  NOT NULL
);
CREATE UNIQUE INDEX plans_one_default ON plans (is_default) WHERE is_default;
