//! pmw-stats' integration tests on the real ClickHouse and Postgres: windows, time zones,
//! retention, the writer lock, the dashboard in a browser.

mod browser;
mod common;
mod lock;
mod retention;
mod schema_guard;
mod timezone;
mod windows;
