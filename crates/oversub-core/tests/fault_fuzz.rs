//! A countdown fault fuzzer (redb's pattern): the pager is driven by random operations checked against a model
//! (each buffer's bytes, state and what the pool and the store should hold), while the store's engine fails the
//! N-th request for a random N, again and again. Every configuration the pager has is covered: both engines, with
//! and without the host tier, checksums and an arbiter gate, and the staging path of a device the host cannot
//! address. After every operation the accounting must match the model; after the last free, the pool charges 0
//! bytes, the store holds 0 allocated bytes and the host tier is empty. No byte may change, and a failed operation
//! must leave the buffer where it was.
//!
//! `OVERSUB_FUZZ_OPS` sets the operations per configuration (default 1500, enough for CI); issue 17's target of
//! 10⁶ operations is `OVERSUB_FUZZ_OPS=70000` (16 configurations).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{engines, pattern, MIB};
use oversub_accel::cuda::testing::FakeDriver;
use oversub_accel::cuda::CudaMemory;
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_arbiter::{Arbiter, ArbiterConfig, Gate};
use oversub_core::{
    AddressSpace, Buffer, BufferFlags, BufferState, HostTierConfig, PagerError, Pool, PoolConfig,
    StagingConfig, Ticket,
};
use oversub_io::{IoCallback, IoCountersSnapshot, IoEngine, IoError, IoRequest};

/// Fails the N-th request for a random N in `1..=max_gap`, then draws the next N: a store that keeps failing now
/// and then. The failed request is not performed; the rest of its batch is, and the batch completes with the error
/// only after them (the engine contract).
#[derive(Debug)]
struct CountdownEngine {
    inner: Arc<dyn IoEngine>,
    countdown: AtomicU64,
    rng: Mutex<u64>,
    max_gap: u64,
    injected: AtomicU64,
}

impl CountdownEngine {
    fn new(inner: Arc<dyn IoEngine>, seed: u64, max_gap: u64) -> Self {
        let e = CountdownEngine {
            inner,
            countdown: AtomicU64::new(0),
            rng: Mutex::new(seed | 1),
            max_gap,
            injected: AtomicU64::new(0),
        };
        e.rearm();
        e
    }

    fn rearm(&self) {
        let mut x = self.rng.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        self.countdown
            .store(1 + *x % self.max_gap, Ordering::Relaxed);
    }

    fn fails_now(&self) -> bool {
        if self.countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.rearm();
            self.injected.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

// SAFETY: forwards to a real engine; an injected failure completes only after the inner batch (the surviving
// requests) finished, or without submitting anything.
unsafe impl IoEngine for CountdownEngine {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    unsafe fn submit(&self, requests: Vec<IoRequest>, on_done: IoCallback) -> Result<(), IoError> {
        let mut failed = false;
        let kept: Vec<IoRequest> = requests
            .into_iter()
            .filter(|_| {
                let fail = self.fails_now();
                failed |= fail;
                !fail
            })
            .collect();
        let cb: IoCallback = if failed {
            Box::new(move |_| on_done(Err(IoError::Injected { nth: 0 })))
        } else {
            on_done
        };
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.submit(kept, cb) }
    }

    fn counters(&self) -> IoCountersSnapshot {
        self.inner.counters()
    }
}

#[derive(Debug, Clone, Copy)]
struct Config {
    host_tier: bool,
    gate: bool,
    checksums: bool,
    staging: bool,
}

use oversub_base::rng::Rng;

/// What the model knows of one buffer.
struct Model {
    buffer: Buffer,
    bytes: Vec<u8>,
    read_only: bool,
    /// Paged out (the model's view; operations in flight are held in `pending`).
    out: bool,
}

const STORE_BYTES: u64 = 48 * MIB;
const CAPACITY: u64 = 12 * MIB;
const GRANULE: usize = 64 << 10;

fn build(engine: Arc<dyn IoEngine>, config: Config, seed: u64) -> (Pool, Arc<CountdownEngine>) {
    let faulty = Arc::new(CountdownEngine::new(engine, seed, 40));
    let store = common::store_with(faulty.clone(), STORE_BYTES, 256 << 10);
    let device: Arc<dyn DeviceMemory> = if config.staging {
        let fake = Arc::new(FakeDriver::new(4 * CAPACITY, GRANULE));
        Arc::new(CudaMemory::with_driver(fake).unwrap())
    } else {
        Arc::new(HostMemory::default())
    };
    let mut pool_config = PoolConfig::new(CAPACITY)
        .verify_checksums(config.checksums)
        .staging(StagingConfig {
            chunk_bytes: 256 << 10,
            chunks: 4,
            pinned: true,
            direct_storage: true,
        });
    if config.host_tier {
        pool_config = pool_config.host_tier(HostTierConfig {
            capacity_bytes: 3 * MIB,
            pinned: false,
        });
    }
    if config.gate {
        let arbiter = Arbiter::in_process(ArbiterConfig {
            chunk_bytes: 128 << 10,
            chunk_time: Some(Duration::from_micros(200)),
            ..ArbiterConfig::default()
        })
        .unwrap();
        pool_config = pool_config
            .gate(Arc::new(Gate::new(arbiter)))
            .gate_calibration_samples(0);
    }
    let pool = Pool::new(pool_config, device, store).unwrap();
    (pool, faulty)
}

/// Errors a random operation may meet: refusals of the model's own misuse, the injected failures and running
/// out of room. Anything else (a checksum mismatch above all) fails the test.
fn tolerated(e: &PagerError) -> bool {
    matches!(
        e,
        PagerError::Store(IoError::Injected { .. })
            | PagerError::Store(IoError::StoreFull { .. })
            | PagerError::OutOfMemory { .. }
            | PagerError::ReadOnly(_)
    )
}

fn read_all(space: &AddressSpace, m: &Model) -> Result<Vec<u8>, PagerError> {
    let mut out = vec![0u8; m.bytes.len()];
    space.read_direct(m.buffer, 0, &mut out)?;
    Ok(out)
}

/// Pool and store occupancy must be what the live buffers account for.
fn check_accounting(pool: &Pool, space: &AddressSpace, models: &BTreeMap<u64, Model>) {
    let mut resident = 0u64;
    let mut on_store = 0u64;
    let mut in_tier = 0u64;
    let align = pool.store().alignment() as u64;
    for m in models.values() {
        let info = space.info(m.buffer).unwrap();
        assert_eq!(
            info.state == BufferState::PagedOut,
            m.out,
            "{} state {:?}",
            m.buffer,
            info.state
        );
        if info.state == BufferState::Resident {
            resident += info.reserved_bytes;
        }
        if info.stored {
            let bytes = info.size_bytes.next_multiple_of(align);
            if info.in_host_tier {
                in_tier += 1;
            } else {
                on_store += bytes;
            }
        }
    }
    let stats = pool.stats();
    assert_eq!(stats.used_bytes, resident, "pool charge");
    assert_eq!(space.charged_bytes(), resident, "space charge");
    assert_eq!(
        stats.store_capacity_bytes - stats.store_free_bytes,
        on_store,
        "store allocation"
    );
    if in_tier == 0 {
        if let Some((free, total)) = pool.host_tier_bytes() {
            assert_eq!(free, total, "host tier holds bytes of no buffer");
        }
    }
}

/// The fuzzer's state: what each live buffer must hold, and the tickets in flight.
struct Fuzz<'a> {
    space: &'a AddressSpace,
    models: BTreeMap<u64, Model>,
    next_id: u64,
    /// Tickets in flight, with the model entry they belong to and whether the buffer was freed meanwhile.
    pending: Vec<(u64, Ticket, bool)>,
}

impl Fuzz<'_> {
    fn in_flight(&self, id: u64) -> bool {
        self.pending.iter().any(|p| p.0 == id)
    }

    /// The buffer of `id` now is where its model says it is.
    fn learn_state(&mut self, id: u64) {
        let m = self.models.get_mut(&id).unwrap();
        m.out = self.space.info(m.buffer).unwrap().state == BufferState::PagedOut;
    }

    /// A new buffer of a random size, filled with `pattern(fill_seed, ..)`.
    fn alloc(&mut self, rng: &mut Rng, fill_seed: u64) {
        let size = 1 + rng.below(700 << 10) as usize;
        let read_only = rng.below(4) == 0;
        let flags = if read_only {
            BufferFlags::READ_ONLY
        } else {
            BufferFlags::DEFAULT
        };
        match self.space.alloc(size as u64, flags) {
            Ok(buffer) => {
                let bytes = pattern(fill_seed, size);
                self.space.write(buffer, 0, &bytes).unwrap();
                let model = Model {
                    buffer,
                    bytes,
                    read_only,
                    out: false,
                };
                self.models.insert(self.next_id, model);
                self.next_id += 1;
            }
            Err(e) if tolerated(&e) => {}
            Err(e) => panic!("alloc: {e}"),
        }
    }

    /// Frees `id`, also while in flight (released when the ticket ends).
    fn free(&mut self, id: u64) {
        let m = self.models.remove(&id).unwrap();
        self.space.free(m.buffer).unwrap();
        for p in self.pending.iter_mut().filter(|p| p.0 == id) {
            p.2 = true;
        }
    }

    /// Pages `id` out, sync or async; false where there was nothing to do.
    fn page_out(&mut self, rng: &mut Rng, id: u64) -> bool {
        let space = self.space;
        let m = self.models.get_mut(&id).unwrap();
        if m.out {
            assert!(matches!(
                space.page_out(m.buffer),
                Err(PagerError::AlreadyPagedOut(_))
            ));
            return false;
        }
        if rng.below(2) == 0 {
            match space.page_out(m.buffer) {
                Ok(()) => m.out = true,
                Err(e) if tolerated(&e) => {}
                Err(e) => panic!("page_out: {e}"),
            }
        } else {
            match space.page_out_async(m.buffer) {
                Ok(t) => self.pending.push((id, t, false)),
                Err(e) if tolerated(&e) => {}
                Err(e) => panic!("page_out_async: {e}"),
            }
        }
        true
    }

    /// Pages `id` in, sync or async; false where there was nothing to do.
    fn page_in(&mut self, rng: &mut Rng, id: u64) -> bool {
        let space = self.space;
        let m = self.models.get_mut(&id).unwrap();
        if !m.out {
            return false;
        }
        if rng.below(2) == 0 {
            match space.page_in(m.buffer) {
                Ok(()) => m.out = false,
                Err(e) if tolerated(&e) => {}
                Err(e) => panic!("page_in: {e}"),
            }
        } else {
            match space.page_in_async(m.buffer) {
                Ok(t) => self.pending.push((id, t, false)),
                Err(e) if tolerated(&e) => {}
                Err(e) => panic!("page_in_async: {e}"),
            }
        }
        true
    }

    /// Finishes (or drops) a ticket in flight; false where there was none, or its buffer was freed.
    fn finish_one(&mut self, rng: &mut Rng) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let (id, ticket, freed) = self
            .pending
            .swap_remove(rng.below(self.pending.len() as u64) as usize);
        let kind = ticket.kind();
        let result = if rng.below(4) == 0 {
            drop(ticket);
            None
        } else {
            Some(ticket.finish())
        };
        if freed {
            return false;
        }
        let m = &self.models[&id];
        let state = self.space.info(m.buffer).unwrap().state;
        let page_out = kind == oversub_core::OpKind::PageOut;
        match result {
            Some(Err(e)) if !tolerated(&e) => panic!("finish {kind:?}: {e}"),
            // Success moves the buffer; a failure leaves it where it was.
            Some(Ok(())) => assert_eq!(state == BufferState::PagedOut, page_out),
            Some(Err(_)) => assert_eq!(state == BufferState::PagedOut, !page_out),
            // A dropped ticket's outcome is learnt from the state.
            None => {}
        }
        self.models.get_mut(&id).unwrap().out = state == BufferState::PagedOut;
        true
    }

    /// Writes part of `id`: in memory when resident, straight to the store when paged out.
    fn write(&mut self, rng: &mut Rng, id: u64) {
        let space = self.space;
        let m = self.models.get_mut(&id).unwrap();
        let len = m.bytes.len() as u64;
        let off = rng.below(len);
        let n = 1 + rng.below((len - off).min(300 << 10));
        let data = pattern(rng.next_u64(), n as usize);
        let direct = m.out;
        let mut result = if direct {
            space.write_direct(m.buffer, off, &data)
        } else {
            space.write(m.buffer, off, &data)
        };
        // A failed direct write may have written part of the range: retry until it lands, as a user would, so the
        // model knows the bytes.
        let mut tries = 0;
        while matches!(&result, Err(PagerError::Store(IoError::Injected { .. }))) && tries < 20 {
            result = space.write_direct(m.buffer, off, &data);
            tries += 1;
        }
        match result {
            Ok(()) => m.bytes[off as usize..(off + n) as usize].copy_from_slice(&data),
            Err(PagerError::ReadOnly(_)) => assert!(m.read_only),
            Err(e) => panic!("write (direct: {direct}): {e}"),
        }
    }

    /// Reads `id` whole (from memory or straight from the store) and compares.
    fn read(&self, id: u64) {
        let m = &self.models[&id];
        match read_all(self.space, m) {
            Ok(back) => assert!(back == m.bytes, "bytes of {} changed", m.buffer),
            Err(e) if tolerated(&e) => {}
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Finishes every ticket in flight; with `strict`, each must end well or with a tolerated error.
    fn settle(&mut self, strict: bool) {
        for (id, t, freed) in std::mem::take(&mut self.pending) {
            let r = t.finish();
            if let (true, Err(e)) = (strict, &r) {
                assert!(tolerated(e), "finish: {e}");
            }
            if !freed {
                self.learn_state(id);
            }
        }
    }

    /// Pages everything out or in (finishing what is in flight first, as page-all skips it).
    fn page_all(&mut self, rng: &mut Rng) {
        self.settle(true);
        let r = if rng.below(2) == 0 {
            self.space.page_out_all()
        } else {
            self.space.page_in_all()
        };
        if let Err(e) = &r {
            assert!(tolerated(e), "page all: {e}");
        }
        let ids: Vec<u64> = self.models.keys().copied().collect();
        for id in ids {
            self.learn_state(id);
        }
    }
}

fn fuzz_one(engine: Arc<dyn IoEngine>, config: Config, seed: u64, ops: usize) -> u64 {
    let (pool, faulty) = build(engine, config, seed);
    let space = pool.address_space();
    let mut rng = Rng::new(seed | 1);
    let mut fuzz = Fuzz {
        space: &space,
        models: BTreeMap::new(),
        next_id: 0,
        pending: Vec::new(),
    };
    for step in 0..ops {
        let ids: Vec<u64> = fuzz.models.keys().copied().collect();
        let pick = |rng: &mut Rng| -> Option<u64> {
            (!ids.is_empty()).then(|| ids[rng.below(ids.len() as u64) as usize])
        };
        // An operation on a buffer in flight is skipped, as is the check after a skipped step.
        let ran = match rng.below(12) {
            0 | 1 if fuzz.models.len() < 10 => {
                fuzz.alloc(&mut rng, seed ^ step as u64);
                true
            }
            2 => {
                if let Some(id) = pick(&mut rng) {
                    fuzz.free(id);
                }
                true
            }
            3 | 4 => match pick(&mut rng).filter(|&id| !fuzz.in_flight(id)) {
                Some(id) => fuzz.page_out(&mut rng, id),
                None => false,
            },
            5 | 6 => match pick(&mut rng).filter(|&id| !fuzz.in_flight(id)) {
                Some(id) => fuzz.page_in(&mut rng, id),
                None => false,
            },
            7 | 8 => fuzz.finish_one(&mut rng),
            9 => match pick(&mut rng).filter(|&id| !fuzz.in_flight(id)) {
                Some(id) => {
                    fuzz.write(&mut rng, id);
                    true
                }
                None => false,
            },
            10 => match pick(&mut rng).filter(|&id| !fuzz.in_flight(id)) {
                Some(id) => {
                    fuzz.read(id);
                    true
                }
                None => false,
            },
            _ => {
                fuzz.page_all(&mut rng);
                true
            }
        };
        if ran && fuzz.pending.is_empty() {
            check_accounting(&pool, &space, &fuzz.models);
        }
    }
    // Settle, verify every byte, free everything: nothing may stay charged or allocated.
    fuzz.settle(false);
    let models = std::mem::take(&mut fuzz.models);
    check_accounting(&pool, &space, &models);
    for m in models.values() {
        let back = loop {
            match read_all(&space, m) {
                Ok(b) => break b,
                Err(e) if tolerated(&e) => continue,
                Err(e) => panic!("final read: {e}"),
            }
        };
        assert!(back == m.bytes, "bytes of {} changed", m.buffer);
        space.free(m.buffer).unwrap();
    }
    let stats = pool.stats();
    assert_eq!(stats.used_bytes, 0, "pool still charges bytes");
    assert_eq!(
        stats.store_free_bytes, stats.store_capacity_bytes,
        "store still holds allocated bytes"
    );
    if let Some((free, total)) = pool.host_tier_bytes() {
        assert_eq!(free, total, "host tier still holds bytes");
    }
    faulty.injected.load(Ordering::Relaxed)
}

fn ops_per_config() -> usize {
    std::env::var("OVERSUB_FUZZ_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

#[test]
fn random_operations_with_injected_faults_lose_and_leak_nothing() {
    let ops = ops_per_config();
    let mut total_ops = 0usize;
    let mut injected = 0u64;
    for (name, engine) in engines() {
        for bits in 0..8u32 {
            let config = Config {
                host_tier: bits & 1 != 0,
                gate: bits & 2 != 0,
                checksums: bits & 4 != 0,
                staging: false,
            };
            let seed = 0x5EED_0000 + u64::from(bits) * 7919 + name.len() as u64;
            eprintln!("{name} {config:?}");
            injected += fuzz_one(engine.clone(), config, seed, ops);
            total_ops += ops;
        }
    }
    eprintln!("{total_ops} operations, {injected} injected I/O failures");
    assert!(injected > 0, "no fault was injected");
}

#[test]
fn staged_paging_with_injected_faults_loses_and_leaks_nothing() {
    let ops = ops_per_config();
    for (name, engine) in engines() {
        for host_tier in [false, true] {
            let config = Config {
                host_tier,
                gate: false,
                checksums: true,
                staging: true,
            };
            eprintln!("{name} {config:?}");
            fuzz_one(engine.clone(), config, 0xCAFE + host_tier as u64, ops / 2);
        }
    }
}

/// Several threads free buffers while others page them in and out (singly and all at once): whatever the
/// interleaving, the pool and the store end empty once every buffer is freed.
#[test]
fn frees_racing_operations_from_several_threads_leak_nothing() {
    let ops = ops_per_config();
    for (name, engine) in engines() {
        eprintln!("{name}");
        let (pool, _) = build(
            engine,
            Config {
                host_tier: true,
                gate: false,
                checksums: true,
                staging: false,
            },
            0xF00D,
        );
        let space = pool.address_space();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let space = space.clone();
                scope.spawn(move || {
                    let mut rng = Rng::new(0x1234 + t);
                    let mut mine: Vec<Buffer> = Vec::new();
                    for _ in 0..ops {
                        match rng.below(7) {
                            0 if mine.len() < 4 => {
                                let size = 1 + rng.below(2 * MIB);
                                if let Ok(b) = space.alloc(size, BufferFlags::DEFAULT) {
                                    mine.push(b);
                                }
                            }
                            1 if !mine.is_empty() => {
                                let b = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                                space.free(b).unwrap();
                            }
                            2 => {
                                let _ = space.page_in_all();
                            }
                            3 => {
                                let _ = space.page_out_all();
                            }
                            _ if !mine.is_empty() => {
                                let b = mine[rng.below(mine.len() as u64) as usize];
                                // Start an operation and free the buffer before it ends, now and then.
                                let t = if rng.below(2) == 0 {
                                    space.page_out_async(b)
                                } else {
                                    space.page_in_async(b)
                                };
                                if rng.below(3) == 0 {
                                    mine.retain(|&x| x != b);
                                    space.free(b).unwrap();
                                }
                                drop(t);
                            }
                            _ => {}
                        }
                    }
                    for b in mine {
                        space.free(b).unwrap();
                    }
                });
            }
        });
        assert!(space.buffers().is_empty());
        let stats = pool.stats();
        assert_eq!(stats.used_bytes, 0, "pool still charges bytes");
        assert_eq!(stats.store_free_bytes, stats.store_capacity_bytes);
        let (free, total) = pool.host_tier_bytes().unwrap();
        assert_eq!(free, total);
    }
}
