//! Incidents, derived from the availability samples: a run of unavailable samples of push,
//! ingest or the webhook lane lasting at least [`INCIDENT_MIN_MS`]; overlapping runs of
//! different parts are one incident. Each says when it began, how long it lasted (or that it is
//! still open), which parts were late and, where the samples recorded it, the cause: Postgres
//! not answering, ClickHouse not taking the sampler's writes, a push or live leader change, an
//! RPC provider demoted, a deploy (a pmw service instance started). Newest first.

use std::fmt::Write;

use pmw_core::ch::availability::{self, CauseAgg, RunRow};
use pmw_core::ch::{ChClient, Window};
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};

use crate::error::StatsError;
use crate::figures::gap;
use crate::html::esc;
use crate::model::iso;

/// A run of unavailable samples this long or longer is an incident (shorter ones only lower the
/// availability figures): longer than the recoveries pmw budgets for a leader failover, a
/// Postgres restart or an RPC cut (docs/RELIABILITY.md), so an incident is an outage a
/// subscriber noticed.
pub const INCIDENT_MIN_MS: i64 = 30_000;
/// Runs of different parts this close (or overlapping) are one incident (a sample period and a
/// half: samples further apart break a run anyway).
const MERGE_WITHIN_MS: i64 = 2_500;
/// An incident whose run holds the newest sample is open while that sample is this fresh.
const OPEN_WHILE_FRESH_MS: i64 = 10_000;
/// A pmw service instance started this long before an incident (or during it) is named as its
/// cause (a deploy or a restart).
const DEPLOY_LEAD_MS: i64 = 60_000;
/// Incidents listed at most.
const MAX_LISTED: usize = 50;

/// One cause, as recorded by the samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// `postgres`, `clickhouse`, `leader_change`, `provider_demoted` or `deploy`.
    pub kind: String,
    pub text: String,
}

/// One incident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    pub start: String,
    pub start_ms: i64,
    /// The end of its last unavailable sample; `null` while open.
    pub end: Option<String>,
    pub end_ms: Option<i64>,
    /// How long it lasted (so far, when open).
    pub length_ms: i64,
    /// Still going on (its run holds the newest sample, which is fresh).
    pub open: bool,
    /// The parts that were late: `ingest`, `push`, `webhooks`.
    pub late: Vec<String>,
    /// The same, said: "ingest behind the head", …
    pub late_text: Vec<String>,
    /// Empty: no cause recorded.
    pub causes: Vec<Cause>,
}

fn late_text(part: &str) -> &'static str {
    match part {
        "ingest" => "ingest behind the head",
        "push" => "push behind ingest",
        _ => "webhooks behind",
    }
}

fn part_key(part: &str) -> &'static str {
    match part {
        "ingest" => "ingest",
        "push" => "push",
        _ => "webhooks",
    }
}

/// A run of failing samples long enough to count, or several merged: `[from_ms, to_ms)`, the
/// parts that were late, and whether it is still going on.
struct Run<'a> {
    from_ms: i64,
    to_ms: i64,
    parts: Vec<&'a str>,
    open: bool,
}

/// Incidents (without causes) from the runs of failing samples, newest first. `newest_ms`: the
/// newest sample's time (0: none), `now_ms`: the snapshot's time.
pub fn derive(runs: &[RunRow], newest_ms: i64, now_ms: i64) -> Vec<Incident> {
    let mut spans: Vec<Run<'_>> = runs
        .iter()
        .filter(|r| r.last_ms + 1_000 - r.since_ms >= INCIDENT_MIN_MS)
        .map(|r| Run {
            from_ms: r.since_ms,
            to_ms: r.last_ms + 1_000,
            parts: vec![r.part.as_str()],
            open: newest_ms > 0
                && r.last_ms >= newest_ms
                && now_ms - newest_ms <= OPEN_WHILE_FRESH_MS,
        })
        .collect();
    spans.sort_by_key(|s| s.from_ms);
    let mut out: Vec<Incident> = Vec::new();
    let mut cur: Option<Run<'_>> = None;
    for run in spans {
        match &mut cur {
            Some(c) if run.from_ms <= c.to_ms + MERGE_WITHIN_MS => {
                c.to_ms = c.to_ms.max(run.to_ms);
                c.parts.extend(run.parts);
                c.open |= run.open;
            }
            _ => {
                if let Some(c) = cur.take() {
                    out.push(incident(c, now_ms));
                }
                cur = Some(run);
            }
        }
    }
    if let Some(c) = cur {
        out.push(incident(c, now_ms));
    }
    out.reverse();
    out.truncate(MAX_LISTED);
    out
}

fn incident(run: Run<'_>, now_ms: i64) -> Incident {
    let Run {
        from_ms: from,
        to_ms: to,
        parts,
        open,
    } = run;
    let late: Vec<&str> = ["ingest", "push", "webhook"]
        .into_iter()
        .filter(|p| parts.contains(p))
        .collect();
    Incident {
        start: iso(from),
        start_ms: from,
        end: (!open).then(|| iso(to)),
        end_ms: (!open).then_some(to),
        length_ms: if open {
            (now_ms - from).max(to - from)
        } else {
            to - from
        },
        open,
        late: late.iter().map(|p| part_key(p).to_string()).collect(),
        late_text: late.iter().map(|p| late_text(p).to_string()).collect(),
        causes: Vec::new(),
    }
}

/// The causes the samples around `inc` recorded.
pub fn causes(inc: &Incident, a: &CauseAgg) -> Vec<Cause> {
    let mut out = Vec::new();
    let mut add = |kind: &str, text: String| {
        out.push(Cause {
            kind: kind.into(),
            text,
        })
    };
    if a.samples == 0 {
        return Vec::new();
    }
    if a.pg_all_ok == 0 {
        add("postgres", "Postgres not answering".into());
    }
    if a.ch_all_ok == 0 {
        add(
            "clickhouse",
            "ClickHouse outage (pmw-stats could not write to it)".into(),
        );
    }
    if a.epoch_min > 0 && a.epoch_max > a.epoch_min {
        add(
            "leader_change",
            format!(
                "push leader change (epoch {} → {})",
                a.epoch_min, a.epoch_max
            ),
        );
    }
    if a.live_instances > 1 {
        add("leader_change", "pmw-live leader change".into());
    }
    if a.demoted_max > 0 {
        add(
            "provider_demoted",
            format!("{} RPC provider(s) demoted", a.demoted_max),
        );
    }
    let until = inc.end_ms.unwrap_or(inc.start_ms + inc.length_ms);
    let started = a.started_ms;
    if started > 0 && started >= inc.start_ms - DEPLOY_LEAD_MS && started <= until {
        let service = if a.started_service.is_empty() {
            "a pmw service"
        } else {
            a.started_service.as_str()
        };
        add(
            "deploy",
            format!("deploy or restart: {service} started at {}", iso(started)),
        );
    }
    out
}

/// The incidents whose runs ended inside `w` (newest first), with their causes, as of `now`.
pub async fn read(ch: &ChClient, w: Window, now: UnixMs) -> Result<Vec<Incident>, StatsError> {
    let runs = availability::runs(ch, w, INCIDENT_MIN_MS).await?;
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let newest = availability::newest(ch, w).await?;
    let mut out = derive(&runs, newest, now.0);
    for inc in &mut out {
        let until = inc.end_ms.unwrap_or(now.0 + 1);
        let around = Window {
            from_ms: inc.start_ms - 2_000,
            to_ms: until + 3_000,
        };
        let agg = availability::causes(ch, around).await?;
        inc.causes = causes(inc, &agg);
    }
    Ok(out)
}

/// The page's incident list.
pub fn render(threshold_ms: i64, list: &[Incident], out: &mut String) {
    let _ = write!(
        out,
        "<div id=\"incidents\"><h3>Incidents</h3><p class=\"meta\">An incident is a run of \
         unavailable samples (push, ingest or the webhook lane) lasting at least {}; newest \
         first. The cause is named where pmw's own records show it.</p>",
        gap(threshold_ms)
    );
    if list.is_empty() {
        out.push_str("<p class=\"nodata\" id=\"no-incidents\">No incidents recorded.</p></div>");
        return;
    }
    out.push_str("<ol class=\"incident-list\">");
    for i in list {
        let kinds: Vec<&str> = i.causes.iter().map(|c| c.kind.as_str()).collect();
        let cause = if i.causes.is_empty() {
            "none recorded".to_string()
        } else {
            i.causes
                .iter()
                .map(|c| c.text.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let length = gap(i.length_ms);
        let _ = write!(
            out,
            "<li class=\"incident\" data-start-ms=\"{ms}\" data-open=\"{open}\" data-late=\"{late}\" \
             data-causes=\"{kinds}\"><span class=\"inc-state\">{state}</span>: began \
             <time datetime=\"{start}\">{start}</time>, {lasted}<span class=\"inc-length\">\
             {length}</span>{so_far}; late: <span class=\"inc-late\">{late_text}</span>; cause: \
             <span class=\"inc-cause\">{cause}</span></li>",
            ms = i.start_ms,
            open = i.open,
            late = esc(&i.late.join(" ")),
            kinds = esc(&kinds.join(" ")),
            state = if i.open { "ongoing" } else { "resolved" },
            start = esc(&i.start),
            lasted = if i.open { "" } else { "lasted " },
            so_far = if i.open { " so far" } else { "" },
            late_text = esc(&i.late_text.join(", ")),
            cause = esc(&cause),
        );
    }
    out.push_str("</ol></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(part: &str, since_s: i64, last_s: i64) -> RunRow {
        RunRow {
            part: part.into(),
            since_ms: since_s * 1_000,
            last_ms: last_s * 1_000,
            samples: (last_s - since_s + 1) as u64,
        }
    }

    #[test]
    fn runs_at_least_the_threshold_become_incidents_merged_across_parts_newest_first() {
        let runs = [
            // 29 s: below the threshold (a run of k samples lasts k s).
            run("push", 100, 128),
            // 30 s: an incident.
            run("ingest", 1_000, 1_029),
            // Push late from 2_000 for 60 s, webhooks from 2_040 for 40 s: one incident.
            run("webhook", 2_040, 2_079),
            run("push", 2_000, 2_059),
        ];
        let list = derive(&runs, 5_000_000, 5_000_500);
        assert_eq!(list.len(), 2, "{list:?}");
        let newest = &list[0];
        assert_eq!(newest.start_ms, 2_000_000);
        assert_eq!(newest.end_ms, Some(2_080_000));
        assert_eq!(newest.length_ms, 80_000);
        assert_eq!(newest.late, ["push", "webhooks"]);
        assert_eq!(newest.late_text, ["push behind ingest", "webhooks behind"]);
        assert!(!newest.open);
        assert_eq!((list[1].start_ms, list[1].length_ms), (1_000_000, 30_000));
        assert_eq!(list[1].late_text, ["ingest behind the head"]);
    }

    #[test]
    fn a_run_holding_the_fresh_newest_sample_is_open() {
        let runs = [run("push", 100, 200)];
        let open = derive(&runs, 200_000, 205_000);
        assert!(open[0].open);
        assert_eq!((open[0].end_ms, open[0].length_ms), (None, 105_000));
        // The sampler stopped long ago: the run ended with the samples, not open.
        let stale = derive(&runs, 200_000, 400_000);
        assert!(!stale[0].open);
        assert_eq!(stale[0].length_ms, 101_000);
    }

    #[test]
    fn causes_are_named_from_what_the_samples_recorded() {
        let inc = &derive(&[run("push", 1_000, 1_059)], 9_999_000, 9_999_500)[0];
        let none = CauseAgg {
            samples: 62,
            pg_all_ok: 1,
            ch_all_ok: 1,
            epoch_min: 4,
            epoch_max: 4,
            live_instances: 1,
            started_ms: 900_000 - DEPLOY_LEAD_MS - 1,
            ..CauseAgg::default()
        };
        assert_eq!(causes(inc, &none), []);
        let all = CauseAgg {
            pg_all_ok: 0,
            ch_all_ok: 0,
            epoch_max: 5,
            live_instances: 2,
            demoted_max: 1,
            started_ms: 1_000_000 - DEPLOY_LEAD_MS,
            started_service: "pmw-push".into(),
            ..none.clone()
        };
        let kinds: Vec<String> = causes(inc, &all).into_iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [
                "postgres",
                "clickhouse",
                "leader_change",
                "leader_change",
                "provider_demoted",
                "deploy"
            ]
        );
        assert_eq!(
            causes(inc, &all)[2].text,
            "push leader change (epoch 4 → 5)"
        );
        assert_eq!(causes(inc, &CauseAgg::default()), []);
    }
}
