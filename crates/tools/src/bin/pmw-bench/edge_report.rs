//! The report's "Edge mode" section: the broker hop, the fan-out across the edges with memory
//! per session, the throughput beside single-process mode, and the goals with verdicts.

use std::fmt::Write;

use crate::edge::EdgeFanOut;
use crate::report::{p, within_budget, Report};
use crate::stats::{ms, Summary};
use crate::throughput::RateStep;

/// The session count the edge-mode fan-out goal asks for.
pub const GOAL_SESSIONS: usize = 50_000;
/// The broker hop's goal at p50, ms (issue 46).
pub const GOAL_HOP_MS: f64 = 1.5;

fn kib(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1} KiB"))
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("–".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

/// The broker hop: edge-mode WebSocket p50 − single-process p50 (same sessions, same load).
pub fn hop_ms(r: &Report) -> Option<f64> {
    let e = p(&r.edge.ws, |s| s.p50)?;
    let s = p(&r.pmw.ws, |s| s.p50)?;
    Some(e - s)
}

/// The highest throughput step that kept up with the WebSocket p99 within budget.
fn best(r: &Report, steps: &[RateStep]) -> Option<(u32, f64)> {
    within_budget(r.plan.p99_budget_ms, steps).map(|s| (s.matches_per_block, s.matched_per_s()))
}

/// Edge mode's throughput is no lower than single-process mode's: it held at least the same
/// step (the steps are the same fill rates in both modes; trades/s of one step differ by noise).
pub fn throughput_not_lower(r: &Report) -> Option<bool> {
    let single = best(r, &r.rates).map_or(0, |b| b.0);
    let edge = best(r, &r.edge_rates).map_or(0, |b| b.0);
    (!r.rates.is_empty() && !r.edge_rates.is_empty()).then_some(edge >= single)
}

fn verdict(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "**met**",
        Some(false) => "**not met**",
        None => "not measured",
    }
}

pub fn render(o: &mut String, r: &Report) {
    let pl = &r.plan;
    let f = &r.edge_fanout;
    let q = |s: &Option<Summary>| format!("{} / {}", ms(p(s, |s| s.p50)), ms(p(s, |s| s.p99)));
    let _ = writeln!(o, "## Edge mode\n");
    let _ = writeln!(o, "One pmw-push leader publishes each WebSocket round to a private NATS JetStream stream on the local stack's cluster; pmw-edge processes (child processes, like push) consume the stream and serve `/v1/ws`. Clients connect straight to each edge's own loopback address (no proxy), client *i* to edge *i* mod {}. Webhooks stay with the leader. Latency is client-observed with the same clients and collector as single-process mode; in the fan-out steps each edge's clients run in a client process of their own (this benchmark's binary as a worker) that streams each sample to the collector.\n", pl.edges);

    let _ = writeln!(o, "### The broker hop\n");
    let _ = writeln!(o, "The latency window's {} sessions on one pmw-edge beside the same sessions on pmw-push itself (same run, same load; p50 / p99): edge mode {}, single-process {}. The hop through NATS JetStream adds **{}** at p50 (goal ≤ {GOAL_HOP_MS} ms).\n",
        r.edge.clients, q(&r.edge.ws), q(&r.pmw.ws), ms(hop_ms(r)));

    let _ = writeln!(o, "### Fan-out across {} edges\n", pl.edges);
    let _ = writeln!(o, "Sessions are added step by step, spread evenly over {} pmw-edge processes on one stream (each step's traffic: {} matches per block for {:?}); a step holds when every session stays open and the client-observed p99 is ≤ {} ms; a step over budget with every session open is measured once more and the second window decides. Memory is each edge's `VmRSS` with the step's sessions open and idle: the sum over the edges ÷ sessions (everything the edges hold, their baseline included), and net of the edges' RSS before any session.\n",
        pl.edges, pl.matches_per_block, pl.fanout_window, pl.p99_budget_ms);
    let _ = writeln!(o, "| sessions | failed to connect | open after the step | edges' RSS, idle (sum) | per edge | KiB / session (sum ÷ sessions) | KiB / session, net | per edge, net | delivered / owed | p50 | p95 | p99 | holds |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let each = |v: &[Option<u64>]| v.iter().map(|k| mib(*k)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(
        o,
        "| 0 | | 0 | {} | {} | | | | | | | | |",
        mib(f.rss0_total()),
        each(&f.rss0_kib)
    );
    for s in &f.steps {
        let st = &s.step;
        let per_edge = f
            .net_kib_per_edge(s)
            .iter()
            .map(|v| v.map_or("–".into(), |v| format!("{v:.1}")))
            .collect::<Vec<_>>()
            .join(", ");
        let holds = match (st.ok, st.first_p99) {
            (true, None) => "yes".to_string(),
            (false, None) => "**no**".to_string(),
            (ok, Some(first)) => format!(
                "{} (second window; the first had p99 {})",
                if ok { "yes" } else { "**no**" },
                ms(Some(first))
            ),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {per_edge} KiB | {} / {} | {} | {} | {} | {holds} |",
            st.sessions,
            st.failed,
            st.live,
            mib(s.total_kib()),
            each(&s.rss_kib),
            kib(s.kib_per_session()),
            kib(f.net_kib_per_session(s)),
            st.delivered,
            st.expected,
            ms(p(&st.lat, |s| s.p50)),
            ms(p(&st.lat, |s| s.p95)),
            ms(p(&st.lat, |s| s.p99)),
        );
    }
    let tried = pl.edge_steps.last().copied().unwrap_or(0);
    let cap = match f.capacity() {
        Some(c) if c == tried => format!("**≥ {c}** sessions (the largest step tried held)"),
        Some(c) => format!("**{c}** sessions (the next step did not hold)"),
        None => "**below the first step**".into(),
    };
    let _ = writeln!(o, "\nCapacity across {} edges: {cap}.\n", pl.edges);

    render_rates(o, r);
    render_goals(o, r, f);
}

fn render_rates(o: &mut String, r: &Report) {
    let _ = writeln!(o, "### Throughput: edge mode beside single-process mode\n");
    let _ = writeln!(o, "The same fill-rate steps as [Sustained throughput](#sustained-throughput), the same {} WebSocket sessions (here spread over the {} edges) and {} webhook endpoints, the same rule for keeping up and the same repeats (the median window, the windows' p99 range in brackets); \"within budget\" also needs the client-observed WebSocket p99 ≤ {} ms.\n",
        r.plan.ws_clients, r.plan.edges, r.plan.webhooks, r.plan.p99_budget_ms);
    let _ = writeln!(o, "| matches/block | single-process: matched trades/s | WS delivered / owed | WS p50 / p99 | kept up | edge mode: matched trades/s | WS delivered / owed | WS p50 / p99 | kept up |\n|---|---|---|---|---|---|---|---|---|");
    let cell = |s: Option<&RateStep>| match s {
        None => "not run | | | ".to_string(),
        Some(s) => format!(
            "{:.1} | {} / {} | {} / {} | {} ({} windows)",
            s.matched_per_s(),
            s.ws_frames,
            s.ws_expected,
            ms(p(&s.lat, |s| s.p50)),
            s.p99_spread(),
            if s.kept_up { "yes" } else { "**no**" },
            s.windows_kept_up()
        ),
    };
    for &m in &r.plan.rates {
        let (a, b) = (at(&r.rates, m), at(&r.edge_rates, m));
        if a.is_none() && b.is_none() {
            continue;
        }
        let _ = writeln!(o, "| {m} | {} | {} |", cell(a), cell(b));
    }
    let say = |b: Option<(u32, f64)>| {
        b.map_or("below the first step".into(), |(m, t)| {
            format!("{t:.1} matched trades/s ({m} matches/block)")
        })
    };
    let _ = writeln!(
        o,
        "\nSustained within budget: single-process **{}**, edge mode **{}**.\n",
        say(best(r, &r.rates)),
        say(best(r, &r.edge_rates))
    );
    render_rate_cpu(o, r);
}

/// Where the two cores went in each mode's steps: the same parties, plus the edges and the NATS
/// nodes (by command name) in edge mode.
fn render_rate_cpu(o: &mut String, r: &Report) {
    let _ = writeln!(o, "CPU seconds per step in each mode (`/proc/<pid>/stat`, user + system, from the step's start until its deliveries settled; push = the leader; the NATS nodes idle in single-process mode), and the CPU of everything that carries a frame from the leader to the client (leader, edges, NATS nodes; single-process: push) per WebSocket frame delivered:\n");
    let _ = writeln!(o, "| matches/block | mode | push | edges | NATS | postgres | clickhouse | anvil | generators | total | seconds of the step | µs per frame (push + edges + NATS) |\n|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &m in &r.plan.rates {
        for (mode, s) in [("single", at(&r.rates, m)), ("edge", at(&r.edge_rates, m))] {
            let Some(s) = s else { continue };
            let c = &s.cpu;
            let carry = c.push + c.edges + c.nats;
            let _ = writeln!(
                o,
                "| {m} | {mode} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                c.push,
                c.edges,
                c.nats,
                c.postgres,
                c.clickhouse,
                c.anvil,
                c.generators,
                c.total(),
                s.secs,
                if s.ws_frames > 0 { format!("{:.1}", carry * 1e6 / s.ws_frames as f64) } else { "–".into() },
            );
        }
    }
    let _ = writeln!(o);
}

/// The step at `m` matches per block.
fn at(steps: &[RateStep], m: u32) -> Option<&RateStep> {
    steps.iter().find(|s| s.matches_per_block == m)
}

fn render_goals(o: &mut String, r: &Report, f: &EdgeFanOut) {
    let pl = &r.plan;
    let _ = writeln!(
        o,
        "### Goals (issue 31)\n\n| goal | measured | verdict |\n|---|---|---|"
    );
    let largest = f.steps.iter().rfind(|s| s.step.ok);
    let fan = match largest {
        Some(s) => format!(
            "{} sessions held across {} edges, p99 {}, {} per session (edges' RSS summed)",
            s.step.sessions,
            pl.edges,
            ms(p(&s.step.lat, |s| s.p99)),
            kib(s.kib_per_session())
        ),
        None => "no step held".into(),
    };
    let fan_ok = if f.capacity().is_some_and(|c| c >= GOAL_SESSIONS) {
        Some(true)
    } else if pl.edge_steps.iter().any(|&n| n >= GOAL_SESSIONS) {
        Some(false)
    } else {
        None
    };
    let fan_verdict = match fan_ok {
        None => format!(
            "not tried at this scale (largest step {})",
            pl.edge_steps.last().copied().unwrap_or(0)
        ),
        v => verdict(v).into(),
    };
    let _ = writeln!(
        o,
        "| ≥ {GOAL_SESSIONS} WebSocket sessions across {} edges with p99 ≤ {} ms at {} matches per block | {fan} | {fan_verdict} |",
        pl.edges, pl.p99_budget_ms, pl.matches_per_block
    );
    let hop = hop_ms(r);
    let _ = writeln!(
        o,
        "| broker hop ≤ {GOAL_HOP_MS} ms at p50 | {} | {} |",
        ms(hop),
        verdict(hop.map(|h| h <= GOAL_HOP_MS))
    );
    let rate =
        |v: Option<(u32, f64)>| v.map_or("–".into(), |(m, t)| format!("{t:.1} ({m}/block)"));
    let _ = writeln!(
        o,
        "| edge-mode throughput (matched trades/s within WS p99 ≤ {} ms) no lower than single-process mode | edge {} vs single {} | {} |\n",
        pl.p99_budget_ms,
        rate(best(r, &r.edge_rates)),
        rate(best(r, &r.rates)),
        verdict(throughput_not_lower(r))
    );
}
