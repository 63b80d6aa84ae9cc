-- Writer epochs (#44): one row per single-writer lock (pmw-live, pmw-stats). Each holder bumps
-- the epoch as it takes the lock and records its lock session (pid and backend start); every
-- fenced write checks, in the same statement, that its epoch is still the current one and
-- that the recorded session still holds the lock. The row is replicated like any committed
-- write, so the epoch stays monotonic across a Patroni promotion, and a pid reused on a new
-- primary matches neither the epoch nor the backend start. `renewed_ms` is the holder's lease:
-- it renews it every second; a standby deposes a holder whose lease ran out.
CREATE TABLE writer_epochs (
    lock_key bigint PRIMARY KEY,
    epoch bigint NOT NULL,
    holder text NOT NULL,
    pid integer NOT NULL,
    backend_start timestamptz NOT NULL,
    acquired_ms bigint NOT NULL,
    renewed_ms bigint NOT NULL
);
