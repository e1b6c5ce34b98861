//! Where paged-out memory goes, seen in the process's resident set: with immediate release it is given back (RSS
//! falls by the buffer's size); with recycling (the default) it stays in the backend's pool (RSS holds) and the
//! next buffer reuses it instead of growing the process.
//! Alone in its own test binary so no other test's allocations move the RSS meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use oversub_accel::{DeviceMemory, HostMemory, HostMemoryConfig, PageRelease};
use oversub_core::{BufferFlags, Pool, PoolConfig};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn pool(release: PageRelease, engine: Arc<dyn oversub_io::IoEngine>) -> Pool {
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::new(HostMemoryConfig {
        release,
        ..HostMemoryConfig::default()
    }));
    Pool::new(
        PoolConfig::new(256 * MIB).verify_checksums(true),
        device,
        store_with(engine, 256 * MIB, 1 << 20),
    )
    .unwrap()
}

#[test]
fn immediate_release_gives_memory_back_and_recycling_keeps_it_for_the_next_buffer() {
    for (name, engine) in engines() {
        for release in [PageRelease::Immediate, PageRelease::Recycle] {
            let pool = pool(release, Arc::clone(&engine));
            let space = pool.address_space();
            let size = 128 * MIB;
            let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
            let ptr = space.host_ptr(b).unwrap();
            // SAFETY: the buffer is resident and size bytes long.
            unsafe { std::ptr::write_bytes(ptr, 0xC3, size as usize) };
            let full = rss_bytes();
            space.page_out(b).unwrap();
            let out = rss_bytes();
            let fell = full.saturating_sub(out);
            match release {
                PageRelease::Immediate => assert!(
                    fell >= size * 9 / 10,
                    "{name}: RSS fell by {fell} bytes only (from {full} to {out})"
                ),
                _ => assert!(
                    fell < size / 10,
                    "{name}, recycled: the pool keeps the pages, yet RSS fell by {fell}"
                ),
            }
            space.page_in(b).unwrap();
            let back = rss_bytes();
            assert!(
                back + size / 10 >= full,
                "{name} {release:?}: RSS did not come back ({back} < {full})"
            );
            let ptr2 = space.host_ptr(b).unwrap();
            assert_eq!(ptr, ptr2);
            // SAFETY: resident again, same address.
            let bytes = unsafe { std::slice::from_raw_parts(ptr2, size as usize) };
            assert!(bytes.iter().all(|&x| x == 0xC3));
            if release == PageRelease::Recycle {
                // Out again, and a second buffer takes the pooled pages: the process does not grow, and the new
                // buffer reads zeros, not b's bytes.
                space.page_out(b).unwrap();
                let before = rss_bytes();
                let c = space.alloc(size, BufferFlags::DEFAULT).unwrap();
                let grew = rss_bytes().saturating_sub(before);
                assert!(grew < size / 10, "{name}: a new buffer grew RSS by {grew}");
                let p = space.host_ptr(c).unwrap();
                // SAFETY: c is resident and size bytes long.
                let fresh = unsafe { std::slice::from_raw_parts(p, size as usize) };
                assert!(
                    fresh.iter().all(|&x| x == 0),
                    "{name}: a new buffer saw old bytes"
                );
                space.free(c).unwrap();
            }
            space.free(b).unwrap();
        }
    }
}
