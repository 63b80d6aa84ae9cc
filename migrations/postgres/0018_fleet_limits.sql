-- Limits that hold across every process serving `/v1/ws` (issue 42 item 4): push's leader and
-- any number of pmw-edge processes share these two tables, touched only when a session connects,
-- authenticates or closes (never on the delivery path).
--
-- A session lease per open WebSocket session: `holder` names the serving process, `expires_ms`
-- (Postgres's clock, ms since the epoch) is pushed forward by that process's upkeep every few
-- seconds and the row is deleted on close. An account's session cap counts its unexpired leases
-- under a row lock of the account, so two edges cannot both admit the last session; a crashed
-- process's leases stop counting once they expire.
CREATE TABLE session_leases (
    holder     text   NOT NULL,
    session_id bigint NOT NULL,
    account_id bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (holder, session_id)
);
CREATE INDEX session_leases_account ON session_leases (account_id, expires_ms);

-- Shared rate limits (GCRA): per `scope` and `key` (an account's WebSocket connects, a client
-- address's failed authentications), the theoretical arrival time of the next request. One
-- upsert takes a request or refuses it; a row whose time has passed is at rest and is deleted
-- by the upkeep.
CREATE TABLE rate_limits (
    scope  text   NOT NULL,
    key    text   NOT NULL,
    tat_ms bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
