//! The pager on a device the host cannot address (the cuda backend over the recording fake driver): the staging
//! path's ordering (no unmap before the copy-out finished, no copy-in before the map), round trips that keep the
//! device address and every byte, memory really given back, buffers past the device's capacity cycling through,
//! and failures that lose nothing. Real swap files, every I/O engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{check_filled, engines, filled_buffers, pattern, store_with};
use oversub_accel::cuda::testing::{Call, FakeDriver};
use oversub_accel::cuda::CudaMemory;
use oversub_accel::DeviceMemory;
use oversub_core::{BufferFlags, BufferState, PagerError, Pool, PoolConfig, StagingConfig};
use oversub_io::testing::FailingEngine;
use oversub_io::IoEngine;

const GRANULE: usize = 64 << 10;

fn staging(chunk_bytes: u64, chunks: usize) -> StagingConfig {
    StagingConfig {
        chunk_bytes,
        chunks,
        pinned: true,
        direct_storage: true,
    }
}

fn fake_pool(
    engine: Arc<dyn IoEngine>,
    device_bytes: u64,
    config: StagingConfig,
) -> (Pool, Arc<FakeDriver>) {
    let fake = Arc::new(FakeDriver::new(device_bytes, GRANULE));
    let device: Arc<dyn DeviceMemory> = Arc::new(CudaMemory::with_driver(fake.clone()).unwrap());
    let pool = Pool::new(
        PoolConfig::new(device_bytes).staging(config),
        device,
        store_with(engine, 64 << 20, 1 << 20),
    )
    .unwrap();
    assert_eq!(pool.transfer_path(), "staging");
    (pool, fake)
}

/// The fake driver saw its calls in a good order ([`check_order`]) and no misuse.
fn check_fake(fake: &FakeDriver, what: &str) {
    check_order(&fake.calls());
    assert!(
        fake.violations().is_empty(),
        "{what}: {:?}",
        fake.violations()
    );
}

/// Checks the recorded calls: every unmap comes after the completion of every copy-out queued from its range,
/// and every copy-in is queued after its range was mapped and granted access.
fn check_order(calls: &[Call]) {
    // (start, len) -> mapped with access now
    let mut mapped: Vec<(u64, usize)> = Vec::new();
    let mut pending_out: Vec<(u64, usize)> = Vec::new();
    let inside = |a: u64, n: usize, (s, l): (u64, usize)| a >= s && a + n as u64 <= s + l as u64;
    for (i, c) in calls.iter().enumerate() {
        match *c {
            Call::MemSetAccess { addr, len } => mapped.push((addr, len)),
            Call::MemUnmap { addr, len } => {
                assert!(
                    !pending_out.iter().any(|&(a, n)| inside(a, n, (addr, len))),
                    "call {i}: unmap of {addr:#x} before the copy-out from it finished"
                );
                mapped.retain(|&m| m != (addr, len));
            }
            Call::CopyOutQueued { src, len, .. } => {
                assert!(
                    mapped.iter().any(|&m| inside(src, len, m)),
                    "call {i}: copy-out of unmapped memory"
                );
                pending_out.push((src, len));
            }
            Call::CopyOutDone { src, len } => {
                let at = pending_out.iter().position(|&p| p == (src, len)).unwrap();
                pending_out.remove(at);
            }
            Call::CopyInQueued { dst, len, .. } => {
                assert!(
                    mapped.iter().any(|&m| inside(dst, len, m)),
                    "call {i}: copy-in to {dst:#x} before the map"
                );
            }
            _ => {}
        }
    }
}

#[test]
fn round_trips_keep_address_and_bytes_through_staging() {
    for (engine_name, engine) in engines() {
        // Chunks of 12 KiB, three of them: buffers span many chunks and end in a partial one.
        let (pool, fake) = fake_pool(engine, 16 << 20, staging(12 << 10, 3));
        fake.polls_before_ready(1);
        let space = pool.address_space();
        for size in [GRANULE as u64, 3 * GRANULE as u64 + 4097, 100_003] {
            let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
            let mut zeros = vec![1u8; size as usize];
            space.read(b, 0, &mut zeros).unwrap();
            assert!(
                zeros.iter().all(|x| *x == 0),
                "{engine_name}: a new buffer reads as zeros"
            );
            let data = pattern(size, size as usize);
            space.write(b, 0, &data).unwrap();
            let addr = space.info(b).unwrap().addr;
            let reserved = pool.stats().used_bytes;
            let device_before = fake.used_bytes();

            space.page_out(b).unwrap();
            assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
            assert!(
                fake.used_bytes() < device_before,
                "{engine_name}: device memory given back"
            );
            assert_eq!(
                device_before - fake.used_bytes(),
                reserved,
                "{engine_name}: memory in use falls by the buffer's reservation"
            );

            space.page_in(b).unwrap();
            assert_eq!(
                space.info(b).unwrap().addr,
                addr,
                "{engine_name}: same device address"
            );
            let mut back = vec![0u8; size as usize];
            space.read(b, 0, &mut back).unwrap();
            assert!(back == data, "{engine_name}: every byte back, size {size}");
            space.free(b).unwrap();
        }
        let calls = fake.calls();
        check_fake(&fake, engine_name);
        assert!(calls.iter().any(|c| matches!(c, Call::CopyOutDone { .. })));
    }
}

#[test]
fn async_page_in_overlaps_and_keeps_order() {
    for (engine_name, engine) in engines() {
        let (pool, fake) = fake_pool(engine, 16 << 20, staging(16 << 10, 4));
        let space = pool.address_space();
        let sizes: Vec<u64> = (0..4).map(|i| 200_000 + i * 4096).collect();
        let bufs = filled_buffers(&space, &sizes, 0);
        space.page_out_all().unwrap();
        let tickets: Vec<_> = bufs
            .iter()
            .map(|b| space.page_in_async(*b).unwrap())
            .collect();
        for t in tickets {
            t.finish().unwrap();
        }
        check_filled(&space, &bufs, &sizes, 0, engine_name);
        check_fake(&fake, engine_name);
    }
}

#[test]
fn buffers_past_the_device_capacity_cycle_without_loss() {
    for (engine_name, engine) in engines() {
        // A 1 MiB device; eight buffers of 256 KiB: at most four fit at once.
        let (pool, fake) = fake_pool(engine, 1 << 20, staging(32 << 10, 4));
        let space = pool.address_space();
        let size = 256 << 10;
        let mut bufs = Vec::new();
        for i in 0..8u64 {
            if i >= 4 {
                space.page_out(bufs[(i - 4) as usize]).unwrap();
            }
            let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
            space.write(b, 0, &pattern(i, size as usize)).unwrap();
            bufs.push(b);
        }
        for round in 0..3 {
            for (i, b) in bufs.iter().enumerate() {
                if space.info(*b).unwrap().state == BufferState::PagedOut {
                    // Make room: page out the buffer four places before it.
                    let victim = bufs[(i + 4) % 8];
                    if space.info(victim).unwrap().state == BufferState::Resident {
                        space.page_out(victim).unwrap();
                    }
                    space.page_in(*b).unwrap();
                }
                let mut back = vec![0u8; size as usize];
                space.read(*b, 0, &mut back).unwrap();
                assert!(
                    back == pattern(i as u64, size as usize),
                    "{engine_name}: round {round}, buffer {i}"
                );
            }
        }
        assert!(fake.used_bytes() <= 1 << 20);
        check_fake(&fake, engine_name);
    }
}

#[test]
fn failed_copies_and_commits_lose_nothing() {
    let (_, engine) = engines().remove(0);
    let (pool, fake) = fake_pool(engine, 4 << 20, staging(16 << 10, 2));
    let space = pool.address_space();
    let size = 150_000usize;
    let b = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
    let data = pattern(9, size);
    space.write(b, 0, &data).unwrap();

    // A copy-out fails half-way: the buffer stays resident with its bytes, its slot goes back.
    let free_before = pool.stats().store_free_bytes;
    fake.fail_call("cuMemcpyDtoHAsync", 3);
    let err = space.page_out(b).unwrap_err();
    assert!(matches!(err, PagerError::Device(_)), "{err}");
    assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
    assert_eq!(pool.stats().store_free_bytes, free_before);
    let mut back = vec![0u8; size];
    space.read(b, 0, &mut back).unwrap();
    assert!(back == data);

    // Out of device memory at page-in: the buffer stays out, nothing is charged, and a retry works.
    space.page_out(b).unwrap();
    let used = pool.stats().used_bytes;
    fake.fail_call("cuMemCreate", 1);
    let err = space.page_in(b).unwrap_err();
    assert!(matches!(err, PagerError::Device(_)), "{err}");
    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    assert_eq!(pool.stats().used_bytes, used);

    // A copy-in fails: the memory is given back and the stored copy still holds the bytes.
    fake.fail_call("cuMemcpyHtoDAsync", 2);
    assert!(space.page_in(b).is_err());
    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    space.page_in(b).unwrap();
    space.read(b, 0, &mut back).unwrap();
    assert!(back == data);
    check_fake(&fake, "");
}

#[test]
fn failed_store_io_loses_nothing() {
    for (engine_name, engine) in engines() {
        // The store fails its 3rd request from now on, then every one after it.
        let failing: Arc<dyn IoEngine> = Arc::new(FailingEngine::new(engine, 3));
        let (pool, fake) = fake_pool(failing, 4 << 20, staging(16 << 10, 2));
        let space = pool.address_space();
        let size = 120_000usize;
        let b = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
        let data = pattern(5, size);
        space.write(b, 0, &data).unwrap();
        assert!(space.page_out(b).is_err(), "{engine_name}");
        assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
        let mut back = vec![0u8; size];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == data, "{engine_name}");
        check_fake(&fake, engine_name);
    }
}

#[test]
fn read_only_buffers_are_written_once_through_staging() {
    let (_, engine) = engines().remove(0);
    let (pool, fake) = fake_pool(engine, 4 << 20, staging(16 << 10, 2));
    let space = pool.address_space();
    let b = space.alloc(100_000, BufferFlags::READ_ONLY).unwrap();
    space.write(b, 0, &pattern(1, 100_000)).unwrap();
    space.page_out(b).unwrap();
    space.page_in(b).unwrap();
    let outs = |calls: &[Call]| {
        calls
            .iter()
            .filter(|c| matches!(c, Call::CopyOutQueued { .. }))
            .count()
    };
    let first = outs(&fake.calls());
    space.page_out(b).unwrap();
    assert_eq!(
        outs(&fake.calls()),
        first,
        "the second page-out copies nothing out"
    );
    space.page_in(b).unwrap();
    let mut back = vec![0u8; 100_000];
    space.read(b, 0, &mut back).unwrap();
    assert!(back == pattern(1, 100_000));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// The host-memory tier on both kinds of device: buffers go to host RAM while it has room, then to the store;
/// direct access reaches the tier copy; every byte comes back at the same address.
#[test]
fn host_tier_holds_buffers_before_the_store() {
    use oversub_accel::HostMemory;
    use oversub_core::HostTierConfig;
    let (_, engine) = engines().remove(0);
    let fake = Arc::new(FakeDriver::new(16 << 20, GRANULE));
    let devices: Vec<(&str, Arc<dyn DeviceMemory>)> = vec![
        ("host", Arc::new(HostMemory::default())),
        (
            "cuda (fake)",
            Arc::new(CudaMemory::with_driver(fake.clone()).unwrap()),
        ),
    ];
    for (name, device) in devices {
        let pool = Pool::new(
            PoolConfig::new(16 << 20)
                .staging(staging(16 << 10, 2))
                .host_tier(HostTierConfig {
                    capacity_bytes: 300 << 10,
                    pinned: true,
                }),
            device,
            store_with(engine.clone(), 16 << 20, 1 << 20),
        )
        .unwrap();
        assert_eq!(pool.host_tier_bytes(), Some((300 << 10, 300 << 10)));
        let space = pool.address_space();
        let size = 200_000usize;
        let a = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
        let b = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
        space.write(a, 0, &pattern(1, size)).unwrap();
        space.write(b, 0, &pattern(2, size)).unwrap();
        let store_free = pool.stats().store_free_bytes;
        space.page_out(a).unwrap();
        assert!(
            space.info(a).unwrap().in_host_tier,
            "{name}: the first fits the tier"
        );
        assert_eq!(
            pool.stats().store_free_bytes,
            store_free,
            "{name}: nothing on the store"
        );
        space.page_out(b).unwrap();
        assert!(
            !space.info(b).unwrap().in_host_tier,
            "{name}: the second goes to the store"
        );
        assert!(pool.stats().store_free_bytes < store_free);

        // Direct access to the tier copy.
        let mut head = vec![0u8; 5000];
        space.read_direct(a, 1000, &mut head).unwrap();
        assert!(head == pattern(1, size)[1000..6000], "{name}");
        space.write_direct(a, 7, b"tier").unwrap();

        let addr = space.info(a).unwrap().addr;
        space.page_in(a).unwrap();
        space.page_in(b).unwrap();
        assert_eq!(space.info(a).unwrap().addr, addr);
        let mut back = vec![0u8; size];
        space.read(a, 0, &mut back).unwrap();
        let mut want = pattern(1, size);
        want[7..11].copy_from_slice(b"tier");
        assert!(back == want, "{name}: tier round trip");
        space.read(b, 0, &mut back).unwrap();
        assert!(back == pattern(2, size), "{name}: store round trip");
        assert_eq!(
            pool.host_tier_bytes(),
            Some((300 << 10, 300 << 10)),
            "{name}: tier space given back"
        );
        // Async through the tier.
        let t = space.page_out_async(a).unwrap();
        t.finish().unwrap();
        let t = space.page_in_async(a).unwrap();
        t.finish().unwrap();
        space.read(a, 0, &mut back).unwrap();
        assert!(back == want, "{name}: async tier round trip");
    }
    check_fake(&fake, "");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Any ring (buffers × chunk size), any buffer sizes, any polling delay: every byte comes back at the same
    /// address and the driver's rules hold.
    #[test]
    fn staging_ring_of_any_shape_keeps_every_byte(
        chunk_pages in 1u64..8,
        chunks in 1usize..5,
        polls in 0u32..3,
        sizes in proptest::collection::vec(1u64..300_000, 1..4),
    ) {
        let engine: Arc<dyn IoEngine> = Arc::new(oversub_io::PsyncEngine::new(4).unwrap());
        let (pool, fake) = fake_pool(engine, 8 << 20, staging(chunk_pages * 4096, chunks));
        fake.polls_before_ready(polls);
        let space = pool.address_space();
        let bufs: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let b = space.alloc(n, BufferFlags::DEFAULT).unwrap();
                space.write(b, 0, &pattern(i as u64 + n, n as usize)).unwrap();
                (b, n, space.info(b).unwrap().addr)
            })
            .collect();
        for t in space.page_out_all_async().unwrap() {
            t.finish().unwrap();
        }
        for t in space.page_in_all_async().unwrap() {
            t.finish().unwrap();
        }
        for (i, &(b, n, addr)) in bufs.iter().enumerate() {
            proptest::prop_assert_eq!(space.info(b).unwrap().addr, addr);
            let mut back = vec![0u8; n as usize];
            space.read(b, 0, &mut back).unwrap();
            proptest::prop_assert!(back == pattern(i as u64 + n, n as usize));
        }
        check_order(&fake.calls());
        proptest::prop_assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    }
}
