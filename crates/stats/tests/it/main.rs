//! pmw-stats' integration tests on the real ClickHouse (and a current one, chDB) and Postgres:
//! the ClickHouse layer on both engines, windows, availability, time zones,
//! retention, the writer lock, the pending tier, the dashboard in a browser.

mod availability;
mod browser;
mod common;
mod engines;
mod lock;
mod pending;
mod providers;
mod retention;
mod schema_guard;
mod timezone;
mod windows;
