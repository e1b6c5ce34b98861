//! The pager on a store striped over several files: round trips (checksums on), a member that fails (the page-out
//! fails naming it and the buffer stays resident with its bytes), and the GPUDirect path, which a striped store
//! does not take (its slot extents are not offsets in one file).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{check_filled, checked_host_pool, engines, filled_buffers, pattern, Hooked, MIB};
use oversub_accel::cuda::testing::FakeDriver;
use oversub_accel::cuda::CudaMemory;
use oversub_accel::{AccelError, DeviceMemory, DevicePtr, DirectStorage};
use oversub_core::{BufferFlags, BufferState, PagerError, Pool, PoolConfig, StagingConfig};
use oversub_io::testing::FailingFdEngine;
use oversub_io::{IoEngine, IoError, PsyncEngine, SwapStore};

fn dirs(n: usize) -> (Vec<tempfile::TempDir>, Vec<PathBuf>) {
    let d: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let p = d.iter().map(|d| d.path().to_path_buf()).collect();
    (d, p)
}

#[test]
fn pager_round_trips_on_a_striped_store() {
    for (name, engine) in engines() {
        let (_d, locations) = dirs(3);
        let store = SwapStore::builder()
            .engine(engine)
            .capacity_bytes(64 * MIB)
            .stripe_bytes(MIB)
            .build(&locations)
            .unwrap();
        assert_eq!(store.member_count(), 3);
        let pool = checked_host_pool(store);
        let space = pool.address_space();
        let sizes = [1u64, 4097, MIB / 2, 5 * MIB + 17, 20 * MIB];
        let bufs = filled_buffers(&space, &sizes, 0);
        for round in 0..2 {
            space.page_out_all().unwrap();
            space.page_in_all().unwrap();
            check_filled(&space, &bufs, &sizes, 0, &format!("{name}, round {round}"));
        }
    }
}

#[test]
fn a_failing_member_fails_the_page_out_and_keeps_the_buffer() {
    let inner: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(8).unwrap());
    let failing = Arc::new(FailingFdEngine::new(inner));
    let (_d, locations) = dirs(2);
    let store = SwapStore::builder()
        .engine(failing.clone())
        .capacity_bytes(64 * MIB)
        .stripe_bytes(MIB)
        .build(&locations)
        .unwrap();
    let bad_fd = store.member_fds()[1];
    let bad_path = store.member_paths()[1].to_path_buf();
    let pool = checked_host_pool(store);
    let space = pool.address_space();
    let size = 6 * MIB + 5;
    let early = space.alloc(size, BufferFlags::DEFAULT).unwrap();
    space.write(early, 0, &pattern(1, size as usize)).unwrap();
    space.page_out(early).unwrap();

    let later = space.alloc(size, BufferFlags::DEFAULT).unwrap();
    space.write(later, 0, &pattern(2, size as usize)).unwrap();
    failing.fail_fd(Some(bad_fd));
    let err = space.page_out(later).unwrap_err();
    match &err {
        PagerError::Store(IoError::Member { path, source }) => {
            assert_eq!(path, &bad_path);
            assert_eq!(source.raw_os_error(), Some(libc::EIO));
        }
        other => panic!("expected the member's error, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&bad_path.display().to_string()),
        "{err}"
    );
    // Still resident, every byte there.
    assert_eq!(space.info(later).unwrap().state, BufferState::Resident);
    let mut out = vec![0u8; size as usize];
    space.read(later, 0, &mut out).unwrap();
    assert!(out == pattern(2, size as usize));
    // A page-in needing the member fails too and keeps the stored copy.
    assert!(space.page_in(early).is_err());
    assert_eq!(space.info(early).unwrap().state, BufferState::PagedOut);

    failing.fail_fd(None);
    space.page_in(early).unwrap();
    space.read(early, 0, &mut out).unwrap();
    assert!(
        out == pattern(1, size as usize),
        "the earlier page-out's data"
    );
    space.page_out(later).unwrap();
    space.page_in(later).unwrap();
    space.read(later, 0, &mut out).unwrap();
    assert!(out == pattern(2, size as usize));
}

/// GPUDirect Storage claimed (for the cuda backend over the fake driver) that must never be used for I/O.
#[derive(Debug)]
struct ClaimsCufile;

impl DirectStorage for ClaimsCufile {
    fn register(&self, _fd: std::os::fd::RawFd) -> Result<(), AccelError> {
        Ok(())
    }
    unsafe fn read(
        &self,
        _fd: std::os::fd::RawFd,
        _dst: DevicePtr,
        _len: usize,
        _file_offset: u64,
    ) -> Result<(), AccelError> {
        panic!("cuFile used on a striped store");
    }
    unsafe fn write(
        &self,
        _fd: std::os::fd::RawFd,
        _src: DevicePtr,
        _len: usize,
        _file_offset: u64,
    ) -> Result<(), AccelError> {
        panic!("cuFile used on a striped store");
    }
}

#[test]
fn a_striped_store_stages_instead_of_gpudirect() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(8).unwrap());
    let staging = StagingConfig {
        chunk_bytes: MIB,
        chunks: 4,
        pinned: true,
        direct_storage: true,
    };
    let device = || -> Arc<dyn DeviceMemory> {
        let fake = Arc::new(FakeDriver::new(64 * MIB, 64 << 10));
        let inner = Arc::new(CudaMemory::with_driver(fake).unwrap());
        Arc::new(Hooked::over(inner).with_direct_storage(ClaimsCufile))
    };
    for n in [1, 2] {
        let (_d, locations) = dirs(n);
        let store = SwapStore::builder()
            .engine(engine.clone())
            .capacity_bytes(64 * MIB)
            .stripe_bytes(MIB)
            .build(&locations)
            .unwrap();
        let direct = store.is_direct();
        let pool = Pool::new(
            PoolConfig::new(32 * MIB).staging(staging),
            device(),
            Arc::new(store),
        )
        .unwrap();
        if n == 1 {
            // One file: the fake's GPUDirect is taken where the file system allows O_DIRECT.
            assert_eq!(
                pool.transfer_path(),
                if direct { "cufile" } else { "staging" }
            );
            continue;
        }
        assert_eq!(pool.transfer_path(), "staging");
        let space = pool.address_space();
        let size = 5 * MIB + 3;
        let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
        space.write(b, 0, &pattern(9, size as usize)).unwrap();
        space.page_out(b).unwrap();
        space.page_in(b).unwrap();
        let mut out = vec![0u8; size as usize];
        space.read(b, 0, &mut out).unwrap();
        assert!(out == pattern(9, size as usize));
    }
}
