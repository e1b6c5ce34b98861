//! The gate's admissions of work of a given cost (`admit_for`) and its event log, on a fake clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{script, setup, MS, T0, US};
use oversub_arbiter::{Clock, Gate, GateEvent, GateEventKind, WorkKind};

#[test]
fn admit_for_is_unrestricted_without_a_task() {
    let (clock, arbiter) = setup(100);
    let gate = Gate::new(arbiter);
    let a = gate.admit_for(Duration::from_secs(3600));
    assert_eq!(a.chunks, 0);
    assert_eq!(a.start_ns, T0);
    assert_eq!(a.grant_until_ns, None);
    assert_eq!(clock.now_ns(), T0, "no wait");
    let stats = gate.stats();
    assert_eq!((stats.operations, stats.chunks, stats.waits), (1, 0, 0));
}

#[test]
fn admit_for_admits_only_when_the_cost_fits_the_grant() {
    let (clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_millis(1)).unwrap();
    let gate = Gate::new(arbiter.clone());
    // 1 ms of window: 700 µs fit now.
    let a = gate.admit_for(Duration::from_micros(700));
    assert_eq!((a.start_ns, a.grant_until_ns), (T0, Some(T0 + MS)));
    clock.advance(700 * US);
    // 300 µs left: exactly 300 µs fit, 301 µs do not.
    let a = gate.admit_for(Duration::from_micros(300));
    assert_eq!(a.start_ns, T0 + 700 * US);
    assert!(a.start_ns + 300 * US <= a.grant_until_ns.unwrap());
    // Not fitting: the gate waits out the window (and then polls the overdue phase) until a new one opens.
    let next = Arc::new(arbiter.register_task().unwrap());
    drop(task);
    let n = Arc::clone(&next);
    clock.at(T0 + 1_500 * US, move || {
        n.com(Duration::from_millis(2)).unwrap()
    });
    next.com(Duration::from_micros(300)).unwrap();
    let a = gate.admit_for(Duration::from_micros(301));
    assert_eq!(a.start_ns, T0 + 1_500 * US, "admitted in the next window");
    assert_eq!(a.grant_until_ns, Some(T0 + 3_500 * US));
    assert!(gate.stats().waits >= 1);
    assert_eq!(gate.stats().operations, 3);
}

#[test]
fn admit_for_waits_across_a_memory_phase() {
    let (clock, arbiter) = setup(100);
    // Load 500 µs, compute 2 ms, unload 400 µs, twice.
    let mem = script(
        &clock,
        &arbiter,
        T0,
        &[
            (true, 500 * US),
            (false, 2 * MS),
            (true, 400 * US),
            (true, 500 * US),
            (false, 2 * MS),
            (true, 400 * US),
        ],
    );
    let gate = Gate::new(arbiter);
    let mut ran = Vec::new();
    for cost_us in [150u64, 1_900, 600, 1_200, 50] {
        let cost = cost_us * US;
        let a = gate.admit_for(Duration::from_nanos(cost));
        let start = clock.now_ns();
        assert_eq!(a.start_ns, start);
        assert!(
            a.grant_until_ns.is_none_or(|until| start + cost <= until),
            "{a:?} cost {cost}"
        );
        clock.advance(cost);
        ran.push((start, start + cost));
    }
    for r in &ran {
        for m in &mem {
            assert!(
                !(r.0 < m.1 && m.0 < r.1),
                "{r:?} overlaps memory phase {m:?}"
            );
        }
    }
    // 150 µs fits the first window, 1900 µs does not fit what is left of it, and so on.
    assert_eq!(ran[0].0, T0 + 500 * US);
    assert_eq!(ran[1].0, T0 + 3_400 * US);
    assert!(gate.stats().waits >= 2);
}

#[test]
fn admit_for_longer_than_any_window_waits_for_no_oper() {
    let (clock, arbiter) = setup(100);
    let _mem = script(
        &clock,
        &arbiter,
        T0,
        &[(true, 300 * US), (false, MS), (true, 300 * US), (false, MS)],
    );
    let gate = Gate::new(arbiter);
    let a = gate.admit_for(Duration::from_millis(5));
    assert_eq!(a.grant_until_ns, None, "unrestricted");
    assert_eq!(a.start_ns, T0 + 2_600 * US, "after the task's NO_OPER");
    assert_eq!(clock.now_ns(), a.start_ns);
}

#[test]
fn admit_up_to_still_counts_chunks_of_t_q() {
    let (_clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_micros(1_050)).unwrap();
    let gate = Gate::new(arbiter);
    assert_eq!(gate.admit_up_to(32).chunks, 10);
    assert_eq!(gate.admit().chunks, 1);
    assert_eq!(gate.stats().chunks, 11);
    assert_eq!(gate.stats().operations, 0);
}

#[test]
fn the_event_log_is_off_by_default_and_records_nothing() {
    let (clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.mem(Duration::from_micros(200)).unwrap();
    let gate = Gate::new(arbiter);
    assert!(!gate.is_recording());
    gate.admit_for(Duration::from_micros(10));
    gate.admit_up_to(4);
    gate.record(GateEvent {
        start_ns: 1,
        end_ns: 2,
        kind: GateEventKind::Ran {
            what: WorkKind::Commit,
            bytes: 4096,
        },
    });
    let x = gate.record_run(WorkKind::Transfer, 1 << 20, || {
        clock.advance(5 * US);
        7
    });
    assert_eq!(x, 7);
    assert!(gate.stats().waits >= 1);
    assert!(gate.take_events().is_empty());
    assert_eq!(gate.events_dropped(), 0);
}

#[test]
fn the_event_log_records_admissions_waits_and_reported_work() {
    let (clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.mem(Duration::from_micros(200)).unwrap();
    let t = Arc::new(task);
    let t2 = Arc::clone(&t);
    clock.at(T0 + 200 * US, move || {
        t2.com(Duration::from_millis(1)).unwrap()
    });
    let gate = Gate::new(arbiter);
    gate.set_recording(true);
    let a = gate.admit_for(Duration::from_micros(40));
    gate.record_run(WorkKind::Commit, 8192, || clock.advance(30 * US));
    let b = gate.admit_up_to(3);
    gate.record_run(WorkKind::Transfer, 3 << 20, || clock.advance(250 * US));
    gate.record(GateEvent {
        start_ns: 5,
        end_ns: 6,
        kind: GateEventKind::Ran {
            what: WorkKind::Copy,
            bytes: 1,
        },
    });
    let events = gate.take_events();
    let expected = vec![
        GateEvent {
            start_ns: T0,
            end_ns: T0 + 200 * US,
            kind: GateEventKind::Waited,
        },
        GateEvent {
            start_ns: T0 + 200 * US,
            end_ns: T0 + 240 * US,
            kind: GateEventKind::Admitted {
                chunks: 0,
                grant_until_ns: Some(T0 + 1_200 * US),
            },
        },
        GateEvent {
            start_ns: T0 + 200 * US,
            end_ns: T0 + 230 * US,
            kind: GateEventKind::Ran {
                what: WorkKind::Commit,
                bytes: 8192,
            },
        },
        GateEvent {
            start_ns: T0 + 230 * US,
            end_ns: T0 + 530 * US,
            kind: GateEventKind::Admitted {
                chunks: 3,
                grant_until_ns: Some(T0 + 1_200 * US),
            },
        },
        GateEvent {
            start_ns: T0 + 230 * US,
            end_ns: T0 + 480 * US,
            kind: GateEventKind::Ran {
                what: WorkKind::Transfer,
                bytes: 3 << 20,
            },
        },
        GateEvent {
            start_ns: 5,
            end_ns: 6,
            kind: GateEventKind::Ran {
                what: WorkKind::Copy,
                bytes: 1,
            },
        },
    ];
    assert_eq!(events, expected);
    assert_eq!((a.chunks, b.chunks), (0, 3));
    assert!(gate.take_events().is_empty(), "taken");
    // Off again: nothing more is logged.
    gate.set_recording(false);
    gate.admit();
    assert!(gate.take_events().is_empty());
}

#[test]
fn the_event_log_is_bounded_and_counts_what_it_drops() {
    let (_clock, arbiter) = setup(100);
    let gate = Gate::new(arbiter);
    gate.set_event_capacity(10);
    gate.set_recording(true);
    for i in 0..25u64 {
        gate.record(GateEvent {
            start_ns: i,
            end_ns: i,
            kind: GateEventKind::Ran {
                what: WorkKind::Decommit,
                bytes: i,
            },
        });
    }
    assert_eq!(gate.events_dropped(), 15);
    let events = gate.take_events();
    assert_eq!(events.len(), 10);
    assert_eq!(events[9].start_ns, 9, "the first ones are kept");
    // Taking them makes room again.
    gate.admit();
    assert_eq!(gate.take_events().len(), 1);
    assert_eq!(gate.events_dropped(), 15);
}

#[test]
fn an_overrun_is_learned_and_kept_free_at_the_end_of_later_grants() {
    let (clock, arbiter) = setup(100);
    let gate = Gate::new(arbiter.clone());
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_micros(1_000)).unwrap();
    // 1 ms of grant holds 10 chunks of 100 us.
    let a = gate.admit_up_to(32);
    assert_eq!(a.chunks, 10);
    assert_eq!(a.promised_end_ns, a.start_ns + 1_000 * US);
    // The batch ran 250 us past its promise: the gate learns it (rounded up to 2^18 ns).
    gate.finished(&a, a.promised_end_ns + 250 * US);
    assert_eq!(gate.overrun_guard(), Duration::from_nanos(1 << 18));
    // A later window of 1 ms now admits only what fits in 1 ms minus the guard.
    clock.advance(2 * MS);
    task.com(Duration::from_micros(1_000)).unwrap();
    let b = gate.admit_up_to(32);
    assert_eq!(b.chunks, 7);
    // A shorter overrun does not lower it; work admitted while unrestricted promised nothing.
    gate.finished(&b, b.promised_end_ns + 10 * US);
    assert_eq!(gate.overrun_guard(), Duration::from_nanos(1 << 18));
    task.no_oper().unwrap();
    let c = gate.admit_up_to(1);
    assert_eq!(c.grant_until_ns, None);
    gate.finished(&c, c.promised_end_ns + 10 * MS);
    assert_eq!(gate.overrun_guard(), Duration::from_nanos(1 << 18));
}

#[test]
fn an_overrun_rarer_than_the_quantile_stops_counting() {
    let (_clock, arbiter) = setup(100);
    let gate = Gate::new(arbiter.clone());
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_secs(1)).unwrap();
    let a = gate.admit();
    // One stall of 35 ms, then work in time.
    gate.finished(&a, a.promised_end_ns + 35 * MS);
    assert!(gate.overrun_guard() >= Duration::from_millis(35));
    for _ in 0..998 {
        gate.finished(&a, a.promised_end_ns);
    }
    // 1 of 999: still within the 99.9th percentile.
    assert!(gate.overrun_guard() >= Duration::from_millis(35));
    gate.finished(&a, a.promised_end_ns);
    gate.finished(&a, a.promised_end_ns);
    assert_eq!(gate.overrun_guard(), Duration::ZERO);
    // Keeping the longest ever seen is a setting.
    gate.set_overrun_quantile(1.0);
    gate.finished(&a, a.promised_end_ns);
    assert!(gate.overrun_guard() >= Duration::from_millis(35));
}

/// A window with room for the work but not for the work and the learned overrun guard is waited out: the gate
/// asks the server to fit both, so the answer is "wait until the window ends" and not a grant the gate then
/// refuses and asks for again at the same instant (a livelock on a fake clock, which only the waiting side moves;
/// a busy loop until the window closes on a real one).
#[test]
fn a_window_too_short_for_the_work_and_the_guard_is_waited_out() {
    let (clock, arbiter) = setup(100);
    let gate = Arc::new(Gate::new(arbiter.clone()));
    let mem = script(
        &clock,
        &arbiter,
        T0,
        &[
            (false, 1_000 * US),
            (true, 300 * US),
            (false, 1_000 * US),
            (true, 300 * US),
            (false, 1_000 * US),
        ],
    );
    let a = gate.admit();
    // An overrun of 250 us: the guard is 2^18 ns (262 us).
    gate.finished(&a, a.promised_end_ns + 250 * US);
    assert_eq!(gate.overrun_guard(), Duration::from_nanos(1 << 18));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (clock, gate) = (Arc::clone(&clock), Arc::clone(&gate));
        std::thread::spawn(move || {
            // 200 us of the first window left: room for 100 us of work, not for it and the guard.
            clock.advance(800 * US);
            let op = gate.admit_for(Duration::from_micros(100));
            // The same in the second window, for chunks.
            clock.advance(800 * US);
            let chunk = gate.admit();
            tx.send((op, chunk)).unwrap();
        });
    }
    let (op, chunk) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the gate kept asking at a fixed time instead of waiting");
    // Each waited for the window's end, then the memory phase, and started with the next window.
    assert_eq!(op.start_ns, mem[0].1);
    assert_eq!(op.grant_until_ns, Some(mem[0].1 + MS));
    assert_eq!(chunk.start_ns, mem[1].1);
    assert_eq!(chunk.chunks, 1);
    assert!(gate.stats().waits >= 4, "{:?}", gate.stats());
}
