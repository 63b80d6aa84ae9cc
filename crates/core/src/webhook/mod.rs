//! Webhook identity and signing, shared by push (which delivers) and the API (which creates
//! secrets and queues replays): the stable `webhook-id` of a delivery and Standard Webhooks
//! signatures ([`sign`]). The delivery engine itself lives in pmw-push.

pub mod sign;

use crate::message::Kind;
use crate::Cursor;

pub use sign::{Secret, Signing, SigningError};

/// What a delivery carries: the `type` of its body.
pub type DeliveryKind = Kind;

/// A `webhook-id` stable across retries: `msg_<cursor>_<block hash prefix>_<endpoint>_<kind>`.
/// The block hash prefix keeps a trade re-mined at the same `(block, log_index)` after a reorg
/// from colliding with the orphaned one (which `ON CONFLICT DO NOTHING` would drop).
pub fn webhook_id(cursor: Cursor, block_hash: &str, endpoint_id: i64, kind: Kind) -> String {
    let h = block_hash.trim_start_matches("0x");
    let prefix = h.get(..8).unwrap_or(h);
    format!("msg_{cursor}_{prefix}_{endpoint_id}_{}", kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_ids_differ_by_block_hash_endpoint_and_kind() {
        let c = Cursor {
            block: 7,
            log_index: 2,
        };
        let id = webhook_id(c, "0xabcdef0123456789", 5, Kind::Trade);
        assert_eq!(id, "msg_000000000007-000002_abcdef01_5_trade");
        assert_ne!(id, webhook_id(c, "0xabcdef0f23456789", 5, Kind::Trade));
        assert_ne!(id, webhook_id(c, "0xabcdef0123456789", 6, Kind::Trade));
        assert_ne!(id, webhook_id(c, "0xabcdef0123456789", 5, Kind::Retract));
        assert_eq!(
            webhook_id(c, "0xab", 1, Kind::Retract),
            "msg_000000000007-000002_ab_1_retract"
        );
    }
}
