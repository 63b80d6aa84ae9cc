//! The provider quorum: no lone provider makes a fact. A block's hash is taken when at least
//! the quorum of providers report it at its height; `finalized` is the highest block at least
//! the quorum report as finalized. Owns the counting and the record of what ingest waits on
//! (metrics, the heartbeat's `rpc_quorum`: `pmwctl status` and `/v1/ready` warn on it).

use pmw_core::UnixMs;
use serde_json::{json, Value};

pub const WAITS: &str = "pmw_live_quorum_waits_total";
pub const WAITING_BLOCK: &str = "pmw_live_quorum_waiting_block";
pub const DISSENTS: &str = "pmw_live_quorum_dissents_total";

/// The answer at least `quorum` of `answers` (provider, answer) gave, with who gave it; the
/// one given most (then first) when several reach the quorum.
pub fn agreed<T: Eq + Clone>(answers: &[(usize, T)], quorum: usize) -> Option<(T, Vec<usize>)> {
    let mut groups: Vec<(&T, Vec<usize>)> = Vec::new();
    for (i, a) in answers {
        match groups.iter_mut().find(|(g, _)| *g == a) {
            Some((_, who)) => who.push(*i),
            None => groups.push((a, vec![*i])),
        }
    }
    groups
        .into_iter()
        .filter(|(_, who)| who.len() >= quorum)
        .fold(
            None,
            |best: Option<(&T, Vec<usize>)>, (a, who)| match best {
                Some(b) if b.1.len() >= who.len() => Some(b),
                _ => Some((a, who)),
            },
        )
        .map(|(a, who)| (a.clone(), who))
}

/// How many of `answers` gave the answer given most (0 when none).
pub fn most<T: Eq + Clone>(answers: &[(usize, T)]) -> usize {
    agreed(answers, 1).map_or(0, |(_, who)| who.len())
}

/// The highest value at least `quorum` of `values` reach: the quorum-th largest.
pub fn nth_largest(mut values: Vec<u64>, quorum: usize) -> Option<u64> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(quorum.max(1) - 1).copied()
}

/// What ingest waits on for a quorum.
#[derive(Debug, Default)]
pub struct Wait {
    /// Block, providers that agreed, providers asked, since.
    on: Option<(u64, usize, usize, i64)>,
    waits: u64,
}

impl Wait {
    /// Block `number` has `agree` of `asked` agreeing: counted, logged once per block.
    pub fn waiting(&mut self, number: u64, agree: usize, asked: usize) {
        self.waits += 1;
        metrics::counter!(WAITS).increment(1);
        metrics::gauge!(WAITING_BLOCK).set(number as f64);
        let since = match self.on {
            Some((n, _, _, since)) if n == number => since,
            _ => {
                tracing::warn!(
                    block = number,
                    agree,
                    asked,
                    "no quorum of providers on the block; waiting"
                );
                UnixMs::now().0
            }
        };
        self.on = Some((number, agree, asked, since));
    }

    /// A quorum agreed on `number`: a wait at or below it is over.
    pub fn met(&mut self, number: u64) {
        if self.on.is_some_and(|(n, ..)| n <= number) {
            tracing::info!(block = number, "quorum of providers reached");
            self.on = None;
            metrics::gauge!(WAITING_BLOCK).set(0.0);
        }
    }

    /// The block waited on, if any.
    pub fn block(&self) -> Option<u64> {
        self.on.map(|(n, ..)| n)
    }

    pub fn snapshot(&self, quorum: usize, providers: usize) -> Value {
        json!({
            "quorum": quorum,
            "providers": providers,
            "waits": self.waits,
            "waiting": self.on.map(|(block, agree, asked, since_ms)| json!({
                "block": block, "agree": agree, "asked": asked, "since_ms": since_ms,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_counts_only_with_a_quorum() {
        let a = [(0, 'x'), (1, 'y'), (2, 'x')];
        assert_eq!(agreed(&a, 2), Some(('x', vec![0, 2])));
        assert_eq!(agreed(&a, 3), None);
        assert_eq!(agreed(&[(0, 'y'), (1, 'x')], 2), None);
        assert_eq!(agreed(&[(0, 'y'), (1, 'x')], 1), Some(('y', vec![0])));
        assert_eq!(agreed::<char>(&[], 1), None);
    }

    #[test]
    fn finalized_is_the_quorum_th_largest() {
        assert_eq!(nth_largest(vec![100, 90, 1_000_000], 2), Some(100));
        assert_eq!(nth_largest(vec![100, 90, 95], 3), Some(90));
        assert_eq!(nth_largest(vec![100], 2), None);
        assert_eq!(nth_largest(vec![100], 1), Some(100));
    }

    #[test]
    fn a_wait_is_kept_until_its_block_has_a_quorum() {
        let mut w = Wait::default();
        w.waiting(10, 1, 2);
        w.waiting(10, 1, 2);
        assert_eq!(w.snapshot(2, 2)["waiting"]["block"], 10);
        assert_eq!(w.snapshot(2, 2)["waits"], 2);
        w.met(9);
        assert!(!w.snapshot(2, 2)["waiting"].is_null());
        w.met(10);
        assert!(w.snapshot(2, 2)["waiting"].is_null());
    }
}
