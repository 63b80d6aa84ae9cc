//! ClickHouse: the client, and the production write and read paths for facts (trades, latency
//! rows, availability samples, the delivery log); every statement's text is in [`statements`].

pub mod availability;
mod client;
pub mod delivery_log;
pub mod latency;
pub mod statements;
pub mod trades;
pub mod visible;
pub mod window;

pub use client::*;
pub use delivery_log::DeliveryLogRow;
pub use latency::{IngestLatencyRow, PushLatencyRow};
pub use trades::{TradeRow, WalletTradeRow};
pub use window::Window;
