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

/// The recovery budget of a fault kind, ms (`None`: the kind does not darken a feed).
pub fn budget(kind: &Kind, lease_ms: i64) -> Option<i64> {
    budget_of(kind.name(), lease_ms)
}

fn budget_of(kind: &str, lease_ms: i64) -> Option<i64> {
    Some(match kind {
        "leader kill -9" => 2_000,
        "leader SIGSTOP" => lease_ms + 2_000,
        "postgres restart" => 5_000,
        // No extra silence at all: judged by every trade detected while it lasted.
        "clickhouse stop" => 1_000,
        "rpc ws cut" | "live restart" => 3_000,
        // One of two providers cut or slowed: nothing should go dark; recovery from its end
        // within the RPC budget (and whatever overlaps it is judged from its end).
        "provider cut" | "provider lag" => 3_000,
        "rolling deploy" => 1_000,
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
/// and no excuse for another fault's recovery.
fn harmless(kind: &Kind) -> bool {
    matches!(kind, Kind::ClickHouseStop { .. })
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
        .filter_map(|d| budget(&d.fault.kind, lease_ms).map(|budget| Window { done: d, budget }))
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
    for w in &windows {
        let (kind, e) = (w.done.fault.kind.name(), w.done.ended_ms);
        if matches!(w.done.fault.kind, Kind::Deploy) && !w.done.note.starts_with("exit status: 0") {
            j.failed_deploys
                .push(format!("t+{} s: {}", w.done.fault.at_s, w.done.note));
        }

        // The first block anyone was told of after the fault's end.
        let first_detect = detects.iter().copied().find(|&d| d >= e);
        // The other faults that may darken a feed, each from its start to its deadline: a trade
        // whose wait overlapped one is that fault's to answer for (judged from its end), not a
        // fault judged by the trades detected while it lasted.
        for s in streams {
            let hooks = s.name.starts_with("hook");
            let until = deadline(w, &windows, hooks);
            let masked = until > w.deadline();
            let others: Vec<(i64, i64)> = windows
                .iter()
                .filter(|g| !harmless(&g.done.fault.kind) && !std::ptr::eq(g.done, w.done))
                .map(|g| (g.done.began_ms, g.deadline_for(hooks)))
                .collect();
            let own = |d: i64, a: i64| !others.iter().any(|&(b, x)| d <= x && a >= b);
            let recovery = if harmless(&w.done.fault.kind) {
                // Every trade detected while it lasted whose wait no other fault overlapped.
                s.deliveries
                    .iter()
                    .filter(|&&(d, a)| d >= w.done.began_ms && d <= e && !s.excused(d, a))
                    .filter(|&&(d, a)| own(d, a))
                    .map(|&(d, a)| a - d)
                    .max()
            } else if matches!(w.done.fault.kind, Kind::Deploy) {
                // Every trade detected while the deploy ran, delivered within the budget (a
                // leader frozen in the middle of a deploy is the freeze's to answer for).
                s.deliveries
                    .iter()
                    .filter(|&&(d, a)| {
                        d >= w.done.began_ms && d <= w.done.end_ms && !s.excused(d, a)
                    })
                    .filter(|&&(d, a)| own(d, a))
                    .map(|&(d, a)| a - d)
                    .max()
            } else {
                let first = s
                    .deliveries
                    .iter()
                    .filter(|&&(d, a)| d >= e && !s.excused(d, a))
                    .min_by_key(|&&(d, a)| (d, a));
                first
                    .zip(first_detect)
                    .map(|(&(d, a), fd)| (fd - e) + (a - d))
            };
            let Some(recovery_ms) = recovery else {
                *j.unjudged.entry(kind).or_default() += 1;
                continue;
            };
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
            j.samples.push(Sample {
                kind,
                at_s: w.done.fault.at_s,
                stream: s.name.clone(),
                recovery_ms,
                allowed_ms,
                masked: masked && !harmless(&w.done.fault.kind),
            });
        }
    }
    j.silences = attribute(done, streams);
    j
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
                .filter(|d| d.began_ms <= to && d.ended_ms.max(d.began_ms + 1) >= from)
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
mod tests {
    use super::*;
    use crate::schedule::Fault;

    fn done(kind: Kind, began: i64, ended: i64) -> Done {
        Done {
            fault: Fault { at_s: 0, kind },
            start_ms: began,
            end_ms: ended,
            began_ms: began,
            ended_ms: ended,
            note: "exit status: 0".into(),
        }
    }

    fn stream(deliveries: Vec<(i64, i64)>) -> Stream {
        Stream {
            name: "ws 0".into(),
            silences: owed_silences(&deliveries, 1_000),
            deliveries,
            excused: Vec::new(),
        }
    }

    #[test]
    fn a_quick_recovery_passes_and_a_slow_one_breaks_the_budget() {
        let kill = [done(Kind::LeaderKill9, 10_000, 10_000)];
        // Trades every 300 ms, delivered 20 ms later, except those detected in the 3 s after
        // the kill (delivered at 13 s).
        let slow: Vec<(i64, i64)> = (0..100)
            .map(|i| i * 300)
            .map(|d| {
                (
                    d,
                    if (10_000..13_000).contains(&d) {
                        13_000
                    } else {
                        d + 20
                    },
                )
            })
            .collect();
        let fast: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 20)).collect();
        assert!(!judge(&kill, &[stream(fast)], 10_000).failed());
        let j = judge(&kill, &[stream(slow)], 10_000);
        assert!(j.failed());
        assert_eq!(j.samples[0].recovery_ms, 13_000 - 10_000);
    }

    #[test]
    fn a_subscriber_with_no_trade_soon_after_is_not_charged_for_the_quiet() {
        let kill = [done(Kind::LeaderKill9, 10_000, 10_000)];
        // Another subscriber sees a block at 10.2 s; this one's next trade is detected at
        // 15 s and delivered 20 ms later.
        let other = stream(vec![(10_200, 10_220)]);
        let quiet = stream(vec![(9_000, 9_020), (15_000, 15_020)]);
        let j = judge(&kill, &[other, quiet], 10_000);
        assert!(!j.failed());
        assert!(j.samples.iter().all(|s| s.recovery_ms == 220));
    }

    #[test]
    fn a_fault_under_way_before_the_budget_ends_moves_the_deadline() {
        // A kill at 10 s (deadline 12 s) and a Postgres restart from 11 s to 20 s (deadline
        // 25 s): a recovery at 24 s passes both; at 26 s it breaks both.
        let faults = [
            done(Kind::LeaderKill9, 10_000, 10_000),
            done(Kind::PostgresRestart, 11_000, 20_000),
        ];
        let at = |r: i64| stream(vec![(10_100, r), (20_100, r), (r, r + 10)]);
        let j = judge(&faults, &[at(24_000)], 10_000);
        assert!(!j.failed(), "{}", table(&j, 10_000));
        assert!(j.samples.iter().any(|s| s.masked));
        assert!(judge(&faults, &[at(26_000)], 10_000).failed());
    }

    #[test]
    fn a_fault_starting_during_a_deploy_answers_for_the_trades_it_held() {
        // A deploy from 10 s to 30 s (its own deadline: 1 s after its start) and a leader frozen
        // from 15 s to 22 s (no takeover): trades detected 15–22 s wait until 22.5 s.
        let faults = [
            done(Kind::Deploy, 10_000, 10_000),
            done(Kind::LeaderStop { secs: 7 }, 15_000, 22_000),
        ];
        let mut f = faults.clone();
        f[0].end_ms = 30_000;
        let held: Vec<(i64, i64)> = (0..150)
            .map(|i| i * 300)
            .map(|d| {
                (
                    d,
                    if (15_000..22_000).contains(&d) {
                        22_500
                    } else {
                        d + 40
                    },
                )
            })
            .collect();
        let j = judge(&f, &[stream(held.clone())], 10_000);
        assert!(!j.failed(), "{}", table(&j, 10_000));
        // Without the freeze, the same waits are the deploy's: over its 1 s.
        let j = judge(&f[..1], &[stream(held.clone())], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
        // A trade the deploy held before the freeze began is still the deploy's.
        let mut slow = held;
        slow[40].1 = slow[40].0 + 2_000;
        assert!((10_000..13_000).contains(&slow[40].0));
        let j = judge(&f, &[stream(slow)], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
    }

    #[test]
    fn a_deploy_holds_webhooks_until_its_end_and_websockets_for_one_second() {
        // An RPC cut from 10 s to 15 s and a deploy from 13 s to 25 s: webhooks recover at 22 s
        // (a handover held them), WebSocket at 15.2 s.
        let mut deploy = done(Kind::Deploy, 13_000, 13_000);
        deploy.end_ms = 25_000;
        let faults = [done(Kind::RpcCut { secs: 5 }, 10_000, 15_000), deploy];
        let at = |r: i64| vec![(15_100, r), (16_000, r.max(16_020)), (26_000, 26_020)];
        let mut hook = stream(at(22_000));
        hook.name = "hook 0/hook".into();
        let j = judge(&faults, &[hook.clone(), stream(at(15_200))], 10_000);
        assert!(!j.failed(), "{}", table(&j, 10_000));
        // The same 7 s on a WebSocket stream break the cut's 3 s.
        let j = judge(&faults, &[stream(at(22_000))], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
        // And a webhook recovery after the deploy's end + 1 s breaks it too.
        hook.deliveries = at(26_500);
        let j = judge(&faults, &[hook], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
    }

    #[test]
    fn a_clickhouse_stop_darkens_nothing_and_excuses_no_one() {
        let stop = done(Kind::ClickHouseStop { secs: 10 }, 10_000, 20_000);
        let normal: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 40)).collect();
        assert!(!judge(
            std::slice::from_ref(&stop),
            &[stream(normal.clone())],
            10_000
        )
        .failed());
        // One trade detected during the stop waits 1.5 s: over the budget.
        let mut late = normal.clone();
        late[50].1 = late[50].0 + 1_500;
        assert!((10_000..=20_000).contains(&late[50].0));
        let j = judge(std::slice::from_ref(&stop), &[stream(late.clone())], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
        // ... unless its wait overlapped a leader kill: the kill's to answer for (2 s budget).
        let kill = done(Kind::LeaderKill9, late[50].0 + 100, late[50].0 + 100);
        let both = [stop.clone(), kill];
        assert!(!judge(&both, &[stream(late)], 10_000).failed());
        // A kill during the stop is not excused by it: 3 s to recover breaks the kill's 2 s.
        let mut dark = normal;
        for t in dark.iter_mut().filter(|t| (12_000..15_000).contains(&t.0)) {
            t.1 = 15_000;
        }
        let faults = [stop, done(Kind::LeaderKill9, 12_000, 12_000)];
        let j = judge(&faults, &[stream(dark)], 10_000);
        assert!(j.failed(), "{}", table(&j, 10_000));
        assert!(j.samples.iter().all(|s| !s.masked));
    }

    #[test]
    fn a_deploy_is_judged_by_every_trade_it_overlapped_and_fails_when_it_failed() {
        let mut deploy = done(Kind::Deploy, 10_000, 40_000);
        let ok: Vec<(i64, i64)> = (0..200).map(|i| (i * 300, i * 300 + 400)).collect();
        assert!(!judge(std::slice::from_ref(&deploy), &[stream(ok.clone())], 10_000).failed());
        let mut gap = ok.clone();
        gap[100].1 = gap[100].0 + 1_500;
        assert!(judge(
            std::slice::from_ref(&deploy),
            &[stream(gap.clone())],
            10_000
        )
        .failed());
        // A webhook endpoint may wait for the handover of attempts in flight (up to 11 s).
        let mut hook = stream(gap.clone());
        hook.name = "hook 0/hook".into();
        assert!(!judge(std::slice::from_ref(&deploy), &[hook.clone()], 10_000).failed());
        hook.deliveries[100].1 = hook.deliveries[100].0 + 12_000;
        assert!(judge(std::slice::from_ref(&deploy), &[hook], 10_000).failed());
        deploy.note = "exit status: 1: pmw-push-b did not come back as standby".into();
        let j = judge(&[deploy], &[stream(ok)], 10_000);
        assert!(j.failed() && j.failed_deploys.len() == 1);
    }

    #[test]
    fn excused_windows_are_not_judged() {
        let kill = [done(Kind::LeaderKill9, 10_000, 10_000)];
        let mut s = stream(vec![(10_100, 19_000)]);
        s.excused = vec![(9_000, 18_000)];
        let j = judge(&kill, &[s], 10_000);
        assert!(!j.failed());
        assert_eq!(j.unjudged.get("leader kill -9"), Some(&1));
        // The first trade after the excused window is judged instead (block seen at 10.1 s,
        // that trade delivered 20 ms after its detection).
        let mut s = stream(vec![(10_100, 19_000), (18_500, 18_520)]);
        s.excused = vec![(9_000, 18_000)];
        let j = judge(&kill, &[s], 10_000);
        assert!(j.unjudged.is_empty());
        assert_eq!(j.samples[0].recovery_ms, 120);
    }

    #[test]
    fn owed_silences_count_only_time_a_detected_trade_waited() {
        // Nothing owed between 1 s and 5 s (the next trade is detected at 5 s): no silence;
        // a trade detected at 6 s and delivered at 9 s: 3 s of silence.
        let s = owed_silences(&[(0, 1_000), (5_000, 5_010), (6_000, 9_000)], 1_000);
        assert_eq!(s, vec![(6_000, 9_000)]);
        assert_eq!(union_ms([(0, 10), (5, 20), (30, 40)].into_iter()), 30);
    }
}
