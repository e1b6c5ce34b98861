//! Time as the arbiter sees it: nanoseconds of one system-wide monotonic clock, so that processes compare deadlines.

use oversub_base::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A source of time that can also wait. Shared-memory deadlines are stored in its nanoseconds, so every process
/// using one arbiter must use the same clock (the [`MonotonicClock`] in production).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Nanoseconds since the clock's epoch.
    fn now_ns(&self) -> u64;
    /// Waits until `now_ns() >= deadline_ns`.
    fn sleep_until(&self, deadline_ns: u64);
}

/// `CLOCK_MONOTONIC`: system-wide, so deadlines written by one process mean the same in another.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// The clock's current reading.
    pub fn now() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec to the valid pointer we pass.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        if rc != 0 {
            // CLOCK_MONOTONIC cannot fail on Linux; fall back to 0 (the arbiter then sees every phase as current)
            // rather than panic.
            return 0;
        }
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    }
}

/// Below this the sleep is finished by spinning: `nanosleep` overshoots by tens of microseconds, which is a large
/// share of a short memory phase.
const SPIN_BELOW_NS: u64 = 60_000;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        Self::now()
    }

    fn sleep_until(&self, deadline_ns: u64) {
        loop {
            let now = Self::now();
            if now >= deadline_ns {
                return;
            }
            let left = deadline_ns - now;
            if left > SPIN_BELOW_NS {
                std::thread::sleep(Duration::from_nanos(left - SPIN_BELOW_NS / 2));
            } else {
                std::hint::spin_loop();
                std::thread::yield_now();
            }
        }
    }
}

/// A clock for tests: time stands still until someone advances it, and `sleep_until` jumps to the deadline.
/// Events scheduled with [`FakeClock::at`] run when time reaches them, in time order, before the advancing call
/// returns, so a test can script CPU phases that happen "while" a transfer side sleeps.
///
/// Time is one for all threads: a thread's wait jumps it for every other thread too, so work another thread was
/// admitted for and has not finished appears to run through the whole wait (an overrun, to a gate). Tests that
/// check fake times exactly keep one gated thread busy at a time.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
    events: Mutex<Vec<(u64, u64, EventFn)>>,
    next_seq: AtomicU64,
    moved: Condvar,
}

struct EventFn(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for EventFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("event")
    }
}

impl FakeClock {
    /// A clock reading `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        FakeClock {
            now: AtomicU64::new(start_ns),
            ..Default::default()
        }
    }

    /// Moves time forward by `ns`, running due events.
    pub fn advance(&self, ns: u64) {
        let target = self.now_ns().saturating_add(ns);
        self.advance_to(target);
    }

    /// Moves time forward to `deadline_ns` (never backwards), running due events in time order; each runs with
    /// the clock reading its own time.
    pub fn advance_to(&self, deadline_ns: u64) {
        loop {
            let next = {
                let mut events = lock(&self.events);
                let due = events
                    .iter()
                    .enumerate()
                    .filter(|(_, (t, _, _))| *t <= deadline_ns)
                    .min_by_key(|(_, (t, seq, _))| (*t, *seq))
                    .map(|(i, _)| i);
                due.map(|i| events.swap_remove(i))
            };
            match next {
                Some((t, _, f)) => {
                    self.now.fetch_max(t, Ordering::AcqRel);
                    (f.0)();
                }
                None => break,
            }
        }
        self.now.fetch_max(deadline_ns, Ordering::AcqRel);
        self.moved.notify_all();
    }

    /// Runs `f` when the clock reaches `at_ns` (at once, on the next advance, if that time has passed).
    pub fn at(&self, at_ns: u64, f: impl FnOnce() + Send + 'static) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.events).push((at_ns, seq, EventFn(Box::new(f))));
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    fn sleep_until(&self, deadline_ns: u64) {
        if self.now_ns() < deadline_ns {
            self.advance_to(deadline_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn monotonic_clock_moves_forward_and_sleeps_past_the_deadline() {
        let c = MonotonicClock;
        let a = c.now_ns();
        c.sleep_until(a + 100_000);
        assert!(c.now_ns() >= a + 100_000);
    }

    #[test]
    fn fake_clock_runs_events_in_time_order_at_their_time() {
        let clock = Arc::new(FakeClock::new(100));
        let log = Arc::new(Mutex::new(Vec::new()));
        for t in [300u64, 200, 250] {
            let (c, l) = (Arc::clone(&clock), Arc::clone(&log));
            clock.at(t, move || lock(&l).push((t, c.now_ns())));
        }
        clock.sleep_until(260);
        assert_eq!(clock.now_ns(), 260);
        clock.advance(100);
        let log = lock(&log).clone();
        assert_eq!(log, vec![(200, 200), (250, 250), (300, 300)]);
        assert_eq!(clock.now_ns(), 360);
    }
}
