//! The pager under a memory arbiter: every storage request is one admitted chunk, and no chunk runs into a CPU
//! task's memory phase. Time is a fake clock that the recording store advances by one chunk time per request, so
//! the check is exact and no wall-clock time is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{check_filled, engines, filled_buffers, pattern, prem_on_fake_clock, MIB};
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_arbiter::{Arbiter, ArbiterConfig, Clock, FakeClock, Gate};
use oversub_core::{BufferFlags, BufferState, Pool, PoolConfig};
use oversub_io::testing::{FailingEngine, RecordingEngine};
use oversub_io::IoEngine;

const US: u64 = 1_000;
const T0: u64 = 1_000_000_000;
const CHUNK_NS: u64 = 100 * US;
const CHUNK_BYTES: u64 = 256 << 10;

struct Setup {
    clock: Arc<FakeClock>,
    gate: Arc<Gate>,
    recorder: Arc<RecordingEngine>,
    starts: Arc<Mutex<Vec<(u64, u64)>>>,
    pool: Pool,
    mem_phases: Vec<(u64, u64)>,
}

/// A PREM task (load 300 µs, compute 1 ms, unload 200 µs, repeated) scripted on a fake clock, and a pool whose
/// store's engine records each request's start and advances the clock by one chunk time.
fn setup(engine: Arc<dyn IoEngine>, wrap_failing: Option<u64>) -> Setup {
    setup_on(engine, wrap_failing, Arc::new(HostMemory::default()))
}

fn setup_on(
    engine: Arc<dyn IoEngine>,
    wrap_failing: Option<u64>,
    device: Arc<dyn DeviceMemory>,
) -> Setup {
    let (clock, arbiter, mem_phases) = prem_on_fake_clock(T0, CHUNK_BYTES, CHUNK_NS, 400);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let observer = {
        let (clock, starts) = (clock.clone(), starts.clone());
        Box::new(move |r: &oversub_io::testing::RecordedRequest| {
            let now = clock.now_ns();
            starts.lock().unwrap().push((now, r.len));
            clock.advance(CHUNK_NS);
        })
    };
    let inner: Arc<dyn IoEngine> = match wrap_failing {
        Some(nth) => Arc::new(FailingEngine::new(engine, nth)),
        None => engine,
    };
    let recorder = Arc::new(RecordingEngine::with_observer(inner, observer));
    let store = common::store_with(recorder.clone(), 64 * MIB, 4 << 20);
    let gate = Arc::new(Gate::new(arbiter));
    let pool = Pool::new(
        PoolConfig::new(32 * MIB)
            .verify_checksums(true)
            .gate(gate.clone())
            .gate_calibration_samples(0),
        device,
        store,
    )
    .unwrap();
    Setup {
        clock,
        gate,
        recorder,
        starts,
        pool,
        mem_phases,
    }
}

fn assert_no_chunk_in_a_memory_phase(s: &Setup) {
    let starts = s.starts.lock().unwrap().clone();
    assert!(!starts.is_empty());
    for &(start, len) in &starts {
        assert!(
            len <= CHUNK_BYTES,
            "request of {len} bytes is larger than a chunk"
        );
        let end = start + CHUNK_NS;
        for &(m0, m1) in &s.mem_phases {
            assert!(
                !(start < m1 && m0 < end),
                "chunk [{start}, {end}) runs into memory phase [{m0}, {m1})"
            );
        }
    }
}

#[test]
fn paging_under_the_arbiter_keeps_out_of_memory_phases_and_keeps_every_byte() {
    for (name, engine) in engines() {
        let s = setup(engine, None);
        let space = s.pool.address_space();
        let sizes = [3 * MIB + 4096, MIB, 5 * MIB / 2];
        let bufs = filled_buffers(&space, &sizes, 0);
        let copies = s.gate.stats().chunks;
        assert!(
            copies >= 3 + 4 + 10,
            "{name}: writes were chunked too ({copies} chunks)"
        );
        // Two rounds, async page-outs of all, then page-ins one by one.
        for _ in 0..2 {
            let tickets = space.page_out_all_async().unwrap();
            for t in tickets {
                t.finish().unwrap();
            }
            for &b in &bufs {
                assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
                space.page_in(b).unwrap();
            }
        }
        check_filled(&space, &bufs, &sizes, 0, name);
        assert_no_chunk_in_a_memory_phase(&s);
        let requests = s.recorder.requests();
        let io_bytes: u64 = requests.iter().map(|r| r.len).sum();
        let expected: u64 = sizes.iter().map(|n| n.next_multiple_of(4096)).sum::<u64>() * 4;
        assert_eq!(io_bytes, expected, "{name}");
        // Batches of at most 32 chunks, each batch admitted whole.
        let mut per_batch = std::collections::BTreeMap::new();
        for r in &requests {
            *per_batch.entry(r.batch).or_insert(0u32) += 1;
        }
        assert!(
            per_batch.values().all(|&n| n <= 32),
            "{name}: {per_batch:?}"
        );
        assert!(
            per_batch.values().any(|&n| n > 1),
            "{name}: chunks were batched"
        );
        let stats = s.gate.stats();
        assert!(
            stats.waits > 0,
            "{name}: the gate never had to wait: {stats:?}"
        );
        // Every transfer and memory-map operation ran on the one gated worker, so in fake time none overran.
        assert_eq!(s.gate.overrun_guard(), Duration::ZERO, "{name}: {stats:?}");
        assert!(s.clock.now_ns() > T0, "{name}");
    }
}

#[test]
fn a_failed_chunk_fails_the_operation_and_loses_nothing() {
    for (name, engine) in engines() {
        // The 6th request fails, part-way through the 4 MiB buffer's first page-out (16 chunks).
        let s = setup(engine, Some(6));
        let space = s.pool.address_space();
        let b = space.alloc(4 * MIB, BufferFlags::DEFAULT).unwrap();
        let data = pattern(9, 4 * MIB as usize);
        space.write(b, 0, &data).unwrap();
        let free_before = s.pool.store().free_bytes();
        let err = space.page_out(b).unwrap_err();
        assert!(err.to_string().contains("injected"), "{name}: {err}");
        assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
        assert_eq!(
            s.pool.store().free_bytes(),
            free_before,
            "{name}: slot given back"
        );
        let mut back = vec![0u8; data.len()];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == data, "{name}: bytes intact");
        space.page_out(b).unwrap();
        space.page_in(b).unwrap();
        space.read(b, 0, &mut back).unwrap();
        assert!(back == data, "{name}");
        assert_no_chunk_in_a_memory_phase(&s);
    }
}

#[test]
fn a_pool_calibrates_its_chunk_time_on_the_store() {
    let arbiter = Arbiter::in_process(ArbiterConfig {
        chunk_time: Some(Duration::from_secs(1)),
        ..ArbiterConfig::default()
    })
    .unwrap();
    let gate = Arc::new(Gate::new(arbiter));
    let store = common::store_with(engines().remove(0).1, 16 * MIB, 1 << 20);
    let pool = Pool::new(
        PoolConfig::new(8 * MIB)
            .gate(gate.clone())
            .gate_calibration_samples(4),
        Arc::new(HostMemory::default()),
        store,
    )
    .unwrap();
    let t = gate.chunk_time();
    assert!(t > Duration::ZERO && t < Duration::from_secs(1), "{t:?}");
    assert_eq!(pool.store().free_bytes(), pool.store().capacity_bytes());
    assert!(pool.gate().is_some());
}

/// The staging path (a device the host cannot address: the cuda backend over the fake driver) obeys the arbiter
/// the same way: one admitted chunk (copy plus I/O) at a time, none in a memory phase, every byte kept.
///
/// Here two threads are gated: the staging ring's (chunks) and the gated worker (the decommit after a page-out,
/// the commit before a page-in), and both move the fake clock (a wait jumps it to its deadline). So buffers are
/// paged out one at a time, as in `gated_mm.rs`: with page-outs in flight together, the staging thread's waits
/// jump time under a decommit admitted on the gated worker (when the OS holds that thread back between its
/// admission and its end), the gate learns that as an overrun of up to a window, and the fake-time checks stop
/// being exact.
#[test]
fn staged_paging_under_the_arbiter_keeps_out_of_memory_phases() {
    use oversub_accel::cuda::testing::FakeDriver;
    use oversub_accel::cuda::CudaMemory;
    for (name, engine) in engines() {
        let fake = Arc::new(FakeDriver::new(64 * MIB, 64 << 10));
        let device: Arc<dyn DeviceMemory> =
            Arc::new(CudaMemory::with_driver(fake.clone()).unwrap());
        let s = setup_on(engine, None, device);
        assert_eq!(s.pool.transfer_path(), "staging");
        assert_eq!(s.pool.staging_chunk_bytes(), Some(CHUNK_BYTES));
        let space = s.pool.address_space();
        let sizes = [3 * MIB + 4096, MIB];
        let bufs = filled_buffers(&space, &sizes, 0);
        for _ in 0..2 {
            for &b in &bufs {
                space.page_out(b).unwrap();
            }
            for &b in &bufs {
                space.page_in(b).unwrap();
            }
        }
        check_filled(&space, &bufs, &sizes, 0, name);
        assert_no_chunk_in_a_memory_phase(&s);
        assert!(
            s.gate.stats().waits > 0,
            "{name}: the gate never had to wait"
        );
        // In exact fake time nothing overruns its admission: a guard would mean that one thread's time ran into
        // another's gated operation.
        assert_eq!(
            s.gate.overrun_guard(),
            Duration::ZERO,
            "{name}: {:?}",
            s.gate.stats()
        );
        assert!(
            fake.violations().is_empty(),
            "{name}: {:?}",
            fake.violations()
        );
    }
}
