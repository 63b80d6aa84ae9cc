//! The retry schedule and the classification of one attempt's result.
//!
//! | attempt | sent after the previous attempt failed |
//! |---|---|
//! | 1 | immediately (when enqueued) |
//! | 2 | 5 s |
//! | 3 | 5 min |
//! | 4 | 30 min |
//! | 5 | 2 h |
//! | 6 | 5 h |
//! | 7 | 10 h |
//! | 8 | 10 h, then the delivery is failed for good |
//!
//! Every delay gets ±20 % jitter. For 429, 502, 503 and 504 a `Retry-After` header (seconds or
//! an HTTP date) is honoured: the next attempt is never sooner than it asks, capped at 1 h
//! (the scheduled delay still applies when it is longer). 410 Gone disables the endpoint.
//! A 3xx is a failure (redirects are never followed).

use std::time::Duration;

use rand::Rng;

/// `SCHEDULE[i]` is the delay before attempt `i + 1` (the first is immediate).
pub const SCHEDULE: [Duration; 8] = [
    Duration::ZERO,
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// Attempts before a delivery is failed for good.
pub const MAX_ATTEMPTS: u32 = SCHEDULE.len() as u32;
/// Relative jitter applied to each scheduled delay.
pub const JITTER: f64 = 0.2;
/// Longest `Retry-After` honoured.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(3600);

/// What one attempt came to. Stored as `outcome` in `delivery_log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Delivered,
    /// 410: the endpoint is disabled.
    Gone,
    /// 3xx: redirects are failures.
    Redirect,
    /// 429, 502, 503, 504: `Retry-After` honoured.
    Throttled,
    /// Any other status.
    HttpError,
    /// No response within the timeout.
    Timeout,
    /// Connection or protocol failure.
    Network,
    /// Destination refused by the SSRF guard (URL or resolved address).
    Refused,
    /// The delivery could not be signed or built (bad stored secret, bad payload).
    Invalid,
}

impl Outcome {
    /// Outcome of a received status code.
    pub fn from_status(status: u16) -> Outcome {
        match status {
            200..=299 => Outcome::Delivered,
            410 => Outcome::Gone,
            300..=399 => Outcome::Redirect,
            429 | 502 | 503 | 504 => Outcome::Throttled,
            _ => Outcome::HttpError,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Gone => "gone",
            Outcome::Redirect => "redirect",
            Outcome::Throttled => "throttled",
            Outcome::HttpError => "http_error",
            Outcome::Timeout => "timeout",
            Outcome::Network => "network",
            Outcome::Refused => "refused",
            Outcome::Invalid => "invalid",
        }
    }
}

/// What happens to the delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Done: state `delivered`.
    Delivered,
    /// Try again after this delay: state `pending`.
    RetryIn(Duration),
    /// No attempts left: state `failed`.
    Failed,
    /// 410: state `failed` and the endpoint disabled.
    Disable,
}

/// `base` scaled by a uniform factor in `[1 - JITTER, 1 + JITTER]`.
pub fn jitter(base: Duration, rng: &mut impl Rng) -> Duration {
    base.mul_f64(rng.gen_range((1.0 - JITTER)..=(1.0 + JITTER)))
}

/// The scheduled (jittered) delay after `attempts` attempts have failed, or `None` when no
/// attempt is left.
pub fn scheduled_delay(attempts: u32, rng: &mut impl Rng) -> Option<Duration> {
    SCHEDULE.get(attempts as usize).map(|d| jitter(*d, rng))
}

/// Decide the next step after attempt number `attempts` (1-based) ended in `outcome`.
pub fn plan(
    attempts: u32,
    outcome: Outcome,
    retry_after: Option<Duration>,
    rng: &mut impl Rng,
) -> Next {
    match outcome {
        Outcome::Delivered => Next::Delivered,
        Outcome::Gone => Next::Disable,
        _ => match scheduled_delay(attempts, rng) {
            None => Next::Failed,
            Some(delay) => {
                let asked = match outcome {
                    Outcome::Throttled => retry_after.map(|d| d.min(RETRY_AFTER_CAP)),
                    _ => None,
                };
                Next::RetryIn(asked.map_or(delay, |a| a.max(delay)))
            }
        },
    }
}

/// Parse a `Retry-After` value: delta seconds or an HTTP date, relative to `now_ms`. A date in
/// the past means zero; anything unparseable means no hint.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let delta = at.timestamp_millis().saturating_sub(now_ms).max(0);
    Some(Duration::from_millis(delta as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    #[test]
    fn webhook_retry_schedule_is_the_published_table() {
        let secs: Vec<u64> = SCHEDULE.iter().map(Duration::as_secs).collect();
        assert_eq!(
            secs,
            [0, 5, 300, 1800, 7200, 18_000, 36_000, 36_000],
            "immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h"
        );
        assert_eq!(MAX_ATTEMPTS, 8);
    }

    #[test]
    fn webhook_retry_plan_walks_the_schedule_then_fails() {
        let mut r = rng();
        for attempts in 1..MAX_ATTEMPTS {
            let base = SCHEDULE[attempts as usize];
            match plan(attempts, Outcome::HttpError, None, &mut r) {
                Next::RetryIn(d) => {
                    assert!(
                        d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2),
                        "{attempts}: {d:?}"
                    )
                }
                other => panic!("attempt {attempts}: {other:?}"),
            }
        }
        assert_eq!(
            plan(MAX_ATTEMPTS, Outcome::Timeout, None, &mut r),
            Next::Failed
        );
        assert_eq!(plan(1, Outcome::Delivered, None, &mut r), Next::Delivered);
        assert_eq!(plan(3, Outcome::Gone, None, &mut r), Next::Disable);
        assert_eq!(
            plan(MAX_ATTEMPTS, Outcome::Gone, None, &mut r),
            Next::Disable
        );
    }

    #[test]
    fn webhook_retry_jitter_stays_within_twenty_percent_and_varies() {
        let mut r = rng();
        let base = Duration::from_secs(300);
        let samples: Vec<Duration> = (0..2000).map(|_| jitter(base, &mut r)).collect();
        let (lo, hi) = (base.mul_f64(0.8), base.mul_f64(1.2));
        assert!(samples.iter().all(|d| *d >= lo && *d <= hi));
        // Spread over the whole band, not a constant.
        assert!(samples.iter().any(|d| *d < base.mul_f64(0.85)));
        assert!(samples.iter().any(|d| *d > base.mul_f64(1.15)));
        assert_eq!(jitter(Duration::ZERO, &mut r), Duration::ZERO);
    }

    #[test]
    fn webhook_retry_after_is_honoured_for_throttling_only_and_capped() {
        let mut r = rng();
        let ask = Some(Duration::from_secs(120));
        let d = |n: Next| match n {
            Next::RetryIn(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            d(plan(1, Outcome::Throttled, ask, &mut r)),
            Duration::from_secs(120)
        );
        let plain = d(plan(1, Outcome::HttpError, ask, &mut r));
        assert!(plain <= Duration::from_secs(6), "{plain:?}");
        let capped = d(plan(
            1,
            Outcome::Throttled,
            Some(Duration::from_secs(86_400)),
            &mut r,
        ));
        assert_eq!(capped, RETRY_AFTER_CAP);
        // A short hint never shortens the schedule.
        let later = d(plan(
            4,
            Outcome::Throttled,
            Some(Duration::from_secs(1)),
            &mut r,
        ));
        assert!(later >= Duration::from_secs(5760), "{later:?}");
        for s in [429, 502, 503, 504] {
            assert_eq!(Outcome::from_status(s), Outcome::Throttled);
        }
        assert_eq!(Outcome::from_status(500), Outcome::HttpError);
        assert_eq!(Outcome::from_status(302), Outcome::Redirect);
        assert_eq!(Outcome::from_status(410), Outcome::Gone);
        assert_eq!(Outcome::from_status(204), Outcome::Delivered);
    }

    #[test]
    fn webhook_retry_after_parses_seconds_and_http_dates() {
        let now = 1_445_412_480_000; // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:30:00 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
