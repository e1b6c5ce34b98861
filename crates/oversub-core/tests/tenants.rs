//! Several tenants in one pool: the contention-aware plan (quotas), buffers past a victim's quota living on the
//! store, and direct range reads and writes that return the same bytes as resident access. Every test runs on
//! each I/O engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{engines, pattern, pool_with, MIB};
use oversub_core::{BufferFlags, BufferState, PagerError, TenantConfig};
use proptest::prelude::*;

#[test]
fn plan_keeps_high_priority_tenants_whole_and_fits_the_capacity() {
    for (name, engine) in engines() {
        // Three tenants of 32 MiB in 72 MiB (1.33x oversubscribed): the lowest-priority one keeps 8 MiB.
        let pool = pool_with(engine, 72 * MIB, 256 * MIB);
        let a = pool
            .tenant_space(TenantConfig::new("a", 32 * MIB, 3.0))
            .unwrap();
        let b = pool
            .tenant_space(TenantConfig::new("b", 32 * MIB, 2.0))
            .unwrap();
        let c = pool
            .tenant_space(TenantConfig::new("c", 32 * MIB, 1.0))
            .unwrap();
        let q = pool.tenant_quotas();
        assert_eq!(
            q.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"],
            "{name}"
        );
        assert!(!q[0].victim && !q[1].victim && q[2].victim);
        assert_eq!(q[2].resident_limit_bytes, 8 * MIB);
        assert_eq!(q[2].alpha, 0.75);
        assert!(q.iter().map(|t| t.resident_limit_bytes).sum::<u64>() <= 72 * MIB);
        assert_eq!(a.resident_limit(), Some(32 * MIB));
        assert_eq!(c.resident_limit(), Some(8 * MIB));

        // Everyone allocates their whole demand in 4 MiB buffers: the victim's beyond 8 MiB start on the store.
        for space in [&a, &b, &c] {
            for i in 0..8u64 {
                let buf = space.alloc(4 * MIB, BufferFlags::DEFAULT).unwrap();
                let data = pattern(u64::from(space.id()) * 100 + i, 4096);
                space.write_direct(buf, 4 * MIB - 4096, &data).unwrap();
            }
        }
        let states: Vec<BufferState> = c
            .buffers()
            .iter()
            .map(|&b| c.info(b).unwrap().state)
            .collect();
        assert_eq!(
            states
                .iter()
                .filter(|s| **s == BufferState::Resident)
                .count(),
            2,
            "{name}"
        );
        assert_eq!(pool.stats().used_bytes, 72 * MIB);
        assert_eq!(c.charged_bytes(), 8 * MIB);

        // A page-in past the victim's quota is refused and changes nothing; the bytes are there directly.
        let on_store = c.buffers()[5];
        match c.page_in(on_store) {
            Err(PagerError::QuotaExceeded {
                buffer,
                limit_bytes,
                ..
            }) => {
                assert_eq!(buffer, Some(on_store));
                assert_eq!(limit_bytes, 8 * MIB);
            }
            other => panic!("{name}: expected QuotaExceeded, got {other:?}"),
        }
        assert_eq!(c.info(on_store).unwrap().state, BufferState::PagedOut);
        let mut back = vec![0u8; 4096];
        c.read_direct(on_store, 4 * MIB - 4096, &mut back).unwrap();
        assert_eq!(back, pattern(u64::from(c.id()) * 100 + 5, 4096));
        // ...and the rest of a store-allocated buffer reads as zeros, like one allocated in memory.
        c.read_direct(on_store, 0, &mut back).unwrap();
        assert!(back.iter().all(|&x| x == 0));

        // Paging one of its resident buffers out makes room for another.
        c.page_out(c.buffers()[0]).unwrap();
        c.page_in(on_store).unwrap();
        let mut tail = vec![0u8; 4096];
        c.read(on_store, 4 * MIB - 4096, &mut tail).unwrap();
        assert_eq!(tail, pattern(u64::from(c.id()) * 100 + 5, 4096));
    }
}

#[test]
fn arrivals_shrink_quotas_and_departures_restore_them() {
    for (name, engine) in engines() {
        let pool = pool_with(engine, 16 * MIB, 128 * MIB);
        let low = pool
            .tenant_space(TenantConfig::new("low", 16 * MIB, 1.0))
            .unwrap();
        let bufs: Vec<_> = (0..4u64)
            .map(|i| {
                let b = low.alloc(4 * MIB, BufferFlags::DEFAULT).unwrap();
                low.write(b, 0, &pattern(i, 4 * MIB as usize)).unwrap();
                b
            })
            .collect();
        // Touch buffer 0 last, so it is the most recently used and stays.
        let mut probe = [0u8; 1];
        low.read(bufs[0], 0, &mut probe).unwrap();
        assert_eq!(low.resident_limit(), Some(16 * MIB));

        // A higher-priority tenant of 8 MiB arrives: the low one may keep 8 MiB and gives up its LRU buffers.
        let high = pool
            .tenant_space(TenantConfig::new("high", 8 * MIB, 5.0))
            .unwrap();
        assert_eq!(low.resident_limit(), Some(8 * MIB), "{name}");
        assert_eq!(low.charged_bytes(), 8 * MIB);
        assert_eq!(low.info(bufs[0]).unwrap().state, BufferState::Resident);
        assert_eq!(low.info(bufs[1]).unwrap().state, BufferState::PagedOut);
        let hb = high.alloc(8 * MIB, BufferFlags::DEFAULT).unwrap();
        assert_eq!(high.info(hb).unwrap().state, BufferState::Resident);

        // Nothing was lost: every buffer reads back, directly or resident.
        for (i, &b) in bufs.iter().enumerate() {
            let mut out = vec![0u8; 4 * MIB as usize];
            low.read_direct(b, 0, &mut out).unwrap();
            assert!(
                out == pattern(i as u64, 4 * MIB as usize),
                "{name}: buffer {i}"
            );
        }

        // The high-priority tenant leaves: the low one may hold its whole demand again.
        drop(high);
        assert_eq!(low.resident_limit(), Some(16 * MIB), "{name}");
        assert_eq!(pool.tenant_quotas().len(), 1);
        low.page_in_all().unwrap();
        assert_eq!(low.charged_bytes(), 16 * MIB);
    }
}

#[test]
fn impossible_tenants_are_refused() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 16 * MIB, 64 * MIB);
    let e = pool
        .tenant_space(TenantConfig::new("huge", 65 * MIB, 1.0))
        .unwrap_err();
    assert!(e.to_string().contains("swap store"), "{e}");
    let e = pool
        .tenant_space(TenantConfig::new("empty", 0, 1.0))
        .unwrap_err();
    assert!(matches!(e, PagerError::InvalidSize(_)), "{e}");
    let e = pool
        .tenant_space(TenantConfig::new("nan", MIB, f64::NAN))
        .unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");
    assert!(
        pool.tenant_quotas().is_empty(),
        "refused tenants leave no trace"
    );
}

#[test]
fn direct_access_edges() {
    for (name, engine) in engines() {
        let pool = pool_with(engine, 16 * MIB, 64 * MIB);
        let s = pool.address_space();
        let b = s.alloc(10_000, BufferFlags::DEFAULT).unwrap();
        s.write(b, 0, &pattern(7, 10_000)).unwrap();
        s.page_out(b).unwrap();
        let mut out = vec![0u8; 10];
        let e = s.read_direct(b, 9_995, &mut out).unwrap_err();
        assert!(matches!(e, PagerError::OutOfBounds { .. }), "{name}: {e}");
        s.read_direct(b, 9_990, &mut out).unwrap();
        assert_eq!(out, pattern(7, 10_000)[9_990..]);
        s.read_direct(b, 0, &mut []).unwrap();
        // With checksums on, a direct write must not make the next page-in fail verification.
        s.write_direct(b, 1, b"xyz").unwrap();
        s.page_in(b).unwrap();
        let mut head = [0u8; 5];
        s.read(b, 0, &mut head).unwrap();
        let p = pattern(7, 5);
        assert_eq!(head, [p[0], b'x', b'y', b'z', p[4]]);
        // Aligned ranges into aligned memory go without a bounce buffer; same bytes either way.
        let big = s.alloc(3 * MIB, BufferFlags::DEFAULT).unwrap();
        let data = pattern(9, 3 * MIB as usize);
        s.write(big, 0, &data).unwrap();
        s.page_out(big).unwrap();
        let mut aligned = oversub_io::AlignedBuf::new(2 * MIB as usize, 4096).unwrap();
        s.read_direct(big, 4096, aligned.as_mut_slice()).unwrap();
        assert!(
            aligned.as_slice() == &data[4096..4096 + 2 * MIB as usize],
            "{name}"
        );
        aligned.as_mut_slice().fill(0xAB);
        s.write_direct(big, 8192, aligned.as_slice()).unwrap();
        s.page_in(big).unwrap();
        let mut all = vec![0u8; 3 * MIB as usize];
        s.read(big, 0, &mut all).unwrap();
        assert!(
            all[..8192] == data[..8192]
                && all[8192 + 2 * MIB as usize..] == data[8192 + 2 * MIB as usize..]
        );
        assert!(
            all[8192..8192 + 2 * MIB as usize]
                .iter()
                .all(|&x| x == 0xAB),
            "{name}"
        );
        // Read-only buffers on the store cannot change.
        let ro = s.alloc(4096, BufferFlags::READ_ONLY).unwrap();
        s.page_out(ro).unwrap();
        assert!(matches!(
            s.write_direct(ro, 0, b"a"),
            Err(PagerError::ReadOnly(_))
        ));
        // In flight: refused.
        let t = s.page_out_async(b).unwrap();
        let r = s.read_direct(b, 0, &mut head);
        assert!(
            r.is_ok() || matches!(r, Err(PagerError::OperationInFlight { .. })),
            "{r:?}"
        );
        t.finish().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Random unaligned ranges: direct reads of a paged-out buffer return what resident reads return, and
    /// direct writes land exactly where resident writes would.
    #[test]
    fn direct_ranges_match_resident_access(
        size in 1usize..(3 << 20),
        ops in proptest::collection::vec((any::<bool>(), 0.0f64..1.0, 0.0f64..1.0, any::<u64>()), 1..6),
    ) {
        for (name, engine) in engines() {
            let pool = pool_with(engine, 8 * MIB, 32 * MIB);
            let s = pool.address_space();
            let b = s.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
            let mut model = pattern(size as u64, size);
            s.write(b, 0, &model).unwrap();
            s.page_out(b).unwrap();
            for &(write, x, y, seed) in &ops {
                let start = ((x * size as f64) as usize).min(size - 1);
                let len = (((y * (size - start) as f64) as usize).max(1)).min(size - start);
                if write {
                    let data = pattern(seed, len);
                    s.write_direct(b, start as u64, &data).unwrap();
                    model[start..start + len].copy_from_slice(&data);
                } else {
                    let mut out = vec![0u8; len];
                    s.read_direct(b, start as u64, &mut out).unwrap();
                    prop_assert!(out[..] == model[start..start + len], "{}: read {}+{}", name, start, len);
                }
            }
            s.page_in(b).unwrap();
            let mut all = vec![0u8; size];
            s.read(b, 0, &mut all).unwrap();
            prop_assert!(all == model, "{}: contents after page-in", name);
            // Resident direct access is plain access.
            let mut again = vec![0u8; size];
            s.read_direct(b, 0, &mut again).unwrap();
            prop_assert!(again == model);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Arrive { demand_mib: u64, priority: u8 },
    Leave(usize),
    Alloc(usize),
    PageIn(usize),
    Touch(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..12, 0u8..4).prop_map(|(demand_mib, priority)| Op::Arrive {
            demand_mib,
            priority
        }),
        (0usize..4).prop_map(Op::Leave),
        (0usize..4).prop_map(Op::Alloc),
        (0usize..4).prop_map(Op::PageIn),
        (0usize..4).prop_map(Op::Touch),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    /// Tenants arriving, leaving, allocating and paging in random order: after every step no tenant holds more
    /// than its limit, the limits fit the pool, and every buffer still holds its bytes.
    #[test]
    fn tenants_state_machine(ops in proptest::collection::vec(op(), 1..30)) {
        let (_, engine) = engines().remove(0);
        let pool = pool_with(engine, 12 * MIB, 256 * MIB);
        // (space, its buffers with their seeds)
        let mut live: Vec<(oversub_core::AddressSpace, Vec<(oversub_core::Buffer, u64)>)> = Vec::new();
        let mut seed = 0u64;
        for op in ops {
            match op {
                Op::Arrive { demand_mib, priority } => {
                    let n = live.len();
                    let s = pool
                        .tenant_space(TenantConfig::new(format!("t{n}"), demand_mib * MIB, f64::from(priority)))
                        .unwrap();
                    live.push((s, Vec::new()));
                }
                Op::Leave(i) if i < live.len() => {
                    live.remove(i);
                }
                Op::Alloc(i) if i < live.len() => {
                    seed += 1;
                    let (s, bufs) = &mut live[i];
                    let b = s.alloc(MIB, BufferFlags::DEFAULT).unwrap();
                    s.write_direct(b, 0, &pattern(seed, 4096)).unwrap();
                    bufs.push((b, seed));
                }
                Op::PageIn(i) if i < live.len() => {
                    let (s, bufs) = &live[i];
                    if let Some(&(b, _)) = bufs.first() {
                        match s.page_in(b) {
                            Ok(())
                            | Err(PagerError::AlreadyResident(_))
                            | Err(PagerError::QuotaExceeded { .. })
                            | Err(PagerError::OutOfMemory { .. }) => {}
                            Err(e) => panic!("page-in: {e}"),
                        }
                    }
                }
                Op::Touch(i) if i < live.len() => {
                    let (s, bufs) = &live[i];
                    for &(b, sd) in bufs {
                        let mut out = vec![0u8; 4096];
                        s.read_direct(b, 0, &mut out).unwrap();
                        prop_assert!(out == pattern(sd, 4096));
                    }
                }
                _ => {}
            }
            let quotas = pool.tenant_quotas();
            prop_assert_eq!(quotas.len(), live.len());
            prop_assert!(quotas.iter().map(|q| q.resident_limit_bytes).sum::<u64>() <= 12 * MIB);
            for (s, _) in &live {
                let limit = s.resident_limit().unwrap();
                prop_assert!(s.charged_bytes() <= limit, "as{} holds {} > {}", s.id(), s.charged_bytes(), limit);
            }
            prop_assert!(pool.stats().used_bytes <= 12 * MIB);
        }
    }
}

/// Records the priority each batch reaches the engine with, then forwards it.
#[derive(Debug)]
struct PrioritySpy {
    inner: std::sync::Arc<dyn oversub_io::IoEngine>,
    seen: std::sync::Mutex<Vec<(oversub_io::Direction, i64)>>,
}

// SAFETY: forwards every call unchanged to the inner engine.
unsafe impl oversub_io::IoEngine for PrioritySpy {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    unsafe fn submit(
        &self,
        requests: Vec<oversub_io::IoRequest>,
        on_done: oversub_io::IoCallback,
    ) -> Result<(), oversub_io::IoError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.submit_with_priority(requests, 0, false, on_done) }
    }

    unsafe fn submit_with_priority(
        &self,
        requests: Vec<oversub_io::IoRequest>,
        priority: i64,
        tagged: bool,
        on_done: oversub_io::IoCallback,
    ) -> Result<(), oversub_io::IoError> {
        if let Some(r) = requests.first() {
            self.seen.lock().unwrap().push((r.direction, priority));
        }
        // SAFETY: forwarded from our caller.
        unsafe {
            self.inner
                .submit_with_priority(requests, priority, tagged, on_done)
        }
    }

    fn counters(&self) -> oversub_io::IoCountersSnapshot {
        self.inner.counters()
    }
}

#[test]
fn tenants_transfers_carry_their_rank_to_the_store() {
    // Alg. 1 line 4: the store's queue sees each tenant's transfers at its rank (0 highest, then -1, -2).
    let spy = std::sync::Arc::new(PrioritySpy {
        inner: engines().remove(0).1,
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let store = std::sync::Arc::new(
        oversub_io::SwapStore::builder()
            .capacity_bytes(64 * MIB)
            .engine(spy.clone())
            .create_temp(&std::env::temp_dir())
            .unwrap(),
    );
    let device: std::sync::Arc<dyn oversub_accel::DeviceMemory> =
        std::sync::Arc::new(oversub_accel::HostMemory::default());
    let pool =
        oversub_core::Pool::new(oversub_core::PoolConfig::new(24 * MIB), device, store).unwrap();
    let low = pool
        .tenant_space(TenantConfig::new("low", 8 * MIB, 1.0))
        .unwrap();
    let high = pool
        .tenant_space(TenantConfig::new("high", 8 * MIB, 5.0))
        .unwrap();
    let mid = pool
        .tenant_space(TenantConfig::new("mid", 8 * MIB, 3.0))
        .unwrap();
    for (space, want) in [(&high, 0), (&mid, -1), (&low, -2)] {
        let buf = space.alloc(MIB, BufferFlags::DEFAULT).unwrap();
        spy.seen.lock().unwrap().clear();
        space.page_out(buf).unwrap();
        space.page_in(buf).unwrap();
        let seen = spy.seen.lock().unwrap().clone();
        assert!(!seen.is_empty());
        assert!(
            seen.iter().all(|&(_, p)| p == want),
            "{seen:?}, want {want}"
        );
    }
    // A new tenant above them all re-ranks the others at once, for slots that already exist.
    let top = pool
        .tenant_space(TenantConfig::new("top", 8 * MIB, 9.0))
        .unwrap();
    let buf = high.buffers()[0];
    spy.seen.lock().unwrap().clear();
    high.page_out(buf).unwrap();
    high.page_in(buf).unwrap();
    assert!(spy.seen.lock().unwrap().iter().all(|&(_, p)| p == -1));
    drop(top);
}
