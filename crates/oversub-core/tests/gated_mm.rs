//! Gated commit and decommit: under an arbiter, the pager's memory-map operations (the commit before a page-in, the
//! decommit after a page-out) run on the gated worker, each admitted for its worst-case cost, so none runs outside a
//! grant or into a CPU task's memory phase. Time is a fake clock that a PREM task's phases are scripted on; the
//! store's engine advances it by one chunk time per request and the device by each operation's cost, so the checks
//! are exact and no wall-clock time is asserted. A failed commit fails its page-in and loses nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{check_filled, engines, pattern, prem_on_fake_clock, Hooked, MIB};
use oversub_accel::{AccelError, DeviceMemory, HostMemory, Reservation};
use oversub_arbiter::{
    Arbiter, ArbiterConfig, Clock, FakeClock, Gate, GateEvent, GateEventKind, WorkKind,
};
use oversub_core::{
    BufferFlags, BufferState, HostTierConfig, MmCost, PagerError, Pool, PoolConfig,
};
use oversub_io::testing::RecordingEngine;
use oversub_io::IoEngine;

const US: u64 = 1_000;
const T0: u64 = 1_000_000_000;
const CHUNK_NS: u64 = 100 * US;
const CHUNK_BYTES: u64 = 256 << 10;
const COMMIT: MmCost = MmCost::new(Duration::from_micros(40), Duration::ZERO);
const DECOMMIT: MmCost = MmCost::new(Duration::from_micros(30), Duration::from_micros(20));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mm {
    Commit,
    Decommit,
}

/// One memory-map operation as the device saw it.
#[derive(Debug, Clone)]
struct MmCall {
    kind: Mm,
    start_ns: u64,
    end_ns: u64,
    len: u64,
    thread: Option<String>,
    failed: bool,
}

/// Around a device ([`MmRecorder::around`]): while armed, records every commit and decommit (with the fake clock's
/// time and the thread) and advances the clock by the operation's worst-case cost, and can fail the next commit or
/// hold it until released.
#[derive(Debug)]
struct MmRecorder {
    clock: Arc<FakeClock>,
    armed: AtomicBool,
    fail_next_commit: AtomicBool,
    calls: Mutex<Vec<MmCall>>,
    /// While set, the next commit waits (up to a minute) for a message before it runs.
    hold_commit: Mutex<Option<mpsc::Receiver<()>>>,
    held_too_long: AtomicBool,
}

impl MmRecorder {
    fn new(clock: Arc<FakeClock>) -> Self {
        MmRecorder {
            clock,
            armed: AtomicBool::new(false),
            fail_next_commit: AtomicBool::new(false),
            calls: Mutex::new(Vec::new()),
            hold_commit: Mutex::new(None),
            held_too_long: AtomicBool::new(false),
        }
    }

    fn calls(&self) -> Vec<MmCall> {
        self.calls.lock().unwrap().clone()
    }

    fn record<T>(
        &self,
        kind: Mm,
        range: &Reservation,
        op: impl FnOnce() -> Result<T, AccelError>,
    ) -> Result<T, AccelError> {
        if !self.armed.load(Ordering::Acquire) {
            return op();
        }
        let len = range.len as u64;
        let start_ns = self.clock.now_ns();
        let injected = kind == Mm::Commit && self.fail_next_commit.swap(false, Ordering::AcqRel);
        let result = if injected {
            Err(AccelError::OutOfMemory("injected commit failure".into()))
        } else {
            op()
        };
        let cost = match kind {
            Mm::Commit => COMMIT.time(len),
            Mm::Decommit => DECOMMIT.time(len),
        };
        self.clock.advance(cost.as_nanos() as u64);
        self.calls.lock().unwrap().push(MmCall {
            kind,
            start_ns,
            end_ns: self.clock.now_ns(),
            len,
            thread: std::thread::current().name().map(str::to_string),
            failed: result.is_err(),
        });
        result
    }
}

impl MmRecorder {
    /// The device `inner` with this recorder around its commits and decommits.
    fn around(self: &Arc<Self>, inner: Arc<dyn DeviceMemory>) -> Hooked {
        let (on_commit, on_decommit) = (Arc::clone(self), Arc::clone(self));
        Hooked::over(inner)
            .on_commit(move |range, commit| {
                if let Some(rx) = on_commit.hold_commit.lock().unwrap().take() {
                    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
                        on_commit.held_too_long.store(true, Ordering::Release);
                    }
                }
                on_commit.record(Mm::Commit, range, commit)
            })
            .on_decommit(move |range, decommit| on_decommit.record(Mm::Decommit, range, decommit))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Host memory to the store, checksummed (pieces hashed on the checksum thread).
    Hashed,
    /// Host memory to the store, no checksums.
    Plain,
    /// Host memory to the host-memory tier.
    HostTier,
    /// A device the host cannot address (the cuda backend over the fake driver), through the staging ring.
    Staging,
}

const PATHS: [Path; 4] = [Path::Hashed, Path::Plain, Path::HostTier, Path::Staging];

struct Setup {
    clock: Arc<FakeClock>,
    gate: Arc<Gate>,
    device: Arc<MmRecorder>,
    pool: Pool,
    mem_phases: Vec<(u64, u64)>,
}

/// A PREM task (load 300 µs, compute 1 ms, unload 200 µs, repeated) on a fake clock, and a pool on `path` whose
/// store advances the clock by one chunk time per request and whose device records its memory-map operations.
fn setup(engine: Arc<dyn IoEngine>, path: Path) -> Setup {
    let (clock, arbiter, mem_phases) = prem_on_fake_clock(T0, CHUNK_BYTES, CHUNK_NS, 2_000);
    let observer = {
        let clock = clock.clone();
        Box::new(move |_: &oversub_io::testing::RecordedRequest| clock.advance(CHUNK_NS))
    };
    let recorder = Arc::new(RecordingEngine::with_observer(engine, observer));
    let store = common::store_with(recorder, 64 * MIB, 4 << 20);
    let inner: Arc<dyn DeviceMemory> = match path {
        Path::Staging => {
            use oversub_accel::cuda::testing::FakeDriver;
            use oversub_accel::cuda::CudaMemory;
            let fake = Arc::new(FakeDriver::new(64 * MIB, 64 << 10));
            Arc::new(CudaMemory::with_driver(fake).unwrap())
        }
        _ => Arc::new(HostMemory::default()),
    };
    let device = Arc::new(MmRecorder::new(clock.clone()));
    let gate = Arc::new(Gate::new(arbiter));
    let mut config = PoolConfig::new(32 * MIB)
        .verify_checksums(path == Path::Hashed)
        .gate(gate.clone())
        .gate_calibration_samples(0)
        .gate_mm_costs(COMMIT, DECOMMIT);
    if path == Path::HostTier {
        config = config.host_tier(HostTierConfig {
            capacity_bytes: 16 * MIB,
            pinned: false,
        });
    }
    let pool = Pool::new(config, Arc::new(device.around(inner)), store).unwrap();
    assert_eq!(
        pool.transfer_path(),
        if path == Path::Staging {
            "staging"
        } else {
            "direct"
        }
    );
    let costs = pool.gate_costs().unwrap();
    assert_eq!((costs.commit, costs.decommit), (COMMIT, DECOMMIT));
    assert_eq!(costs.decommit_time(2 * MIB), Duration::from_micros(70));
    Setup {
        clock,
        gate,
        device,
        pool,
        mem_phases,
    }
}

/// Every recorded memory-map operation ran on the gated worker, inside the grant of the admission just before it
/// (started at or after it, ended by its promised end and the grant's), and overlapped no memory phase; the gate
/// logged each one as `Ran`.
fn assert_all_gated(s: &Setup, calls: &[MmCall], events: &[GateEvent]) {
    let admissions: Vec<&GateEvent> = events
        .iter()
        .filter(|e| matches!(e.kind, GateEventKind::Admitted { chunks: 0, .. }))
        .collect();
    for c in calls {
        assert_eq!(
            c.thread.as_deref(),
            Some("oversub-gated-io"),
            "{c:?} ran outside the gated worker"
        );
        let a = admissions
            .iter()
            .rev()
            .find(|a| a.start_ns <= c.start_ns)
            .unwrap_or_else(|| panic!("{c:?} has no admission before it"));
        let GateEventKind::Admitted { grant_until_ns, .. } = a.kind else {
            unreachable!()
        };
        assert_eq!(a.start_ns, c.start_ns, "{c:?} started right at {a:?}");
        assert!(c.end_ns <= a.end_ns, "{c:?} ran past its admission {a:?}");
        if let Some(until) = grant_until_ns {
            assert!(c.end_ns <= until, "{c:?} ran past its grant {a:?}");
        }
        for &(m0, m1) in &s.mem_phases {
            assert!(
                !(c.start_ns < m1 && m0 < c.end_ns),
                "{c:?} runs into memory phase [{m0}, {m1})"
            );
        }
    }
    let ran: Vec<(WorkKind, u64, u64, u64)> = events
        .iter()
        .filter_map(|e| match e.kind {
            GateEventKind::Ran {
                what: what @ (WorkKind::Commit | WorkKind::Decommit),
                bytes,
            } => Some((what, bytes, e.start_ns, e.end_ns)),
            _ => None,
        })
        .collect();
    let recorded: Vec<(WorkKind, u64, u64, u64)> = calls
        .iter()
        .map(|c| {
            let what = match c.kind {
                Mm::Commit => WorkKind::Commit,
                Mm::Decommit => WorkKind::Decommit,
            };
            (what, c.len, c.start_ns, c.end_ns)
        })
        .collect();
    assert_eq!(ran, recorded, "the gate's log names every operation");
}

#[test]
fn gated_commit_and_decommit_never_run_outside_a_grant() {
    for (name, engine) in engines() {
        for path in PATHS {
            eprintln!("{name}, {path:?}");
            let s = setup(engine.clone(), path);
            let space = s.pool.address_space();
            let sizes = [3 * MIB + 4096, MIB, 5 * MIB / 2];
            let bufs: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let flags = if i == 1 {
                        BufferFlags::READ_ONLY
                    } else {
                        BufferFlags::DEFAULT
                    };
                    let b = space.alloc(n, flags).unwrap();
                    space.write(b, 0, &pattern(i as u64, n as usize)).unwrap();
                    b
                })
                .collect();
            s.gate.set_recording(true);
            s.device.armed.store(true, Ordering::Release);
            let rounds = 3;
            for _ in 0..rounds {
                if matches!(path, Path::Hashed | Path::Plain) {
                    // Everything runs on the gated worker: page-outs may be in flight together.
                    for t in space.page_out_all_async().unwrap() {
                        t.finish().unwrap();
                    }
                    let tickets: Vec<_> = bufs
                        .iter()
                        .map(|&b| space.page_in_async(b).unwrap())
                        .collect();
                    for t in tickets {
                        t.finish().unwrap();
                    }
                } else {
                    // The tier's and the staging ring's threads advance the fake clock too: one operation at a
                    // time, so that no other thread's time runs into a gated operation's.
                    for &b in &bufs {
                        space.page_out(b).unwrap();
                    }
                    for &b in &bufs {
                        space.page_in(b).unwrap();
                    }
                }
            }
            s.device.armed.store(false, Ordering::Release);
            s.gate.set_recording(false);
            let calls = s.device.calls();
            let events = s.gate.take_events();
            let commits = calls.iter().filter(|c| c.kind == Mm::Commit).count();
            let decommits = calls.iter().filter(|c| c.kind == Mm::Decommit).count();
            assert_eq!(
                commits,
                rounds * bufs.len(),
                "{name} {path:?}: one per page-in"
            );
            assert_eq!(
                decommits,
                rounds * bufs.len(),
                "{name} {path:?}: one per page-out"
            );
            assert!(calls.iter().all(|c| !c.failed));
            assert_all_gated(&s, &calls, &events);
            assert!(s.gate.stats().operations >= 2 * (rounds * bufs.len()) as u64);
            assert!(
                events.iter().any(|e| matches!(
                    e.kind,
                    GateEventKind::Ran {
                        what: WorkKind::Transfer | WorkKind::Copy,
                        ..
                    }
                )),
                "{name} {path:?}: transfers are logged too"
            );
            assert!(
                events.iter().any(|e| e.kind == GateEventKind::Waited),
                "{name} {path:?}: the gate had to wait"
            );
            check_filled(&space, &bufs, &sizes, 0, &format!("{name} {path:?}"));
            for b in bufs {
                space.free(b).unwrap();
            }
            assert_eq!(s.pool.stats().used_bytes, 0);
            assert!(s.clock.now_ns() > T0);
        }
    }
}

#[test]
fn a_failed_gated_commit_fails_the_page_in_and_loses_nothing() {
    for (name, engine) in engines() {
        for path in PATHS {
            eprintln!("{name}, {path:?}");
            let s = setup(engine.clone(), path);
            let space = s.pool.address_space();
            let n = 3 * MIB + 4096;
            let data = pattern(7, n as usize);
            let b = space.alloc(n, BufferFlags::DEFAULT).unwrap();
            space.write(b, 0, &data).unwrap();
            space.page_out(b).unwrap();
            let store_free = s.pool.store().free_bytes();
            let tier_free = s.pool.host_tier_bytes();
            assert_eq!(s.pool.stats().used_bytes, 0);
            s.gate.set_recording(true);
            s.device.armed.store(true, Ordering::Release);
            s.device.fail_next_commit.store(true, Ordering::Release);
            let err = space.page_in(b).unwrap_err();
            assert!(
                matches!(err, PagerError::Device(AccelError::OutOfMemory(_))),
                "{name} {path:?}: {err}"
            );
            assert!(err.to_string().contains("injected"), "{err}");
            // Still paged out with its stored copy; the charge is refunded and the memory given back (by a gated
            // decommit after the failed commit).
            let info = space.info(b).unwrap();
            assert_eq!(info.state, BufferState::PagedOut);
            assert!(info.stored);
            assert_eq!(s.pool.stats().used_bytes, 0, "{name} {path:?}");
            assert_eq!(space.charged_bytes(), 0);
            assert_eq!(s.pool.store().free_bytes(), store_free);
            assert_eq!(s.pool.host_tier_bytes(), tier_free);
            let calls = s.device.calls();
            assert_eq!(
                calls.iter().map(|c| (c.kind, c.failed)).collect::<Vec<_>>(),
                vec![(Mm::Commit, true), (Mm::Decommit, false)],
                "{name} {path:?}"
            );
            assert_all_gated(&s, &calls, &s.gate.take_events());
            // The next page-in works and every byte is there.
            space.page_in(b).unwrap();
            let mut back = vec![0u8; data.len()];
            space.read(b, 0, &mut back).unwrap();
            assert!(back == data, "{name} {path:?}: bytes intact");
            space.free(b).unwrap();
            assert_eq!(s.pool.stats().used_bytes, 0);
            assert_eq!(s.pool.store().free_bytes(), s.pool.store().capacity_bytes());
            if let Some((free, total)) = s.pool.host_tier_bytes() {
                assert_eq!(free, total);
            }
        }
    }
}

/// `page_in_async` only queues the gated commit: it returns while the commit is still held back, and the commit
/// runs on the gated worker.
#[test]
fn page_in_async_does_not_wait_for_the_gated_commit() {
    let (_, engine) = engines().remove(0);
    let s = setup(engine, Path::Hashed);
    let space = s.pool.address_space();
    let data = pattern(3, (2 * MIB) as usize);
    let b = space.alloc(2 * MIB, BufferFlags::DEFAULT).unwrap();
    space.write(b, 0, &data).unwrap();
    space.page_out(b).unwrap();
    let (release, held) = mpsc::channel();
    *s.device.hold_commit.lock().unwrap() = Some(held);
    s.device.armed.store(true, Ordering::Release);
    let ticket = space.page_in_async(b).unwrap();
    // Returned with the commit still held (a commit in this thread would have waited here for a minute).
    assert_eq!(space.info(b).unwrap().state, BufferState::PagingIn);
    release.send(()).unwrap();
    ticket.finish().unwrap();
    assert!(!s.device.held_too_long.load(Ordering::Acquire));
    let calls = s.device.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].thread.as_deref(), Some("oversub-gated-io"));
    let mut back = vec![0u8; data.len()];
    space.read(b, 0, &mut back).unwrap();
    assert!(back == data);
}

/// Without measurement or given costs, commit and decommit cost one chunk time each; with measurement they are
/// positive, and the decommit grows with the length.
#[test]
fn the_pool_measures_the_costs_of_commit_and_decommit() {
    let arbiter = Arbiter::in_process(ArbiterConfig {
        chunk_time: Some(Duration::from_millis(3)),
        ..ArbiterConfig::default()
    })
    .unwrap();
    let gate = Arc::new(Gate::new(arbiter));
    let pool = Pool::new(
        PoolConfig::new(8 * MIB)
            .gate(gate.clone())
            .gate_calibration_samples(0),
        Arc::new(HostMemory::default()),
        common::store_with(engines().remove(0).1, 16 * MIB, 1 << 20),
    )
    .unwrap();
    let costs = pool.gate_costs().unwrap();
    assert_eq!(costs.chunk_time, Duration::from_millis(3));
    assert_eq!(costs.commit_time(64 * MIB), Duration::from_millis(3));
    assert_eq!(costs.decommit_time(4096), Duration::from_millis(3));
    drop(pool);
    let pool = Pool::new(
        PoolConfig::new(8 * MIB)
            .gate(gate)
            .gate_calibration_samples(2),
        Arc::new(HostMemory::default()),
        common::store_with(engines().remove(0).1, 16 * MIB, 1 << 20),
    )
    .unwrap();
    let costs = pool.gate_costs().unwrap();
    assert!(costs.commit.fixed > Duration::ZERO, "{costs:?}");
    assert!(costs.decommit.fixed > Duration::ZERO, "{costs:?}");
    assert!(costs.decommit.per_mib > Duration::ZERO, "{costs:?}");
    assert!(costs.decommit_time(4096) >= costs.decommit.fixed);
    assert!(costs.decommit_time(1 << 30) > costs.decommit_time(4096));
    assert_eq!(pool.store().free_bytes(), pool.store().capacity_bytes());
}
