//! What the fake-clock tests share: an arbiter on a fake clock and PREM tasks scripted on it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use oversub_arbiter::{Arbiter, ArbiterConfig, FakeClock};

pub const US: u64 = 1_000;
pub const MS: u64 = 1_000_000;
pub const T0: u64 = 1_000 * MS;

/// An arbiter on a fake clock at [`T0`] whose chunk takes `chunk_us`.
pub fn setup(chunk_us: u64) -> (Arc<FakeClock>, Arbiter) {
    let clock = Arc::new(FakeClock::new(T0));
    let config = ArbiterConfig {
        stale_after: Duration::from_millis(50),
        chunk_time: Some(Duration::from_micros(chunk_us)),
        poll: Duration::from_micros(50),
        ..ArbiterConfig::default()
    };
    let arbiter = Arbiter::in_process_with_clock(config, clock.clone()).unwrap();
    (clock, arbiter)
}

/// A PREM task that keeps to its announced phases, (is_mem, length) in order from `start_ns`, then `NO_OPER`;
/// returns its memory phases.
pub fn script(
    clock: &Arc<FakeClock>,
    arbiter: &Arbiter,
    start_ns: u64,
    phases: &[(bool, u64)],
) -> Vec<(u64, u64)> {
    let task = Arc::new(arbiter.register_task().unwrap());
    let mut t = start_ns;
    let mut mem = Vec::new();
    for &(is_mem, len) in phases {
        let task = Arc::clone(&task);
        clock.at(t, move || {
            let d = Duration::from_nanos(len);
            if is_mem { task.mem(d) } else { task.com(d) }.unwrap();
        });
        if is_mem {
            mem.push((t, t + len));
        }
        t += len;
    }
    let task = Arc::clone(&task);
    clock.at(t, move || task.no_oper().unwrap());
    clock.advance(0);
    mem
}
