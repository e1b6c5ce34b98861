//! The server's protocol on a fake clock: grant sizes, waits, several tasks, stale phases, and the gate's promise
//! that no chunk runs into a memory phase.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{script, setup, MS, T0, US};
use oversub_arbiter::{
    Arbiter, ArbiterConfig, ArbiterError, Clock, Decision, FakeClock, Gate, PreemptionHook,
    WaitReason, MAX_TASKS,
};
use proptest::prelude::*;

fn chunk(us: u64) -> Duration {
    Duration::from_micros(us)
}

#[test]
fn no_task_means_unrestricted() {
    let (_clock, arbiter) = setup(100);
    assert_eq!(arbiter.request(chunk(100)), Decision::Unrestricted);
    let task = arbiter.register_task().unwrap();
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Unrestricted,
        "a fresh task is NO_OPER"
    );
    task.no_oper().unwrap();
    assert_eq!(arbiter.request(chunk(100)), Decision::Unrestricted);
}

#[test]
fn grants_hold_the_chunks_that_fit_the_rest_of_the_compute_phase() {
    let (clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_millis(5)).unwrap();
    // Eq. 1: Q = (t(C) - t(req)) / T(Q).
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Grant {
            until_ns: T0 + 5 * MS,
            chunks: 50
        }
    );
    clock.advance(1_050 * US);
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Grant {
            until_ns: T0 + 5 * MS,
            chunks: 39
        }
    );
    // A different transfer side with slower chunks gets fewer.
    assert_eq!(
        arbiter.request(chunk(1_000)),
        Decision::Grant {
            until_ns: T0 + 5 * MS,
            chunks: 3
        }
    );
    clock.advance(3_900 * US + 1);
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Wait {
            until_ns: T0 + 5 * MS,
            reason: WaitReason::WindowTooShort
        }
    );
}

#[test]
fn a_memory_phase_says_how_long_to_wait() {
    let (clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    task.mem(Duration::from_micros(645)).unwrap();
    clock.advance(45 * US);
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Wait {
            until_ns: T0 + 645 * US,
            reason: WaitReason::MemoryPhase
        }
    );
    let s = arbiter.stats();
    assert_eq!((s.requests, s.waits, s.grants), (1, 1, 0));
}

#[test]
fn several_tasks_share_one_window_from_the_last_load_to_the_first_unload() {
    let (clock, arbiter) = setup(100);
    let a = arbiter.register_task().unwrap();
    let b = arbiter.register_task().unwrap();
    assert_ne!(a.slot(), b.slot());
    a.mem(Duration::from_millis(1)).unwrap();
    b.mem(Duration::from_millis(3)).unwrap();
    // Both loading: wait for the last load to end.
    assert!(matches!(
        arbiter.request(chunk(100)),
        Decision::Wait { until_ns, reason: WaitReason::MemoryPhase } if until_ns == T0 + 3 * MS
    ));
    clock.advance(MS);
    a.com(Duration::from_millis(9)).unwrap(); // a computes until T0 + 10 ms
    assert!(matches!(
        arbiter.request(chunk(100)),
        Decision::Wait { until_ns, .. } if until_ns == T0 + 3 * MS
    ));
    clock.advance(2 * MS);
    b.com(Duration::from_millis(4)).unwrap(); // b computes until T0 + 7 ms: its unload comes first
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Grant {
            until_ns: T0 + 7 * MS,
            chunks: 40
        }
    );
    clock.advance(4 * MS);
    b.mem(Duration::from_millis(1)).unwrap();
    assert!(matches!(
        arbiter.request(chunk(100)),
        Decision::Wait {
            reason: WaitReason::MemoryPhase,
            ..
        }
    ));
    drop(b); // gone: its slot no longer restricts anything
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Grant {
            until_ns: T0 + 10 * MS,
            chunks: 30
        }
    );
}

#[test]
fn overdue_phases_hold_transfers_briefly_and_stale_ones_expire() {
    let (clock, arbiter) = setup(100);
    let crashed = arbiter.register_task().unwrap();
    crashed.mem(Duration::from_millis(2)).unwrap();
    let slot = crashed.slot();
    crashed.detach(); // as if the process died mid-phase
    clock.advance(3 * MS);
    // Past its deadline but not stale: ask again after the poll interval.
    assert_eq!(
        arbiter.request(chunk(100)),
        Decision::Wait {
            until_ns: T0 + 3 * MS + 50 * US,
            reason: WaitReason::MemoryPhase
        }
    );
    clock.advance(49 * MS);
    assert_eq!(arbiter.request(chunk(100)), Decision::Unrestricted);
    assert!(arbiter.stats().expired >= 1);
    assert!(arbiter.tasks().iter().any(|t| t.slot == slot && t.stale));
    // Its slot is reused.
    let next = arbiter.register_task().unwrap();
    assert_eq!(next.slot(), slot);

    // An overdue compute phase means a memory phase is imminent: no grant.
    next.com(Duration::from_millis(1)).unwrap();
    clock.advance(2 * MS);
    assert!(matches!(
        arbiter.request(chunk(100)),
        Decision::Wait {
            reason: WaitReason::Overdue,
            ..
        }
    ));
}

#[test]
fn bad_phases_are_refused_and_change_nothing() {
    let (_clock, arbiter) = setup(100);
    let task = arbiter.register_task().unwrap();
    let generation = arbiter.generation();
    assert!(matches!(
        task.mem(Duration::ZERO),
        Err(ArbiterError::InvalidDuration { .. })
    ));
    assert!(matches!(
        task.com(Duration::from_secs(7200)),
        Err(ArbiterError::InvalidDuration { .. })
    ));
    assert_eq!(arbiter.generation(), generation);
    assert!(matches!(
        oversub_arbiter::Phase::from_parts("CPU_MEM", Some(-0.5)),
        Err(ArbiterError::InvalidDuration {
            reason: "durations cannot be negative",
            ..
        })
    ));
    assert!(matches!(
        oversub_arbiter::Phase::from_parts("CPU_LOAD", Some(0.5)),
        Err(ArbiterError::UnknownPhase(_))
    ));
    assert!(Arbiter::in_process(ArbiterConfig {
        chunk_bytes: 0,
        ..ArbiterConfig::default()
    })
    .is_err());
}

#[test]
fn slots_run_out_and_come_back() {
    let (_clock, arbiter) = setup(100);
    let tasks: Vec<_> = (0..MAX_TASKS)
        .map(|_| arbiter.register_task().unwrap())
        .collect();
    assert!(matches!(arbiter.register_task(), Err(ArbiterError::NoFreeSlot(n)) if n == MAX_TASKS));
    drop(tasks);
    assert!(arbiter.register_task().is_ok());
}

#[derive(Debug, Default)]
struct RecordingHook(Mutex<Vec<u64>>);

impl PreemptionHook for RecordingHook {
    fn preempt(&self, end_ns: u64) {
        self.0.lock().unwrap().push(end_ns);
    }
}

#[test]
fn memory_phases_call_the_preemption_hooks() {
    let (_clock, arbiter) = setup(100);
    let hook = Arc::new(RecordingHook::default());
    arbiter.add_preemption_hook(hook.clone());
    let task = arbiter.register_task().unwrap();
    task.com(Duration::from_millis(1)).unwrap();
    task.mem(Duration::from_millis(2)).unwrap();
    assert_eq!(*hook.0.lock().unwrap(), vec![T0 + 2 * MS]);
}

/// Runs `chunks` chunks through a gate, each taking `chunk_ns` of fake time, and returns their intervals.
fn run_chunks(clock: &Arc<FakeClock>, gate: &Gate, chunks: u64, chunk_ns: u64) -> Vec<(u64, u64)> {
    let mut intervals = Vec::new();
    gate.run_chunked(chunks * gate.chunk_bytes(), |_, _| {
        let start = clock.now_ns();
        clock.advance(chunk_ns);
        intervals.push((start, clock.now_ns()));
        Ok::<(), ()>(())
    })
    .unwrap();
    intervals
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn the_gate_never_runs_a_chunk_into_a_memory_phase() {
    let (clock, arbiter) = setup(122);
    // Table 2 (TX1 averages): load 444 µs, compute 8784 µs, unload 716 µs; ten iterations.
    let mut phases = Vec::new();
    for _ in 0..10 {
        phases.extend([(true, 444 * US), (false, 8_784 * US), (true, 716 * US)]);
    }
    let mem = script(&clock, &arbiter, T0, &phases);
    let gate = Gate::new(arbiter.clone());
    let chunks = run_chunks(&clock, &gate, 500, 122 * US);
    for c in &chunks {
        for m in &mem {
            assert!(!overlaps(*c, *m), "chunk {c:?} overlaps memory phase {m:?}");
        }
    }
    let stats = gate.stats();
    assert_eq!(stats.chunks, 500);
    assert!(stats.waits >= 9, "{stats:?}");
    // 72 chunks of 122 µs fill a compute phase of 8784 µs exactly.
    let in_first_window = chunks
        .iter()
        .filter(|c| c.0 >= mem[0].1 && c.1 <= mem[1].0)
        .count();
    assert_eq!(in_first_window, 72);
}

#[test]
fn a_task_that_starts_its_memory_phase_early_overlaps_by_at_most_one_chunk() {
    let (clock, arbiter) = setup(100);
    let task = Arc::new(arbiter.register_task().unwrap());
    task.com(Duration::from_millis(5)).unwrap();
    // The compute phase really ends after 2 ms.
    let t = Arc::clone(&task);
    clock.at(T0 + 2 * MS + 30 * US, move || {
        t.mem(Duration::from_millis(1)).unwrap()
    });
    let t = Arc::clone(&task);
    clock.at(T0 + 3 * MS + 30 * US, move || t.no_oper().unwrap());
    let gate = Gate::new(arbiter.clone());
    let chunks = run_chunks(&clock, &gate, 30, 100 * US);
    let mem = (T0 + 2 * MS + 30 * US, T0 + 3 * MS + 30 * US);
    let overlapping: Vec<_> = chunks.iter().filter(|c| overlaps(**c, mem)).collect();
    assert_eq!(overlapping.len(), 1, "{overlapping:?}");
    assert_eq!(gate.stats().preemptions, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn no_chunk_overlaps_any_tasks_memory_phase(
        tasks in proptest::collection::vec(
            (0u64..2_000, proptest::collection::vec((50u64..3_000, 50u64..12_000), 1..8)),
            1..4,
        ),
        chunk_us in 20u64..600,
        chunks in 1u64..300,
    ) {
        let (clock, arbiter) = setup(chunk_us);
        let mut mem = Vec::new();
        for (offset_us, iters) in &tasks {
            // A task announces from the start (a leading compute phase): one that jumps from NO_OPER straight into
            // a memory phase cannot be foreseen by any server.
            let mut phases = vec![(false, 10 * US + offset_us * US)];
            for (m, c) in iters {
                phases.push((true, m * US));
                phases.push((false, c * US));
            }
            phases.push((true, 100 * US));
            mem.extend(script(&clock, &arbiter, T0, &phases));
        }
        let gate = Gate::new(arbiter.clone());
        let intervals = run_chunks(&clock, &gate, chunks, chunk_us * US);
        prop_assert_eq!(intervals.len() as u64, chunks);
        for c in &intervals {
            for m in &mem {
                prop_assert!(!overlaps(*c, *m), "chunk {:?} overlaps memory phase {:?}", c, m);
            }
        }
    }
}
