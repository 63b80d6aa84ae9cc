-- Replays per account and hour (issue 30): a replay re-queues up to 10,000 trades, so each
-- account may start only so many an hour. One row per account holds the current hour's count;
-- the API charges a replay with one upsert that refuses past the quota, so parallel calls cannot
-- exceed it (the row lock of ON CONFLICT serialises them).
CREATE TABLE replay_quota (
    account_id bigint  PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    -- Start of the hour counted, in ms since the epoch.
    hour_ms    bigint  NOT NULL,
    replays    integer NOT NULL CHECK (replays >= 0)
);
