//! pmw-live's integration tests: live in-process on a private anvil with the real Postgres and
//! ClickHouse.

mod audit;
mod common;
mod emitters;
mod finality;
mod ingest;
mod ledger;
mod mempool;
mod notifier;
mod pair;
mod pending;
mod pending_fed;
mod pool;
mod projector;
mod providers;
mod quorum;
mod schema_guard;
