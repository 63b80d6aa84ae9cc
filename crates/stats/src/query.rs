//! The ClickHouse reads behind the snapshot. Every percentile is taken by `quantilesExact` over the
//! per-row difference (`t_push_ms - t_detect_ms`, …), never as a difference of percentiles, and
//! every query carries a lower and an upper bound (`t >= from AND t < to`). Ingest rows are placed
//! in time by `t_detect_ms`, push rows by `t_push_ms` (each table's partition key); backfilled
//! rows are left out.

use clickhouse::Row;
use pmw_core::ch::ChClient;
use pmw_core::ch::Window;
use pmw_core::UnixMs;
use serde::Deserialize;

use crate::error::StatsError;
use crate::model::{self, iso, NamedWindow, SeriesSpec, Stage};
use crate::snapshot::{
    coverage, Bin, Bounds, BucketReport, Diagnostics, HeadLead, Headline, HeadlineFigure,
    HistogramReport, Percentiles, RowsAfterNow, Series, SeriesReport, Snapshot, Stages,
    WindowReport, HEADLINE_LABEL, P50P99, PERCENTILE_DEFINITION,
};

/// Lower edges (ms) of the histogram's bins after the first (`< 0`); the last bin is open.
pub const HISTOGRAM_EDGES: [i64; 12] =
    [0, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000];

#[derive(Debug, Row, Deserialize)]
struct IngestAgg {
    n: u64,
    logs_q: Vec<i64>,
    stored_q: Vec<i64>,
    lead_p50: i64,
    lead_min: i64,
    lead_max: i64,
    first_ms: i64,
}

#[derive(Debug, Row, Deserialize)]
struct PushAgg {
    channel: String,
    n: u64,
    q: Vec<i64>,
    first_ms: i64,
}

#[derive(Debug, Row, Deserialize)]
struct IngestBucket {
    bucket: i64,
    n: u64,
    logs_q: Vec<i64>,
    stored_q: Vec<i64>,
}

#[derive(Debug, Row, Deserialize)]
struct PushBucket {
    channel: String,
    bucket: i64,
    n: u64,
    q: Vec<i64>,
}

#[derive(Debug, Row, Deserialize)]
struct HistogramRow {
    n: u64,
    bins: Vec<u64>,
}

use pmw_core::ch::statements::{
    HISTOGRAM, INGEST_ROWS_AFTER, INGEST_SERIES, INGEST_WINDOW, PUSH_ROWS_AFTER, PUSH_SERIES,
    PUSH_WINDOW,
};

fn channel_stage(channel: &str) -> Option<Stage> {
    match channel {
        "ws" => Some(Stage::DetectPushWs),
        "webhook" => Some(Stage::DetectPushWebhook),
        "webhook_first" => Some(Stage::DetectPushWebhookFirst),
        "final" => Some(Stage::DetectFinal),
        _ => None,
    }
}

/// Compute the whole snapshot as of `now`, with 30 daily availability bars.
pub async fn compute(ch: &ChClient, now: UnixMs) -> Result<Snapshot, StatsError> {
    compute_with(ch, now, crate::days::SHORT_DAYS).await
}

/// Compute the whole snapshot as of `now`, with `days` daily availability bars.
pub async fn compute_with(ch: &ChClient, now: UnixMs, days: i64) -> Result<Snapshot, StatsError> {
    let mut windows = Vec::new();
    let mut head_lead = Vec::new();
    for nw in model::windows(now) {
        let (report, lead) = window_report(ch, nw).await?;
        windows.push(report);
        head_lead.push(lead);
    }
    let headline = Headline {
        label: HEADLINE_LABEL.into(),
        stage: Stage::HEADLINE.key().into(),
        figures: windows
            .iter()
            .map(|w| {
                let p = w.stages.get(Stage::HEADLINE);
                HeadlineFigure {
                    window: w.window.clone(),
                    count: p.count,
                    p50_ms: p.p50_ms,
                }
            })
            .collect(),
    };
    let series = Series {
        hourly_24h: series(ch, SeriesSpec::hourly_24h(now)).await?,
        daily_30d: series(ch, SeriesSpec::daily_30d(now)).await?,
    };
    let last_hour = model::windows(now)[0];
    let histogram_1h = histogram(ch, last_hour).await?;
    let rows_dated_after_now = rows_after(ch, now.0 + 1).await?;
    let availability = crate::availability::report(ch, &model::windows(now), days, now).await?;
    Ok(Snapshot {
        generated_at: iso(now.0),
        generated_at_ms: now.0,
        percentiles: PERCENTILE_DEFINITION.into(),
        headline,
        windows,
        series,
        histogram_1h,
        availability,
        audit: Default::default(),
        pending: Default::default(),
        diagnostics: Diagnostics {
            head_lead_ms: head_lead,
            rows_dated_after_now,
            rpc_providers: serde_json::Value::Null,
        },
    })
}

async fn window_report(
    ch: &ChClient,
    nw: NamedWindow,
) -> Result<(WindowReport, HeadLead), StatsError> {
    let Window { from_ms, to_ms } = nw.window;
    let ingest: IngestAgg = ch
        .query(INGEST_WINDOW)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_one()
        .await?;
    let push: Vec<PushAgg> = ch
        .query(PUSH_WINDOW)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all()
        .await?;
    let mut stages = Stages::all(Percentiles::EMPTY);
    stages.detect_logs = Percentiles::from_quantiles(ingest.n, &ingest.logs_q);
    stages.detect_stored = Percentiles::from_quantiles(ingest.n, &ingest.stored_q);
    let mut first = (ingest.n > 0).then_some(ingest.first_ms);
    for row in &push {
        if let Some(stage) = channel_stage(&row.channel) {
            *stages.get_mut(stage) = Percentiles::from_quantiles(row.n, &row.q);
            if row.n > 0 {
                first = Some(first.map_or(row.first_ms, |f| f.min(row.first_ms)));
            }
        }
    }
    let bounds = Bounds::new(from_ms, to_ms);
    let lead = HeadLead {
        window: nw.name.into(),
        bounds: bounds.clone(),
        count: ingest.n,
        p50_ms: (ingest.n > 0).then_some(ingest.lead_p50),
        min_ms: (ingest.n > 0).then_some(ingest.lead_min),
        max_ms: (ingest.n > 0).then_some(ingest.lead_max),
    };
    let report = WindowReport {
        window: nw.name.into(),
        bounds,
        coverage: coverage(from_ms, to_ms, first),
        data_since: first.map(iso),
        stages,
    };
    Ok((report, lead))
}

async fn series(ch: &ChClient, spec: SeriesSpec) -> Result<SeriesReport, StatsError> {
    let w = spec.window();
    let ingest: Vec<IngestBucket> = ch
        .query(INGEST_SERIES)
        .bind(spec.from_ms)
        .bind(spec.bucket_ms)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all()
        .await?;
    let push: Vec<PushBucket> = ch
        .query(PUSH_SERIES)
        .bind(spec.from_ms)
        .bind(spec.bucket_ms)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all()
        .await?;
    let mut buckets: Vec<BucketReport> = (0..spec.count)
        .map(|i| {
            let b = spec.bucket(i);
            BucketReport {
                bounds: Bounds::new(b.from_ms, b.to_ms),
                in_progress: i == spec.count - 1,
                stages: Stages::all(P50P99::EMPTY),
            }
        })
        .collect();
    let len = buckets.len();
    let slot = |bucket: i64| usize::try_from(bucket).ok().filter(|i| *i < len);
    for row in &ingest {
        let Some(i) = slot(row.bucket) else { continue };
        buckets[i].stages.detect_logs = P50P99::from_quantiles(row.n, &row.logs_q);
        buckets[i].stages.detect_stored = P50P99::from_quantiles(row.n, &row.stored_q);
    }
    for row in &push {
        let (Some(i), Some(stage)) = (slot(row.bucket), channel_stage(&row.channel)) else {
            continue;
        };
        *buckets[i].stages.get_mut(stage) = P50P99::from_quantiles(row.n, &row.q);
    }
    Ok(SeriesReport {
        name: spec.name.into(),
        bucket_ms: spec.bucket_ms,
        bounds: Bounds::new(w.from_ms, w.to_ms),
        buckets,
    })
}

/// The histogram query: one `countIf` per bin, in bin order.
fn histogram_sql() -> String {
    let mut bins = vec![format!("countIf(d < {})", HISTOGRAM_EDGES[0])];
    for pair in HISTOGRAM_EDGES.windows(2) {
        bins.push(format!("countIf(d >= {} AND d < {})", pair[0], pair[1]));
    }
    bins.push(format!(
        "countIf(d >= {})",
        HISTOGRAM_EDGES[HISTOGRAM_EDGES.len() - 1]
    ));
    HISTOGRAM.replace("{bins}", &bins.join(", "))
}

/// Bin descriptions matching [`histogram_sql`].
pub fn histogram_bins(counts: &[u64]) -> Vec<Bin> {
    let e = &HISTOGRAM_EDGES;
    let mut bins = Vec::with_capacity(e.len() + 1);
    bins.push((format!("< {} ms", e[0]), None, Some(e[0])));
    for pair in e.windows(2) {
        bins.push((
            format!("{}–{} ms", pair[0], pair[1]),
            Some(pair[0]),
            Some(pair[1]),
        ));
    }
    bins.push((
        format!("≥ {} ms", e[e.len() - 1]),
        Some(e[e.len() - 1]),
        None,
    ));
    bins.into_iter()
        .enumerate()
        .map(|(i, (label, lo_ms, hi_ms))| Bin {
            label,
            lo_ms,
            hi_ms,
            count: counts.get(i).copied().unwrap_or(0),
        })
        .collect()
}

async fn histogram(ch: &ChClient, nw: NamedWindow) -> Result<HistogramReport, StatsError> {
    let row: HistogramRow = ch
        .query(&histogram_sql())
        .bind(nw.window.from_ms)
        .bind(nw.window.to_ms)
        .fetch_one()
        .await?;
    Ok(HistogramReport {
        stage: Stage::HEADLINE.key().into(),
        window: nw.name.into(),
        bounds: Bounds::new(nw.window.from_ms, nw.window.to_ms),
        count: row.n,
        bins: histogram_bins(&row.bins),
    })
}

async fn rows_after(ch: &ChClient, at_ms: i64) -> Result<RowsAfterNow, StatsError> {
    let ingest_latency: u64 = ch
        .query(INGEST_ROWS_AFTER)
        .bind(at_ms)
        .bind(at_ms)
        .bind(at_ms)
        .fetch_one()
        .await?;
    let push_latency: u64 = ch
        .query(PUSH_ROWS_AFTER)
        .bind(at_ms)
        .bind(at_ms)
        .fetch_one()
        .await?;
    Ok(RowsAfterNow {
        ingest_latency,
        push_latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_sql_and_bins_agree() {
        let sql = histogram_sql();
        assert_eq!(sql.matches("countIf(").count(), HISTOGRAM_EDGES.len() + 1);
        let bins = histogram_bins(&[1; 13]);
        assert_eq!(bins.len(), HISTOGRAM_EDGES.len() + 1);
        assert_eq!(bins[0].hi_ms, Some(0));
        assert_eq!((bins[1].lo_ms, bins[1].hi_ms), (Some(0), Some(5)));
        assert_eq!(bins.last().unwrap().hi_ms, None);
        for q in [INGEST_WINDOW, PUSH_WINDOW, INGEST_SERIES, PUSH_SERIES, &sql] {
            assert!(q.contains(">= ?") && q.contains("< ?"), "two-sided: {q}");
        }
    }
}
