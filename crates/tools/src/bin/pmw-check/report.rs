//! The verdict: what each checked client and endpoint holds against what the oracle says it is
//! owed, per channel (lost, phantom, duplicated, out of order, retract without a trade,
//! detect→delivery p50/p99/max, longest silence), and each fault's own effect.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::faults::{Done, World};
use crate::hooks::Hook;
use crate::hooks::{replay, replay_each};
use crate::ws::{Id, WsClient};

pub fn pct(v: &mut [i64], q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[derive(Default)]
pub struct Row {
    pub subscribers: usize,
    pub owed: usize,
    pub held: usize,
    pub lost: usize,
    pub phantom: usize,
    pub duplicated: usize,
    pub out_of_order: usize,
    pub retract_without_trade: usize,
    pub latencies: Vec<i64>,
    pub silence_max: i64,
    pub extra: String,
    pub examples: Vec<String>,
}

impl Row {
    fn compare(
        &mut self,
        who: &str,
        owed: Option<&BTreeSet<Id>>,
        canonical: &BTreeSet<Id>,
        held: &BTreeSet<Id>,
    ) {
        self.subscribers += 1;
        self.held += held.len();
        if let Some(owed) = owed {
            self.owed += owed.len();
            let lost: Vec<_> = owed.difference(held).collect();
            self.lost += lost.len();
            if let Some(l) = lost.first() {
                self.examples
                    .push(format!("{who}: lost {l:?} (+{} more)", lost.len() - 1));
            }
        }
        let allowed = owed.unwrap_or(canonical);
        let phantom: Vec<_> = held.difference(allowed).collect();
        self.phantom += phantom.len();
        if let Some(p) = phantom.first() {
            self.examples.push(format!(
                "{who}: phantom {p:?} (+{} more)",
                phantom.len() - 1
            ));
        }
    }
}

/// Lost + phantom over the checked subscribers only (what settling waits for).
pub fn unsettled(w: &World, owed: &[BTreeSet<Id>]) -> usize {
    let mut n = 0;
    for (c, owed) in w.checked.iter().zip(owed) {
        let ws: BTreeSet<Id> = c.client.log.lock().unwrap().held.keys().cloned().collect();
        let hk: BTreeSet<Id> = replay(&c.hook.accepted()).held.keys().cloned().collect();
        n += owed.symmetric_difference(&ws).count() + owed.symmetric_difference(&hk).count();
    }
    n
}

pub struct Verdict {
    pub ws: Row,
    pub hooks: Row,
    pub churn_ws: Row,
    pub churn_hooks: Row,
}

impl Verdict {
    pub fn failed(&self) -> bool {
        let bad = |r: &Row| r.lost + r.phantom + r.out_of_order;
        bad(&self.ws)
            + bad(&self.hooks)
            + bad(&self.churn_ws)
            + self.ws.duplicated
            + self.churn_ws.duplicated
            > 0
            || self.churn_hooks.phantom > 0
    }
}

/// `done`: the faults run (their outages excuse a late retract: [`crate::faults::excused_orphan`]).
pub fn verdict(
    w: &World,
    owed: &[BTreeSet<Id>],
    canonical: &BTreeSet<Id>,
    done: &[crate::faults::Done],
) -> Verdict {
    let outages: Vec<(i64, i64)> = done
        .iter()
        .filter(|d| d.struck && d.fault.kind.holds_up_webhooks())
        .map(|d| (d.began_ms, d.ended_ms))
        .collect();
    let mut v = Verdict {
        ws: Row::default(),
        hooks: Row::default(),
        churn_ws: Row::default(),
        churn_hooks: Row::default(),
    };
    let clients = w.checked.iter().map(|c| (&c.client, Some(c), &c.hook));
    let churn = w.churn.iter().map(|c| (&c.client, None, &c.hook));
    for (i, (client, checked, hook)) in clients.chain(churn).enumerate() {
        let against = Against {
            own: checked.map(|_| &owed[i]),
            canonical,
        };
        let (ws, hk) = if checked.is_some() {
            (&mut v.ws, &mut v.hooks)
        } else {
            (&mut v.churn_ws, &mut v.churn_hooks)
        };
        judge_ws(ws, i, client, &against);
        let paused: Vec<(String, i64, i64)> = match checked {
            None => w.churn[i - w.checked.len()].paused.lock().unwrap().clone(),
            Some(_) => Vec::new(),
        };
        judge_hook(w, hk, i, hook, &against, &paused, &outages);
    }
    v
}

/// What a subscriber is judged against: what it is owed (checked subscribers only) and the
/// canonical fills.
struct Against<'a> {
    own: Option<&'a BTreeSet<Id>>,
    canonical: &'a BTreeSet<Id>,
}

/// Subscriber `i`'s WebSocket client, into its channel's row.
fn judge_ws(ws: &mut Row, i: usize, client: &WsClient, against: &Against<'_>) {
    let l = client.log.lock().unwrap();
    let held: BTreeSet<Id> = l.held.keys().cloned().collect();
    ws.compare(&format!("ws {i}"), against.own, against.canonical, &held);
    ws.duplicated += l.duplicated.len();
    ws.out_of_order += l.out_of_order.len();
    ws.retract_without_trade += l.retract_without_trade.len();
    for (name, list) in [
        ("duplicated", &l.duplicated),
        ("out of order", &l.out_of_order),
        ("retract without trade", &l.retract_without_trade),
    ] {
        if let Some(x) = list.first() {
            ws.examples
                .push(format!("ws {i}: {name} {x:?} (+{} more)", list.len() - 1));
        }
    }
    ws.latencies
        .extend(l.deliveries.iter().map(|(d, at)| at - d));
    ws.silence_max = ws.silence_max.max(l.longest_silence_ms);
    let _ = write!(
        ws.extra,
        "[{i}: {} reconnects, closes {:?}, resyncs {}] ",
        l.gaps.len(),
        l.closes,
        l.resyncs
    );
}

/// Subscriber `i`'s webhook receiver (each endpoint's accepted messages replayed), into its
/// channel's row; an orphan on an endpoint `paused` while its retract was owed is excused.
fn judge_hook(
    w: &World,
    hk: &mut Row,
    i: usize,
    hook: &Hook,
    against: &Against<'_>,
    paused: &[(String, i64, i64)],
    outages: &[(i64, i64)],
) {
    let canonical = against.canonical;
    let (mut held, mut reordered, mut redelivered) = (BTreeSet::new(), 0, 0);
    let reorgs = w.reorgs.lock().unwrap().clone();
    let mut excused_orphans = 0;
    for (path, s) in replay_each(&hook.accepted()) {
        for k in s.held.keys() {
            if canonical.contains(k) {
                held.insert(k.clone());
            } else if crate::faults::excused_orphan(&path, &k.2, paused, &reorgs, outages) {
                // Deleted or disabled while its retract was owed: reported, not judged.
                excused_orphans += 1;
            } else {
                held.insert(k.clone());
            }
        }
        hk.duplicated += s.duplicated.len();
        hk.retract_without_trade += s.retract_without_trade.len();
        for (name, list) in [
            ("duplicated", &s.duplicated),
            ("retract without trade", &s.retract_without_trade),
        ] {
            if let Some(x) = list.first() {
                hk.examples
                    .push(format!("hook {i}: {name} {x:?} (+{} more)", list.len() - 1));
            }
        }
        hk.latencies
            .extend(s.deliveries.iter().map(|(d, at)| at - d));
        hk.silence_max = hk.silence_max.max(s.longest_silence_ms);
        reordered += s.reordered;
        redelivered += s.redelivered;
    }
    hk.compare(&format!("hook {i}"), against.own, canonical, &held);
    hook.with_log(|l| {
        let _ = write!(
            hk.extra,
            "[{i}: {} requests, bad signature {}, 500 {}, timeout {}, slow {}, reordered {}, redelivered {}, orphans on endpoints deleted or disabled while a retract was owed {}] ",
            l.requests, l.bad_signature, l.answered_500, l.timed_out, l.slow, reordered, redelivered, excused_orphans
        );
    });
}

pub fn table(v: &mut Verdict) -> String {
    let mut out = String::from(
        "| channel | subscribers | owed | held | lost | phantom | duplicated | out of order | retract w/o trade | detect→delivery p50 / p99 / max ms | longest silence ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (name, r) in [
        ("WebSocket (checked)", &mut v.ws),
        ("webhooks (checked)", &mut v.hooks),
        ("WebSocket (churn)", &mut v.churn_ws),
        ("webhooks (churn)", &mut v.churn_hooks),
    ] {
        let (p50, p99) = (pct(&mut r.latencies, 0.5), pct(&mut r.latencies, 0.99));
        let max = r.latencies.iter().max().copied().unwrap_or(0);
        let owed = if name.contains("churn") {
            "–".to_string()
        } else {
            r.owed.to_string()
        };
        let lost = if name.contains("churn") {
            "–".to_string()
        } else {
            r.lost.to_string()
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {owed} | {} | {lost} | {} | {} | {} | {} | {p50} / {p99} / {max} | {} |",
            r.subscribers, r.held, r.phantom, r.duplicated, if name.starts_with("webhooks") { "–".to_string() } else { r.out_of_order.to_string() }, r.retract_without_trade, r.silence_max
        );
    }
    out
}

pub fn details(v: &Verdict) -> String {
    let mut out = String::new();
    for (name, r) in [
        ("ws", &v.ws),
        ("hooks", &v.hooks),
        ("churn ws", &v.churn_ws),
        ("churn hooks", &v.churn_hooks),
    ] {
        let _ = writeln!(out, "{name}: {}", r.extra.trim_end());
        for e in r.examples.iter().take(8) {
            let _ = writeln!(out, "  {e}");
        }
    }
    out
}

/// Per fault: WebSocket reconnects of checked clients within 30 s, their longest reconnect
/// gap, and the slowest detect→delivery of trades detected within 10 s of the fault's end.
pub fn effects(w: &World, done: &[Done]) -> String {
    let mut out = String::from(
        "| at s | fault | took ms | reconnects (30 s) | max reconnect gap ms | max detect→delivery ms (trades detected during it +10 s) | note |\n|---|---|---|---|---|---|---|\n",
    );
    let logs: Vec<_> = w.checked.iter().map(|c| c.client.log.clone()).collect();
    for d in done {
        let (mut rec, mut gap, mut lat) = (0, 0, 0);
        for l in &logs {
            let l = l.lock().unwrap();
            for (a, b) in &l.gaps {
                if *a >= d.start_ms && *a <= d.end_ms + 30_000 {
                    rec += 1;
                    gap = gap.max(b - a);
                }
            }
            for (det, at) in &l.deliveries {
                if *det >= d.start_ms && *det <= d.end_ms + 10_000 {
                    lat = lat.max(at - det);
                }
            }
        }
        let note: String = d.note.replace('|', "/").chars().take(90).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {rec} | {gap} | {lat} | {note} |",
            d.fault.at_s,
            d.fault.kind,
            d.end_ms - d.start_ms
        );
    }
    out
}

/// "reorg ×4, leader kill -9 ×2, …"
pub fn summary(done: &[crate::schedule::Fault]) -> String {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for d in done {
        *kinds.entry(d.kind.name()).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What availability is judged on: each checked client's trade frames and each checked
/// endpoint's first attempts, with the windows that are not the system's to answer for (a
/// paused client until 2 s after it reads again; an endpoint whose receiver holds every
/// in-flight slot).
pub fn streams(w: &World, done: &[Done]) -> Vec<crate::availability::Stream> {
    use crate::availability::{owed_silences, Stream};
    use crate::schedule::Kind;
    let mut out = Vec::new();
    for (i, c) in w.checked.iter().enumerate() {
        let paused: Vec<(i64, i64)> = done
            .iter()
            .filter(|d| matches!(d.fault.kind, Kind::SlowConsumer { client, .. } if client == i))
            .map(|d| (d.began_ms, d.ended_ms + 2_000))
            .collect();
        let l = c.client.log.lock().unwrap();
        out.push(Stream {
            name: format!("ws {i}"),
            deliveries: l.deliveries.clone(),
            excused: paused,
            silences: l.silences.clone(),
        });
        drop(l);
        // A receiver holding every one of the endpoint's in-flight slots (slow answers, one
        // past the sender's timeout) excuses what waited meanwhile: the sender may not start
        // another attempt (`SENDER_SLOTS`).
        let (firsts, saturated) = c
            .hook
            .with_log(|l| (l.first_attempts.clone(), l.saturated.clone()));
        type Spans = Vec<(i64, i64)>;
        let mut by: BTreeMap<String, (Spans, Spans)> = BTreeMap::new();
        for (path, d, at) in firsts {
            by.entry(path).or_default().0.push((d, at));
        }
        for (path, from, to) in saturated {
            by.entry(path).or_default().1.push((from, to));
        }
        for (path, (deliveries, excused)) in by {
            out.push(Stream {
                name: format!("hook {i}{path}"),
                silences: owed_silences(&deliveries, 1_000),
                deliveries,
                excused,
            });
        }
    }
    out
}
