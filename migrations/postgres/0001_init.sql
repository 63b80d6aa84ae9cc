-- pmw Postgres schema: small, hot, transactional state. Times are bigint milliseconds since the
-- Unix epoch (UTC) in *_ms columns. Hot-updated rows live in tiny tables with no index on the
-- updated columns, a low fillfactor (room for HOT updates) and their own autovacuum settings.

-- Ingest watermark: the highest block whose rows are fully visible in ClickHouse. One row.
CREATE TABLE ingest_cursor (
    id           smallint PRIMARY KEY CHECK (id = 1),
    block_number bigint   NOT NULL,
    block_hash   text     NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

-- Push cursor per push slot (one slot today; K slots when push is sharded).
CREATE TABLE push_cursor (
    slot         smallint PRIMARY KEY,
    block_number bigint   NOT NULL,
    log_index    integer  NOT NULL,
    reorg_id     bigint   NOT NULL DEFAULT 0,
    epoch        bigint   NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

-- PushEpoch: bumped by each new leader. Claims and cursor moves check it in the same statement
-- (epoch row taken FOR SHARE), so a deposed leader's writes fail.
CREATE TABLE push_epoch (
    slot        smallint PRIMARY KEY,
    epoch       bigint   NOT NULL,
    leader      text     NOT NULL,
    acquired_ms bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);

-- Liveness of every service instance; `state` is a small JSON document (last round, lag, …).
CREATE TABLE heartbeats (
    service    text    NOT NULL,
    instance   text    NOT NULL,
    pid        integer NOT NULL,
    started_ms bigint  NOT NULL,
    beat_ms    bigint  NOT NULL,
    state      jsonb   NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (service, instance)
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);

-- Recent canonical chain, for reorg detection (parent-hash check) and the cursor's block hash.
CREATE TABLE chain_blocks (
    block_number  bigint  PRIMARY KEY,
    block_hash    text    NOT NULL,
    parent_hash   text    NOT NULL,
    block_time_ms bigint  NOT NULL,
    t_detect_ms   bigint  NOT NULL,
    backfilled    boolean NOT NULL
);

-- Reorgs seen by live: push retracts orphaned trades it already delivered and rewinds.
CREATE TABLE reorgs (
    id            bigserial PRIMARY KEY,
    ancestor      bigint NOT NULL,
    old_head      bigint NOT NULL,
    new_head_hash text   NOT NULL,
    depth         integer NOT NULL,
    detected_ms   bigint NOT NULL
);

CREATE TABLE accounts (
    id          bigserial PRIMARY KEY,
    name        text   NOT NULL,
    email       text,
    plan        text   NOT NULL,
    created_ms  bigint NOT NULL,
    disabled_ms bigint
);

-- API keys are random and shown once; only their SHA-256 is stored, shown by prefix.
CREATE TABLE api_keys (
    id          bigserial PRIMARY KEY,
    account_id  bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    prefix      text   NOT NULL UNIQUE,
    key_hash    bytea  NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    label       text   NOT NULL DEFAULT '',
    created_ms  bigint NOT NULL,
    revoked_ms  bigint
);
CREATE INDEX api_keys_account ON api_keys (account_id);

-- Short-lived WebSocket tickets for browsers (which cannot send an Authorization header).
CREATE TABLE ws_tickets (
    ticket_hash bytea  PRIMARY KEY CHECK (octet_length(ticket_hash) = 32),
    account_id  bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    expires_ms  bigint NOT NULL,
    used_ms     bigint
);

-- Followed wallets: 20 raw bytes.
CREATE TABLE subscriptions (
    account_id bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    wallet     bytea  NOT NULL CHECK (octet_length(wallet) = 20),
    label      text   NOT NULL DEFAULT '',
    created_ms bigint NOT NULL,
    PRIMARY KEY (account_id, wallet)
);
CREATE INDEX subscriptions_wallet ON subscriptions (wallet);

-- Webhook endpoints; the previous secret keeps signing until its overlap window ends.
CREATE TABLE webhook_endpoints (
    id                  bigserial PRIMARY KEY,
    account_id          bigint  NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    url                 text    NOT NULL,
    secret              text    NOT NULL,
    previous_secret     text,
    previous_expires_ms bigint,
    enabled             boolean NOT NULL DEFAULT true,
    disabled_reason     text,
    created_ms          bigint  NOT NULL,
    updated_ms          bigint  NOT NULL
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id);

-- WebSocket delivery claims: each push round claims the ledger range it delivers, fenced by
-- epoch, in the same statement as the cursor move. A new leader voids its predecessor's claims
-- still open (ranges it may not have delivered live; clients recover them by resuming with
-- their cursor). WS claims are never re-claimed on timeout: resending an old trade after a
-- newer one breaks clients that keep a high-water cursor.
CREATE TABLE ws_claims (
    id          bigserial PRIMARY KEY,
    slot        smallint NOT NULL,
    epoch       bigint   NOT NULL,
    from_block  bigint   NOT NULL,
    from_log    integer  NOT NULL,
    to_block    bigint   NOT NULL,
    to_log      integer  NOT NULL,
    trades      integer  NOT NULL,
    state       text     NOT NULL CHECK (state IN ('claimed', 'delivered', 'voided')),
    claimed_ms  bigint   NOT NULL,
    done_ms     bigint
);
CREATE INDEX ws_claims_open ON ws_claims (slot, epoch) WHERE state = 'claimed';

-- Webhook deliveries and their retry state: survives restarts and leader changes.
-- `id` is the stable `webhook-id` of every attempt of this message.
CREATE TABLE webhook_deliveries (
    id              text    PRIMARY KEY,
    endpoint_id     bigint  NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    kind            text    NOT NULL CHECK (kind IN ('trade', 'retract')),
    block_number    bigint  NOT NULL,
    log_index       integer NOT NULL,
    payload         jsonb   NOT NULL,
    state           text    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_ms bigint  NOT NULL,
    claimed_epoch   bigint,
    claimed_ms      bigint,
    last_status     integer,
    last_error      text,
    t_detect_ms     bigint  NOT NULL,
    created_ms      bigint  NOT NULL,
    done_ms         bigint
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_ms);

-- Market-name cache, filled in the background; nothing on the push path waits for it.
CREATE TABLE market_names (
    token_id        text    PRIMARY KEY,
    status          text    NOT NULL CHECK (status IN ('pending', 'resolved', 'not_found')),
    condition_id    text,
    question        text,
    slug            text,
    outcome         text,
    outcome_index   integer,
    neg_risk        boolean,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_ms bigint  NOT NULL,
    first_seen_ms   bigint  NOT NULL,
    resolved_ms     bigint
);
CREATE INDEX market_names_pending ON market_names (next_attempt_ms) WHERE status = 'pending';
