//! Published availability: per window, the share of the measured time push and ingest were
//! within their bounds (the headline), the share of the window measured beside it, and the
//! longest gap of each, from the sampler's per-second rows ([`crate::sampler`]). A second
//! without a sample is not measured: never available, shown on its own, and counted against
//! the share of the whole window (also given). Report types, the ClickHouse read and the page
//! section (the daily bars are [`crate::days`], the incidents [`crate::incidents`]).

use std::fmt::Write;

use pmw_core::ch::availability::{self, AvailabilityAgg};
use pmw_core::ch::ChClient;
use serde::{Deserialize, Serialize};

use crate::days::DayBar;
use crate::error::StatsError;
use crate::figures::{gap, pct, share, span};
use crate::html::esc;
use crate::incidents::{Incident, INCIDENT_MIN_MS};
use crate::model::{coverage, iso, Bounds, Coverage, NamedWindow, SeriesSpec, DAY_MS};
use crate::sampler::{INGEST_WITHIN_BLOCKS, LIVE_BEAT_FRESH_MS, PUSH_WITHIN_MS, SAMPLE_EVERY};
use pmw_core::UnixMs;

/// One part (push or ingest) over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Seconds sampled and within the bound.
    pub available_s: u64,
    /// Seconds sampled and not within the bound.
    pub unavailable_s: u64,
    /// available_s / the seconds measured (sampled): the headline figure; `null` when nothing
    /// was measured.
    pub available_share_of_measured: Option<f64>,
    /// available_s / the window's seconds (unmeasured time counts against it).
    pub available_share_of_window: f64,
    /// The same as `available_share_of_window` (kept for existing readers).
    pub available_share: f64,
    /// The same as `available_share_of_measured` (kept for existing readers).
    pub available_share_of_sampled: Option<f64>,
    /// The longest run of unavailable samples inside the window (0: none); `null` when nothing
    /// was sampled.
    pub longest_gap_ms: Option<i64>,
    /// When that run started (clipped at the window's start).
    pub longest_gap_from: Option<String>,
}

/// Both parts over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AvailabilityWindow {
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    /// The window's length in seconds.
    pub seconds: u64,
    /// Seconds with at least one sample.
    pub sampled_s: u64,
    /// sampled_s / seconds: the share of the window that was measured.
    pub sampled_share: f64,
    /// `partial` when the first sample in the window came later than 1 % of its length after its
    /// start (the sampler, or the whole stack, started since), `none` without samples.
    pub coverage: Coverage,
    /// The first sampled second inside the window.
    pub sampled_since: Option<String>,
    /// Seconds without a sample (the sampler was not running): unknown.
    pub unknown_s: u64,
    pub unknown_share: f64,
    pub push: Part,
    pub ingest: Part,
    /// The longest any owed trade had waited for push in a sample (ms); `null` when never
    /// measured.
    pub push_max_lag_ms: Option<i64>,
    /// The most blocks ingest trailed the newest header received in a sample; `null` when never
    /// measured.
    pub ingest_max_lag_blocks: Option<i64>,
}

/// The availability section of the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AvailabilityReport {
    pub definition: String,
    pub sample_every_ms: i64,
    pub push_within_ms: i64,
    pub ingest_within_blocks: i64,
    pub windows: Vec<AvailabilityWindow>,
    /// One bar per UTC day, oldest first (today in progress).
    #[serde(default)]
    pub days: Vec<DayBar>,
    /// Incidents: runs of unavailable samples at least this long.
    #[serde(default)]
    pub incident_threshold_ms: i64,
    /// Newest first.
    #[serde(default)]
    pub incidents: Vec<Incident>,
}

impl Default for AvailabilityReport {
    fn default() -> Self {
        AvailabilityReport {
            definition: definition(),
            sample_every_ms: SAMPLE_EVERY.as_millis() as i64,
            push_within_ms: PUSH_WITHIN_MS,
            ingest_within_blocks: INGEST_WITHIN_BLOCKS,
            windows: Vec::new(),
            days: Vec::new(),
            incident_threshold_ms: INCIDENT_MIN_MS,
            incidents: Vec::new(),
        }
    }
}

/// What the figures mean, in the JSON and on the page.
pub fn definition() -> String {
    format!(
        "pmw-stats samples Postgres every {} ms. Push is available when the oldest trade it owes \
         (after the WebSocket push cursor, at or below the ingest watermark) has been readable \
         for at most {} ms (nothing owed: available). Ingest is available when pmw-live's writer \
         heartbeat is at most {} ms old and the newest block header it received is at most {} \
         blocks above the ingest watermark. Postgres not answering counts as unavailable for \
         both. A second without a sample (the sampler not running) is not measured: the headline \
         share is over the time measured, the share measured is shown beside it, and the share \
         of the whole window (unmeasured time counted against it) below. The longest gap is \
         the longest run of consecutive unavailable samples inside the window",
        SAMPLE_EVERY.as_millis(),
        PUSH_WITHIN_MS,
        LIVE_BEAT_FRESH_MS,
        INGEST_WITHIN_BLOCKS
    )
}

fn part(seconds: u64, sampled: u64, ok: u64, gap_ms: i64, gap_from_ms: i64) -> Part {
    let ok = ok.min(sampled);
    let sampled_any = sampled > 0;
    let of_measured = sampled_any.then(|| share(ok, sampled));
    Part {
        available_s: ok,
        unavailable_s: sampled - ok,
        available_share_of_measured: of_measured,
        available_share_of_window: share(ok, seconds),
        available_share: share(ok, seconds),
        available_share_of_sampled: of_measured,
        longest_gap_ms: sampled_any.then_some(gap_ms.max(0)),
        longest_gap_from: (sampled_any && gap_ms > 0).then(|| iso(gap_from_ms)),
    }
}

/// One window's figures from its aggregate.
pub fn window_of(nw: NamedWindow, agg: &AvailabilityAgg) -> AvailabilityWindow {
    let w = nw.window;
    let seconds = u64::try_from((w.to_ms - w.from_ms) / 1000).unwrap_or(0);
    // A window's two partial seconds can each hold a sample: never more than its length.
    let sampled = agg.sampled.min(seconds);
    AvailabilityWindow {
        window: nw.name.into(),
        bounds: Bounds::new(w.from_ms, w.to_ms),
        seconds,
        sampled_s: sampled,
        sampled_share: share(sampled, seconds),
        coverage: coverage(w.from_ms, w.to_ms, (sampled > 0).then_some(agg.first_ms)),
        sampled_since: (sampled > 0).then(|| iso(agg.first_ms.max(w.from_ms))),
        unknown_s: seconds - sampled,
        unknown_share: share(seconds - sampled, seconds),
        push: part(
            seconds,
            sampled,
            agg.push_ok_s,
            agg.push_gap_ms,
            agg.push_gap_from_ms,
        ),
        ingest: part(
            seconds,
            sampled,
            agg.ingest_ok_s,
            agg.ingest_gap_ms,
            agg.ingest_gap_from_ms,
        ),
        // -1 is "not measurable" (and ClickHouse's max over no rows is 0): only a measured lag.
        push_max_lag_ms: (sampled > 0 && agg.push_max_lag_ms >= 0).then_some(agg.push_max_lag_ms),
        ingest_max_lag_blocks: (sampled > 0 && agg.ingest_max_lag_blocks >= 0)
            .then_some(agg.ingest_max_lag_blocks),
    }
}

/// The report over `windows`, with `days` daily bars and the incidents of those days, as of
/// `now`.
pub async fn report(
    ch: &ChClient,
    windows: &[NamedWindow],
    days: i64,
    now: UnixMs,
) -> Result<AvailabilityReport, StatsError> {
    let mut out = AvailabilityReport::default();
    for nw in windows {
        let agg = availability::window(ch, nw.window).await?;
        out.windows.push(window_of(*nw, &agg));
    }
    let spec = SeriesSpec::new("days", DAY_MS, days, now);
    out.days = crate::days::read(ch, spec).await?;
    out.incidents = crate::incidents::read(ch, spec.window(), now).await?;
    Ok(out)
}

fn part_line(out: &mut String, name: &str, p: &Part, most: &str) {
    let gap_text = match p.longest_gap_ms {
        Some(g) => gap(g),
        None => "no data".into(),
    };
    let _ = write!(
        out,
        "<div class=\"avail-part\" data-part=\"{name}\" data-available-share=\"{share}\" \
         data-share-of-window=\"{of_window}\" data-longest-gap-ms=\"{g}\"><span class=\"pname\">\
         {name}</span> <span class=\"share\">{shown}</span> <span class=\"of\">available over the \
         time measured</span><div class=\"meta\">longest gap <span class=\"gap\">{gap_text}</span>; \
         {most}; <span class=\"window-share\">{window_shown}</span> of the whole window \
         (unmeasured time counted against it)</div></div>",
        share = p.available_share_of_measured.map_or(String::new(), |v| v.to_string()),
        of_window = p.available_share_of_window,
        g = p.longest_gap_ms.map_or(String::new(), |g| g.to_string()),
        shown = p.available_share_of_measured.map_or("no data".into(), pct),
        window_shown = pct(p.available_share_of_window),
    );
}

/// "measured 6 min of 1 h", and for a partial window since when.
fn measured_line(out: &mut String, w: &AvailabilityWindow) {
    let _ = write!(
        out,
        "<div class=\"measured\">measured <b>{}</b> of {} (<span class=\"sampled-share\">{}\
         </span>)</div>",
        span(w.sampled_s),
        span(w.seconds),
        pct(w.sampled_share),
    );
    match (w.coverage, &w.sampled_since) {
        (Coverage::Partial, Some(since)) => {
            let _ = write!(
                out,
                "<div class=\"partial avail-partial\">partial window: measured since <time \
                 datetime=\"{0}\">{0}</time></div>",
                esc(since)
            );
        }
        (Coverage::None, _) => {
            out.push_str(
                "<div class=\"partial avail-partial\">nothing measured in this window</div>",
            );
        }
        _ => {}
    }
}

/// The page section: one card per window, then the daily bars and the incidents.
pub fn render(r: &AvailabilityReport, out: &mut String) {
    let _ = write!(
        out,
        "<section id=\"availability\"><h2>Availability</h2><p class=\"sub\">Share of the time \
         measured during which pmw was available. Push: the oldest trade owed readable for at \
         most {} s; ingest: within {} blocks of the newest header received. Time the sampler did \
         not run is not measured: shown apart, never counted as available.</p>\
         <div class=\"cards\">",
        r.push_within_ms / 1000,
        r.ingest_within_blocks
    );
    for w in &r.windows {
        let _ = write!(
            out,
            "<div class=\"card avail-window\" data-window=\"{name}\" data-unknown-s=\"{u}\" \
             data-sampled-s=\"{s}\" data-seconds=\"{secs}\" data-coverage=\"{cov}\">\
             <div class=\"wname\">last {name}</div>",
            name = esc(&w.window),
            u = w.unknown_s,
            s = w.sampled_s,
            secs = w.seconds,
            cov = match w.coverage {
                Coverage::Full => "full",
                Coverage::Partial => "partial",
                Coverage::None => "none",
            },
        );
        if w.sampled_s == 0 {
            out.push_str("<div class=\"nodata avail-none\">nothing measured: unknown</div>");
        } else {
            let waited = w.push_max_lag_ms.map_or("no data".into(), gap);
            let behind = w
                .ingest_max_lag_blocks
                .map_or("no data".into(), |b| b.to_string());
            let most = format!("longest wait <span class=\"max-lag\">{waited}</span>");
            part_line(out, "push", &w.push, &most);
            let most = format!("most behind <span class=\"max-lag\">{behind}</span> blocks");
            part_line(out, "ingest", &w.ingest, &most);
        }
        measured_line(out, w);
        let _ = write!(
            out,
            "<div class=\"meta\">not measured: <span class=\"unknown\">{}</span> \
             ({} s of {} s)</div><div class=\"meta\"><time datetime=\"{f}\">{f}</time> → \
             <time datetime=\"{t}\">{t}</time></div></div>",
            pct(w.unknown_share),
            w.unknown_s,
            w.seconds,
            f = esc(&w.bounds.from),
            t = esc(&w.bounds.to),
        );
    }
    out.push_str("</div>");
    crate::days::render(&r.days, out);
    crate::incidents::render(r.incident_threshold_ms, &r.incidents, out);
    let _ = write!(
        out,
        "<p class=\"meta\">{}.</p></section>",
        esc(&r.definition)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::ch::Window;

    fn nw(len_s: i64) -> NamedWindow {
        NamedWindow {
            name: "1h",
            window: Window {
                from_ms: 1_000_000,
                to_ms: 1_000_001 + len_s * 1000,
            },
        }
    }

    #[test]
    fn unknown_time_counts_against_the_share_and_is_reported_apart() {
        let agg = AvailabilityAgg {
            sampled: 3_000,
            push_ok_s: 2_960,
            ingest_ok_s: 3_000,
            push_gap_ms: 40_000,
            push_gap_from_ms: 1_500_000,
            ingest_gap_ms: 0,
            ingest_gap_from_ms: 0,
            push_max_lag_ms: 44_000,
            ingest_max_lag_blocks: 1,
            first_ms: 1_600_000,
        };
        let w = window_of(nw(3_600), &agg);
        assert_eq!(
            (w.push_max_lag_ms, w.ingest_max_lag_blocks),
            (Some(44_000), Some(1))
        );
        assert_eq!((w.seconds, w.sampled_s, w.unknown_s), (3_600, 3_000, 600));
        assert_eq!((w.push.available_s, w.push.unavailable_s), (2_960, 40));
        assert_eq!(w.push.available_share, 0.822222);
        assert_eq!(w.push.available_share_of_sampled, Some(0.986666));
        assert_eq!(w.push.longest_gap_ms, Some(40_000));
        assert_eq!(
            w.push.longest_gap_from.as_deref(),
            Some("1970-01-01T00:25:00.000Z")
        );
        assert_eq!(
            (w.ingest.longest_gap_ms, w.ingest.longest_gap_from),
            (Some(0), None)
        );
        assert_eq!(w.unknown_share, 0.166666);
        // The headline is over the time measured; the sampled share beside it.
        assert_eq!(w.push.available_share_of_measured, Some(0.986666));
        assert_eq!(w.push.available_share_of_window, 0.822222);
        assert_eq!(w.sampled_share, 0.833333);
        assert_eq!(w.coverage, Coverage::Partial, "first sample 600 s in");
        assert_eq!(w.sampled_since.as_deref(), Some("1970-01-01T00:26:40.000Z"));
        // Nothing sampled: every figure unknown, no share of sampled time, no gap.
        let none = window_of(
            nw(3_600),
            &AvailabilityAgg {
                sampled: 0,
                push_ok_s: 0,
                ingest_ok_s: 0,
                push_gap_ms: 0,
                push_gap_from_ms: 0,
                ingest_gap_ms: 0,
                ingest_gap_from_ms: 0,
                push_max_lag_ms: 0,
                ingest_max_lag_blocks: 0,
                first_ms: 0,
            },
        );
        assert_eq!(
            (none.push_max_lag_ms, none.ingest_max_lag_blocks),
            (None, None)
        );
        assert_eq!((none.unknown_s, none.unknown_share), (3_600, 1.0));
        assert_eq!(
            (
                none.push.available_share_of_sampled,
                none.push.longest_gap_ms
            ),
            (None, None)
        );
    }
}
