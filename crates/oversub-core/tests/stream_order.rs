//! Uses recorded on the caller's streams (`AddressSpace::record_use`), on the cuda backend over the fake driver,
//! where a "kernel" reading a buffer is a copy-out queued on a stream of the test's (the fake runs queued work only
//! when something waits for it, the latest a GPU may run it). A page-out or free after a recorded use waits for
//! that use and not for the whole device, so work queued later stays queued; with no record the page-out waits
//! for the device as before. Every engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{engines, pattern, store_with};
use oversub_accel::cuda::testing::{Call, FakeDriver};
use oversub_accel::cuda::{CudaDriver, CudaMemory, StreamHandle};
use oversub_accel::DeviceMemory;
use oversub_core::{Buffer, BufferFlags, BufferState, PagerError, Pool, PoolConfig};
use oversub_io::IoEngine;

const GRANULE: usize = 64 << 10;
const LEN: usize = 256 << 10;

fn fake_pool(engine: Arc<dyn IoEngine>) -> (Pool, Arc<FakeDriver>) {
    let fake = Arc::new(FakeDriver::new(16 << 20, GRANULE));
    let device: Arc<dyn DeviceMemory> = Arc::new(CudaMemory::with_driver(fake.clone()).unwrap());
    let pool = Pool::new(
        PoolConfig::new(8 << 20),
        device,
        store_with(engine, 64 << 20, 1 << 20),
    )
    .unwrap();
    (pool, fake)
}

/// Queues a "kernel" that reads `len` bytes of `buffer` into `out` on `stream`.
fn queue_read(
    fake: &FakeDriver,
    space: &oversub_core::AddressSpace,
    buffer: Buffer,
    out: &mut [u8],
    stream: StreamHandle,
) {
    let addr = space.info(buffer).unwrap().addr;
    // SAFETY: `out` outlives the copy (the caller keeps it until the fake has run it, or until the test ends, when
    // the fake no longer runs anything), and the buffer is mapped while the copy is queued.
    unsafe { fake.memcpy_dtoh_async(out.as_mut_ptr(), addr.0, out.len(), stream) }.unwrap();
}

fn done_reading(calls: &[Call], addr: u64) -> bool {
    calls
        .iter()
        .any(|c| matches!(c, Call::CopyOutDone { src, .. } if *src == addr))
}

#[test]
fn page_out_waits_for_the_recorded_use_only() {
    for (engine_name, engine) in engines() {
        let (pool, fake) = fake_pool(engine);
        let space = pool.address_space();
        let compute = fake.stream_create(0).unwrap();
        let a = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        let b = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        space.write(a, 0, &pattern(1, LEN)).unwrap();
        let (addr_a, addr_b) = (space.info(a).unwrap().addr.0, space.info(b).unwrap().addr.0);

        // a's last use, recorded; then later work on b, queued after the record.
        let mut seen_a = vec![0u8; LEN];
        let mut seen_b = vec![0u8; LEN];
        queue_read(&fake, &space, a, &mut seen_a, compute);
        space.record_use(a, compute.0).unwrap();
        queue_read(&fake, &space, b, &mut seen_b, compute);
        let before = fake.calls().len();

        space.page_out(a).unwrap();
        let calls = fake.calls()[before..].to_vec();
        assert!(
            !calls.contains(&Call::CtxSync),
            "{engine_name}: no device-wide wait: {calls:?}"
        );
        assert!(done_reading(&calls, addr_a), "{engine_name}: a's use ran");
        assert!(
            !done_reading(&calls, addr_b),
            "{engine_name}: the work queued after the record is still queued"
        );
        assert!(
            fake.violations().is_empty(),
            "{engine_name}: {:?}",
            fake.violations()
        );
        assert_eq!(
            seen_a,
            pattern(1, LEN),
            "{engine_name}: the use read a's bytes"
        );

        // The record was consumed: the next page-out of a waits for the device again.
        space.page_in(a).unwrap();
        let before = fake.calls().len();
        space.page_out(a).unwrap();
        assert!(
            fake.calls()[before..].contains(&Call::CtxSync),
            "{engine_name}: no record, a device-wide wait"
        );
        assert!(done_reading(&fake.calls(), addr_b));
        assert_eq!(space.info(a).unwrap().state, BufferState::PagedOut);
        drop(seen_b);
    }
}

#[test]
fn a_newer_record_on_the_stream_replaces_the_older() {
    for (engine_name, engine) in engines() {
        let (pool, fake) = fake_pool(engine);
        let space = pool.address_space();
        let compute = fake.stream_create(0).unwrap();
        let a = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        let mut first = vec![0u8; LEN];
        let mut second = vec![0u8; LEN];
        queue_read(&fake, &space, a, &mut first, compute);
        space.record_use(a, compute.0).unwrap();
        queue_read(&fake, &space, a, &mut second, compute);
        space.record_use(a, compute.0).unwrap();
        space.page_out(a).unwrap();
        let waited = fake
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::EventSync { .. }))
            .count();
        assert!(waited >= 1, "{engine_name}");
        let addr = space.info(a).unwrap().addr.0;
        let reads = fake
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::CopyOutDone { src, .. } if *src == addr))
            .count();
        assert!(
            reads >= 2,
            "{engine_name}: both uses ran before the memory went"
        );
        assert!(
            fake.violations().is_empty(),
            "{engine_name}: {:?}",
            fake.violations()
        );
    }
}

#[test]
fn free_waits_for_the_recorded_use() {
    for (engine_name, engine) in engines() {
        let (pool, fake) = fake_pool(engine);
        let space = pool.address_space();
        let compute = fake.stream_create(0).unwrap();
        let a = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        let addr = space.info(a).unwrap().addr.0;
        let mut seen = vec![0u8; LEN];
        queue_read(&fake, &space, a, &mut seen, compute);
        space.record_use(a, compute.0).unwrap();
        space.free(a).unwrap();
        assert!(done_reading(&fake.calls(), addr), "{engine_name}");
        assert!(
            fake.violations().is_empty(),
            "{engine_name}: unmapped under a queued use: {:?}",
            fake.violations()
        );
    }
}

#[test]
fn a_record_needs_a_resident_buffer_of_the_space() {
    for (engine_name, engine) in engines() {
        let (pool, fake) = fake_pool(engine);
        let space = pool.address_space();
        let compute = fake.stream_create(0).unwrap();
        let a = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        space.page_out(a).unwrap();
        assert!(
            matches!(
                space.record_use(a, compute.0),
                Err(PagerError::NotResident { .. })
            ),
            "{engine_name}"
        );
        space.free(a).unwrap();
        assert!(
            matches!(
                space.record_use(a, compute.0),
                Err(PagerError::UnknownBuffer(_))
            ),
            "{engine_name}"
        );
        // A stream the driver does not know is the driver's error, and nothing is recorded.
        let b = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
        assert!(space.record_use(b, 0xdead).is_err(), "{engine_name}");
        space.page_out(b).unwrap();
    }
}

#[test]
fn on_host_memory_a_record_only_checks_the_buffer() {
    let pool = Pool::new(
        PoolConfig::new(4 << 20),
        Arc::new(oversub_accel::HostMemory::default()),
        store_with(engines().remove(0).1, 16 << 20, 1 << 20),
    )
    .unwrap();
    let space = pool.address_space();
    let a = space.alloc(LEN as u64, BufferFlags::DEFAULT).unwrap();
    space.write(a, 0, &pattern(3, LEN)).unwrap();
    space.record_use(a, 0).unwrap();
    space.page_out(a).unwrap();
    space.page_in(a).unwrap();
    let mut back = vec![0u8; LEN];
    space.read(a, 0, &mut back).unwrap();
    assert_eq!(back, pattern(3, LEN));
}
