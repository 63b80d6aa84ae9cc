//! Charts rendered server-side as SVG with `plotters` (SVG backend only: text is left to the
//! browser's default sans-serif, nothing is loaded). Empty buckets are gaps, never zeros; a chart
//! with no data at all says so.

use plotters::coord::ranged1d::SegmentValue;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;

use crate::error::StatsError;
use crate::model::Stage;
use crate::snapshot::{HistogramReport, SeriesReport};

const SIZE: (u32, u32) = (760, 280);
const P50: RGBColor = RGBColor(31, 119, 180);
const P99: RGBColor = RGBColor(214, 39, 40);

/// Every chart's frame: its title, margin and axis label areas.
fn frame<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &'b str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(64);
    b
}

fn chart_err<E: std::fmt::Display>(e: E) -> StatsError {
    StatsError::Chart(e.to_string())
}

/// An SVG that only says there is nothing to draw (with the caption, so the reader knows what).
fn empty_svg(title: &str, message: &str) -> Result<String, StatsError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(chart_err)?;
        let (w, h) = root.dim_in_pixel();
        let style = TextStyle::from(("sans-serif", 18).into_font())
            .color(&RGBColor(110, 110, 110))
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ));
        root.draw(&Text::new(
            message.to_string(),
            (w as i32 / 2, h as i32 / 2),
            style,
        ))
        .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// Maximal runs of consecutive buckets that have a value.
fn runs(values: &[Option<i64>]) -> Vec<Vec<(i32, f64)>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => cur.push((i as i32, *v as f64)),
            None if !cur.is_empty() => out.push(std::mem::take(&mut cur)),
            None => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The y axis of a latency chart over `values`: from 0 (or the lowest value, if negative) to 10 %
/// above the highest; `None` when there is no value at all.
fn y_range<'a>(values: impl IntoIterator<Item = &'a Option<i64>>) -> Option<(f64, f64)> {
    let all: Vec<i64> = values.into_iter().flatten().copied().collect();
    let (min, max) = (all.iter().min()?, all.iter().max()?);
    let lo = (*min).min(0) as f64;
    Some((lo, ((*max as f64) * 1.1).max(lo + 1.0)))
}

type LineChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordi32, RangedCoordf64>>;

/// One percentile as lines (split at empty buckets) with a dot per bucket, in the legend once.
fn draw_line(
    chart: &mut LineChart<'_, '_>,
    name: &str,
    color: RGBColor,
    values: &[Option<i64>],
) -> Result<(), StatsError> {
    let runs = runs(values);
    for (j, run) in runs.iter().enumerate() {
        let drawn = chart
            .draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))
            .map_err(chart_err)?;
        if j == 0 {
            drawn.label(name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    chart
        .draw_series(
            runs.iter()
                .flatten()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )
        .map_err(chart_err)?;
    Ok(())
}

/// p50 and p99 of `stage` per bucket of `series`; `label` names bucket `i` on the x axis.
pub fn series_chart(
    title: &str,
    series: &SeriesReport,
    stage: Stage,
    label: impl Fn(i64) -> String,
) -> Result<String, StatsError> {
    let of = |pick: fn(&crate::snapshot::P50P99) -> Option<i64>| -> Vec<Option<i64>> {
        series
            .buckets
            .iter()
            .map(|b| pick(b.stages.get(stage)))
            .collect()
    };
    let (p50, p99) = (of(|p| p.p50_ms), of(|p| p.p99_ms));
    let Some((lo, hi)) = y_range(p50.iter().chain(&p99)) else {
        return empty_svg(title, "no data in this period");
    };
    let n = series.buckets.len() as i32;
    let labels: Vec<String> = series
        .buckets
        .iter()
        .map(|b| label(b.bounds.from_ms))
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = frame(&root, title)
            .build_cartesian_2d(-1..n, lo..hi)
            .map_err(chart_err)?;
        let fmt_x = |x: &i32| {
            usize::try_from(*x)
                .ok()
                .and_then(|i| labels.get(i))
                .cloned()
                .unwrap_or_default()
        };
        chart
            .configure_mesh()
            .x_labels(12)
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&|y: &f64| format!("{y:.0}"))
            .y_desc("ms")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(chart_err)?;
        draw_line(&mut chart, "p50", P50, &p50)?;
        draw_line(&mut chart, "p99", P99, &p99)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// Short x-axis label of a histogram bin.
fn bin_label(lo: Option<i64>, hi: Option<i64>) -> String {
    let short = |ms: i64| {
        if ms >= 1_000 && ms % 1_000 == 0 {
            format!("{}s", ms / 1_000)
        } else if ms >= 500 {
            format!("{}s", ms as f64 / 1_000.0)
        } else {
            ms.to_string()
        }
    };
    match (lo, hi) {
        (None, Some(h)) => format!("<{}", short(h)),
        (Some(l), None) => format!("≥{}", short(l)),
        (Some(l), Some(h)) => format!("{}–{}", short(l), short(h)),
        (None, None) => String::new(),
    }
}

/// Bars of the headline stage's distribution over the last hour.
pub fn histogram_chart(title: &str, h: &HistogramReport) -> Result<String, StatsError> {
    if h.count == 0 {
        return empty_svg(title, "no data in this period");
    }
    let max = h.bins.iter().map(|b| b.count).max().unwrap_or(0);
    let top = max + max / 10 + 1;
    let n = h.bins.len() as u32;
    let labels: Vec<String> = h.bins.iter().map(|b| bin_label(b.lo_ms, b.hi_ms)).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = frame(&root, title)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0u64..top)
            .map_err(chart_err)?;
        let fmt_x = |x: &SegmentValue<u32>| match x {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n as usize)
            .x_label_formatter(&fmt_x)
            .x_label_style(("sans-serif", 11))
            .x_desc("ms (header received → pushed)")
            .y_desc("deliveries")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(P50.filled())
                    .margin(3)
                    .data(h.bins.iter().enumerate().map(|(i, b)| (i as u32, b.count))),
            )
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_gaps() {
        let r = runs(&[None, Some(1), Some(2), None, Some(5), None]);
        assert_eq!(r, vec![vec![(1, 1.0), (2, 2.0)], vec![(4, 5.0)]]);
    }

    #[test]
    fn the_y_axis_starts_at_zero_unless_below_and_leaves_headroom() {
        assert_eq!(y_range(&[None, None]), None);
        assert_eq!(
            y_range(&[Some(10), None, Some(100)]),
            Some((0.0, 110.00000000000001))
        );
        assert_eq!(
            y_range(&[Some(-20), Some(50)]),
            Some((-20.0, 55.00000000000001))
        );
        assert_eq!(y_range(&[Some(0)]), Some((0.0, 1.0)), "never an empty axis");
    }

    #[test]
    fn bin_labels_are_short() {
        assert_eq!(bin_label(None, Some(0)), "<0");
        assert_eq!(bin_label(Some(500), Some(1_000)), "0.5s–1s");
        assert_eq!(bin_label(Some(10_000), None), "≥10s");
        assert_eq!(bin_label(Some(20), Some(50)), "20–50");
    }
}
