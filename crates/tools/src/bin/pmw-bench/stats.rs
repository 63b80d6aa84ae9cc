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
}
