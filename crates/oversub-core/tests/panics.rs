//! A completion that panics (here: the device backend's release of a buffer's memory, run on the I/O thread) fails
//! its operation with `CompletionLost` instead of leaving the waiter hanging, and loses nothing: the buffer stays
//! where it was with its bytes, and the accounting comes back to zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{
    assert_holds, assert_nothing_held, each_engine_and_checksums, engines, pattern, pool_over,
    Hooked, MIB,
};
use oversub_core::{BufferFlags, BufferState, PagerError, Pool};
use oversub_io::testing::FailingEngine;
use oversub_io::IoEngine;

/// The host backend, whose next `decommit` panics once when `armed` is set.
fn panicky_host() -> (Arc<Hooked>, Arc<AtomicBool>) {
    let armed = Arc::new(AtomicBool::new(false));
    let trigger = Arc::clone(&armed);
    let device = Hooked::default().on_decommit(move |_, decommit| {
        if trigger.swap(false, Ordering::AcqRel) {
            panic!("injected panic in decommit");
        }
        decommit()
    });
    (Arc::new(device), armed)
}

fn pool_on(engine: Arc<dyn IoEngine>, device: Arc<Hooked>, checksums: bool) -> Pool {
    pool_over(engine, device, (32 * MIB, 64 * MIB), checksums)
}

#[test]
fn a_panicking_completion_fails_the_page_out_and_loses_nothing() {
    each_engine_and_checksums(|engine, checksums| {
        let (device, panic_next_decommit) = panicky_host();
        let pool = pool_on(engine.clone(), device, checksums);
        let space = pool.address_space();
        let b = space.alloc(9 * MIB + 3, BufferFlags::DEFAULT).unwrap();
        let bytes = pattern(3, (9 * MIB + 3) as usize);
        space.write(b, 0, &bytes).unwrap();
        panic_next_decommit.store(true, Ordering::Release);
        let err = space.page_out(b).unwrap_err();
        assert!(matches!(err, PagerError::CompletionLost { .. }), "{err}");
        // The memory was never released: the buffer is resident with its bytes, and can be paged again.
        assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
        assert_holds(&space, b, &bytes);
        space.page_out(b).unwrap();
        space.page_in(b).unwrap();
        assert_holds(&space, b, &bytes);
        space.free(b).unwrap();
        assert_nothing_held(&pool);
    });
}

#[test]
fn a_panicking_completion_after_a_failed_read_keeps_the_stored_copy() {
    for (name, engine) in engines() {
        eprintln!("{name}");
        let (device, panic_next_decommit) = panicky_host();
        // Requests: page-out = 3 writes of 1 MiB; the 4th request (the page-in's first read) fails.
        let failing: Arc<dyn IoEngine> = Arc::new(FailingEngine::new(engine, 4));
        let pool = pool_on(failing, device, true);
        let space = pool.address_space();
        let b = space.alloc(3 * MIB, BufferFlags::DEFAULT).unwrap();
        let bytes = pattern(4, (3 * MIB) as usize);
        space.write(b, 0, &bytes).unwrap();
        space.page_out(b).unwrap();
        // The failed read's completion gives the memory back and panics doing so.
        panic_next_decommit.store(true, Ordering::Release);
        let err = space.page_in(b).unwrap_err();
        assert!(matches!(err, PagerError::CompletionLost { .. }), "{err}");
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
        // finish released the memory the lost completion could not.
        assert_eq!(pool.stats().used_bytes, 0);
        space.page_in(b).unwrap();
        assert_holds(&space, b, &bytes);
        space.free(b).unwrap();
        assert_nothing_held(&pool);
    }
}
