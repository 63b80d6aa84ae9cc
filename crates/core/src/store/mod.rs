//! The production ClickHouse write and read paths for facts (trades and latency rows); every
//! statement's text is in [`statements`].

pub mod delivery_log;
pub mod latency;
pub mod statements;
pub mod trades;
pub mod visible;
pub mod window;

pub use delivery_log::DeliveryLogRow;
pub use latency::{IngestLatencyRow, PushLatencyRow};
pub use trades::{TradeRow, WalletTradeRow};
pub use window::Window;
