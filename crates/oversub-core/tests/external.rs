//! Buffers backed by an external file (a model checkpoint as the store): they start paged out, read the file's
//! bytes at page-in on the host backend and through the staging ring (the cuda backend over the fake driver), give
//! only memory back at page-out, write nothing to the store, refuse writes, and report a file modified under them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::Arc;

use common::{engines, pattern, pool_with, store_with};
use oversub_accel::cuda::testing::FakeDriver;
use oversub_accel::cuda::CudaMemory;
use oversub_accel::DeviceMemory;
use oversub_core::{BufferFlags, BufferState, PagerError, Pool, PoolConfig, StagingConfig};
use oversub_io::{ExternalFile, IoError};

const MIB: u64 = 1 << 20;

fn checkpoint(dir: &std::path::Path, len: usize) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.join("model.safetensors");
    let data = pattern(42, len);
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

/// Pages three external buffers in and out twice, past the pool's capacity, and checks every byte each time.
fn cycle(pool: &Pool, path: &std::path::Path, data: &[u8]) {
    let space = pool.address_space();
    let file = Arc::new(ExternalFile::open(path).unwrap());
    let free_before = pool.store().free_bytes();
    let ranges = [(0u64, 2 * MIB), (2 * MIB, 2 * MIB), (4 * MIB, MIB)];
    let bufs: Vec<_> = ranges
        .iter()
        .map(|&(at, len)| {
            space
                .alloc_external(&file, at, len, BufferFlags::READ_ONLY)
                .unwrap()
        })
        .collect();
    for b in &bufs {
        let info = space.info(*b).unwrap();
        assert_eq!(info.state, BufferState::PagedOut);
        assert!(info.stored);
    }
    for round in 0..2 {
        for (b, &(at, len)) in bufs.iter().zip(&ranges) {
            space.page_in(*b).unwrap();
            let mut got = vec![0u8; len as usize];
            space.read(*b, 0, &mut got).unwrap();
            assert!(
                got == data[at as usize..(at + len) as usize],
                "round {round}, buffer at {at}"
            );
            assert!(matches!(
                space.write(*b, 0, &[1]),
                Err(PagerError::ReadOnly(_))
            ));
            space.page_out(*b).unwrap();
        }
    }
    // Nothing went to the store, and freeing gives nothing back to it.
    assert_eq!(pool.store().free_bytes(), free_before);
    assert_eq!(pool.store().engine().counters().bytes_written, 0);
    for b in bufs {
        space.free(b).unwrap();
    }
    assert_eq!(pool.store().free_bytes(), free_before);
}

#[test]
fn external_buffers_on_the_host_backend() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        let dir = tempfile::tempdir().unwrap();
        let (path, data) = checkpoint(dir.path(), (5 * MIB + 123) as usize);
        // Room for two of the three buffers at a time.
        let pool = pool_with(engine, 4 * MIB, 8 * MIB);
        cycle(&pool, &path, &data);
    }
}

#[test]
fn external_buffers_through_the_staging_ring() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        let dir = tempfile::tempdir().unwrap();
        let (path, data) = checkpoint(dir.path(), (5 * MIB) as usize);
        let fake = Arc::new(FakeDriver::new(4 * MIB, 64 << 10));
        let device: Arc<dyn DeviceMemory> = Arc::new(CudaMemory::with_driver(fake).unwrap());
        let config = PoolConfig::new(4 * MIB).staging(StagingConfig {
            chunk_bytes: 512 << 10,
            chunks: 2,
            pinned: true,
            direct_storage: true,
        });
        let pool = Pool::new(config, device, store_with(engine, 8 * MIB, 1 << 20)).unwrap();
        assert_eq!(pool.transfer_path(), "staging");
        cycle(&pool, &path, &data);
    }
}

#[test]
fn external_buffers_must_be_read_only_and_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = checkpoint(dir.path(), (2 * MIB) as usize);
    let pool = pool_with(engines().remove(0).1, 4 * MIB, 4 * MIB);
    let space = pool.address_space();
    let file = Arc::new(ExternalFile::open(&path).unwrap());
    assert!(matches!(
        space.alloc_external(&file, 0, MIB, BufferFlags::DEFAULT),
        Err(PagerError::Unsupported(_))
    ));
    assert!(matches!(
        space.alloc_external(&file, 0, 3 * MIB, BufferFlags::READ_ONLY),
        Err(PagerError::Store(IoError::InvalidArgument(_)))
    ));
    let b = space
        .alloc_external(&file, MIB, MIB, BufferFlags::READ_ONLY)
        .unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"x")
        .unwrap();
    let err = space.page_in(b).unwrap_err();
    assert!(
        err.to_string().contains("changed after oversub opened it"),
        "{err}"
    );
    // The failed page-in lost nothing: the buffer is still paged out, and nothing stays charged.
    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    assert_eq!(pool.stats().used_bytes, 0);
    space.free(b).unwrap();
}
