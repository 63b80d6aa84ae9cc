//! Failed authentication per client address, checked BEFORE the credential lookup: an address
//! that failed recently is a suspect, and each of its attempts is counted (a `governor` GCRA
//! limiter per address) before the store is asked; past the limit it gets 429 with no lookup.
//! Addresses that have not failed cost nothing. The table is an LRU (`lru`) of at most
//! [`MAX_ADDRESSES`] entries, each forgotten once it has been idle for as long as its burst
//! takes to refill: rotating addresses cannot grow it. IPv6 clients are counted by /64 (one
//! host's usual allocation), so rotating within a prefix gains nothing.

use std::net::{IpAddr, Ipv6Addr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use lru::LruCache;

/// The most addresses remembered at once (the least recently seen is forgotten first).
pub const MAX_ADDRESSES: usize = 65_536;

/// What [`FailureThrottle::admit`] decided, handed back to [`FailureThrottle::failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// No recent failure from this address: not counted yet.
    Clean,
    /// A recent failure: this attempt was already counted.
    Counted,
}

struct Entry {
    failures: DefaultDirectRateLimiter,
    last: Instant,
}

/// Failed authentications per client address, bounded in size and forgetting idle addresses.
pub struct FailureThrottle {
    quota: Quota,
    forget_after: Duration,
    clock: DefaultClock,
    entries: Mutex<LruCache<IpAddr, Entry>>,
}

/// The unit an address is counted by: an IPv4 address, or an IPv6 /64.
pub fn unit(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
        v4 => v4,
    }
}

impl FailureThrottle {
    /// `rate` failures a second per address, `burst` at once, [`MAX_ADDRESSES`] remembered.
    pub fn new(rate: NonZeroU32, burst: NonZeroU32) -> FailureThrottle {
        let cap = NonZeroUsize::new(MAX_ADDRESSES).expect("positive");
        FailureThrottle::with_capacity(rate, burst, cap)
    }

    pub fn with_capacity(
        rate: NonZeroU32,
        burst: NonZeroU32,
        cap: NonZeroUsize,
    ) -> FailureThrottle {
        // Idle this long, an address's burst has refilled: forgetting it changes nothing.
        let refill = Duration::from_secs_f64(f64::from(burst.get()) / f64::from(rate.get()));
        FailureThrottle {
            quota: Quota::per_second(rate).allow_burst(burst),
            forget_after: refill.max(Duration::from_secs(1)),
            clock: DefaultClock::default(),
            entries: Mutex::new(LruCache::new(cap)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<IpAddr, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before the lookup: `Err(wait)` when `ip` has used up its failures (answer 429 with
    /// `Retry-After`, ask no store); a suspect's attempt is counted now.
    pub fn admit(&self, ip: IpAddr) -> Result<Admission, Duration> {
        let key = unit(ip);
        let mut entries = self.lock();
        let Some(e) = entries.get(&key) else {
            return Ok(Admission::Clean);
        };
        if e.last.elapsed() >= self.forget_after {
            entries.pop(&key);
            return Ok(Admission::Clean);
        }
        match e.failures.check() {
            Ok(()) => Ok(Admission::Counted),
            Err(not_until) => Err(not_until.wait_time_from(self.clock.now())),
        }
    }

    /// After a failed lookup (or a credential refused without one): counted unless `admit`
    /// already did; `Err(wait)` when this failure is over the limit.
    pub fn failed(&self, ip: IpAddr, admission: Admission) -> Result<(), Duration> {
        let key = unit(ip);
        let mut entries = self.lock();
        if admission == Admission::Counted {
            if let Some(e) = entries.get_mut(&key) {
                e.last = Instant::now();
                return Ok(());
            }
        }
        let quota = self.quota;
        let e = entries.get_or_insert_mut(key, || Entry {
            failures: RateLimiter::direct(quota),
            last: Instant::now(),
        });
        e.last = Instant::now();
        e.failures
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Count one attempt of `ip` whatever its outcome (a plain per-address rate limit, e.g. of
    /// unauthenticated requests): `Err(wait)` past the limit.
    pub fn take(&self, ip: IpAddr) -> Result<(), Duration> {
        let admission = self.admit(ip)?;
        self.failed(ip, admission)
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(rate: u32, burst: u32) -> FailureThrottle {
        FailureThrottle::new(
            NonZeroU32::new(rate).unwrap(),
            NonZeroU32::new(burst).unwrap(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// One attempt that fails: `Err` when refused before or after the lookup.
    fn attempt(t: &FailureThrottle, a: IpAddr) -> Result<(), Duration> {
        let adm = t.admit(a)?;
        t.failed(a, adm)
    }

    #[test]
    fn past_the_burst_an_address_is_refused_before_the_lookup() {
        let t = throttle(1, 3);
        let a = ip("203.0.113.7");
        assert_eq!(t.admit(a), Ok(Admission::Clean), "no failure yet");
        for _ in 0..3 {
            attempt(&t, a).unwrap();
        }
        let wait = t.admit(a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert_eq!(t.admit(ip("203.0.113.8")), Ok(Admission::Clean));
    }

    #[test]
    fn a_suspects_attempts_are_counted_once() {
        let t = throttle(1, 4);
        let a = ip("198.51.100.1");
        attempt(&t, a).unwrap();
        // Counted at admission, not again when it fails: 4 attempts in all fit the burst.
        for _ in 0..3 {
            assert_eq!(t.admit(a), Ok(Admission::Counted));
            t.failed(a, Admission::Counted).unwrap();
        }
        assert!(t.admit(a).is_err());
    }

    #[test]
    fn ipv6_is_counted_by_64_and_mapped_ipv4_as_ipv4() {
        let t = throttle(1, 2);
        attempt(&t, ip("2001:db8:1:2::1")).unwrap();
        attempt(&t, ip("2001:db8:1:2:ffff::9")).unwrap();
        assert!(t.admit(ip("2001:db8:1:2::abcd")).is_err(), "same /64");
        assert!(t.admit(ip("2001:db8:1:3::1")).is_ok(), "another /64");
        attempt(&t, ip("192.0.2.1")).unwrap();
        attempt(&t, ip("::ffff:192.0.2.1")).unwrap();
        assert!(t.admit(ip("192.0.2.1")).is_err());
    }

    #[test]
    fn idle_addresses_are_forgotten() {
        let t = throttle(1000, 1);
        let a = ip("192.0.2.9");
        attempt(&t, a).unwrap();
        assert_eq!(t.len(), 1);
        std::thread::sleep(Duration::from_millis(1_050));
        assert_eq!(t.admit(a), Ok(Admission::Clean));
        assert!(t.is_empty());
    }

    /// Resident set size in bytes (Linux).
    fn rss() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4096
    }

    #[test]
    fn a_flood_of_distinct_ipv6_addresses_stays_bounded() {
        let t = throttle(20, 40);
        let flood = |from: u128, n: u128| {
            for i in from..from + n {
                // A distinct /64 each: the worst case for the table.
                let a = IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | (i << 64) | 1));
                let _ = attempt(&t, a);
            }
        };
        flood(0, 100_000);
        let (len_half, rss_half) = (t.len(), rss());
        flood(100_000, 100_000);
        let (len, rss_end) = (t.len(), rss());
        println!(
            "200k distinct /64s: {len} addresses remembered (cap {MAX_ADDRESSES}); RSS {} MiB after 100k, {} MiB after 200k",
            rss_half >> 20,
            rss_end >> 20
        );
        assert_eq!(len, MAX_ADDRESSES);
        assert_eq!(len_half, MAX_ADDRESSES);
        assert!(
            rss_end <= rss_half + (8 << 20),
            "RSS grew from {rss_half} to {rss_end} while the table was full"
        );
    }
}
