//! Percentiles over per-sample values (nearest rank: the value at rank ⌈q·n⌉ of the sorted
//! samples, never an interpolation between two), and their rendering.

/// Percentiles of one set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarise `values` (any order); `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Summary {
            n: v.len(),
            p50: rank(&v, 0.50),
            p95: rank(&v, 0.95),
            p99: rank(&v, 0.99),
            max: v[v.len() - 1],
        })
    }

    /// The headline of repeated windows: each percentile the median of the `windows`' (so one
    /// noisy window cannot move it), with `pooled`'s count and max (every window's deliveries).
    /// `pooled` alone when there are no windows.
    pub fn median_of(pooled: Option<Summary>, windows: &[Summary]) -> Option<Summary> {
        let pooled = pooled?;
        let med = |f: fn(&Summary) -> f64| {
            let v: Vec<f64> = windows.iter().map(f).collect();
            spread(&v).map_or(f(&pooled), |s| s.0)
        };
        Some(Summary {
            n: pooled.n,
            p50: med(|s| s.p50),
            p95: med(|s| s.p95),
            p99: med(|s| s.p99),
            max: pooled.max,
        })
    }
}

/// The nearest-rank percentile `q` of sorted, non-empty `v`.
pub fn rank(v: &[f64], q: f64) -> f64 {
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The median of integer samples (e.g. lag in blocks); 0 when empty.
pub fn median_u64(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// The median of `values` with their spread: (median, min, max); `None` when empty. The median
/// of an even count is the lower middle value (a measured figure, never an average of two).
pub fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some((v[(v.len() - 1) / 2], v[0], v[v.len() - 1]))
}

/// `median (min–max)`: the median as `median` renders it, the range with `digits` decimals
/// (the median alone for one value, a dash for none).
fn show_spread(values: &[f64], median: impl Fn(f64) -> String, digits: usize) -> String {
    match spread(values) {
        Some((m, lo, hi)) if values.len() > 1 => {
            format!("{} ({lo:.digits$}–{hi:.digits$})", median(m))
        }
        Some((m, _, _)) => median(m),
        None => "–".into(),
    }
}

/// `median (min–max)` in milliseconds, or a dash.
pub fn ms_spread(values: &[f64]) -> String {
    show_spread(values, |m| ms(Some(m)), 1)
}

/// Whole units (e.g. µs) as `median (min–max)`, or a dash.
pub fn int_spread(values: &[f64]) -> String {
    show_spread(values, |m| format!("{m:.0}"), 0)
}

/// Milliseconds (one decimal; three below 1 ms), or a dash.
pub fn ms(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() < 1.0 => format!("{x:.3} ms"),
        Some(x) => format!("{x:.1} ms"),
        None => "–".into(),
    }
}

/// A ratio `a / b` with one decimal and a `×`, or a dash.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
        _ => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!((s.p50, s.p95, s.p99, s.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(Summary::of(&[3.0]).unwrap().p99, 3.0);
        assert!(Summary::of(&[]).is_none());
        assert_eq!(median_u64(&[5, 1, 3, 9]), 3);
    }

    fn window(p50: f64, p99: f64) -> Summary {
        Summary {
            n: 10,
            p50,
            p95: p99,
            p99,
            max: p99,
        }
    }

    #[test]
    fn a_noisy_window_moves_neither_the_median_nor_hides_in_the_spread() {
        let windows = [window(8.0, 20.0), window(30.0, 400.0), window(9.0, 22.0)];
        let pooled = Summary::of(&[1.0, 500.0]);
        let h = Summary::median_of(pooled, &windows).unwrap();
        assert_eq!(
            (h.p50, h.p95, h.p99, h.max, h.n),
            (9.0, 22.0, 22.0, 500.0, 2)
        );
        assert_eq!(spread(&[20.0, 400.0, 22.0]), Some((22.0, 20.0, 400.0)));
        assert_eq!(ms_spread(&[20.0, 400.0, 22.0]), "22.0 ms (20.0–400.0)");
        assert_eq!(ms_spread(&[5.0]), "5.0 ms");
        assert_eq!(int_spread(&[9.4, 12.0, 10.2]), "10 (9–12)");
        assert_eq!(int_spread(&[]), "–");
        // An even count takes the lower middle value: a measured figure.
        assert_eq!(spread(&[4.0, 1.0, 3.0, 2.0]).map(|s| s.0), Some(2.0));
        assert!(Summary::median_of(None, &windows).is_none());
        assert_eq!(
            Summary::median_of(pooled, &[]).map(|s| s.p50),
            pooled.map(|s| s.p50)
        );
    }
}
