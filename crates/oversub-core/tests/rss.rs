//! Paged-out memory is really given back: the process's resident set shrinks by the buffer's size.
//! Alone in its own test binary so no other test's allocations move the RSS meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use oversub_core::BufferFlags;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn resident_memory_falls_after_page_out_and_returns_after_page_in() {
    for (name, engine) in engines() {
        let pool = pool_with(engine, 256 * MIB, 256 * MIB);
        let space = pool.address_space();
        let size = 128 * MIB;
        let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
        let ptr = space.host_ptr(b).unwrap();
        // SAFETY: the buffer is resident and size bytes long.
        unsafe { std::ptr::write_bytes(ptr, 0xC3, size as usize) };
        let full = rss_bytes();
        space.page_out(b).unwrap();
        let out = rss_bytes();
        assert!(
            full.saturating_sub(out) >= size * 9 / 10,
            "{name}: RSS fell by {} bytes only (from {full} to {out})",
            full.saturating_sub(out)
        );
        space.page_in(b).unwrap();
        let back = rss_bytes();
        assert!(
            back.saturating_sub(out) >= size * 9 / 10,
            "{name}: RSS did not come back"
        );
        let ptr2 = space.host_ptr(b).unwrap();
        assert_eq!(ptr, ptr2);
        // SAFETY: resident again, same address.
        let bytes = unsafe { std::slice::from_raw_parts(ptr2, size as usize) };
        assert!(bytes.iter().all(|&x| x == 0xC3));
    }
}
