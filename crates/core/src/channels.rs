//! The Postgres NOTIFY channels between services, named once: who sends on each and who listens.

/// A block was ingested (payload: its number). Sent by pmw-live after the watermark commits,
/// coalesced; pmw-push's leader LISTENs and runs a round. Losing a notification only delays
/// delivery until the leader's fallback poll.
pub const BLOCKS: &str = "pmw_blocks";

/// Subscribers changed (accounts, keys, subscriptions, webhook endpoints; empty payload). Sent
/// by the API and `pmwctl` in the changing transaction; pmw-push reloads its subscription index.
/// A lost one is healed by the next round, which compares the `subs_version` it reads with the
/// index's.
pub const SUBSCRIPTIONS: &str = "pmw_subscriptions";

/// Pending-tier events were appended (payload: the highest `pending_events.id` of the
/// statement). Sent by a trigger on `pending_events` (migration 0023) when pmw-live's pending
/// recorder commits; push's pending lane LISTENs. A lost one only delays until its fallback poll.
pub const PENDING: &str = "pmw_pending";
