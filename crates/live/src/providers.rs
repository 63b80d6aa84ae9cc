//! Several RPC providers at once: their shared state (no RPC is made here; [`crate::chain`]
//! makes the calls and [`crate::heads`] follows the heads). Owns the head race ([`race`]),
//! each provider's health and the leader of the branch rule ([`health`]), the order in which
//! providers are asked, the hedge delay (a provider's observed p95), the quorum and its waits
//! ([`quorum`]), and the per-provider figures for metrics and the heartbeat (`pmwctl status`).
//! A provider that reports another chain id is never asked and its heads are ignored.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `pmw_live_provider_heads_total{provider}` | counter | block hashes it announced (each once) |
//! | `pmw_live_provider_heads_won_total{provider}` | counter | of those, announced before every other provider: its arrival stamped `t_detect_ms` |
//! | `pmw_live_provider_head_lag_seconds{provider}` | histogram | for heads another provider announced first: how much later this one did |
//! | `pmw_live_provider_head_block{provider}` | gauge | the highest head it announced |
//! | `pmw_live_provider_healthy{provider}` | gauge | 1 healthy, 0 demoted (failing, no subscription, or lagging) |
//! | `pmw_live_provider_leader{provider}` | gauge | 1 for the provider asked first for canonical blocks |
//! | `pmw_live_provider_demotions_total{provider}` | counter | times it was demoted |
//! | `pmw_live_provider_errors_total{provider}` | counter | calls to it that failed or timed out |
//! | `pmw_live_provider_not_found_total{provider}` | counter | calls it answered "block not found" / `null` (asked the next provider; never read as "not canonical") |
//! | `pmw_live_provider_hedges_total{provider}` | counter | second requests sent elsewhere because it had not answered within its p95 |
//! | `pmw_live_provider_wrong_chain_total{provider}` | counter | times it reported another chain id than `PMW_LIVE_CHAIN_ID` (it is not used until it reports the right one) |
//! | `pmw_live_quorum_waits_total` | counter | ingest steps that waited because fewer than the quorum of providers agreed on a block's hash (or on `finalized`) |
//! | `pmw_live_quorum_dissents_total` | counter | answers of a provider (label `provider`) that differed from what the quorum agreed on (a block's logs): a lying or broken provider |
//! | `pmw_live_quorum_waiting_block` | gauge | the block ingest waits on for a quorum (0 when none) |

pub mod health;
pub mod quorum;
pub mod race;

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use health::{Health, Standing};
use race::{Arrival, Race};

pub const HEADS: &str = "pmw_live_provider_heads_total";
pub const HEADS_WON: &str = "pmw_live_provider_heads_won_total";
pub const HEAD_LAG: &str = "pmw_live_provider_head_lag_seconds";
pub const HEAD_BLOCK: &str = "pmw_live_provider_head_block";
pub const HEALTHY: &str = "pmw_live_provider_healthy";
pub const LEADER: &str = "pmw_live_provider_leader";
pub const DEMOTIONS: &str = "pmw_live_provider_demotions_total";
pub const ERRORS: &str = "pmw_live_provider_errors_total";
pub const NOT_FOUND: &str = "pmw_live_provider_not_found_total";
pub const HEDGES: &str = "pmw_live_provider_hedges_total";
pub const WRONG_CHAIN: &str = "pmw_live_provider_wrong_chain_total";

/// Samples kept per window (head lags, call times).
const WINDOW: usize = 256;
/// Calls timed before a provider's p95 is trusted as its hedge delay.
const HEDGE_MIN_SAMPLES: usize = 20;
/// The hedge delay before that, and its bounds after.
const HEDGE_DEFAULT: Duration = Duration::from_millis(1_000);
const HEDGE_FLOOR: Duration = Duration::from_millis(20);
const HEDGE_CEILING: Duration = Duration::from_millis(2_000);
/// A provider whose last this-many logs answers were "not found" (its HTTP side lags its
/// subscription) is not asked first for the blocks it announces...
const NOT_FOUND_STREAK: u32 = 3;
/// ...except once every this many blocks, to notice that it caught up.
const NOT_FOUND_PROBE_EVERY: u32 = 10;

/// Which calls a time sample is of (they differ in cost at real providers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `eth_getLogs` of one block by hash.
    Logs,
    /// A block header by number or tag.
    Block,
}

/// The last [`WINDOW`] samples of something, for percentiles.
#[derive(Debug, Default, Clone)]
struct Samples(VecDeque<i64>);

impl Samples {
    fn push(&mut self, v: i64) {
        if self.0.len() == WINDOW {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    /// Nearest-rank percentile `q` (0–1), `None` when empty.
    fn pct(&self, q: f64) -> Option<i64> {
        let mut v: Vec<i64> = self.0.iter().copied().collect();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
        v.get(rank - 1).copied()
    }
}

/// One provider's counters (the heartbeat shows them; metrics count the same events).
#[derive(Debug, Default, Clone)]
struct Stats {
    heads: u64,
    wins: u64,
    lag_ms: Samples,
    errors: u64,
    not_found: u64,
    hedges: u64,
    demotions: u64,
    logs_ms: Samples,
    block_ms: Samples,
    /// Logs calls answered "not found" in a row, and blocks it was not asked first since.
    not_found_streak: u32,
    skipped: u32,
}

struct Inner {
    health: Vec<Health>,
    standing: Vec<Standing>,
    stats: Vec<Stats>,
    leader: usize,
    race: Race,
    wait: quorum::Wait,
}

/// The shared state of every provider, in configuration order (index = provider).
pub struct Pool {
    names: Vec<String>,
    max_lag: u64,
    /// Providers that must agree on a block hash (1: any one's word).
    quorum: usize,
    inner: Mutex<Inner>,
}

impl Pool {
    pub fn new(names: Vec<String>, max_lag: u64, quorum: usize) -> Pool {
        let n = names.len();
        for name in &names {
            for c in [
                HEADS,
                HEADS_WON,
                DEMOTIONS,
                ERRORS,
                NOT_FOUND,
                HEDGES,
                WRONG_CHAIN,
            ] {
                metrics::counter!(c, "provider" => name.clone()).increment(0);
            }
        }
        metrics::counter!(quorum::WAITS).increment(0);
        Pool {
            names,
            max_lag,
            quorum: quorum.clamp(1, n.max(1)),
            inner: Mutex::new(Inner {
                health: vec![Health::default(); n],
                standing: vec![Standing::NoSubscription; n],
                stats: vec![Stats::default(); n],
                leader: 0,
                race: Race::default(),
                wait: quorum::Wait::default(),
            }),
        }
    }

    /// Providers that must agree on a block hash.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Provider `i` reported the configured chain id (`true`) or another one (not used until
    /// it reports the right one).
    pub fn chain_checked(&self, i: usize, ok: bool) {
        let mut g = self.lock();
        if !ok {
            metrics::counter!(WRONG_CHAIN, "provider" => self.names[i].clone()).increment(1);
        }
        if g.health[i].wrong_chain == ok {
            g.health[i].wrong_chain = !ok;
            self.judge(&mut g);
        }
    }

    /// Whether provider `i` may be asked (it is not on another chain).
    pub fn usable(&self, i: usize) -> bool {
        !self.lock().health[i].wrong_chain
    }

    /// The providers that announced `hash` as a head (while it is remembered).
    pub fn announced(&self, hash: &[u8; 32]) -> Vec<usize> {
        let g = self.lock();
        let seen = g.race.seen(hash);
        (0..self.len())
            .filter(|&i| seen & (1 << i) != 0 && !g.health[i].wrong_chain)
            .collect()
    }

    /// Fewer than the quorum agreed on block `number` (`agree` of `asked`): ingest waits.
    pub fn no_quorum(&self, number: u64, agree: usize, asked: usize) {
        let mut g = self.lock();
        g.wait.waiting(number, agree, asked);
    }

    /// A quorum agreed on block `number`: a wait on it (or below) is over.
    pub fn quorum_met(&self, number: u64) {
        self.lock().wait.met(number);
    }

    /// The block ingest waits on for a quorum, if any.
    pub fn waiting_on(&self) -> Option<u64> {
        self.lock().wait.block()
    }

    /// The quorum facts for the heartbeat (`pmwctl status`, `/v1/ready`).
    pub fn quorum_snapshot(&self) -> Value {
        let g = self.lock();
        g.wait.snapshot(self.quorum, self.len())
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Provider `i` announced `hash` (block `number`) at `t_ms`: `true` when ingest takes it
    /// (the first announcement of that hash), `false` when it is only recorded. With a quorum
    /// above 1, an announcement more than the allowed lag above the highest head a quorum of
    /// providers reached is only recorded, and the hash goes to ingest with the first
    /// announcement that is not (a lone provider's inflated head never becomes ingest's target).
    pub fn head_arrived(&self, i: usize, hash: [u8; 32], number: u64, t_ms: i64) -> bool {
        let mut g = self.lock();
        if g.health[i].wrong_chain {
            return false;
        }
        let arrival = g.race.arrive(i, hash, number, t_ms);
        let name = self.names[i].clone();
        if arrival != Arrival::Repeat {
            g.stats[i].heads += 1;
            metrics::counter!(HEADS, "provider" => name.clone()).increment(1);
        }
        match arrival {
            Arrival::First => {
                g.stats[i].wins += 1;
                metrics::counter!(HEADS_WON, "provider" => name.clone()).increment(1);
            }
            Arrival::Later { lag_ms, .. } => {
                g.stats[i].lag_ms.push(lag_ms);
                metrics::histogram!(HEAD_LAG, "provider" => name.clone())
                    .record(lag_ms as f64 / 1e3);
            }
            Arrival::Repeat => {}
        }
        if number > g.health[i].head {
            g.health[i].head = number;
            metrics::gauge!(HEAD_BLOCK, "provider" => name).set(number as f64);
            self.judge(&mut g);
        }
        // The highest head a quorum of the providers that follow the chain reached (one that
        // announced nothing yet counts as 0; one cut, failing or on another chain does not
        // count); with fewer than the quorum there is nothing to judge by (and no block gets a
        // quorum anyway).
        let reached = || {
            let up = g
                .health
                .iter()
                .filter(|h| !h.failing && !h.wrong_chain && (h.ws_up || h.head == 0));
            quorum::nth_largest(up.map(|h| h.head).collect(), self.quorum)
        };
        let believable = self.quorum <= 1 || reached().is_none_or(|r| number <= r + self.max_lag);
        believable && g.race.deliver(&hash)
    }

    /// Provider `i`'s head subscription connected (`true`) or was lost.
    pub fn subscription(&self, i: usize, up: bool) {
        let mut g = self.lock();
        g.health[i].ws_up = up;
        self.judge(&mut g);
    }

    /// A call to provider `i` answered (`kind`, in `took`).
    pub fn answered(&self, i: usize, kind: Kind, took: Duration) {
        let mut g = self.lock();
        let ms = took.as_millis() as i64;
        match kind {
            Kind::Logs => {
                g.stats[i].logs_ms.push(ms);
                (g.stats[i].not_found_streak, g.stats[i].skipped) = (0, 0);
            }
            Kind::Block => g.stats[i].block_ms.push(ms),
        }
        if g.health[i].failing {
            g.health[i].failing = false;
            self.judge(&mut g);
        }
    }

    /// A call to provider `i` failed or timed out.
    pub fn failed(&self, i: usize) {
        let mut g = self.lock();
        g.stats[i].errors += 1;
        metrics::counter!(ERRORS, "provider" => self.names[i].clone()).increment(1);
        if !g.health[i].failing {
            g.health[i].failing = true;
            self.judge(&mut g);
        }
    }

    /// Provider `i` did not have the block asked for (lagging behind a load balancer, or
    /// simply not there yet): not an error, not a verdict on the block.
    pub fn not_found(&self, i: usize, kind: Kind) {
        let mut g = self.lock();
        g.stats[i].not_found += 1;
        if kind == Kind::Logs {
            g.stats[i].not_found_streak += 1;
        }
        metrics::counter!(NOT_FOUND, "provider" => self.names[i].clone()).increment(1);
    }

    /// A second request was sent elsewhere because provider `i` was slower than its p95.
    pub fn hedged(&self, i: usize) {
        self.lock().stats[i].hedges += 1;
        metrics::counter!(HEDGES, "provider" => self.names[i].clone()).increment(1);
    }

    /// How long to wait for provider `i` before hedging: its observed p95 for `kind`.
    pub fn hedge_after(&self, i: usize, kind: Kind) -> Duration {
        let g = self.lock();
        let s = match kind {
            Kind::Logs => &g.stats[i].logs_ms,
            Kind::Block => &g.stats[i].block_ms,
        };
        if s.0.len() < HEDGE_MIN_SAMPLES {
            return HEDGE_DEFAULT;
        }
        let p95 = Duration::from_millis(s.pct(0.95).unwrap_or(0).max(0) as u64);
        p95.clamp(HEDGE_FLOOR, HEDGE_CEILING)
    }

    /// Who to ask for canonical blocks, in order: the leader when healthy, the other healthy
    /// providers, then the demoted ones (a last resort: a single provider is always asked),
    /// never one on another chain.
    pub fn order(&self) -> Vec<usize> {
        let g = self.lock();
        let healthy = |i: &usize| g.standing[*i] == Standing::Healthy;
        let mut out: Vec<usize> = std::iter::once(g.leader)
            .chain(0..self.len())
            .filter(healthy)
            .collect();
        let mut seen = vec![false; self.len()];
        out.retain(|&i| !std::mem::replace(&mut seen[i], true));
        out.extend((0..self.len()).filter(|i| !seen[*i]));
        out.retain(|&i| !g.health[i].wrong_chain);
        out
    }

    /// Who to ask for the logs of block `hash`: the provider that announced it first (when
    /// healthy), then [`Pool::order`]; a provider that keeps answering "not found" for the
    /// blocks it announces is asked last instead (but first once every
    /// [`NOT_FOUND_PROBE_EVERY`] blocks).
    pub fn order_for(&self, hash: &[u8; 32]) -> Vec<usize> {
        let mut out = self.order();
        let mut g = self.lock();
        let Some(w) = g
            .race
            .winner(hash)
            .filter(|w| g.standing[*w] == Standing::Healthy)
        else {
            return out;
        };
        out.retain(|&i| i != w);
        let s = &mut g.stats[w];
        if s.not_found_streak < NOT_FOUND_STREAK {
            out.insert(0, w);
        } else {
            s.skipped += 1;
            if s.skipped >= NOT_FOUND_PROBE_EVERY {
                // Asked first next time; one more "not found" and it is skipped again.
                (s.not_found_streak, s.skipped) = (NOT_FOUND_STREAK - 1, 0);
            }
            out.push(w);
        }
        out
    }

    /// Re-judge every provider's standing and the leader; log and count changes.
    fn judge(&self, g: &mut Inner) {
        let median = health::median(&g.health);
        for i in 0..self.len() {
            let now = health::standing(&g.health[i], median, self.max_lag);
            let was = std::mem::replace(&mut g.standing[i], now);
            if was == now {
                continue;
            }
            let provider = self.names[i].as_str();
            metrics::gauge!(HEALTHY, "provider" => provider.to_string())
                .set(f64::from(u8::from(now == Standing::Healthy)));
            if now == Standing::Healthy {
                tracing::info!(provider, head = g.health[i].head, "provider promoted");
            } else {
                if was == Standing::Healthy {
                    g.stats[i].demotions += 1;
                    metrics::counter!(DEMOTIONS, "provider" => provider.to_string()).increment(1);
                }
                tracing::warn!(
                    provider,
                    reason = now.name(),
                    head = g.health[i].head,
                    median,
                    "provider demoted"
                );
            }
        }
        let heads: Vec<u64> = g.health.iter().map(|h| h.head).collect();
        let healthy: Vec<bool> = g.standing.iter().map(|s| *s == Standing::Healthy).collect();
        let leader = health::leader(g.leader, &heads, &healthy);
        if leader != g.leader {
            let (from, to) = (&self.names[g.leader], &self.names[leader]);
            metrics::gauge!(LEADER, "provider" => from.clone()).set(0.0);
            metrics::gauge!(LEADER, "provider" => to.clone()).set(1.0);
            tracing::debug!(provider = %to, previous = %from, head = heads[leader], "provider leads");
            g.leader = leader;
        }
    }

    /// Per provider, for the heartbeat (`pmwctl status`): standing, head and how far behind
    /// the median, heads announced and won, lag behind the winner (p50/p95 ms), errors,
    /// "not found" answers, hedges, demotions, p95 of its logs calls.
    pub fn snapshot(&self) -> Value {
        let g = self.lock();
        let best = health::median(&g.health);
        let rows: Vec<Value> = (0..self.len())
            .map(|i| {
                let (h, s) = (&g.health[i], &g.stats[i]);
                json!({
                    "name": self.names[i],
                    "standing": g.standing[i].name(),
                    "leader": g.leader == i,
                    "head": h.head,
                    "behind_blocks": best.saturating_sub(h.head),
                    "heads": s.heads,
                    "won": s.wins,
                    "lag_p50_ms": s.lag_ms.pct(0.50),
                    "lag_p95_ms": s.lag_ms.pct(0.95),
                    "errors": s.errors,
                    "not_found": s.not_found,
                    "hedges": s.hedges,
                    "demotions": s.demotions,
                    "logs_p95_ms": s.logs_ms.pct(0.95),
                })
            })
            .collect();
        Value::Array(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Pool {
        let p = Pool::new((0..n).map(|i| format!("p{i}")).collect(), 3, 1);
        for i in 0..n {
            p.subscription(i, true);
        }
        p
    }

    #[test]
    fn a_single_provider_is_always_asked() {
        let p = Pool::new(vec!["rpc".into()], 3, 1);
        assert_eq!(p.order(), vec![0]);
        p.failed(0);
        assert_eq!(p.order(), vec![0]);
        assert_eq!(p.order_for(&[1; 32]), vec![0]);
    }

    #[test]
    fn the_announcer_is_asked_first_for_its_block() {
        let p = pool(3);
        assert!(p.head_arrived(2, [9; 32], 10, 1_000));
        assert!(!p.head_arrived(0, [9; 32], 10, 1_200));
        assert_eq!(p.order_for(&[9; 32])[0], 2);
        // The leader (first to 10) leads canonical questions.
        assert_eq!(p.order()[0], 2);
    }

    #[test]
    fn demoted_providers_go_last_and_come_back_when_they_catch_up() {
        let p = pool(3);
        p.head_arrived(0, [1; 32], 10, 0);
        p.head_arrived(1, [1; 32], 10, 5);
        p.head_arrived(2, [1; 32], 10, 5);
        p.failed(0);
        assert_eq!(p.order(), vec![1, 2, 0]);
        p.answered(0, Kind::Block, Duration::from_millis(5));
        // Lagging: the others moved 4 blocks on.
        p.head_arrived(1, [2; 32], 14, 10);
        p.head_arrived(2, [2; 32], 14, 10);
        assert_eq!(p.snapshot()[0]["standing"], "lagging");
        assert_eq!(p.order(), vec![1, 2, 0]);
        p.head_arrived(0, [2; 32], 14, 20);
        assert_eq!(p.snapshot()[0]["standing"], "healthy");
        assert_eq!(p.snapshot()[0]["demotions"], 2);
    }

    #[test]
    fn a_far_head_neither_demotes_the_others_nor_leads() {
        let p = pool(3);
        for i in 0..3 {
            p.head_arrived(i, [1; 32], 10, 0);
        }
        p.head_arrived(2, [7; 32], 1_000_000, 1);
        let s = p.snapshot();
        assert_eq!(s[0]["standing"], "healthy");
        assert_eq!(s[1]["standing"], "healthy");
        assert_eq!(s[2]["standing"], "ahead");
        assert_eq!(p.order()[..2], [0, 1]);
        assert_eq!(s[2]["leader"], false);
    }

    #[test]
    fn a_provider_on_another_chain_is_never_asked_and_its_heads_are_ignored() {
        let p = pool(2);
        p.chain_checked(1, false);
        assert_eq!(p.order(), vec![0]);
        assert!(!p.head_arrived(1, [3; 32], 10, 0));
        assert!(p.announced(&[3; 32]).is_empty());
        assert_eq!(p.snapshot()[1]["standing"], "wrong_chain");
        p.chain_checked(1, true);
        assert_eq!(p.order().len(), 2);
    }

    #[test]
    fn a_lost_subscription_demotes() {
        let p = pool(2);
        p.subscription(1, false);
        assert_eq!(p.snapshot()[1]["standing"], "no_subscription");
        assert_eq!(p.order(), vec![0, 1]);
    }

    #[test]
    fn wins_and_lag_are_counted_per_provider() {
        let p = pool(2);
        for n in 0..10u8 {
            let t = i64::from(n) * 1_000;
            p.head_arrived(0, [n; 32], u64::from(n) + 1, t);
            p.head_arrived(1, [n; 32], u64::from(n) + 1, t + 200);
            p.head_arrived(1, [n; 32], u64::from(n) + 1, t + 900); // its poll: a repeat
        }
        let s = p.snapshot();
        assert_eq!(
            (s[0]["won"].as_u64(), s[1]["won"].as_u64()),
            (Some(10), Some(0))
        );
        assert_eq!(s[1]["heads"], 10);
        assert_eq!(s[1]["lag_p50_ms"], 200);
        assert_eq!(s[0]["lag_p50_ms"], Value::Null);
    }

    #[test]
    fn an_announcer_that_keeps_not_finding_its_blocks_is_asked_last_with_a_probe() {
        let p = pool(2);
        let mut first = Vec::new();
        for n in 1..=30u8 {
            p.head_arrived(0, [n; 32], u64::from(n), 0);
            p.head_arrived(1, [n; 32], u64::from(n), 5);
            let order = p.order_for(&[n; 32]);
            first.push(order[0]);
            if order[0] == 0 {
                p.not_found(0, Kind::Logs);
            }
        }
        // Asked first for 3 blocks, then once every 10 (the probe), never for the rest.
        let asked: Vec<usize> = (0..30).filter(|&i| first[i] == 0).collect();
        assert_eq!(asked, vec![0, 1, 2, 13, 24], "{first:?}");
        // An answer ends the streak.
        p.answered(0, Kind::Logs, Duration::from_millis(3));
        p.head_arrived(0, [99; 32], 31, 0);
        assert_eq!(p.order_for(&[99; 32])[0], 0);
    }

    #[test]
    fn the_hedge_waits_for_the_observed_p95() {
        let p = pool(2);
        assert_eq!(p.hedge_after(0, Kind::Logs), HEDGE_DEFAULT);
        for ms in 1..=100 {
            p.answered(0, Kind::Logs, Duration::from_millis(ms));
        }
        assert_eq!(p.hedge_after(0, Kind::Logs), Duration::from_millis(95));
        assert_eq!(p.hedge_after(0, Kind::Block), HEDGE_DEFAULT);
    }
}
