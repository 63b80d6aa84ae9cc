//! Availability, judged from what the checked subscribers received (issue 28): per fault, the
//! recovery time (from the fault's end to the delivery of the first trade detected after it)
//! against the kind's budget in docs/RELIABILITY.md, and every silence attributed to the
//! faults that overlapped it, with its excess over their union.
//!
//! A subscriber's recovery is the wait for the first block detected after the fault's end
//! (what ingest owes everyone) plus the detect→delivery of that subscriber's first trade
//! detected after it: a subscriber that simply had no trade in the next seconds is not
//! charged for the quiet. A rolling deploy is judged by the detect→delivery of every trade
//! detected while it ran (no gap beyond one reconnect), but for the trades whose wait another
//! budgeted fault overlapped (that fault answers for them). When another budgeted fault is under
//! way before a fault's budget runs out, the later of their deadlines applies ("masked").
//!
//! A ClickHouse stop darkens nothing (issue 29: ClickHouse is off the delivery path): every
//! trade detected while it lasted is delivered at the normal latency (within 1 s), unless its
//! wait overlapped another fault (then it is that fault's to answer for), and it masks no other
//! fault.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::faults::Done;
use crate::report::pct;
use crate::schedule::Kind;

/// A push leader killed while no standby was ready to take over (multi-host mode: the other
/// member's host down) comes back cold: pm2 restarts it (200 ms, more after recent restarts),
/// it starts, takes the lock and its first round, and Caddy's health check (every 500 ms)
/// finds it; measured 2.5–2.7 s on this box, where a warm takeover takes under 2 s.
const COLD_LEADER_RESTART_MS: i64 = 5_000;

/// The kind a fault that ran is judged and tabled as: its own, or a cold restart's when it
/// killed a leader with no standby ready.
pub fn judged_kind(d: &Done) -> &'static str {
    match (&d.fault.kind, d.cold) {
        (Kind::LeaderKill9, true) => "leader kill -9 (no standby)",
        (kind, _) => kind.name(),
    }
}

/// The recovery budget of a fault kind as judged ([`judged_kind`]), ms (`None`: the kind does
/// not darken a feed).
fn budget_of(kind: &str, lease_ms: i64) -> Option<i64> {
    Some(match kind {
        "leader kill -9" => 2_000,
        "leader kill -9 (no standby)" => COLD_LEADER_RESTART_MS,
        "leader SIGSTOP" => lease_ms + 2_000,
        "postgres restart" => 5_000,
        // No extra silence at all: judged by every trade detected while it lasted.
        "clickhouse stop" => 1_000,
        "rpc ws cut" | "live restart" => 3_000,
        // One of the providers cut or slowed (two others still agree): nothing should go dark; recovery from its end
        // within the RPC budget (and whatever overlaps it is judged from its end).
        "provider cut" | "provider lag" => 3_000,
        "rolling deploy" => 1_000,
        // Edge mode. An edge's clients resume on another edge (Caddy): one reconnect.
        "edge kill -9" | "edge rolling deploy" => 2_000,
        // A frozen edge is noticed by its clients (4 s without a frame: they send nothing to
        // it, and heartbeats come every second) and skipped by Caddy's health check; judged
        // from the freeze.
        "edge SIGSTOP" => 6_000,
        // A node that does not lead the stream: clients of the broker on it reconnect to
        // another node; judged by every trade detected while it was down.
        "nats node kill" => 3_000,
        // The stream's leader: its replicas elect another (JetStream's election timeout) and the
        // leader's publish goes through again; judged from the kill.
        "nats stream leader kill" => 10_000,
        // Multi-host mode (issue 44), each judged from the fault's instant. The primary lost
        // (its Postgres, or its host whole): Patroni's leader key expires (ttl 10 s), the sync
        // standby is promoted, the services' sessions follow it.
        "postgres primary kill" | "host kill" => 15_000,
        // The primary's host frozen or cut off: the same, plus the old primary's demotion.
        "host freeze" | "host partition" => 20_000,
        "patroni switchover" => 5_000,
        // A host holding no primary lost: no gap beyond one reconnect.
        "sync standby lost" | "etcd member lost" => 3_000,
        _ => return None,
    })
}

/// A rolling deploy's budget for webhooks: the sender's attempt timeout (10 s) + 1 s.
const HOOK_DEPLOY_MS: i64 = 11_000;

/// What one checked subscriber received on one channel: (t_detect_ms, delivered ms) per
/// trade, and windows in which its deliveries are not the system's to answer for (a paused
/// client, a receiver sitting on a request on purpose).
#[derive(Clone)]
pub struct Stream {
    pub name: String,
    pub deliveries: Vec<(i64, i64)>,
    pub excused: Vec<(i64, i64)>,
    /// Silences (from, to) of this stream: between any frames (WebSocket) or while an owed
    /// trade waited and nothing came (webhooks).
    pub silences: Vec<(i64, i64)>,
}

impl Stream {
    /// Whether a delivery pending over `[d, a]` overlaps an excused window.
    fn excused(&self, d: i64, a: i64) -> bool {
        self.excused.iter().any(|&(s, e)| d <= e && a >= s)
    }
}

/// Silences of a list of (detect, delivered): between consecutive deliveries, the time the next
/// delivered trade (any later one) had already been detected and nothing came.
pub fn owed_silences(deliveries: &[(i64, i64)], over_ms: i64) -> Vec<(i64, i64)> {
    let mut by_at = deliveries.to_vec();
    by_at.sort_by_key(|&(_, a)| a);
    let mut suffix_min = vec![i64::MAX; by_at.len() + 1];
    for i in (0..by_at.len()).rev() {
        suffix_min[i] = suffix_min[i + 1].min(by_at[i].0);
    }
    let mut out = Vec::new();
    for i in 1..by_at.len() {
        let from = by_at[i - 1].1.max(suffix_min[i]);
        let to = by_at[i].1;
        if to - from > over_ms {
            out.push((from, to));
        }
    }
    out
}

/// A budgeted fault's window.
struct Window<'a> {
    done: &'a Done,
    budget: i64,
}

impl Window<'_> {
    fn deadline(&self) -> i64 {
        self.done.ended_ms + self.budget
    }

    /// The deadline this fault sets for others on a stream: a rolling deploy holds webhooks at
    /// each handover while it runs (up to the attempt timeout), so for webhook streams it lasts
    /// until its end; for WebSocket streams it is its own (its start + 1 s).
    fn deadline_for(&self, hooks: bool) -> i64 {
        if hooks && matches!(self.done.fault.kind, Kind::Deploy) {
            self.done.end_ms.max(self.done.ended_ms) + self.budget
        } else {
            self.deadline()
        }
    }
}

/// One judged (fault, subscriber) pair.
struct Sample {
    kind: &'static str,
    at_s: u64,
    stream: String,
    recovery_ms: i64,
    allowed_ms: i64,
    masked: bool,
}

impl Sample {
    fn failed(&self) -> bool {
        self.recovery_ms > self.allowed_ms
    }
}

pub struct Judgement {
    samples: Vec<Sample>,
    unjudged: BTreeMap<&'static str, usize>,
    silences: Vec<String>,
    pub failed_deploys: Vec<String>,
}

impl Judgement {
    pub fn failed(&self) -> bool {
        self.samples.iter().any(Sample::failed) || !self.failed_deploys.is_empty()
    }
}

/// A fault kind that must not darken anything: judged by the trades detected while it lasted,
/// and no excuse for another fault's recovery (a ClickHouse stop; a NATS node that does not
/// lead the stream, down).
fn harmless(kind: &Kind) -> bool {
    matches!(kind, Kind::ClickHouseStop { .. } | Kind::NatsKill { .. })
}

/// A rolling deploy (of push, or of the edges): judged by every trade detected while it ran.
fn rolling(kind: &Kind) -> bool {
    matches!(kind, Kind::Deploy | Kind::EdgeDeploy)
}

/// The deadline of `f`: its own, moved to a later fault's while one is under way before it.
fn deadline(f: &Window<'_>, all: &[Window<'_>], hooks: bool) -> i64 {
    let mut d = f.deadline();
    loop {
        let later = all
            .iter()
            .filter(|g| !harmless(&g.done.fault.kind))
            .filter(|g| g.done.began_ms <= d && g.deadline_for(hooks) > d)
            .map(|g| g.deadline_for(hooks))
            .max();
        match later {
            Some(l) => d = l,
            None => return d,
        }
    }
}

pub fn judge(done: &[Done], streams: &[Stream], lease_ms: i64) -> Judgement {
    let windows: Vec<Window<'_>> = done
        .iter()
        .filter(|d| d.struck)
        .filter_map(|d| {
            budget_of(judged_kind(d), lease_ms).map(|budget| Window { done: d, budget })
        })
        .collect();
    let detects: Vec<i64> = {
        let mut v: Vec<i64> = streams
            .iter()
            .flat_map(|s| s.deliveries.iter().map(|&(d, _)| d))
            .collect();
        v.sort_unstable();
        v
    };
    let mut j = Judgement {
        samples: Vec::new(),
        unjudged: BTreeMap::new(),
        silences: Vec::new(),
        failed_deploys: Vec::new(),
    };
    // A deploy that failed fails the run, whether or not it got as far as striking.
    j.failed_deploys = done
        .iter()
        .filter(|d| rolling(&d.fault.kind) && !d.note.starts_with("exit status: 0"))
        .map(|d| format!("t+{} s: {}", d.fault.at_s, d.note))
        .collect();
    for w in &windows {
        let (kind, e) = (judged_kind(w.done), w.done.ended_ms);
        // The first block anyone was told of after the fault's end.
        let first_detect = detects.iter().copied().find(|&d| d >= e);
        for s in streams {
            match sample(w, &windows, s, first_detect) {
                Some(sample) => j.samples.push(sample),
                None => *j.unjudged.entry(kind).or_default() += 1,
            }
        }
    }
    j.silences = attribute(done, streams);
    j
}

/// How stream `s` recovered from fault `w` against its allowance (none: nothing to judge it by).
fn sample(
    w: &Window<'_>,
    windows: &[Window<'_>],
    s: &Stream,
    first_detect: Option<i64>,
) -> Option<Sample> {
    let e = w.done.ended_ms;
    let hooks = s.name.starts_with("hook");
    let until = deadline(w, windows, hooks);
    let masked = until > w.deadline();
    let others = others(w, windows, hooks);
    let recovery_ms = recovery(w, s, &others, first_detect)?;
    let mut allowed_ms = if harmless(&w.done.fault.kind) {
        w.budget
    } else {
        until - e
    };
    if matches!(w.done.fault.kind, Kind::Deploy) && hooks {
        // The handover waits for the webhook attempts in flight (so the successor never
        // sends them again): a receiver holding a request holds the webhook lane's
        // handover up to the attempt timeout (docs/RELIABILITY.md).
        allowed_ms = allowed_ms.max(HOOK_DEPLOY_MS);
    }
    Some(Sample {
        kind: judged_kind(w.done),
        at_s: w.done.fault.at_s,
        stream: s.name.clone(),
        recovery_ms,
        allowed_ms,
        masked: masked && !harmless(&w.done.fault.kind),
    })
}

/// The other faults that may darken a feed, each from its start to its deadline: a trade whose
/// wait overlapped one is that fault's to answer for (judged from its end), not a fault judged
/// by the trades detected while it lasted.
fn others(w: &Window<'_>, windows: &[Window<'_>], hooks: bool) -> Vec<(i64, i64)> {
    let mut others: Vec<(i64, i64)> = windows
        .iter()
        .filter(|g| !harmless(&g.done.fault.kind) && !std::ptr::eq(g.done, w.done))
        .map(|g| (g.done.began_ms, g.deadline_for(hooks)))
        .collect();
    if harmless(&w.done.fault.kind) {
        // A harmless fault with a larger budget (a NATS node down during a ClickHouse
        // stop) answers for the trades detected while it lasted, by its own budget.
        others.extend(
            windows
                .iter()
                .filter(|g| harmless(&g.done.fault.kind) && g.budget > w.budget)
                .map(|g| (g.done.began_ms, g.done.ended_ms)),
        );
    }
    others
}

/// Stream `s`'s recovery from fault `w`, ms: for a harmless fault or a rolling deploy, the
/// longest wait of a trade detected while it lasted that no other fault overlapped; else from
/// the fault's end to the first block anyone was told of, plus that stream's first wait.
fn recovery(
    w: &Window<'_>,
    s: &Stream,
    others: &[(i64, i64)],
    first_detect: Option<i64>,
) -> Option<i64> {
    let e = w.done.ended_ms;
    let own = |d: i64, a: i64| !others.iter().any(|&(b, x)| d <= x && a >= b);
    if harmless(&w.done.fault.kind) {
        // Every trade detected while it lasted whose wait no other fault overlapped.
        s.deliveries
            .iter()
            .filter(|&&(d, a)| d >= w.done.began_ms && d <= e && !s.excused(d, a))
            .filter(|&&(d, a)| own(d, a))
            .map(|&(d, a)| a - d)
            .max()
    } else if rolling(&w.done.fault.kind) {
        // Every trade detected while the deploy ran, delivered within the budget (a
        // leader frozen in the middle of a deploy is the freeze's to answer for).
        s.deliveries
            .iter()
            .filter(|&&(d, a)| d >= w.done.began_ms && d <= w.done.end_ms && !s.excused(d, a))
            .filter(|&&(d, a)| own(d, a))
            .map(|&(d, a)| a - d)
            .max()
    } else {
        // A trade detected under a fault that began after this one's end is that fault's to
        // answer for (the stream's first trades after the end may be excused, a paused client's,
        // and the next one already under another fault): not a sample of this recovery.
        let later: Vec<(i64, i64)> = others.iter().copied().filter(|&(b, _)| b > e).collect();
        let first = s
            .deliveries
            .iter()
            .filter(|&&(d, a)| d >= e && !s.excused(d, a))
            .filter(|&&(d, _)| !later.iter().any(|&(b, x)| d >= b && d <= x))
            .min_by_key(|&&(d, a)| (d, a));
        first
            .zip(first_detect)
            .map(|(&(d, a), fd)| (fd - e) + (a - d))
    }
}

/// Every silence over 2 s of every stream, with the faults that overlapped it and its excess
/// over their union (the five longest per stream kind, and the count).
fn attribute(done: &[Done], streams: &[Stream]) -> Vec<String> {
    let mut all: Vec<(i64, String)> = Vec::new();
    for s in streams {
        for &(from, to) in &s.silences {
            if to - from <= 2_000 || s.excused(from, to) {
                continue;
            }
            let over: Vec<&Done> = done
                .iter()
                .filter(|d| d.struck && d.began_ms <= to && d.ended_ms.max(d.began_ms + 1) >= from)
                .filter(|d| !matches!(d.fault.kind, Kind::SlowConsumer { .. }))
                .collect();
            let union = union_ms(
                over.iter()
                    .map(|d| (d.began_ms, d.ended_ms.max(d.began_ms))),
            );
            let names: Vec<String> = over
                .iter()
                .map(|d| format!("{} (t+{})", d.fault.kind, d.fault.at_s))
                .collect();
            all.push((
                to - from,
                format!(
                    "{}: {} ms silent, faults over it: {} (union {} ms, excess {} ms)",
                    s.name,
                    to - from,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    },
                    union,
                    (to - from) - union
                ),
            ));
        }
    }
    all.sort_by_key(|a| std::cmp::Reverse(a.0));
    all.into_iter().map(|(_, s)| s).collect()
}

fn union_ms(spans: impl Iterator<Item = (i64, i64)>) -> i64 {
    let mut v: Vec<(i64, i64)> = spans.collect();
    v.sort_unstable();
    let (mut total, mut cur): (i64, Option<(i64, i64)>) = (0, None);
    for (s, e) in v {
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + cur.map_or(0, |(s, e)| e - s)
}

/// The recovery table (per kind: budget, samples, p50 / max unmasked, masked, breaches), the
/// breaches and the longest silences.
pub fn table(j: &Judgement, lease_ms: i64) -> String {
    let mut out = String::from(
        "| fault kind | budget ms | judged (masked) | recovery p50 / max ms | masked max ms | over budget |\n|---|---|---|---|---|---|\n",
    );
    let mut kinds: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in &j.samples {
        kinds.entry(s.kind).or_default().push(s);
    }
    for (kind, v) in &kinds {
        let mut own: Vec<i64> = v
            .iter()
            .filter(|s| !s.masked)
            .map(|s| s.recovery_ms)
            .collect();
        let masked: Vec<i64> = v
            .iter()
            .filter(|s| s.masked)
            .map(|s| s.recovery_ms)
            .collect();
        let budget = budget_of(kind, lease_ms).unwrap_or(0);
        let own_fig = match own.iter().max().copied() {
            Some(max) => format!("{} / {max}", pct(&mut own, 0.5)),
            None => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {kind} | {budget} | {} ({}) | {own_fig} | {} | {} |",
            v.len(),
            masked.len(),
            masked.iter().max().map_or("–".into(), |m| m.to_string()),
            v.iter().filter(|s| s.failed()).count()
        );
    }
    for (kind, n) in &j.unjudged {
        let _ = writeln!(
            out,
            "| {kind} | – | no trade of its own to judge: {n} | – | – | – |"
        );
    }
    let breaches: Vec<String> = j
        .samples
        .iter()
        .filter(|s| s.failed())
        .map(|s| {
            format!(
                "  over budget: {} at t+{} s, {}: recovered in {} ms, allowed {} ms{}",
                s.kind,
                s.at_s,
                s.stream,
                s.recovery_ms,
                s.allowed_ms,
                if s.masked {
                    " (masked by a later fault)"
                } else {
                    ""
                }
            )
        })
        .collect();
    if !breaches.is_empty() || !j.failed_deploys.is_empty() {
        out.push('\n');
    }
    for b in breaches.iter().take(12) {
        let _ = writeln!(out, "{b}");
    }
    for d in &j.failed_deploys {
        let _ = writeln!(out, "  failed deploy: {d}");
    }
    let _ = writeln!(out, "\nsilences over 2 s: {}", j.silences.len());
    for s in j.silences.iter().take(8) {
        let _ = writeln!(out, "  {s}");
    }
    out
}

#[cfg(test)]
mod tests;
