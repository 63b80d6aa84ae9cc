//! pmw-sim: the trade simulator for development, tests and benchmarks.
//!
//! It makes the four Polymarket exchange addresses of a local anvil chain emit the real
//! exchange events, byte for byte in the real layout (V1 and V2 `OrderFilled`, then
//! `OrdersMatched`, in the order the exchange emits them), for a configurable set of wallets
//! and markets, and records what it emitted so tests can compare it with what pmw ingested.
//! It also serves the markets' metadata in the Gamma `/markets` shape.
//!
//! - [`contracts`]: the emitter contracts (Solidity in `contracts/`, compiled by
//!   `scripts/build-contracts`), exchange addresses, event signatures.
//! - [`Sim`]: install the emitters, run matches (or [`Sim::spawn`] a paced run), read the
//!   record ([`Sim::emitted`]), reorganise the chain ([`Sim::reorg`]).
//! - [`settlement`]: stand-ins that take the real V1/V2 settlement calls (the pending tier's
//!   source) and emit the exchange events for them.
//! - [`Sim::emit_unlisted`]: a look-alike match from an emitter at an address that is not an
//!   exchange ([`unlisted`]), for pmw's unlisted-emitter watch.
//! - [`markets::serve`]: the Gamma-compatible metadata server.
//! - [`anvil::Anvil`]: a private anvil on a free port for tests.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let sim = pmw_sim::Sim::connect("http://127.0.0.1:58545").await?;
//! sim.install_emitters().await?;
//! let fills = sim.run_matches(3).await?;
//! assert!(fills.len() >= 6); // each match: one fill per maker order + the taker order's
//! # Ok(()) }
//! ```

pub mod abi;
pub mod anvil;
pub mod config;
pub mod contracts;
pub mod emitted;
pub mod markets;
pub mod mempool;
pub mod plan;
mod reorg;
pub mod rpc;
pub mod settle_call;
pub mod settlement;
mod sim;
pub mod types;
pub mod unlisted;

pub use config::{demo_markets, demo_wallets, Market, RunConfig, SimConfig};
pub use contracts::{Exchange, EXCHANGES};
pub use emitted::{read_report, Emitted};
pub use mempool::{Outcome, Settlement};
pub use plan::Fate;
pub use reorg::{BlockRef, ReorgOutcome, ReorgPlan, ReplayOrder};
pub use sim::Sim;
pub use tokio_util::sync::CancellationToken;
pub use types::{FeeAsset, Role, Side, TokenId, Version, B256};
pub use unlisted::{UnlistedFill, UnlistedMatch};
