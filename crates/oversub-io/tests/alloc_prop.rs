#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests of the extent allocator.

use oversub_io::{Extent, ExtentAllocator, IoError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    /// Frees the live allocation at this index (modulo the count).
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..200_000).prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
    ]
}

fn check_invariants(a: &ExtentAllocator, live: &[Vec<Extent>], align: u64) {
    let mut all: Vec<Extent> = live.iter().flatten().copied().collect();
    all.extend(a.free_extents());
    all.sort_by_key(|e| e.offset);
    // Allocated and free extents together tile [0, capacity) exactly: no overlap, no
    // leak, all aligned and in range.
    let mut pos = 0;
    for e in &all {
        assert_eq!(e.offset, pos, "gap or overlap at {pos}: {all:?}");
        assert!(e.len > 0);
        assert_eq!(e.offset % align, 0);
        assert_eq!(e.len % align, 0);
        pos += e.len;
    }
    assert_eq!(pos, a.capacity_bytes());
    let used: u64 = live.iter().flatten().map(|e| e.len).sum();
    assert_eq!(a.free_bytes() + used, a.capacity_bytes());
    // Free runs are coalesced: never adjacent.
    let free = a.free_extents();
    for w in free.windows(2) {
        assert!(w[0].offset + w[0].len < w[1].offset);
    }
    assert_eq!(
        a.largest_free(),
        free.iter().map(|e| e.len).max().unwrap_or(0)
    );
}

proptest! {
    #[test]
    fn random_alloc_free(
        cap_units in 1u64..512,
        align_shift in 9u32..14,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let align = 1u64 << align_shift;
        let mut a = ExtentAllocator::new(cap_units * align + align / 2, align);
        prop_assert_eq!(a.capacity_bytes(), cap_units * align);
        let mut live: Vec<Vec<Extent>> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(len) => {
                    let free_before = a.free_bytes();
                    match a.allocate(len) {
                        Ok(ext) => {
                            let total: u64 = ext.iter().map(|e| e.len).sum();
                            prop_assert_eq!(total, len.next_multiple_of(align));
                            prop_assert_eq!(a.free_bytes(), free_before - total);
                            live.push(ext);
                        }
                        Err(IoError::StoreFull { needed, free }) => {
                            prop_assert_eq!(needed, len.next_multiple_of(align));
                            prop_assert_eq!(free, free_before);
                            prop_assert!(needed > free);
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    }
                }
                Op::Free(i) => {
                    if !live.is_empty() {
                        let ext = live.swap_remove(i % live.len());
                        a.free(&ext);
                    }
                }
            }
            check_invariants(&a, &live, align);
        }
        for ext in live.drain(..) {
            a.free(&ext);
        }
        prop_assert_eq!(
            a.free_extents(),
            vec![Extent { offset: 0, len: cap_units * align }]
        );
        prop_assert_eq!(a.free_bytes(), a.capacity_bytes());
    }

    #[test]
    fn fits_whenever_total_free_suffices(
        sizes in proptest::collection::vec(1u64..64, 2..40),
        keep_mask in any::<u64>(),
    ) {
        let align = 4096;
        let total: u64 = sizes.iter().sum();
        let mut a = ExtentAllocator::new(total * align, align);
        let slots: Vec<_> = sizes.iter().map(|&s| a.allocate(s * align).unwrap()).collect();
        prop_assert_eq!(a.free_bytes(), 0);
        for (i, s) in slots.iter().enumerate() {
            if keep_mask & (1 << (i % 64)) == 0 {
                a.free(s);
            }
        }
        let free = a.free_bytes();
        if free > 0 {
            let ext = a.allocate(free).unwrap();
            prop_assert_eq!(ext.iter().map(|e| e.len).sum::<u64>(), free);
            prop_assert_eq!(a.free_bytes(), 0);
        }
    }
}
