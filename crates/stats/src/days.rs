//! The daily availability bars: one bar per UTC day (30, or 90 when retention keeps 90 days),
//! for push and for ingest, coloured by that day's availability over the time measured, grey
//! where nothing was measured; each bar carries its figures as a tooltip (`<title>`) and the
//! same figures are given as a table (the bars' text equivalent). Rendered on the server as
//! inline SVG, nothing loaded.

use std::fmt::Write;

use pmw_core::ch::availability::{self, DayAgg};
use pmw_core::ch::ChClient;
use serde::{Deserialize, Serialize};

use crate::error::StatsError;
use crate::figures::{gap, pct, share, span};
use crate::html::esc;
use crate::model::{iso, Bounds, SeriesSpec, DAY_MS};

/// Days shown when retention keeps at least 90 days of samples; otherwise 30.
pub const LONG_DAYS: i64 = 90;
pub const SHORT_DAYS: i64 = 30;

/// How many daily bars the retention of `retention_days` allows (`PMW_STATS_RETENTION_DAYS`).
pub fn days_shown(retention_days: u32) -> i64 {
    if i64::from(retention_days) >= LONG_DAYS {
        LONG_DAYS
    } else {
        SHORT_DAYS
    }
}

/// A day's colour: `none` (grey: nothing measured), else by the share of the time measured:
/// `ok` ≥ 99.9 %, `minor` ≥ 99 %, `major` ≥ 95 %, `down` below.
pub fn level(of_measured: Option<f64>) -> &'static str {
    match of_measured {
        None => "none",
        Some(s) if s >= 0.999 => "ok",
        Some(s) if s >= 0.99 => "minor",
        Some(s) if s >= 0.95 => "major",
        Some(_) => "down",
    }
}

fn colour(level: &str) -> &'static str {
    match level {
        "ok" => "#2e9e44",
        "minor" => "#c9a800",
        "major" => "#e07b00",
        "down" => "#c62828",
        _ => "#c8c8c8",
    }
}

/// One part (push or ingest) on one day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayPart {
    pub available_s: u64,
    /// available_s / the day's seconds measured; `null` when nothing was measured.
    pub available_share_of_measured: Option<f64>,
    /// The day's colour ([`level`]).
    pub level: String,
    /// The longest run of unavailable samples inside the day (clipped at its start); `null`
    /// when nothing was measured.
    pub longest_gap_ms: Option<i64>,
    pub longest_gap_from: Option<String>,
}

/// One UTC day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayBar {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    /// Today: the day so far.
    pub in_progress: bool,
    /// The day's seconds (so far, for today).
    pub seconds: u64,
    /// Seconds measured (with a sample).
    pub measured_s: u64,
    pub push: DayPart,
    pub ingest: DayPart,
}

fn day_part(measured: u64, ok: u64, gap_ms: i64, gap_from_ms: i64) -> DayPart {
    let any = measured > 0;
    let ok = ok.min(measured);
    let of_measured = any.then(|| share(ok, measured));
    DayPart {
        available_s: ok,
        available_share_of_measured: of_measured,
        level: level(of_measured).into(),
        longest_gap_ms: any.then_some(gap_ms.max(0)),
        longest_gap_from: (any && gap_ms > 0).then(|| iso(gap_from_ms)),
    }
}

/// The bars of `spec`'s days from the per-day aggregates (days without a row: nothing measured).
pub fn bars(spec: SeriesSpec, rows: &[DayAgg]) -> Vec<DayBar> {
    (0..spec.count)
        .map(|i| {
            let b = spec.bucket(i);
            let seconds = u64::try_from((b.to_ms - b.from_ms) / 1000).unwrap_or(0);
            let row = rows.iter().find(|r| r.day * DAY_MS == b.from_ms);
            let measured = row.map_or(0, |r| r.sampled.min(seconds));
            let part = |ok: fn(&DayAgg) -> (u64, i64, i64)| {
                let (ok, g, from) = row.map_or((0, 0, 0), ok);
                day_part(measured, ok, g, from)
            };
            DayBar {
                day: iso(b.from_ms)[..10].to_string(),
                bounds: Bounds::new(b.from_ms, b.to_ms),
                in_progress: i == spec.count - 1,
                seconds,
                measured_s: measured,
                push: part(|r| (r.push_ok_s, r.push_gap_ms, r.push_gap_from_ms)),
                ingest: part(|r| (r.ingest_ok_s, r.ingest_gap_ms, r.ingest_gap_from_ms)),
            }
        })
        .collect()
}

/// Read the bars of `spec` from ClickHouse.
pub async fn read(ch: &ChClient, spec: SeriesSpec) -> Result<Vec<DayBar>, StatsError> {
    let rows = availability::days(ch, spec.window()).await?;
    Ok(bars(spec, &rows))
}

/// A day's figures for one part, as the tooltip and the table say them.
fn figures(d: &DayBar, p: &DayPart) -> String {
    match (p.available_share_of_measured, p.longest_gap_ms) {
        (Some(s), Some(g)) => format!(
            "{} available over {} measured, longest gap {}",
            pct(s),
            span(d.measured_s),
            gap(g)
        ),
        _ => "nothing measured".into(),
    }
}

fn bar_row(out: &mut String, name: &str, days: &[DayBar], part: fn(&DayBar) -> &DayPart) {
    let n = days.len();
    let _ = write!(
        out,
        "<div class=\"day-row\"><div class=\"day-label\">{name}</div><svg class=\"day-bars\" \
         data-part=\"{name}\" viewBox=\"0 0 {w} 30\" preserveAspectRatio=\"none\" role=\"img\" \
         aria-label=\"{name}: one bar per UTC day, the figures are in the table below\">",
        w = n * 10,
    );
    for (i, d) in days.iter().enumerate() {
        let p = part(d);
        let _ =
            write!(
            out,
            "<rect class=\"day-bar\" data-day=\"{day}\" data-level=\"{lvl}\" x=\"{x}\" y=\"0\" \
             width=\"8\" height=\"30\" fill=\"{fill}\"><title>{day}{today}: {name} {fig}</title>\
             </rect>",
            day = esc(&d.day),
            lvl = esc(&p.level),
            x = i * 10 + 1,
            fill = colour(&p.level),
            today = if d.in_progress { " (today, so far)" } else { "" },
            fig = esc(&figures(d, p)),
        );
    }
    out.push_str("</svg></div>");
}

/// The bars and their table.
pub fn render(days: &[DayBar], out: &mut String) {
    let Some(first) = days.first() else {
        return;
    };
    let _ = write!(
        out,
        "<div id=\"daily\" data-days=\"{n}\"><h3>Last {n} days (UTC)</h3>",
        n = days.len()
    );
    bar_row(out, "push", days, |d| &d.push);
    bar_row(out, "ingest", days, |d| &d.ingest);
    let _ = write!(
        out,
        "<div class=\"day-axis meta\"><span>{}</span><span>today</span></div><p class=\"meta\">\
         Each bar is one UTC day, coloured by its availability over the time measured: green \
         ≥ 99.9 %, yellow ≥ 99 %, orange ≥ 95 %, red below, grey: nothing measured.</p>\
         <details class=\"day-details\"><summary>The days as a table</summary><table \
         class=\"day-table\"><caption>Availability per UTC day, newest first</caption><thead><tr>\
         <th scope=\"col\">day</th><th scope=\"col\">push</th><th scope=\"col\">ingest</th>\
         </tr></thead><tbody>",
        esc(&first.day),
    );
    for d in days.iter().rev() {
        let _ = write!(
            out,
            "<tr data-day=\"{day}\"><th scope=\"row\">{day}{today}</th><td>{push}</td><td>{ingest}\
             </td></tr>",
            day = esc(&d.day),
            today = if d.in_progress { " (so far)" } else { "" },
            push = esc(&figures(d, &d.push)),
            ingest = esc(&figures(d, &d.ingest)),
        );
    }
    out.push_str("</tbody></table></details></div>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::UnixMs;

    fn agg(day: i64, sampled: u64, push_ok: u64, gap_ms: i64) -> DayAgg {
        DayAgg {
            day,
            sampled,
            push_ok_s: push_ok,
            ingest_ok_s: sampled,
            push_gap_ms: gap_ms,
            push_gap_from_ms: day * DAY_MS + 1_000,
            ingest_gap_ms: 0,
            ingest_gap_from_ms: 0,
        }
    }

    #[test]
    fn days_are_utc_and_today_is_cut_at_now() {
        // 2026-12-06T00:00:00.000Z exactly: today has begun (1 ms of it counted).
        let midnight = 1_796_515_200_000;
        assert_eq!(iso(midnight), "2026-12-06T00:00:00.000Z");
        let spec = SeriesSpec::new("days", DAY_MS, 30, UnixMs(midnight));
        let d = bars(spec, &[]);
        assert_eq!(d.len(), 30);
        assert_eq!(d[29].day, "2026-12-06");
        assert_eq!((d[29].in_progress, d[29].seconds), (true, 0));
        assert_eq!(d[28].day, "2026-12-05");
        assert_eq!(d[0].day, "2026-11-07");
        // One millisecond before midnight: still the 5th, its last millisecond included.
        let spec = SeriesSpec::new("days", DAY_MS, 30, UnixMs(midnight - 1));
        let d = bars(spec, &[]);
        assert_eq!((d[29].day.as_str(), d[29].seconds), ("2026-12-05", 86_400));
        assert!(d
            .iter()
            .all(|b| b.push.level == "none" && b.measured_s == 0));
    }

    #[test]
    fn each_row_lands_on_its_day_and_is_coloured_over_the_time_measured() {
        let now = UnixMs(1_796_515_200_000 + 3_600_000); // 01:00 on the 6th
        let spec = SeriesSpec::new("days", DAY_MS, 30, now);
        let today = now.0 / DAY_MS;
        let rows = [
            // Yesterday: 1 h measured, 59 min 30 s available: 99.166 %, minor.
            agg(today - 1, 3_600, 3_570, 30_000),
            // Today so far: all measured, all available.
            agg(today, 3_600, 3_600, 0),
            // A day before the bars: ignored.
            agg(today - 40, 100, 0, 100_000),
        ];
        let d = bars(spec, &rows);
        let y = &d[28];
        assert_eq!((y.measured_s, y.seconds), (3_600, 86_400));
        assert_eq!(y.push.available_share_of_measured, Some(0.991666));
        assert_eq!(y.push.level, "minor");
        assert_eq!(y.push.longest_gap_ms, Some(30_000));
        assert_eq!(
            y.push.longest_gap_from.as_deref(),
            Some("2026-12-05T00:00:01.000Z")
        );
        assert_eq!(y.ingest.level, "ok");
        assert_eq!(
            figures(y, &y.push),
            "99.166 % available over 1 h measured, longest gap 30.0 s"
        );
        let t = &d[29];
        assert_eq!((t.seconds, t.push.level.as_str()), (3_600, "ok"));
        assert_eq!(d[27].push.level, "none");
        assert_eq!(figures(&d[27], &d[27].push), "nothing measured");
        assert_eq!(level(Some(0.95)), "major");
        assert_eq!(level(Some(0.949)), "down");
        assert_eq!((days_shown(32), days_shown(90)), (30, 90));
    }
}
