//! Unlisted emitters: logs with a Polymarket fill or match topic0 (both ABIs) from a contract
//! outside the exchange list. Ingest and the audit ask `eth_getLogs` for those topics from any
//! address in the one call they already make ([`split`] separates the two kinds): the
//! allowlisted logs go on as before; the others are never decoded into trades (anyone can emit
//! a look-alike event) but are counted (`pmw_live_unlisted_emitter_events_total{address,source}`,
//! at most [`LABELLED`] addresses by name, the rest as `other`) and handed to the [`Recorder`]
//! task, which writes them to `unlisted_emitters` after the commit, in batches: a sighting never
//! delays a block.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::pg::emitters::{self, Sighting, Sightings, Source};
use pmw_core::pg::PgPool;
use pmw_core::trade::exchange::is_watched_topic;
use pmw_core::trade::{Allowlist, RawLog};
use pmw_core::types::Address;
use pmw_core::UnixMs;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::chain::hex32;

/// The counter of unlisted emitters' events.
pub const EVENTS: &str = "pmw_live_unlisted_emitter_events_total";
/// Addresses named in [`EVENTS`]' label per process; later ones are counted as `other` (an
/// attacker can deploy any number of emitters: the series stay bounded).
pub const LABELLED: usize = 16;
/// How long sightings gather before a write.
const GATHER: Duration = Duration::from_millis(100);
/// Addresses held while Postgres refuses the write; beyond, new ones are dropped (logged).
const MAX_HELD: usize = 10_000;
/// How long `close` waits for the last write.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// `logs` split into the allowlisted emitters' (returned, in order) and the sightings of the
/// others (logs with a watched topic0; any other log is dropped).
pub fn split(logs: Vec<RawLog>, allow: &Allowlist) -> (Vec<RawLog>, Sightings) {
    let mut listed = Vec::with_capacity(logs.len());
    let mut seen = Sightings::new();
    for log in logs {
        if allow.contains(&log.address) {
            listed.push(log);
            continue;
        }
        if !log.topics.first().is_some_and(is_watched_topic) {
            continue;
        }
        let s = Sighting {
            first_block: log.block_number,
            last_block: log.block_number,
            events: 1,
            first_tx: hex32(&log.tx_hash),
        };
        match seen.get_mut(&log.address) {
            Some(prev) => prev.merge(&s),
            None => {
                seen.insert(log.address, s);
            }
        }
    }
    (listed, seen)
}

/// The label an address is counted under (its own for the first [`LABELLED`] seen by this
/// process, `other` after) and whether this is its first sighting here (logged at `warn` once,
/// later ones at `debug`: an attacker's emitters cannot flood the log either).
fn label(address: &Address) -> (String, bool) {
    static NAMED: OnceLock<Mutex<BTreeSet<Address>>> = OnceLock::new();
    let mut named = NAMED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if named.contains(address) {
        return (address.to_lower_hex(), false);
    }
    if named.len() < LABELLED {
        named.insert(*address);
        return (address.to_lower_hex(), true);
    }
    ("other".into(), false)
}

/// The sender's end: counts, logs and hands sightings over (never blocks, never fails).
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::UnboundedSender<(Source, Sightings)>,
}

impl Sink {
    /// Sightings made by `source` (after the block's commit, for ingest).
    pub fn saw(&self, source: Source, sightings: Sightings) {
        if sightings.is_empty() {
            return;
        }
        let by = match source {
            Source::Ingest => "ingest",
            Source::Audit => "audit",
        };
        for (address, s) in &sightings {
            let (label, first) = label(address);
            metrics::counter!(EVENTS, "address" => label, "source" => by).increment(s.events);
            if first {
                tracing::warn!(emitter = %address, block = s.first_block, events = s.events, source = by, "unlisted contract emitted polymarket fill/match events: not delivered");
            } else {
                tracing::debug!(emitter = %address, block = s.first_block, events = s.events, source = by, "unlisted emitter again");
            }
        }
        let _ = self.tx.send((source, sightings));
    }
}

/// The writer task.
pub struct Recorder {
    task: JoinHandle<()>,
}

impl Recorder {
    pub fn spawn(pg: PgPool) -> (Sink, Recorder) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pg, rx));
        (Sink { tx }, Recorder { task })
    }

    /// Wait (bounded) until every sender is gone and the last sightings were attempted.
    pub async fn close(self) {
        if tokio::time::timeout(CLOSE_WAIT, self.task).await.is_err() {
            tracing::warn!("unlisted emitter sightings still unwritten at shutdown");
        }
    }
}

/// Sightings held for the next write, by source.
#[derive(Default)]
struct Held {
    ingest: Sightings,
    audit: Sightings,
}

impl Held {
    fn add(&mut self, source: Source, sightings: Sightings) {
        let into = match source {
            Source::Ingest => &mut self.ingest,
            Source::Audit => &mut self.audit,
        };
        for (a, s) in sightings {
            let full = into.len() >= MAX_HELD;
            match into.get_mut(&a) {
                Some(prev) => prev.merge(&s),
                None if !full => {
                    into.insert(a, s);
                }
                None => {
                    tracing::warn!(emitter = %a, "unlisted emitter sighting dropped: too many held")
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.ingest.is_empty() && self.audit.is_empty()
    }

    async fn write(&mut self, pg: &PgPool) -> Result<(), String> {
        let c = pg.get().await.map_err(|e| e.to_string())?;
        let now = UnixMs::now().0;
        for (source, s) in [
            (Source::Ingest, &mut self.ingest),
            (Source::Audit, &mut self.audit),
        ] {
            emitters::record(&**c, s, source, now)
                .await
                .map_err(|e| e.to_string())?;
            s.clear();
        }
        Ok(())
    }
}

async fn run(pg: PgPool, mut rx: mpsc::UnboundedReceiver<(Source, Sightings)>) {
    let mut held = Held::default();
    let mut retry = Backoff::new(Policy::STORE);
    let mut open = true;
    while open {
        match rx.recv().await {
            Some((source, s)) => held.add(source, s),
            None => open = false,
        }
        if open {
            tokio::time::sleep(GATHER).await;
        }
        while let Ok((source, s)) = rx.try_recv() {
            held.add(source, s);
        }
        while !held.is_empty() {
            match held.write(&pg).await {
                Ok(()) => retry.reset(),
                Err(e) if open => {
                    let wait = retry.next_wait();
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "unlisted emitter sightings not stored yet");
                    tokio::time::sleep(wait).await;
                    while let Ok((source, s)) = rx.try_recv() {
                        held.add(source, s);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unlisted emitter sightings lost at shutdown");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::trade::exchange::{ORDERS_MATCHED_V1, ORDER_FILLED_V2};

    fn log(address: Address, block: u64, topic: [u8; 32]) -> RawLog {
        RawLog {
            address,
            topics: vec![topic],
            data: vec![],
            block_number: block,
            block_hash: [7; 32],
            tx_hash: [block as u8; 32],
            log_index: 0,
        }
    }

    #[test]
    fn listed_logs_go_on_and_others_become_sightings() {
        let allow = Allowlist::polymarket();
        let exchange = allow.addresses().next().unwrap();
        let stranger = Address([0xee; 20]);
        let logs = vec![
            log(stranger, 11, ORDER_FILLED_V2),
            log(exchange, 10, ORDER_FILLED_V2),
            log(stranger, 10, ORDERS_MATCHED_V1),
            log(Address([0xef; 20]), 10, [0x11; 32]),
        ];
        let (listed, seen) = split(logs, &allow);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].address, exchange);
        assert_eq!(
            seen.len(),
            1,
            "a log without a watched topic is no sighting"
        );
        let s = &seen[&stranger];
        assert_eq!((s.first_block, s.last_block, s.events), (10, 11, 2));
        assert_eq!(s.first_tx, hex32(&[10; 32]));
    }

    #[test]
    fn labels_are_bounded() {
        let labels: BTreeSet<String> = (0..200u8).map(|i| label(&Address([i; 20])).0).collect();
        assert!(labels.len() <= LABELLED + 1, "{}", labels.len());
        assert!(labels.contains("other"));
        let named = labels.iter().find(|l| *l != "other").unwrap();
        let again = label(&named.parse().unwrap());
        assert_eq!(
            again,
            (named.clone(), false),
            "a labelled address keeps its label, logged once"
        );
    }
}
