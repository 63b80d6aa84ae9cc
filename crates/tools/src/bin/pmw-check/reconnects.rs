//! Client reconnects per fault (issue 31): every socket a checked client lost, attributed to the
//! faults under way when it dropped. In edge mode the push leader's faults (kill -9, SIGSTOP,
//! rolling deploy) must close no client's socket: a drop during one that no edge, broker, host
//! or client fault under way explains fails the run.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::faults::Done;
use crate::schedule::Kind;

/// How long after a fault's end a drop is still counted as its doing (a client notices a frozen
/// server after 4 s of silence).
const AFTER_MS: i64 = 5_000;

/// What the checked clients' drops come to.
#[derive(Default)]
pub struct Reconnects {
    /// Drops per fault kind under way (a drop during two faults counts for both).
    pub by_kind: BTreeMap<&'static str, usize>,
    pub total: usize,
    /// Drops while a push fault was under way and nothing else that closes sockets was.
    pub push_only: Vec<String>,
    /// Drops while no fault was under way.
    pub unattributed: Vec<String>,
}

/// `drops[i]`: checked client `i`'s (ms, how) of every socket it lost.
pub fn count(done: &[Done], drops: &[Vec<(i64, String)>]) -> Reconnects {
    let mut r = Reconnects::default();
    for (client, list) in drops.iter().enumerate() {
        for (at, how) in list {
            r.total += 1;
            let over: Vec<&Done> = done
                .iter()
                .filter(|d| d.start_ms <= *at && *at <= d.end_ms.max(d.ended_ms) + AFTER_MS)
                .filter(|d| match d.fault.kind {
                    Kind::SlowConsumer { client: c, .. } => c == client,
                    _ => true,
                })
                .collect();
            for d in &over {
                *r.by_kind.entry(d.fault.kind.name()).or_default() += 1;
            }
            let what = format!(
                "client {client} at {at} ({how}); under way: {}",
                if over.is_empty() {
                    "nothing".to_string()
                } else {
                    over.iter()
                        .map(|d| format!("{} (t+{})", d.fault.kind, d.fault.at_s))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            let explained = over.iter().any(|d| {
                d.fault.kind.closes_sockets()
                    || d.fault.kind.takes_a_host()
                    || matches!(d.fault.kind, Kind::SlowConsumer { .. })
            });
            if over.is_empty() {
                r.unattributed.push(what);
            } else if over.iter().any(|d| d.fault.kind.is_push()) && !explained {
                r.push_only.push(what);
            }
        }
    }
    r
}

impl Reconnects {
    /// The report: drops per fault kind, and the push faults' (the edge-mode invariant).
    pub fn table(&self, edge_mode: bool) -> String {
        let mut out = format!(
            "client reconnects (checked clients' dropped sockets): {} in all\n\n| fault under way | drops |\n|---|---|\n",
            self.total
        );
        for (k, n) in &self.by_kind {
            let _ = writeln!(out, "| {k} | {n} |");
        }
        let _ = writeln!(out, "| none | {} |", self.unattributed.len());
        let _ = writeln!(
            out,
            "\npush faults (leader kill -9, SIGSTOP, rolling deploy): {} drops that no edge, broker or client fault explains{}",
            self.push_only.len(),
            if edge_mode {
                " (edge mode: must be 0)"
            } else {
                " (single-process mode: the push leader holds the sockets)"
            }
        );
        for d in self.push_only.iter().chain(&self.unattributed).take(8) {
            let _ = writeln!(out, "  {d}");
        }
        out
    }

    /// Edge mode's invariant: push faults close no client's socket.
    pub fn failed(&self, edge_mode: bool) -> bool {
        edge_mode && !self.push_only.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_during_a_push_fault_alone_fails_edge_mode_and_an_edge_fault_explains_one() {
        let faults = [
            Done::test(Kind::LeaderKill9, 10_000, 10_000),
            Done::test(Kind::EdgeKill9 { edge: 1 }, 30_000, 30_000),
            Done::test(Kind::LeaderStop { secs: 5 }, 31_000, 36_000),
            Done::test(Kind::SlowConsumer { client: 1, secs: 5 }, 50_000, 55_000),
            Done::test(Kind::Deploy, 51_000, 60_000),
        ];
        let none = count(&faults, &[vec![], vec![]]);
        assert!(!none.failed(true));
        // Client 0 drops 2 s after the kill: the push fault's.
        let r = count(&faults, &[vec![(12_000, "eof".into())], vec![]]);
        assert!(r.failed(true) && !r.failed(false));
        assert_eq!(r.by_kind.get("leader kill -9"), Some(&1));
        // During the freeze, but the edge kill is under way too: explained.
        let r = count(&faults, &[vec![(33_000, "eof".into())], vec![]]);
        assert!(!r.failed(true));
        // During the deploy: client 1 was the slow consumer (explained); client 0 was not.
        let r = count(&faults, &[vec![], vec![(52_000, "close 1008".into())]]);
        assert!(!r.failed(true));
        let r = count(&faults, &[vec![(52_000, "close 1012".into())], vec![]]);
        assert!(r.failed(true));
        // During a leader kill inside a host kill (the host's edge went with it): explained.
        let mut host = faults.to_vec();
        host.push(Done::test(Kind::HostKill { secs: 10 }, 70_000, 80_000));
        host.push(Done::test(Kind::LeaderKill9, 72_000, 72_000));
        let r = count(&host, &[vec![(73_000, "eof".into())], vec![]]);
        assert!(!r.failed(true));
        // Long after every fault: unattributed, not a push fault's.
        let r = count(&faults, &[vec![(90_000, "eof".into())], vec![]]);
        assert!(!r.failed(true) && r.unattributed.len() == 1);
    }
}
