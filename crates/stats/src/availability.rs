//! Published availability: per window, the share of time push and ingest were within their
//! bounds and the longest gap of each, from the sampler's per-second rows ([`crate::sampler`]).
//! A second without a sample is unknown: it counts against the available share of the window
//! and is shown on its own, never as available. Report types, the ClickHouse read and the
//! page section.

use std::fmt::Write;

use pmw_core::ch::availability::{self, AvailabilityAgg};
use pmw_core::ch::ChClient;
use serde::{Deserialize, Serialize};

use crate::error::StatsError;
use crate::html::esc;
use crate::model::{iso, Bounds, NamedWindow};
use crate::sampler::{INGEST_WITHIN_BLOCKS, LIVE_BEAT_FRESH_MS, PUSH_WITHIN_MS, SAMPLE_EVERY};

/// One part (push or ingest) over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Seconds sampled and within the bound.
    pub available_s: u64,
    /// Seconds sampled and not within the bound.
    pub unavailable_s: u64,
    /// available_s / the window's seconds (unknown time counts against it).
    pub available_share: f64,
    /// available_s / sampled seconds; `null` when nothing was sampled.
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
}

impl Default for AvailabilityReport {
    fn default() -> Self {
        AvailabilityReport {
            definition: definition(),
            sample_every_ms: SAMPLE_EVERY.as_millis() as i64,
            push_within_ms: PUSH_WITHIN_MS,
            ingest_within_blocks: INGEST_WITHIN_BLOCKS,
            windows: Vec::new(),
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
         both. A second without a sample (the sampler not running) is unknown: it counts \
         against the available share of the window and is reported apart. The longest gap is \
         the longest run of consecutive unavailable samples inside the window",
        SAMPLE_EVERY.as_millis(),
        PUSH_WITHIN_MS,
        LIVE_BEAT_FRESH_MS,
        INGEST_WITHIN_BLOCKS
    )
}

/// A share rounded down to 6 decimals: it never reads 1 unless it is.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    ((part as f64 / whole as f64) * 1e6).floor() / 1e6
}

fn part(seconds: u64, sampled: u64, ok: u64, gap_ms: i64, gap_from_ms: i64) -> Part {
    let ok = ok.min(sampled);
    let sampled_any = sampled > 0;
    Part {
        available_s: ok,
        unavailable_s: sampled - ok,
        available_share: share(ok, seconds),
        available_share_of_sampled: sampled_any.then(|| share(ok, sampled)),
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

/// The report over `windows`.
pub async fn report(
    ch: &ChClient,
    windows: &[NamedWindow],
) -> Result<AvailabilityReport, StatsError> {
    let mut out = AvailabilityReport::default();
    for nw in windows {
        let agg = availability::window(ch, nw.window).await?;
        out.windows.push(window_of(*nw, &agg));
    }
    Ok(out)
}

/// A share as a percentage, rounded down to 3 decimals.
pub fn pct(share: f64) -> String {
    format!("{:.3} %", (share * 100_000.0).floor() / 1_000.0)
}

/// A gap as people read it: `850 ms`, `12.0 s`, `3 min 20 s`.
pub fn gap(ms: i64) -> String {
    match ms {
        m if m < 1_000 => format!("{m} ms"),
        m if m < 120_000 => format!("{:.1} s", m as f64 / 1e3),
        m => format!("{} min {} s", m / 60_000, (m % 60_000) / 1_000),
    }
}

fn part_line(out: &mut String, name: &str, label: &str, p: &Part, most: &str) {
    let gap_text = match p.longest_gap_ms {
        Some(g) => gap(g),
        None => "no data".into(),
    };
    let _ = write!(
        out,
        "<div class=\"avail-part\" data-part=\"{name}\" data-available-share=\"{share}\" \
         data-longest-gap-ms=\"{g}\">{label}: <span class=\"share\">{shown}</span> of the window \
         available (<span class=\"sampled-share\">{of_sampled}</span> of the time sampled), \
         longest gap <span class=\"gap\">{gap_text}</span>; {most}</div>",
        share = p.available_share,
        g = p.longest_gap_ms.map_or(String::new(), |g| g.to_string()),
        shown = pct(p.available_share),
        of_sampled = p.available_share_of_sampled.map_or("no data".into(), pct),
    );
}

/// The page section: one card per window.
pub fn render(r: &AvailabilityReport, out: &mut String) {
    out.push_str(
        "<section id=\"availability\"><h2>Availability</h2><p class=\"sub\">Push: the oldest \
         trade owed readable for at most ",
    );
    let _ = write!(
        out,
        "{} s; ingest: within {} blocks of the newest header received. Unknown: time the \
         sampler did not run, never counted as available.</p><div class=\"cards\">",
        r.push_within_ms / 1000,
        r.ingest_within_blocks
    );
    for w in &r.windows {
        let _ = write!(
            out,
            "<div class=\"card avail-window\" data-window=\"{name}\" data-unknown-s=\"{u}\" \
             data-sampled-s=\"{s}\"><div class=\"wname\">last {name}</div>",
            name = esc(&w.window),
            u = w.unknown_s,
            s = w.sampled_s,
        );
        if w.sampled_s == 0 {
            out.push_str("<div class=\"nodata avail-none\">no samples: unknown</div>");
        } else {
            let waited = w.push_max_lag_ms.map_or("no data".into(), gap);
            let behind = w
                .ingest_max_lag_blocks
                .map_or("no data".into(), |b| b.to_string());
            let most = format!("longest wait <span class=\"max-lag\">{waited}</span>");
            part_line(out, "push", "push", &w.push, &most);
            let most = format!("most behind <span class=\"max-lag\">{behind}</span> blocks");
            part_line(out, "ingest", "ingest", &w.ingest, &most);
        }
        let _ = write!(
            out,
            "<div class=\"meta\">unknown (not sampled): <span class=\"unknown\">{}</span> \
             ({} s of {} s)</div><div class=\"meta\"><time datetime=\"{f}\">{f}</time> → \
             <time datetime=\"{t}\">{t}</time></div></div>",
            pct(w.unknown_share),
            w.unknown_s,
            w.seconds,
            f = esc(&w.bounds.from),
            t = esc(&w.bounds.to),
        );
    }
    let _ = write!(
        out,
        "</div><p class=\"meta\">{}.</p></section>",
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

    #[test]
    fn shares_never_round_up_to_whole() {
        assert_eq!(share(999_999_999, 1_000_000_000), 0.999999);
        assert_eq!(pct(0.9999999), "99.999 %");
        assert_eq!(pct(1.0), "100.000 %");
        assert_eq!(gap(850), "850 ms");
        assert_eq!(gap(12_040), "12.0 s");
        assert_eq!(gap(200_000), "3 min 20 s");
    }
}
