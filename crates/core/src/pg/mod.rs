//! Postgres: connections (a pool, and dedicated sessions for LISTEN and advisory locks) and the
//! reads and writes that more than one service makes, each with its SQL in `pg/sql/`.

pub mod accounts;
mod conn;
pub mod deliveries;
pub mod emitters;
pub mod follow;
pub mod indexes;
pub mod ledger;
pub mod liveness;
pub mod patroni;
mod shared;

pub use conn::*;
pub use shared::*;
