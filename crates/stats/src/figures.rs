//! How the dashboard's figures read: shares of a whole (never rounded up to it), percentages,
//! time spans and gaps as people read them.

/// A share rounded down to 6 decimals: it never reads 1 unless it is.
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    ((part as f64 / whole as f64) * 1e6).floor() / 1e6
}

/// A length as people read it, to the coarser unit: `45 s`, `6 min`, `23 h 10 min`, `6 d 2 h`.
pub fn span(s: u64) -> String {
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3_600 => format!("{} min", s / 60),
        s if s < 2 * 86_400 => match (s / 3_600, (s % 3_600) / 60) {
            (h, 0) => format!("{h} h"),
            (h, m) => format!("{h} h {m} min"),
        },
        s => match (s / 86_400, (s % 86_400) / 3_600) {
            (d, 0) => format!("{d} d"),
            (d, h) => format!("{d} d {h} h"),
        },
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_never_round_up_to_whole() {
        assert_eq!(share(999_999_999, 1_000_000_000), 0.999999);
        assert_eq!(pct(0.9999999), "99.999 %");
        assert_eq!(pct(1.0), "100.000 %");
        assert_eq!(gap(850), "850 ms");
        assert_eq!(gap(12_040), "12.0 s");
        assert_eq!(gap(200_000), "3 min 20 s");
        assert_eq!(span(45), "45 s");
        assert_eq!(span(6 * 60 + 59), "6 min");
        assert_eq!(span(3_600), "1 h");
        assert_eq!(span(86_400), "24 h");
        assert_eq!(span(23 * 3_600 + 600), "23 h 10 min");
        assert_eq!(span(7 * 86_400), "7 d");
        assert_eq!(span(6 * 86_400 + 2 * 3_600 + 59), "6 d 2 h");
    }
}
