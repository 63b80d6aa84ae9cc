//! The completeness audit on the dashboard and in `/latency.json`: pmw-live re-reads every
//! finalized block range from the chain and compares its fills with the stored ones
//! (`audit_cursor`, `audit_ranges` in Postgres). Per window: "audited through block N: X fills
//! checked, M missing, E extra", and how far the audit trails the head. A window without
//! audited ranges has `null` figures, never 0.

use std::fmt::Write;

use pmw_core::pg::PgPool;
use pmw_core::UnixMs;

use crate::error::StatsError;
use crate::html::esc;
use crate::model::{self, iso};
use crate::snapshot::{AuditReport, AuditWindow, Bounds};

/// What the audit compares, stated in the JSON and on the page.
pub const AUDIT_DEFINITION: &str = "pmw-live re-reads every finalized block range with \
eth_getLogs (every OrderFilled and OrdersMatched topic from any address: the exchange list's fills \
are compared, other emitters are only recorded), independently of ingest, and compares the fills (block hash, log index) with the stored, non-retracted trades of those blocks: \
a fill missing from the store is backfilled and delivered, a stored fill the chain does not have \
is retracted. A window counts the ranges audited in it";

fn nonneg(v: Option<i64>) -> Option<u64> {
    v.map(|v| v.max(0) as u64)
}

/// The audit figures as of `now`.
pub async fn report(pg: &PgPool, now: UnixMs) -> Result<AuditReport, StatsError> {
    let c = pg.get().await.map_err(pmw_core::pg::PgError::from)?;
    let mut out = AuditReport {
        definition: AUDIT_DEFINITION.into(),
        ..AuditReport::default()
    };
    if let Some(r) = c.query_opt(include_str!("sql/audit_now.sql"), &[]).await? {
        let audited = r.get::<_, i64>(0);
        let head = r.get::<_, Option<i64>>(2);
        out.audited_through_block = nonneg(Some(audited));
        out.audited_at = Some(iso(r.get::<_, i64>(1)));
        out.head_block = nonneg(head);
        out.trail_blocks = nonneg(head.map(|h| h - audited));
        out.trail_ms = r
            .get::<_, Option<i64>>(4)
            .zip(r.get::<_, Option<i64>>(3))
            .map(|(h, a)| h - a);
    }
    for nw in model::windows(now) {
        let w = nw.window;
        let r = c
            .query_one(
                include_str!("sql/audit_window.sql"),
                &[&w.from_ms, &w.to_ms],
            )
            .await?;
        let ranges = r.get::<_, i64>(0).max(0) as u64;
        let some = |i: usize| (ranges > 0).then(|| r.get::<_, i64>(i).max(0) as u64);
        out.windows.push(AuditWindow {
            window: nw.name.into(),
            bounds: Bounds::new(w.from_ms, w.to_ms),
            ranges,
            blocks_checked: some(1),
            fills_checked: some(2),
            missing: some(3),
            extra: some(4),
            audited_through_block: nonneg(r.get(5)),
            max_trail_blocks: nonneg(r.get(6)),
            max_trail_ms: r.get(7),
        });
    }
    Ok(out)
}

fn num(v: Option<u64>) -> String {
    v.map_or_else(|| "no data".into(), |v| v.to_string())
}

fn secs(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The page's audit section.
pub fn render(a: &AuditReport, out: &mut String) {
    out.push_str("<section id=\"audit\"><h2>Completeness audit</h2>");
    match a.audited_through_block {
        Some(n) => {
            let _ = write!(
                out,
                "<p id=\"audit-now\" data-audited-block=\"{n}\" data-trail-blocks=\"{tb}\">Audited \
                 through block <b>{n}</b>: {tb} blocks{tm} behind the newest stored block.</p>",
                tb = a.trail_blocks.map_or_else(|| "?".into(), |v| v.to_string()),
                tm = a
                    .trail_ms
                    .map_or_else(String::new, |ms| format!(" ({} of block time)", secs(ms))),
            );
        }
        None => out.push_str(
            "<p id=\"audit-now\" class=\"nodata\" data-audited-block=\"\">No block audited yet.</p>",
        ),
    }
    out.push_str("<div class=\"cards\">");
    for w in &a.windows {
        let _ = write!(
            out,
            "<div class=\"card audit-window\" data-window=\"{name}\" data-ranges=\"{ranges}\" \
             data-fills-checked=\"{fa}\" data-missing=\"{ma}\" data-extra=\"{ea}\">\
             <div class=\"wname\">last {name}</div><div class=\"audit-figures{cls}\">",
            name = w.window,
            ranges = w.ranges,
            fa = w.fills_checked.map_or_else(String::new, |v| v.to_string()),
            ma = w.missing.map_or_else(String::new, |v| v.to_string()),
            ea = w.extra.map_or_else(String::new, |v| v.to_string()),
            cls = if w.ranges == 0 { " nodata" } else { "" },
        );
        if w.ranges == 0 {
            out.push_str("no block audited in this window</div>");
        } else {
            let _ = write!(
                out,
                "audited through block {}: {} fills checked, {} missing, {} extra</div>\
                 <div class=\"meta\">{} blocks in {} ranges; trailed the head by at most {} \
                 blocks, {} after the block</div>",
                num(w.audited_through_block),
                num(w.fills_checked),
                num(w.missing),
                num(w.extra),
                num(w.blocks_checked),
                w.ranges,
                num(w.max_trail_blocks),
                w.max_trail_ms.map_or_else(|| "?".into(), secs),
            );
        }
        let _ = write!(
            out,
            "<div class=\"meta\"><time datetime=\"{0}\">{0}</time> → <time datetime=\"{1}\">{1}</time></div></div>",
            w.bounds.from, w.bounds.to
        );
    }
    let _ = write!(
        out,
        "</div><p class=\"meta\">{}.</p></section>",
        esc(&a.definition)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_window_says_no_data_never_zero() {
        let a = AuditReport {
            definition: AUDIT_DEFINITION.into(),
            windows: vec![AuditWindow {
                window: "1h".into(),
                bounds: Bounds::new(0, 1),
                ranges: 0,
                blocks_checked: None,
                fills_checked: None,
                missing: None,
                extra: None,
                audited_through_block: None,
                max_trail_blocks: None,
                max_trail_ms: None,
            }],
            ..AuditReport::default()
        };
        let mut page = String::new();
        render(&a, &mut page);
        assert!(page.contains("No block audited yet"), "{page}");
        assert!(page.contains("no block audited in this window"), "{page}");
        assert!(page.contains("data-fills-checked=\"\""), "{page}");
        let json = serde_json::to_value(&a).unwrap();
        assert!(json["windows"][0]["fills_checked"].is_null(), "{json}");
    }
}
