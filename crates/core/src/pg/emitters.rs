//! Unlisted emitters (`unlisted_emitters`): contracts outside pmw-live's exchange list that
//! emitted a Polymarket fill or match event signature. pmw-live records them (off the block
//! commit), `pmwctl status` and `/v1/ready` warn about the ones still unlisted. Their logs are
//! never delivered: anyone can emit a look-alike event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;

use crate::types::Address;

/// At most this many unlisted emitters are named in a warning (an attacker may deploy many).
pub const WARN_NAMED: usize = 5;

/// Sightings of one address in some blocks (what a block, a range or a batch adds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    pub first_block: u64,
    pub last_block: u64,
    pub events: u64,
    /// The transaction of the first log seen (`0x…`).
    pub first_tx: String,
}

impl Sighting {
    /// `other` folded into this one.
    pub fn merge(&mut self, other: &Sighting) {
        if other.first_block < self.first_block {
            self.first_block = other.first_block;
            self.first_tx.clone_from(&other.first_tx);
        }
        self.last_block = self.last_block.max(other.last_block);
        self.events += other.events;
    }
}

/// Sightings by address.
pub type Sightings = BTreeMap<Address, Sighting>;

/// Where sightings were made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// pmw-live's ingest of new blocks.
    Ingest,
    /// The completeness audit of finalized blocks.
    Audit,
}

/// Record `sightings` in one statement at `now_ms`.
pub async fn record(
    c: &impl GenericClient,
    sightings: &Sightings,
    source: Source,
    now_ms: i64,
) -> Result<(), tokio_postgres::Error> {
    if sightings.is_empty() {
        return Ok(());
    }
    let addresses: Vec<String> = sightings.keys().map(Address::to_lower_hex).collect();
    let column = |f: fn(&Sighting) -> i64| sightings.values().map(f).collect::<Vec<i64>>();
    let first = column(|s| s.first_block as i64);
    let last = column(|s| s.last_block as i64);
    let events = column(|s| s.events as i64);
    let txs: Vec<&str> = sightings.values().map(|s| s.first_tx.as_str()).collect();
    let audit = source == Source::Audit;
    c.execute(
        include_str!("sql/unlisted_record.sql"),
        &[&addresses, &first, &last, &events, &txs, &now_ms, &audit],
    )
    .await?;
    Ok(())
}

/// Mark `listed` (pmw-live's exchange list) as listed at `now_ms`: their warnings stop.
pub async fn mark_listed(
    c: &impl GenericClient,
    listed: &[Address],
    now_ms: i64,
) -> Result<u64, tokio_postgres::Error> {
    let addresses: Vec<String> = listed.iter().map(Address::to_lower_hex).collect();
    c.execute(
        include_str!("sql/unlisted_listed.sql"),
        &[&addresses, &now_ms],
    )
    .await
}

/// One unlisted emitter as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnlistedEmitter {
    pub address: String,
    pub first_block: i64,
    pub last_block: i64,
    /// Events seen at ingest.
    pub events: i64,
    /// Events the audit found in finalized blocks.
    pub audit_events: i64,
    pub first_tx: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

/// The unlisted emitters not in the exchange list, most recently seen first (at most `limit`),
/// and how many there are in all.
pub async fn open(
    c: &impl GenericClient,
    limit: i64,
) -> Result<(Vec<UnlistedEmitter>, i64), tokio_postgres::Error> {
    let rows = c
        .query(include_str!("sql/unlisted_open.sql"), &[&limit])
        .await?;
    let total = rows.first().map_or(0, |r| r.get(8));
    let list = rows
        .iter()
        .map(|r| UnlistedEmitter {
            address: r.get(0),
            first_block: r.get(1),
            last_block: r.get(2),
            events: r.get(3),
            audit_events: r.get(4),
            first_tx: r.get(5),
            first_seen_ms: r.get(6),
            last_seen_ms: r.get(7),
        })
        .collect();
    Ok((list, total))
}

/// The warning `pmwctl status` and `/v1/ready` show: `None` when there is none; else the
/// count and up to [`WARN_NAMED`] addresses with their first block and events.
pub fn warning(list: &[UnlistedEmitter], total: i64) -> Option<String> {
    if total == 0 {
        return None;
    }
    let named: Vec<String> = list
        .iter()
        .take(WARN_NAMED)
        .map(|e| {
            format!(
                "{} (from block {}, {} events, {} in audited blocks)",
                e.address, e.first_block, e.events, e.audit_events
            )
        })
        .collect();
    let more = (total as usize).saturating_sub(named.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Some(format!(
        "{total} unlisted contract(s) emitted Polymarket fill/match events, not delivered: {}{tail}; \
         check each and add a real exchange to PMW_LIVE_EXTRA_EXCHANGES (docs/OPERATIONS.md, \"Unlisted emitters\")",
        named.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(n: u8) -> UnlistedEmitter {
        UnlistedEmitter {
            address: format!("0x{}", hex::encode([n; 20])),
            first_block: 10,
            last_block: 12,
            events: 3,
            audit_events: 1,
            first_tx: "0x01".into(),
            first_seen_ms: 0,
            last_seen_ms: 0,
        }
    }

    #[test]
    fn the_warning_names_a_few_and_counts_the_rest() {
        assert_eq!(warning(&[], 0), None);
        let one = warning(&[e(1)], 1).unwrap();
        assert!(one.starts_with("1 unlisted contract(s)"), "{one}");
        assert!(one.contains("0x0101010101010101010101010101010101010101 (from block 10, 3 events, 1 in audited blocks)"), "{one}");
        assert!(!one.contains("more"), "{one}");
        let list: Vec<_> = (1..=9).map(e).collect();
        let many = warning(&list, 40).unwrap();
        assert_eq!(many.matches("(from block").count(), WARN_NAMED, "{many}");
        assert!(many.contains(" and 35 more;"), "{many}");
    }

    #[test]
    fn a_merge_keeps_the_earliest_block_and_its_tx() {
        let mut a = Sighting {
            first_block: 5,
            last_block: 6,
            events: 2,
            first_tx: "0xa".into(),
        };
        a.merge(&Sighting {
            first_block: 3,
            last_block: 4,
            events: 1,
            first_tx: "0xb".into(),
        });
        a.merge(&Sighting {
            first_block: 9,
            last_block: 9,
            events: 4,
            first_tx: "0xc".into(),
        });
        assert_eq!(
            a,
            Sighting {
                first_block: 3,
                last_block: 9,
                events: 7,
                first_tx: "0xb".into()
            }
        );
    }
}
