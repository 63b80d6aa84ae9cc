//! Polling a condition until it holds or a deadline passes: the one wait every test uses
//! ([`eventually`], [`eventually_every`], [`eventually_blocking`] and [`assert_eventually!`]);
//! and the one fixed wait a test may make, the observation window of a negative check
//! ([`observe_for`]).

use std::future::Future;
use std::time::Duration;

/// How often [`eventually`] polls.
pub const EVERY: Duration = Duration::from_millis(50);

/// A polled outcome: `true`, `Some(_)` or `Ok(_)` ends the wait; anything else is polled again.
pub trait Settled {
    /// Whether this outcome ends the wait.
    fn settled(&self) -> bool;
}

impl Settled for bool {
    fn settled(&self) -> bool {
        *self
    }
}

impl<T> Settled for Option<T> {
    fn settled(&self) -> bool {
        self.is_some()
    }
}

impl<T, E> Settled for Result<T, E> {
    fn settled(&self) -> bool {
        self.is_ok()
    }
}

/// Poll `f` every 50 ms until it settles (`true`, `Some`, `Ok`) or `within` passes; returns the
/// last value (`false`, `None` or the last `Err` when time ran out).
pub async fn eventually<F, Fut, O>(within: Duration, f: F) -> O
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Settled,
{
    eventually_every(within, EVERY, f).await
}

/// [`eventually`], polling every `every` (a drill timing a takeover polls faster, a check that
/// runs a process slower).
pub async fn eventually_every<F, Fut, O>(within: Duration, every: Duration, mut f: F) -> O
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Settled,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let out = f().await;
        if out.settled() || tokio::time::Instant::now() >= deadline {
            return out;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`eventually_every`] for code outside a runtime: polls on this thread, sleeping between.
pub fn eventually_blocking<F, O>(within: Duration, every: Duration, mut f: F) -> O
where
    F: FnMut() -> O,
    O: Settled,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        let out = f();
        if out.settled() || std::time::Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(every);
    }
}

/// A negative check's observation window: let `window` pass so that what must NOT happen (a
/// duplicate, a frame after the last owed one, a bind by a standby) has its chance to; the caller
/// asserts afterwards. Never a wait for something that must happen: that is [`eventually`],
/// which ends as soon as it holds.
pub async fn observe_for(window: Duration) {
    tokio::time::sleep(window).await;
}

/// Wait (in an async test) until a boolean condition holds, polling it every 50 ms; panic if it
/// still does not after `within`, naming the condition, the time waited and, when given, a
/// formatted message. The condition may `.await`.
///
/// ```ignore
/// assert_eventually!(Duration::from_secs(10), rx.count() == 2);
/// assert_eventually!(WITHIN, db.rows().await == 3, "rows of {id}");
/// ```
#[macro_export]
macro_rules! assert_eventually {
    ($within:expr, $cond:expr $(,)?) => {
        $crate::assert_eventually!($within, $cond, "condition never held")
    };
    ($within:expr, $cond:expr, $($arg:tt)+) => {{
        let within: ::std::time::Duration = $within;
        let started = ::std::time::Instant::now();
        let held: bool = $crate::eventually(within, || async { $cond }).await;
        if !held {
            panic!(
                "{}: `{}` still false after {:?} (waited up to {:?})",
                format_args!($($arg)+),
                stringify!($cond),
                started.elapsed(),
                within,
            );
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_the_first_settled_value() {
        let calls = AtomicU32::new(0);
        let got = eventually(Duration::from_secs(5), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            (n >= 3).then_some(n * 10)
        })
        .await;
        assert_eq!(got, Some(30));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn gives_up_with_the_last_value() {
        let started = std::time::Instant::now();
        let got: Result<(), &str> =
            eventually(Duration::from_millis(120), || async { Err("not yet") }).await;
        assert_eq!(got, Err("not yet"));
        assert!(started.elapsed() >= Duration::from_millis(120));
        assert!(!eventually(Duration::ZERO, || async { false }).await);
    }

    #[test]
    fn blocking_polls_until_settled() {
        let mut n = 0;
        let got = eventually_blocking(Duration::from_secs(5), Duration::from_millis(1), || {
            n += 1;
            n == 4
        });
        assert!(got);
        assert_eq!(n, 4);
    }

    #[tokio::test]
    async fn assert_eventually_passes_once_true() {
        let calls = AtomicU32::new(0);
        assert_eventually!(
            Duration::from_secs(5),
            calls.fetch_add(1, Ordering::SeqCst) >= 2
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    #[should_panic(expected = "rows of 7: `1 + 1 == 3` still false after")]
    async fn assert_eventually_names_the_condition() {
        assert_eventually!(Duration::from_millis(60), 1 + 1 == 3, "rows of {}", 7);
    }
}
