//! The caller's own work in the slots (`Runtime::work`): what a closure sees, errors and panics, leases, bad
//! registrations, and demand mode's faults. Timings are not asserted (the machine may be loaded).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use common::*;
use oversub_core::{Pool, PoolSpec};
use oversub_sched::{Bandwidths, Mode, Readahead, RunError, Runtime, System, Work};

const MIB: u64 = 1 << 20;

/// The paper's example at 1/20 of its time scale, 1 MiB units, capacity for 4, every component running the
/// caller's code.
fn tiny_user() -> System {
    let mut sys = paper(MIB, 4);
    scale_time(&mut sys, 0.05);
    for c in &mut sys.components {
        c.work = Work::User {
            wcet_s: c.budget_s * 0.3,
        };
    }
    sys.platform.stores = vec![std::env::temp_dir()];
    sys
}

fn bw() -> Bandwidths {
    Bandwidths::direct(500e6, 500e6)
}

fn pool_for(sys: &System) -> Pool {
    // Page-granular slack over the planned capacity, as the CLI gives.
    PoolSpec::new(sys.platform.capacity_bytes + 64 * 4096)
        .store_capacity(64 * MIB)
        .open()
        .unwrap()
}

/// Each slot checks that the whole buffer holds the pattern its previous slot wrote, then writes the next one.
fn pattern(instance: u64, len: usize) -> impl Iterator<Item = u8> {
    (0..len).map(move |i| (i as u64).wrapping_mul(31).wrapping_add(instance * 7) as u8)
}

#[test]
fn closures_see_their_own_resident_buffers_with_the_bytes_the_previous_slot_left() {
    let sys = tiny_user();
    let names: Vec<String> = sys.components.iter().map(|c| c.name.clone()).collect();
    let problems = Mutex::new(Vec::<String>::new());
    let calls = Mutex::new(HashMap::<String, usize>::new());
    for mode in [Mode::Async, Mode::Sync, Mode::Demand] {
        problems.lock().unwrap().clear();
        calls.lock().unwrap().clear();
        let mut rt = Runtime::new(sys.clone())
            .mode(mode)
            .bandwidths(bw())
            .at_min_period(mode != Mode::Async)
            .hyperperiods(4)
            .warmup(1)
            .pin_threads(false)
            .settle_s(0.0);
        for name in &names {
            let (problems, calls) = (&problems, &calls);
            rt = rt.work(name.clone(), move |slot| {
                let names: Vec<&str> = slot.buffer_names().collect();
                if names != ["state"] {
                    problems
                        .lock()
                        .unwrap()
                        .push(format!("{}: buffers {names:?}", slot.component()));
                }
                let instance = slot.instance() as u64;
                let component = slot.component().to_string();
                let bytes = slot.bytes_mut("state")?;
                let expected_prev = if instance == 0 {
                    None
                } else {
                    Some(instance - 1)
                };
                let ok = match expected_prev {
                    None => bytes.iter().all(|&b| b == 0),
                    Some(prev) => bytes.iter().copied().eq(pattern(prev, bytes.len())),
                };
                if !ok {
                    problems.lock().unwrap().push(format!(
                        "{mode}: {component} slot {instance} found other bytes"
                    ));
                }
                let len = bytes.len();
                for (b, p) in bytes.iter_mut().zip(pattern(instance, len)) {
                    *b = p;
                }
                *calls.lock().unwrap().entry(component).or_default() += 1;
                Ok(())
            });
        }
        let result = rt.run().unwrap();
        assert_eq!(result.slots.len(), 5 * 5, "{mode}");
        assert!(
            problems.lock().unwrap().is_empty(),
            "{:?}",
            problems.lock().unwrap()
        );
        for name in &names {
            assert_eq!(calls.lock().unwrap()[name], 5, "{mode}: {name}");
        }
        // Four units for five: something was paged (demand: evicted) every repetition.
        assert!(!result.ops.is_empty(), "{mode}: nothing paged");
    }
}

#[test]
fn typed_views_and_access_check_their_arguments() {
    let mut sys = tiny_user();
    sys.components[1].buffers[0].read_only = true;
    sys.components[0].buffers.push(oversub_sched::BufferSpec {
        name: "out".into(),
        size_bytes: 4096 + 3,
        read_only: false,
    });
    sys.platform.capacity_bytes = 8 * MIB;
    let seen = Mutex::new(Vec::<String>::new());
    let mut rt = Runtime::new(sys)
        .bandwidths(bw())
        .hyperperiods(1)
        .warmup(0)
        .pin_threads(false)
        .settle_s(0.0)
        .work("A", |slot| {
            let mut seen = seen.lock().unwrap();
            let floats = slot.slice_mut::<f32>("state")?;
            floats[0] = 1.5;
            seen.push(format!("f32 {}", floats.len()));
            seen.push(slot.slice::<f32>("out").unwrap_err().to_string());
            seen.push(slot.access(["state"], ["state"]).err().unwrap().to_string());
            seen.push(slot.bytes("nope").unwrap_err().to_string());
            let ([state], [out]) = slot.access(["state"], ["out"])?;
            out[..4].copy_from_slice(&state[..4]);
            Ok(())
        })
        .work("B", |slot| {
            seen.lock()
                .unwrap()
                .push(slot.bytes_mut("state").unwrap_err().to_string());
            assert!(slot.bytes("state").is_ok());
            Ok(())
        })
        .work("C", |_| Ok(()))
        .work("D", |_| Ok(()))
        .work("E", |_| Ok(()));
    rt.run().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], format!("f32 {}", MIB / 4));
    assert!(seen[1].contains("cannot be viewed as f32"), "{}", seen[1]);
    assert!(seen[2].contains("twice"), "{}", seen[2]);
    assert!(
        seen[3].contains("no buffer \"nope\"") && seen[3].contains("state, out"),
        "{}",
        seen[3]
    );
    assert!(seen[4].contains("read-only"), "{}", seen[4]);
}

fn all_ok<'a>(rt: Runtime<'a>, except: &str) -> Runtime<'a> {
    ["A", "B", "C", "D", "E"]
        .into_iter()
        .filter(|n| *n != except)
        .fold(rt, |rt, n| rt.work(n, |_| Ok(())))
}

#[test]
fn an_error_or_a_panic_in_a_closure_stops_the_run_and_frees_everything() {
    let sys = tiny_user();
    for panics in [false, true] {
        for mode in [Mode::Async, Mode::Sync] {
            let pool = pool_for(&sys);
            let space = pool.address_space();
            let rt = Runtime::new(sys.clone())
                .mode(mode)
                .bandwidths(bw())
                .at_min_period(true)
                .hyperperiods(3)
                .pin_threads(false)
                .settle_s(0.0)
                .work("C", move |slot| {
                    if slot.instance() == 2 {
                        if panics {
                            panic!("C broke");
                        }
                        return Err("C refused".into());
                    }
                    Ok(())
                });
            let mut rt = all_ok(rt, "C");
            let err = rt.run_on(&space).unwrap_err();
            match &err {
                RunError::Work {
                    component,
                    instance,
                    message,
                    ..
                } => {
                    assert_eq!(component, "C");
                    assert_eq!(instance, &2);
                    let want = if panics {
                        "panicked: C broke"
                    } else {
                        "C refused"
                    };
                    assert!(message.contains(want), "{message}");
                }
                other => panic!("{mode}: unexpected {other:?}"),
            }
            assert!(err.to_string().contains("component C"), "{err}");
            assert!(space.buffers().is_empty(), "{mode}: buffers left behind");
            assert_eq!(pool.stats().used_bytes, 0, "{mode}: memory left behind");
        }
    }
}

#[test]
fn a_view_kept_past_its_slot_stops_the_run_and_the_buffer_goes_with_the_view() {
    let sys = tiny_user();
    let pool = pool_for(&sys);
    let space = pool.address_space();
    let kept = Mutex::new(Vec::new());
    let rt = Runtime::new(sys)
        .bandwidths(bw())
        .hyperperiods(2)
        .pin_threads(false)
        .settle_s(0.0)
        .work("A", |slot| {
            kept.lock().unwrap().push(slot.lease("state")?);
            Ok(())
        });
    let mut rt = all_ok(rt, "A");
    let err = rt.run_on(&space).unwrap_err();
    assert!(err.to_string().contains("still alive"), "{err}");
    // The leased buffer stays until its lease goes; the others are freed.
    assert_eq!(space.buffers().len(), 1);
    kept.lock().unwrap().clear();
    assert!(space.buffers().is_empty());
}

#[test]
fn bad_registrations_are_errors_naming_the_component() {
    let sys = tiny_user();
    let mut rt = all_ok(Runtime::new(sys.clone()).bandwidths(bw()), "").work("Z", |_| Ok(()));
    let err = rt.run().unwrap_err();
    assert!(matches!(err, RunError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("\"Z\""), "{err}");

    let mut rt = all_ok(Runtime::new(sys).bandwidths(bw()), "D");
    let err = rt.run().unwrap_err();
    assert!(err.to_string().contains("component D has no work"), "{err}");
}

#[test]
fn demand_mode_faults_every_page_a_slot_touches_after_eviction() {
    let sys = tiny_user();
    let pages = MIB / 4096;
    let mut rt = Runtime::new(sys)
        .mode(Mode::Demand)
        .demand_readahead(Readahead::Off)
        .bandwidths(bw())
        .at_min_period(true)
        .hyperperiods(3)
        .pin_threads(false)
        .settle_s(0.0);
    for n in ["A", "B", "C", "D", "E"] {
        rt = rt.work(n, |slot| {
            // Read one byte per 4 KiB page, write one back: the whole buffer is touched.
            let bytes = slot.bytes_mut("state")?;
            for i in (0..bytes.len()).step_by(4096) {
                bytes[i] = bytes[i].wrapping_add(1);
            }
            Ok(())
        });
    }
    let result = rt.run().unwrap();
    // Every slot's first touch after the buffer was evicted (or never loaded) faults each page in.
    let evicted_before: Vec<_> = result.ops.iter().filter(|o| o.kind == "out").collect();
    assert!(!evicted_before.is_empty(), "LRU evicted nothing");
    let first = &result.slots[0];
    assert!(
        first.major_faults >= pages,
        "{}: {} major faults for {pages} pages",
        first.component,
        first.major_faults
    );
    let faulting = result
        .slots
        .iter()
        .filter(|s| s.major_faults >= pages)
        .count();
    assert!(
        faulting >= 5,
        "only {faulting} slots faulted their whole buffer in"
    );
    assert!(result.major_faults >= pages);
}

#[test]
fn demand_mode_with_the_kernels_readahead_still_faults_its_pages_in() {
    let sys = tiny_user();
    let mut rt = Runtime::new(sys)
        .mode(Mode::Demand)
        .bandwidths(bw())
        .at_min_period(true)
        .hyperperiods(2)
        .pin_threads(false)
        .settle_s(0.0);
    for n in ["A", "B", "C", "D", "E"] {
        rt = rt.work(n, |slot| {
            let bytes = slot.bytes("state")?;
            std::hint::black_box(bytes.iter().step_by(4096).map(|&b| b as u64).sum::<u64>());
            Ok(())
        });
    }
    let result = rt.run().unwrap();
    // Readahead turns most faults minor, but the first slot (nothing resident) still faults its buffer in.
    let first = &result.slots[0];
    assert!(
        first.major_faults >= 1 && first.major_faults + first.minor_faults >= 16,
        "{}: {} major, {} minor faults",
        first.component,
        first.major_faults,
        first.minor_faults
    );
}
