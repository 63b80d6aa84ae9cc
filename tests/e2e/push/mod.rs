//! pmw-push on the real stack with pmw-sim trading and pmw-live ingesting in-process.

mod admission;
mod catchup;
mod change_flood;
mod edge;
mod edge_signed;
mod finality;
mod index;
mod leadership;
mod limits;
mod liveness;
mod nats;
mod observed;
mod pending;
mod pending_hooks;
mod stream;

use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(60);
