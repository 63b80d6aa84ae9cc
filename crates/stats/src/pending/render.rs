//! The page's pending-tier section: per window, seen → pushed, the lead over the header,
//! coverage and the ends by reason; "off" said plainly when the tier has no data at all, and a
//! window without a figure says "no data", never 0.

use std::fmt::Write;

use super::{PendingReport, PendingWindow, Tier};
use crate::html::esc;
use crate::page::fmt_ms;
use crate::snapshot::Percentiles;

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "no data".into(), |v| format!("{:.1} %", v * 100.0))
}

fn attr(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

fn seen(p: &Percentiles, what: &str) -> String {
    if p.count == 0 {
        return format!("<div class=\"meta nodata\">{what}: no data</div>");
    }
    format!(
        "<div class=\"meta\">{what}: p50 {} · p95 {} · p99 {} (n = {})</div>",
        fmt_ms(p.p50_ms),
        fmt_ms(p.p95_ms),
        fmt_ms(p.p99_ms),
        p.count
    )
}

fn card(w: &PendingWindow, out: &mut String) {
    let ws = &w.seen_push_ws;
    let (cls, value) = match ws.p50_ms {
        Some(_) if ws.count > 0 => ("value", fmt_ms(ws.p50_ms)),
        _ => ("value nodata", "no data".into()),
    };
    let _ = write!(
        out,
        "<div class=\"card pending-window\" data-window=\"{name}\" data-seen-p50-ms=\"{p50}\" \
         data-lead-p50-ms=\"{lead}\" data-coverage=\"{cov}\" data-void-share=\"{vs}\">\
         <div class=\"wname\">last {name}</div>\
         <div class=\"{cls}\">{value}</div><div class=\"meta\">seen in a pool → pushed \
         (WebSocket), median</div>{ws_line}{hook_line}",
        name = esc(&w.window),
        p50 = ws.p50_ms.map_or_else(String::new, |v| v.to_string()),
        lead = w
            .lead_over_header
            .p50_ms
            .map_or_else(String::new, |v| v.to_string()),
        cov = attr(w.coverage.share),
        vs = attr(w.ended.void_share),
        ws_line = seen(ws, "WebSocket"),
        hook_line = seen(&w.seen_push_webhook, "webhook"),
    );
    let l = &w.lead_over_header;
    if l.count == 0 {
        out.push_str("<div class=\"meta nodata\">lead over the header: no data</div>");
    } else {
        let _ = write!(
            out,
            "<div class=\"meta\">lead over the header: p50 {} · p90 {} ({} fills)</div>",
            fmt_ms(l.p50_ms),
            fmt_ms(l.p90_ms),
            l.count
        );
    }
    let c = &w.coverage;
    let _ = write!(
        out,
        "<div class=\"meta\">coverage: <b>{}</b> of {} delivered trades had a pending first</div>",
        pct(c.share),
        c.trades
    );
    let e = &w.ended;
    if e.count == 0 {
        out.push_str("<div class=\"meta nodata\">no pending fill ended in this window</div>");
    } else {
        let reasons: Vec<String> = e
            .voided_by_reason
            .iter()
            .map(|r| format!("{} {}", esc(&r.reason), pct(r.share)))
            .collect();
        let _ = write!(
            out,
            "<div class=\"meta\">{} ended: {} voided ({})</div>",
            e.count,
            pct(e.void_share),
            reasons.join(", ")
        );
    }
    let _ = write!(
        out,
        "<div class=\"meta\"><time datetime=\"{0}\">{0}</time> → <time datetime=\"{1}\">{1}</time></div></div>",
        w.bounds.from, w.bounds.to
    );
}

/// The page's pending-tier section.
pub fn render(p: &PendingReport, out: &mut String) {
    out.push_str("<section id=\"pending-tier\"><h2>Before the block: the pending tier</h2>");
    if p.tier == Tier::Off {
        out.push_str(
            "<p id=\"pending-off\" class=\"nodata\" data-tier=\"off\">The pending tier is off: no \
             settlement was seen in a mempool in the last 30 days, so there is no pending figure \
             to show. Trades are delivered from confirmed blocks (the figures above).</p></section>",
        );
        return;
    }
    out.push_str(
        "<p class=\"sub\" data-tier=\"on\">Settlements seen in a node's mempool before a block \
         mines them are pushed as <code>pending</code>, then confirmed by their <code>trade</code> \
         or voided. The headline above stays the confirmed path's.</p><div class=\"cards\">",
    );
    for w in &p.windows {
        card(w, out);
    }
    let _ = write!(
        out,
        "</div><p class=\"meta\">{}.</p></section>",
        esc(&p.definition)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pending::{CoverageShare, EndShare, Ends, Lead, PENDING_DEFINITION, REASONS};
    use crate::snapshot::Bounds;

    fn empty_window() -> PendingWindow {
        PendingWindow {
            window: "1h".into(),
            bounds: Bounds::new(0, 1),
            seen_push_ws: Percentiles::EMPTY,
            seen_push_webhook: Percentiles::EMPTY,
            lead_over_header: Lead {
                count: 0,
                p50_ms: None,
                p90_ms: None,
            },
            coverage: CoverageShare {
                trades: 3,
                with_pending: 0,
                share: Some(0.0),
            },
            ended: Ends {
                count: 0,
                confirmed: 0,
                voided: 0,
                void_share: None,
                voided_by_reason: REASONS
                    .iter()
                    .map(|r| EndShare {
                        reason: (*r).into(),
                        count: 0,
                        share: None,
                    })
                    .collect(),
            },
        }
    }

    #[test]
    fn off_says_so_and_on_shows_a_real_zero_coverage() {
        let mut p = PendingReport {
            tier: Tier::Off,
            definition: PENDING_DEFINITION.into(),
            windows: vec![empty_window()],
        };
        let mut page = String::new();
        render(&p, &mut page);
        assert!(page.contains("The pending tier is off"), "{page}");
        assert!(!page.contains("0.0 %"), "off shows no coverage: {page}");
        p.tier = Tier::On;
        let mut page = String::new();
        render(&p, &mut page);
        assert!(
            page.contains("<b>0.0 %</b> of 3 delivered trades"),
            "{page}"
        );
        assert!(
            page.contains("no pending fill ended in this window"),
            "{page}"
        );
        assert!(page.contains("data-seen-p50-ms=\"\""), "{page}");
    }
}
