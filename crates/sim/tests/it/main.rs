//! pmw-sim's integration tests on a private anvil: the emitted events, reorgs, the settlement
//! stand-ins, the metadata server and the CLI.

mod cli;
mod common;
mod emit;
mod events;
mod markets;
mod reorg;
mod settle;
