//! The public dashboard page, rendered on the server: headline, the pending tier's section
//! ([`crate::pending`]), per-stage table, SVG charts. No
//! script, no external resource; every time is UTC with its window's bounds; a window without
//! rows says "no data" with its count, never 0 and never another window's figure.

use std::fmt::Write;

use crate::charts;
use crate::html::esc;
use crate::model::{iso, Stage};
use crate::snapshot::{Coverage, Percentiles, Snapshot, WindowReport};

/// What the page says about the freshness of the snapshot it shows.
#[derive(Debug, Clone, Default)]
pub struct Freshness {
    /// The snapshot is older than a few refresh intervals.
    pub stale: bool,
    pub refresh_interval_ms: u64,
    /// The last refresh failed with this message.
    pub last_error: Option<String>,
}

/// A latency in milliseconds as shown on the page.
pub fn fmt_ms(v: Option<i64>) -> String {
    match v {
        Some(v) => format!("{v} ms"),
        None => "no data".into(),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2rem auto;max-width:64rem;padding:0 1rem;\
color:#1a1a1a}h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem}\
.sub{color:#555;margin-top:0}.cards{display:flex;flex-wrap:wrap;gap:1rem}\
.card{border:1px solid #ddd;border-radius:6px;padding:.8rem 1rem;flex:1 1 12rem}\
.wname{font-weight:bold}.value{font-size:2rem;margin:.3rem 0}.nodata{color:#888}\
.meta{color:#555;font-size:.8rem}.partial{color:#a05a00;font-size:.8rem}\
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{border-bottom:1px solid #eee;\
padding:.3rem .5rem;text-align:right}th:first-child,td:first-child{text-align:left}\
tr.wrow th{text-align:left;background:#f6f6f6}figure{margin:1.5rem 0}svg{max-width:100%;\
height:auto}figcaption{color:#555;font-size:.8rem}.warn{background:#fff3cd;border:1px solid \
#e0c36c;padding:.5rem 1rem}code{font-size:.85rem}.avail-part{margin:.4rem 0}\
.avail-part .share{font-size:1.6rem;font-weight:bold}.avail-part .pname{font-weight:bold}\
.measured{margin:.3rem 0}.day-row{display:flex;align-items:center;gap:.5rem;margin:.3rem 0}\
.day-label{width:3.5rem;font-size:.85rem}.day-bars{flex:1;width:100%;height:2rem;max-width:none}\
.day-axis{display:flex;justify-content:space-between;margin-left:4rem}.day-table td,.day-table th\
{text-align:left}.incident-list{padding-left:1.2rem}.incident{margin:.4rem 0}.inc-state{font-weight:\
bold}li.incident[data-open=\"true\"] .inc-state{color:#c62828}.scroll{overflow-x:auto}\
@media (max-width:600px){body{margin:1rem auto;padding:0 .6rem}.value{font-size:1.6rem}\
table{font-size:.8rem}th,td{padding:.2rem .3rem}}";

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
}

fn time(ms: i64) -> String {
    let s = iso(ms);
    format!("<time datetime=\"{s}\">{s}</time>")
}

fn bounds(w: &WindowReport) -> String {
    format!("{} → {}", time(w.bounds.from_ms), time(w.bounds.to_ms))
}

fn coverage_note(w: &WindowReport, out: &mut String) {
    match (w.coverage, &w.data_since) {
        (Coverage::Partial, Some(since)) => {
            let _ = write!(
                out,
                "<div class=\"partial\">partial window: data since <time datetime=\"{0}\">{0}</time></div>",
                esc(since)
            );
        }
        (Coverage::None, _) => {
            out.push_str("<div class=\"partial\">no rows recorded in this window</div>");
        }
        _ => {}
    }
}

/// The page for a snapshot.
pub fn render(s: &Snapshot, fresh: &Freshness) -> String {
    let mut out = String::with_capacity(64 * 1024);
    head(&mut out, "pmw latency: block header received → pushed");
    let _ = write!(
        out,
        "<header><h1>Latency: {}</h1><p class=\"sub\">Polymarket trades pushed to subscribers, \
         measured from the moment our node connection receives the block header. Computed at {} \
         (every {} s). All times are UTC.</p></header>",
        esc(&s.headline.label),
        time(s.generated_at_ms),
        fresh.refresh_interval_ms / 1000
    );
    if fresh.stale || fresh.last_error.is_some() {
        let _ = write!(
            out,
            "<p class=\"warn\" id=\"stale\">These figures were computed at {} and {}.</p>",
            time(s.generated_at_ms),
            if fresh.stale {
                "have not been refreshed since"
            } else {
                "the latest refresh failed"
            }
        );
    }

    out.push_str(
        "<section id=\"headline\"><h2>Block header received → pushed (WebSocket), median</h2>\
         <div class=\"cards\">",
    );
    for w in &s.windows {
        let p = w.stages.get(Stage::HEADLINE);
        let (class, attr) = match p.p50_ms {
            Some(v) => ("value", format!(" data-p50-ms=\"{v}\"")),
            None => ("value nodata", " data-p50-ms=\"\"".to_string()),
        };
        let _ = write!(
            out,
            "<div class=\"card\" data-window=\"{name}\"><div class=\"wname\">last {name}</div>\
             <div class=\"{class} headline-value\" data-window=\"{name}\"{attr}>{value}</div>\
             <div class=\"meta\">n = <span class=\"count\">{count}</span> deliveries</div>\
             <div class=\"meta\">{bounds}</div>",
            name = esc(&w.window),
            value = fmt_ms(p.p50_ms),
            count = p.count,
            bounds = bounds(w),
        );
        coverage_note(w, &mut out);
        out.push_str("</div>");
    }
    out.push_str("</div></section>");

    crate::pending::render(&s.pending, &mut out);
    crate::availability::render(&s.availability, &mut out);
    stage_table(s, &mut out);
    crate::audit::render(&s.audit, &mut out);
    charts_section(s, &mut out);
    method(s, &mut out);
    out.push_str("</body></html>");
    out
}

fn cell(p: &Percentiles, v: Option<i64>) -> String {
    if p.count == 0 {
        "<td class=\"nodata\">no data</td>".into()
    } else {
        format!("<td>{}</td>", fmt_ms(v))
    }
}

fn stage_table(s: &Snapshot, out: &mut String) {
    out.push_str(
        "<section id=\"stages\"><h2>Per-stage breakdown</h2><div class=\"scroll\"><table><thead><tr><th>stage</th>\
         <th>p50</th><th>p95</th><th>p99</th><th>count</th></tr></thead>",
    );
    for w in &s.windows {
        let _ = write!(
            out,
            "<tbody data-window=\"{name}\"><tr class=\"wrow\"><th colspan=\"5\">last {name}: {b}</th></tr>",
            name = esc(&w.window),
            b = bounds(w)
        );
        for stage in Stage::ALL {
            let p = w.stages.get(stage);
            let _ = write!(
                out,
                "<tr data-stage=\"{}\"><td>{}</td>{}{}{}<td>{}</td></tr>",
                stage.key(),
                esc(stage.label()),
                cell(p, p.p50_ms),
                cell(p, p.p95_ms),
                cell(p, p.p99_ms),
                p.count
            );
        }
        out.push_str("</tbody>");
    }
    out.push_str("</table></div></section>");
}

fn figure(out: &mut String, id: &str, svg: Result<String, crate::error::StatsError>, cap: &str) {
    let body = match svg {
        Ok(svg) => svg,
        Err(e) => {
            tracing::warn!(chart = id, error = %e, "chart rendering failed");
            "<p class=\"nodata\">chart unavailable</p>".into()
        }
    };
    let _ = write!(
        out,
        "<figure id=\"{id}\">{body}<figcaption>{cap}</figcaption></figure>"
    );
}

fn charts_section(s: &Snapshot, out: &mut String) {
    out.push_str("<section id=\"charts\"><h2>Over time</h2>");
    let stage = Stage::HEADLINE;
    let h = &s.series.hourly_24h;
    figure(
        out,
        "chart-hourly",
        charts::series_chart(
            "header received → pushed (WS), p50 and p99 per hour",
            h,
            stage,
            |ms| iso(ms)[11..16].to_string(),
        ),
        &format!(
            "Per UTC hour, {} → {}; the last hour is in progress; hours without deliveries are gaps.",
            time(h.bounds.from_ms),
            time(h.bounds.to_ms)
        ),
    );
    let d = &s.series.daily_30d;
    figure(
        out,
        "chart-daily",
        charts::series_chart(
            "header received → pushed (WS), p50 and p99 per day",
            d,
            stage,
            |ms| iso(ms)[5..10].to_string(),
        ),
        &format!(
            "Per UTC day, {} → {}; today is in progress; days without deliveries are gaps.",
            time(d.bounds.from_ms),
            time(d.bounds.to_ms)
        ),
    );
    let hist = &s.histogram_1h;
    figure(
        out,
        "chart-histogram",
        charts::histogram_chart("header received → pushed (WS), last hour", hist),
        &format!(
            "Distribution of {} WebSocket deliveries, {} → {}.",
            hist.count,
            time(hist.bounds.from_ms),
            time(hist.bounds.to_ms)
        ),
    );
    out.push_str("</section>");
}

fn method(s: &Snapshot, out: &mut String) {
    out.push_str("<section id=\"method\"><h2>How these numbers are measured</h2><ul>");
    out.push_str(
        "<li>The origin of every latency is the moment our service receives the block header \
         (<code>t_detect_ms</code>, our clock), not the block's own timestamp: blocks often arrive \
         before the whole second they claim.</li>",
    );
    for stage in Stage::ALL {
        let _ = write!(
            out,
            "<li><b>{}</b>: <code>{}</code></li>",
            esc(stage.label()),
            esc(stage.formula())
        );
    }
    let _ = write!(
        out,
        "<li>Percentiles: {}.</li><li>Each window is <code>[from, to)</code>: both bounds are \
         applied, so a mis-dated row can never appear in every window. Blocks fetched to fill a \
         gap (backfilled) and fills found by the completeness audit are left out.</li><li>The same figures as JSON: \
         <a href=\"/latency.json\">/latency.json</a>.</li></ul></section>",
        esc(&s.percentiles)
    );
}

/// The page served before the first snapshot exists.
pub fn pending(last_error: Option<&str>) -> String {
    let mut out = String::new();
    head(&mut out, "pmw latency");
    out.push_str(
        "<h1>Latency: block header received → pushed</h1><p class=\"nodata\" id=\"pending\">\
         The figures are being computed; no data to show yet.</p>",
    );
    if let Some(e) = last_error {
        let _ = write!(out, "<p class=\"warn\">last attempt failed: {}</p>", esc(e));
    }
    out.push_str("</body></html>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_latencies() {
        assert_eq!(fmt_ms(None), "no data");
        assert_eq!(fmt_ms(Some(0)), "0 ms");
    }
}
