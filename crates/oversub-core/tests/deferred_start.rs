//! A large page-in is started off the caller's thread: its memory is committed and its read queued on the pool's
//! starter thread, so `page_in_async` returns without waiting for the commit. What that must keep: the bytes, the
//! order of events (no read before its commit), and the failure paths — a commit or a read that fails there is the
//! ticket's error at finish, the stored copy survives, and nothing stays charged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{
    assert_holds, assert_nothing_held, each_engine_and_checksums, pattern, pool_over, Hooked, MIB,
};
use oversub_accel::AccelError;
use oversub_core::{AddressSpace, Buffer, BufferFlags, BufferState, PagerError, Pool};
use oversub_io::testing::FailingEngine;
use oversub_io::IoEngine;

/// What the hooked backend saw: which thread committed each range; and whether to fail the next commit.
#[derive(Debug, Default)]
struct Watch {
    fail_next_commit: AtomicBool,
    commit_threads: Mutex<Vec<String>>,
}

impl Watch {
    fn last_commit_thread(&self) -> String {
        self.commit_threads.lock().unwrap().last().cloned().unwrap()
    }
}

/// The host backend, recording which thread committed each range, whose next commit fails once when armed.
fn watched_host() -> (Arc<Hooked>, Arc<Watch>) {
    let watch = Arc::new(Watch::default());
    let seen = Arc::clone(&watch);
    let device = Hooked::default().on_commit(move |range, commit| {
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        seen.commit_threads.lock().unwrap().push(thread);
        if seen.fail_next_commit.swap(false, Ordering::AcqRel) {
            return Err(AccelError::OutOfMemory(format!(
                "injected: committing {} bytes",
                range.len
            )));
        }
        commit()
    });
    (Arc::new(device), watch)
}

/// A size the pool starts off the caller's thread (the threshold is 64 MiB), not a multiple of the store's unit.
const LARGE: u64 = 64 * MIB + 4096 + 3;

fn pool_on(engine: Arc<dyn IoEngine>, device: Arc<Hooked>, checksums: bool) -> Pool {
    pool_over(engine, device, (160 * MIB, 256 * MIB), checksums)
}

/// A buffer of `LARGE` pattern bytes, written and paged out, with its bytes.
fn paged_out(space: &AddressSpace, seed: u64) -> (Buffer, Vec<u8>) {
    let b = space.alloc(LARGE, BufferFlags::DEFAULT).unwrap();
    let bytes = pattern(seed, LARGE as usize);
    space.write(b, 0, &bytes).unwrap();
    space.page_out(b).unwrap();
    (b, bytes)
}

/// After a failed page-in: the stored copy pages in intact, and freeing the buffer leaves nothing held.
fn assert_recovers(pool: &Pool, space: &AddressSpace, b: Buffer, bytes: &[u8]) {
    space.page_in(b).unwrap();
    assert_holds(space, b, bytes);
    space.free(b).unwrap();
    assert_nothing_held(pool);
}

#[test]
fn a_large_page_in_commits_on_the_starter_and_a_small_one_here() {
    each_engine_and_checksums(|engine, checksums| {
        let (device, watch) = watched_host();
        let pool = pool_on(engine.clone(), device, checksums);
        let space = pool.address_space();
        let large = space.alloc(LARGE, BufferFlags::DEFAULT).unwrap();
        let small = space.alloc(3 * MIB + 1, BufferFlags::DEFAULT).unwrap();
        let large_bytes = pattern(1, LARGE as usize);
        let small_bytes = pattern(2, (3 * MIB + 1) as usize);
        space.write(large, 0, &large_bytes).unwrap();
        space.write(small, 0, &small_bytes).unwrap();
        for round in 0..3 {
            space.page_out(large).unwrap();
            space.page_out(small).unwrap();
            // Both in flight at once: the small one's commit runs here while the large one's may still run.
            let t_large = space.page_in_async(large).unwrap();
            let t_small = space.page_in_async(small).unwrap();
            assert_eq!(
                space.info(large).unwrap().state,
                BufferState::PagingIn,
                "round {round}"
            );
            t_small.finish().unwrap();
            t_large.finish().unwrap();
            let threads = watch.commit_threads.lock().unwrap().clone();
            let here = std::thread::current().name().unwrap_or("?").to_string();
            assert!(
                threads.iter().any(|t| t.starts_with("oversub-start")),
                "{threads:?}"
            );
            assert!(threads.contains(&here), "{threads:?}");
            watch.commit_threads.lock().unwrap().clear();
            eprintln!("round {round}: reading back");
            assert_holds(&space, large, &large_bytes);
            assert_holds(&space, small, &small_bytes);
        }
        space.free(large).unwrap();
        space.free(small).unwrap();
        assert_nothing_held(&pool);
    });
}

#[test]
fn a_commit_failing_on_the_starter_is_the_tickets_error_and_loses_nothing() {
    each_engine_and_checksums(|engine, checksums| {
        let (device, watch) = watched_host();
        let pool = pool_on(engine.clone(), device, checksums);
        let space = pool.address_space();
        let (b, bytes) = paged_out(&space, 3);
        watch.fail_next_commit.store(true, Ordering::Release);
        // The call itself succeeds: the commit has not run yet when it returns.
        let ticket = space.page_in_async(b).unwrap();
        let err = ticket.finish().unwrap_err();
        assert!(
            matches!(err, PagerError::Device(AccelError::OutOfMemory(_))),
            "{err:?}"
        );
        assert!(watch.last_commit_thread().starts_with("oversub-start"));
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
        assert_eq!(pool.stats().used_bytes, 0);
        // The stored copy is intact.
        assert_recovers(&pool, &space, b, &bytes);
    });
}

#[test]
fn a_read_failing_after_a_deferred_commit_gives_the_memory_back() {
    each_engine_and_checksums(|engine, checksums| {
        let (device, _) = watched_host();
        // The page-out writes 65 requests of at most 1 MiB; the page-in's second read fails.
        let failing: Arc<dyn IoEngine> = Arc::new(FailingEngine::new(engine.clone(), 67));
        let pool = pool_on(failing, device, checksums);
        let space = pool.address_space();
        let (b, bytes) = paged_out(&space, 4);
        let err = space.page_in(b).unwrap_err();
        assert!(matches!(err, PagerError::Store(_)), "{err:?}");
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
        assert_eq!(pool.stats().used_bytes, 0);
        assert_recovers(&pool, &space, b, &bytes);
    });
}
