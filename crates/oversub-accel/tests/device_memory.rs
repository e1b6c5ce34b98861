//! One test body run against every `DeviceMemory` backend: the host backend, the cuda backend over the recording
//! fake driver, and (with `OVERSUB_TEST_CUDA=1` on a machine with a GPU) the cuda backend over the real driver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use oversub_accel::cuda::testing::FakeDriver;
use oversub_accel::cuda::{CudaMemory, CudaMemoryConfig};
use oversub_accel::{
    AccelError, DeviceMemory, DevicePtr, HostMemory, HostMemoryConfig, PageRelease, Reservation,
};
use oversub_testkit::require;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A backend under test: its name, the backend, and the fake driver under it (to check its records).
type Backend = (String, Arc<dyn DeviceMemory>, Option<Arc<FakeDriver>>);

fn backends() -> Vec<Backend> {
    let fake = Arc::new(FakeDriver::new(64 << 20, 2 << 20));
    let mut v: Vec<Backend> = vec![
        (
            "host, immediate release".into(),
            Arc::new(HostMemory::new(HostMemoryConfig {
                release: PageRelease::Immediate,
                ..HostMemoryConfig::default()
            })),
            None,
        ),
        (
            "host, lazy release".into(),
            Arc::new(HostMemory::new(HostMemoryConfig {
                release: PageRelease::Lazy,
                ..HostMemoryConfig::default()
            })),
            None,
        ),
        (
            "host, recycled memory (the default)".into(),
            Arc::new(HostMemory::default()),
            None,
        ),
        (
            "cuda (fake driver)".into(),
            Arc::new(CudaMemory::with_driver(fake.clone()).unwrap()),
            Some(fake),
        ),
    ];
    if oversub_testkit::cuda_opted_in().is_ok() {
        v.push((
            "cuda".into(),
            Arc::new(CudaMemory::new(CudaMemoryConfig::default()).unwrap()),
            None,
        ));
    }
    v
}

fn write(dev: &dyn DeviceMemory, at: DevicePtr, bytes: &[u8]) {
    // SAFETY: committed range of the test.
    unsafe { dev.copy_from_host(at, bytes) }.unwrap();
}

fn read(dev: &dyn DeviceMemory, at: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: committed range of the test.
    unsafe { dev.copy_to_host(at, &mut out) }.unwrap();
    out
}

#[test]
fn reserve_commit_copy_decommit_keeps_address_and_bytes() {
    for (name, dev, fake) in backends() {
        let g = dev.granularity();
        // Sizes that are and are not multiples of the granularity.
        for size in [g, 3 * g + 4097, 12345] {
            let r = dev.reserve(size).unwrap();
            assert_eq!(r.len % g, 0, "{name}");
            assert!(r.len >= size, "{name}");
            dev.commit(&r).unwrap();
            dev.zero_new(&r).unwrap();
            assert!(
                read(dev.as_ref(), r.addr, size).iter().all(|b| *b == 0),
                "{name}: fresh memory reads as zeros"
            );
            let data = pattern(7, size);
            write(dev.as_ref(), r.addr, &data);
            let saved = read(dev.as_ref(), r.addr, size);
            assert_eq!(saved, data, "{name}");
            // SAFETY: nothing uses the range.
            unsafe { dev.decommit(&r) }.unwrap();
            // A lazy release gives the pages back only when the kernel needs memory.
            if let (Some(resident), false) =
                (dev.resident_bytes(&r).unwrap(), name.contains("lazy"))
            {
                assert_eq!(resident, 0, "{name}: decommitted memory is released");
            }
            dev.commit(&r).unwrap();
            write(dev.as_ref(), r.addr, &saved);
            assert_eq!(
                read(dev.as_ref(), r.addr, size),
                data,
                "{name}: same address, same bytes"
            );
            // SAFETY: nothing uses the range.
            unsafe { dev.unreserve(r) }.unwrap();
        }
        if let Some(f) = fake {
            assert!(f.violations().is_empty(), "{name}: {:?}", f.violations());
            assert_eq!(f.live(), (0, 0, 0), "{name}: everything given back");
        }
    }
}

#[test]
fn async_copies_complete_through_fences() {
    for (name, dev, fake) in backends() {
        if let Some(f) = &fake {
            f.polls_before_ready(2);
        }
        let g = dev.granularity();
        let r = dev.reserve(2 * g).unwrap();
        dev.commit(&r).unwrap();
        let mut src = dev.alloc_host(g, true).unwrap();
        src.as_mut_slice().copy_from_slice(&pattern(3, g));
        // SAFETY: committed range; `src` outlives the fence wait.
        let fence =
            unsafe { dev.copy_from_host_async(r.addr.offset(g as u64), src.as_ptr(), g) }.unwrap();
        while !dev.fence_done(&fence).unwrap() {
            std::thread::yield_now();
        }
        dev.fence_wait(fence).unwrap();
        let dst = dev.alloc_host(g, false).unwrap();
        // SAFETY: as above.
        let fence =
            unsafe { dev.copy_to_host_async(r.addr.offset(g as u64), dst.as_ptr(), g) }.unwrap();
        dev.fence_wait(fence).unwrap();
        assert_eq!(dst.as_slice(), src.as_slice(), "{name}");
        // SAFETY: every copy was waited for.
        unsafe { dev.unreserve(r) }.unwrap();
        drop((src, dst));
        if let Some(f) = fake {
            assert!(f.violations().is_empty(), "{name}: {:?}", f.violations());
        }
    }
}

#[test]
fn ranges_that_are_not_ours_are_refused() {
    for (name, dev, _) in backends() {
        let r = dev.reserve(1).unwrap();
        let forged = Reservation {
            addr: r.addr.offset(dev.granularity() as u64 * 64),
            len: r.len,
        };
        assert!(
            matches!(dev.commit(&forged), Err(AccelError::InvalidArgument(_))),
            "{name}"
        );
        let wrong_len = Reservation {
            addr: r.addr,
            len: r.len * 2,
        };
        assert!(
            matches!(dev.commit(&wrong_len), Err(AccelError::InvalidArgument(_))),
            "{name}"
        );
        let mut out = vec![0u8; 16];
        // SAFETY: the call must refuse the range, not touch it.
        let past_end = unsafe { dev.copy_to_host(r.addr.offset(r.len as u64 - 8), &mut out) };
        assert!(
            past_end.is_err(),
            "{name}: a copy past the reservation's end is refused"
        );
        // SAFETY: nothing uses the range.
        unsafe { dev.unreserve(r) }.unwrap();
    }
}

#[test]
fn without_a_driver_the_cuda_backend_says_so() {
    require!(
        oversub_testkit::cuda_driver_loads().is_err(),
        "a CUDA driver loads here; this checks the message given without one"
    );
    match CudaMemory::new(CudaMemoryConfig::default()) {
        Err(AccelError::NoDriver(msg)) => {
            assert!(msg.starts_with("no CUDA driver found"), "{msg}")
        }
        other => panic!("expected the no-driver error, got {other:?}"),
    }
}

#[test]
fn a_device_without_virtual_memory_management_is_refused() {
    let fake = Arc::new(FakeDriver::new(64 << 20, 2 << 20).without_vmm());
    match CudaMemory::with_driver(fake) {
        Err(AccelError::Unsupported(msg)) => assert!(msg.contains("virtual-memory"), "{msg}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn decommit_waits_for_queued_copies_and_out_of_memory_is_typed() {
    let fake = Arc::new(FakeDriver::new(4 << 20, 2 << 20));
    let dev = CudaMemory::with_driver(fake.clone()).unwrap();
    let r = dev.reserve(2 << 20).unwrap();
    dev.commit(&r).unwrap();
    let dst = dev.alloc_host(2 << 20, true).unwrap();
    // A copy-out queued and never waited for: decommit must drain it before unmapping.
    // SAFETY: committed range; `dst` outlives the decommit, which waits for the copy.
    let fence = unsafe { dev.copy_to_host_async(r.addr, dst.as_ptr(), 2 << 20) }.unwrap();
    // SAFETY: the test's own range; the backend drains its copy streams first.
    unsafe { dev.decommit(&r) }.unwrap();
    dev.fence_wait(fence).unwrap();
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    // 6 MiB on a 4 MiB device.
    let big = dev.reserve(6 << 20).unwrap();
    assert!(matches!(dev.commit(&big), Err(AccelError::OutOfMemory(_))));
    // SAFETY: nothing uses the ranges.
    unsafe { dev.unreserve(big) }.unwrap();
    // SAFETY: as above.
    unsafe { dev.unreserve(r) }.unwrap();
    drop(dst);
    drop(dev);
    assert_eq!(fake.live(), (0, 0, 0));
}
