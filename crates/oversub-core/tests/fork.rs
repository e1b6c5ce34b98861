//! Issue 33: a forked child never touches its parent's store. The child of a process with a pool (Python's
//! multiprocessing "fork" start method, `os.fork()`, a DataLoader worker) has a copy of the pool, the store's open
//! file description and none of the pool's threads; when it frees buffers and drops the pool it must not scrub,
//! discard or unlock the parent's store, nor join threads that do not exist there. Each case forks with the
//! parent's buffers paged out, lets the child do what a child does, then checks that the child exited cleanly and
//! that every byte pages back in, on every I/O engine, with checksums on and off, on a named store and a temporary
//! one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{engines, pattern, MIB};
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_core::{AddressSpace, Buffer, BufferFlags, PagerError, Pool, PoolConfig};
use oversub_io::{IoEngine, IoError, Scrub, SwapStore};
use oversub_testkit::fork::{in_child, ChildEnd};

/// One fork at a time: a thread of another test holding a lock at the fork would leave it locked in the child.
static SERIAL: Mutex<()> = Mutex::new(());

/// A hang guard for the child, not a timing check.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// Exit codes of the child, saying which of its steps went wrong.
const CHILD_OK: i32 = 0;
const CHILD_NOT_REFUSED: i32 = 10;
const CHILD_NOT_BUSY: i32 = 11;
const CHILD_GONE: i32 = 12;
const CHILD_FREE_FAILED: i32 = 13;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// An existing file opened by name: kept, scrubbed at close (what a child scrubbed before the fix).
    Named,
    /// A temporary file, unlinked at once.
    Temporary,
}

/// What the child inherits (the directory stays the parent's: the child must not remove it).
struct Setup {
    pool: Pool,
    space: AddressSpace,
    buffers: Vec<(Buffer, Vec<u8>)>,
    path: Option<PathBuf>,
}

/// A pool with buffers of known bytes, all paged out, with its store in `dir`.
fn setup(
    dir: &Path,
    engine: Arc<dyn IoEngine>,
    store: Store,
    checksums: bool,
    scrub: Scrub,
) -> Setup {
    let builder = SwapStore::builder()
        .capacity_bytes(64 * MIB)
        .max_io_bytes(1 << 20)
        .engine(engine)
        .scrub(scrub);
    let (swap, path) = match store {
        Store::Named => {
            let path = dir.join("named.swap");
            std::fs::File::create(&path).unwrap();
            (builder.open(&path).unwrap(), Some(path))
        }
        Store::Temporary => (builder.create_temp(dir).unwrap(), None),
    };
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
    let pool = Pool::new(
        PoolConfig::new(32 * MIB).verify_checksums(checksums),
        device,
        Arc::new(swap),
    )
    .unwrap();
    let space = pool.address_space();
    let buffers: Vec<(Buffer, Vec<u8>)> = [MIB, 3 * MIB + 5, 4096, 9 * MIB]
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let b = space.alloc(size, BufferFlags::DEFAULT).unwrap();
            let data = pattern(i as u64 + 1, size as usize);
            space.write(b, 0, &data).unwrap();
            (b, data)
        })
        .collect();
    space.page_out_all().unwrap();
    Setup {
        pool,
        space,
        buffers,
        path,
    }
}

/// Pages everything back in and compares every byte.
fn check_parent(s: &Setup, what: &str) {
    s.space
        .page_in_all()
        .unwrap_or_else(|e| panic!("{what}: the parent's page-in failed after the child: {e}"));
    for (b, data) in &s.buffers {
        let mut back = vec![0u8; data.len()];
        s.space.read(*b, 0, &mut back).unwrap();
        assert!(back == *data, "{what}: the parent's bytes of {b} changed");
    }
}

fn expect_clean_exit(end: ChildEnd, what: &str) {
    assert_eq!(
        end,
        ChildEnd::Exited(CHILD_OK),
        "{what}: the child did not exit cleanly (101: it panicked; Signalled(6): SIGABRT; 1x: a step below)"
    );
}

/// For each engine, store kind and checksum setting: fork, run `child` there, then check the parent's buffers.
fn each_case(scrub: Scrub, child: impl Fn(Setup) -> i32) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (engine_name, engine) in engines() {
        for store in [Store::Named, Store::Temporary] {
            for checksums in [true, false] {
                let what =
                    format!("{engine_name}, {store:?} store, checksums {checksums}, {scrub:?}");
                let dir = tempfile::tempdir().unwrap();
                let s = setup(dir.path(), Arc::clone(&engine), store, checksums, scrub);
                // The child takes its copy out of the cell; the parent's stays in.
                let cell = Cell::new(Some(s));
                let end = in_child(CHILD_LIMIT, || cell.take().map_or(CHILD_GONE, &child));
                let s = cell.into_inner().unwrap();
                // The parent's bytes first: what the child did to them matters most.
                check_parent(&s, &what);
                expect_clean_exit(end, &what);
            }
        }
    }
}

/// What a child does when it exits normally (Python's `sys.exit`): every buffer is freed, then the space and the
/// pool are dropped.
fn frees_and_drops(s: Setup) -> i32 {
    for (b, _) in &s.buffers {
        if s.space.free(*b).is_err() {
            return CHILD_FREE_FAILED;
        }
    }
    drop(s);
    CHILD_OK
}

#[test]
fn a_child_that_frees_and_drops_the_pool_leaves_the_parents_store_alone() {
    each_case(Scrub::OnClose, frees_and_drops);
}

#[test]
fn a_child_of_a_pool_that_discards_at_release_leaves_the_parents_store_alone() {
    each_case(Scrub::OnRelease, frees_and_drops);
}

/// The child drops the pool without freeing first (the space's drop releases the buffers), then its store.
#[test]
fn a_child_that_drops_the_space_and_the_pool_leaves_the_parents_store_alone() {
    each_case(Scrub::OnClose, |s| {
        let store = Arc::clone(s.pool.store());
        drop(s);
        drop(store);
        CHILD_OK
    });
}

/// Paging in the child is refused at once, and a new pool on the parent's named store is busy, naming the parent;
/// then the child drops what it inherited.
#[test]
fn a_child_that_opens_the_parents_named_store_again_is_told_it_is_busy() {
    let parent = std::process::id();
    each_case(Scrub::OnClose, move |s| {
        let (b, _) = &s.buffers[0];
        if !matches!(s.space.page_in(*b), Err(PagerError::Forked { pool_pid, .. }) if pool_pid == parent)
        {
            return CHILD_NOT_REFUSED;
        }
        if let Some(path) = &s.path {
            if !busy_naming(&reopen(path), parent) {
                return CHILD_NOT_BUSY;
            }
        }
        drop(s);
        CHILD_OK
    });
}

fn reopen(path: &Path) -> Result<SwapStore, IoError> {
    SwapStore::builder().capacity_bytes(64 * MIB).open(path)
}

fn busy_naming(r: &Result<SwapStore, IoError>, pid: u32) -> bool {
    matches!(r, Err(IoError::StoreBusy { holder: Some(h), .. }) if h.contains(&format!("pid {pid}")))
}

/// A ticket of an operation in flight at the fork, dropped in the child: the child neither waits for a
/// completion that never comes there nor settles the parent's operation.
#[test]
fn a_child_that_drops_a_ticket_in_flight_neither_hangs_nor_settles_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (engine_name, engine) in engines() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), engine, Store::Named, true, Scrub::OnClose);
        let (b, _) = s.buffers[3].clone();
        let ticket = s.space.page_in_async(b).unwrap();
        let cell = Cell::new(Some((s, ticket)));
        let end = in_child(CHILD_LIMIT, || {
            let Some((s, ticket)) = cell.take() else {
                return CHILD_GONE;
            };
            drop(ticket);
            drop(s);
            CHILD_OK
        });
        let (s, ticket) = cell.into_inner().unwrap();
        expect_clean_exit(end, engine_name);
        ticket.finish().unwrap();
        check_parent(&s, engine_name);
    }
}
