//! A completion that panics (here: the device backend's release of a buffer's memory, run on the I/O thread) fails
//! its operation with `CompletionLost` instead of leaving the waiter hanging, and loses nothing: the buffer stays
//! where it was with its bytes, and the accounting comes back to zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{engines, pattern, store_with, MIB};
use oversub_accel::{AccelError, DeviceMemory, DevicePtr, HostMemory, Reservation};
use oversub_core::{BufferFlags, BufferState, PagerError, Pool, PoolConfig};
use oversub_io::testing::FailingEngine;
use oversub_io::IoEngine;

/// The host backend, whose next `decommit` panics once when armed.
#[derive(Debug, Default)]
struct PanickyHost {
    inner: HostMemory,
    panic_next_decommit: AtomicBool,
}

// SAFETY: forwards every call to the host backend; the injected panic happens before anything is done.
unsafe impl DeviceMemory for PanickyHost {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn granularity(&self) -> usize {
        self.inner.granularity()
    }
    fn host_accessible(&self) -> bool {
        self.inner.host_accessible()
    }
    fn reserve(&self, len: usize) -> Result<Reservation, AccelError> {
        self.inner.reserve(len)
    }
    fn commit(&self, range: &Reservation) -> Result<(), AccelError> {
        self.inner.commit(range)
    }
    unsafe fn decommit(&self, range: &Reservation) -> Result<(), AccelError> {
        if self.panic_next_decommit.swap(false, Ordering::AcqRel) {
            panic!("injected panic in decommit");
        }
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.decommit(range) }
    }
    unsafe fn unreserve(&self, range: Reservation) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.unreserve(range) }
    }
    fn synchronize(&self) -> Result<(), AccelError> {
        self.inner.synchronize()
    }
    fn host_ptr(&self, range: &Reservation) -> Option<*mut u8> {
        self.inner.host_ptr(range)
    }
    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_to_host(src, dst) }
    }
    unsafe fn copy_from_host(&self, dst: DevicePtr, src: &[u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.copy_from_host(dst, src) }
    }
    fn resident_bytes(&self, range: &Reservation) -> Result<Option<u64>, AccelError> {
        self.inner.resident_bytes(range)
    }
}

fn pool_on(engine: Arc<dyn IoEngine>, device: Arc<PanickyHost>, checksums: bool) -> Pool {
    Pool::new(
        PoolConfig::new(32 * MIB).verify_checksums(checksums),
        device,
        store_with(engine, 64 * MIB, 1 << 20),
    )
    .unwrap()
}

#[test]
fn a_panicking_completion_fails_the_page_out_and_loses_nothing() {
    for (name, engine) in engines() {
        for checksums in [false, true] {
            eprintln!("{name}, checksums {checksums}");
            let device = Arc::new(PanickyHost::default());
            let pool = pool_on(engine.clone(), device.clone(), checksums);
            let space = pool.address_space();
            let b = space.alloc(9 * MIB + 3, BufferFlags::DEFAULT).unwrap();
            let bytes = pattern(3, (9 * MIB + 3) as usize);
            space.write(b, 0, &bytes).unwrap();
            device.panic_next_decommit.store(true, Ordering::Release);
            let err = space.page_out(b).unwrap_err();
            assert!(matches!(err, PagerError::CompletionLost { .. }), "{err}");
            // The memory was never released: the buffer is resident with its bytes, and can be paged again.
            assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
            let mut back = vec![0u8; bytes.len()];
            space.read(b, 0, &mut back).unwrap();
            assert!(back == bytes);
            space.page_out(b).unwrap();
            space.page_in(b).unwrap();
            space.read(b, 0, &mut back).unwrap();
            assert!(back == bytes);
            space.free(b).unwrap();
            assert_eq!(pool.stats().used_bytes, 0);
            assert_eq!(
                pool.stats().store_free_bytes,
                pool.stats().store_capacity_bytes
            );
        }
    }
}

#[test]
fn a_panicking_completion_after_a_failed_read_keeps_the_stored_copy() {
    for (name, engine) in engines() {
        eprintln!("{name}");
        let device = Arc::new(PanickyHost::default());
        // Requests: page-out = 3 writes of 1 MiB; the 4th request (the page-in's first read) fails.
        let failing: Arc<dyn IoEngine> = Arc::new(FailingEngine::new(engine, 4));
        let pool = pool_on(failing, device.clone(), true);
        let space = pool.address_space();
        let b = space.alloc(3 * MIB, BufferFlags::DEFAULT).unwrap();
        let bytes = pattern(4, (3 * MIB) as usize);
        space.write(b, 0, &bytes).unwrap();
        space.page_out(b).unwrap();
        // The failed read's completion gives the memory back and panics doing so.
        device.panic_next_decommit.store(true, Ordering::Release);
        let err = space.page_in(b).unwrap_err();
        assert!(matches!(err, PagerError::CompletionLost { .. }), "{err}");
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
        // finish released the memory the lost completion could not.
        assert_eq!(pool.stats().used_bytes, 0);
        space.page_in(b).unwrap();
        let mut back = vec![0u8; bytes.len()];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == bytes);
        space.free(b).unwrap();
        assert_eq!(pool.stats().used_bytes, 0);
        assert_eq!(
            pool.stats().store_free_bytes,
            pool.stats().store_capacity_bytes
        );
    }
}
