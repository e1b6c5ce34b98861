//! Issue 33 at the store's level: a forked child shares the store's open file description (and its flock) with
//! its parent but has none of the engine's threads. Whatever the child does with its copy of the store (release
//! slots, submit I/O, open the same file again, drop it) must leave the parent's bytes, lock and file alone, and
//! must neither hang nor panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::Cell;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oversub_io::testing::AlignedBuf;
use oversub_io::{Direction, IoEngine, IoError, Scrub, Slot, SwapStore};
use oversub_testkit::engines;
use oversub_testkit::fork::{in_child, ChildEnd};

const MIB: u64 = 1 << 20;

/// One fork at a time: a thread of another test holding a lock at the fork would leave it locked in the child.
static SERIAL: Mutex<()> = Mutex::new(());

/// A hang guard for the child, not a timing check.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

const CHILD_OK: i32 = 0;
const CHILD_NOT_BUSY: i32 = 10;
const CHILD_IO_NOT_REFUSED: i32 = 11;
const CHILD_GONE: i32 = 12;

fn pattern(len: usize, seed: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(len, 4096).unwrap();
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed) | 1;
    }
    b
}

fn write_slot(s: &SwapStore, len: u64, seed: u8) -> Slot {
    let slot = s.allocate(len).unwrap();
    let mut m = pattern(slot.len() as usize, seed);
    // SAFETY: m outlives the blocking transfer.
    unsafe { s.transfer(Direction::Write, &slot, &[m.iovec()]) }.unwrap();
    slot
}

fn read_slot(s: &SwapStore, slot: &Slot) -> Result<AlignedBuf, IoError> {
    let mut back = AlignedBuf::new(slot.len() as usize, 4096).unwrap();
    // SAFETY: back outlives the blocking transfer.
    unsafe { s.transfer(Direction::Read, slot, &[back.iovec()]) }?;
    Ok(back)
}

/// A named store (kept, so scrubbed at close) or a temporary one, with two written slots.
fn store(
    dir: &Path,
    engine: Arc<dyn IoEngine>,
    named: bool,
    scrub: Scrub,
) -> (SwapStore, Vec<Slot>) {
    let builder = SwapStore::builder()
        .capacity_bytes(16 * MIB)
        .engine(engine)
        .scrub(scrub);
    let s = if named {
        let path = dir.join("named.swap");
        std::fs::File::create(&path).unwrap();
        builder.open(&path).unwrap()
    } else {
        builder.create_temp(dir).unwrap()
    };
    let slots = vec![write_slot(&s, MIB, 3), write_slot(&s, 2 * MIB + 4096, 9)];
    (s, slots)
}

/// The child's steps: its I/O is refused at once, a reopen of a named store is busy naming the parent, its slots
/// are released and the store dropped.
fn child(s: SwapStore, slots: Vec<Slot>, parent: u32) -> i32 {
    match read_slot(&s, &slots[0]) {
        Err(IoError::Forked { owner_pid, .. }) if owner_pid == parent => {}
        _ => return CHILD_IO_NOT_REFUSED,
    }
    if s.is_kept() {
        let again = SwapStore::builder().open(s.path());
        let busy = matches!(&again, Err(IoError::StoreBusy { holder: Some(h), .. }) if h.contains(&format!("pid {parent}")));
        if !busy {
            return CHILD_NOT_BUSY;
        }
    }
    for slot in slots {
        s.release(slot);
    }
    drop(s);
    CHILD_OK
}

#[test]
fn a_forked_child_leaves_the_parents_store_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let parent = std::process::id();
    for (engine_name, engine) in engines(4, 8) {
        for named in [true, false] {
            for scrub in [Scrub::OnClose, Scrub::OnRelease] {
                let what = format!("{engine_name}, named {named}, {scrub:?}");
                let dir = tempfile::tempdir().unwrap();
                let (s, slots) = store(dir.path(), Arc::clone(&engine), named, scrub);
                let cell = Cell::new(Some((s, slots)));
                let end = in_child(CHILD_LIMIT, || {
                    cell.take()
                        .map_or(CHILD_GONE, |(s, slots)| child(s, slots, parent))
                });
                let (s, slots) = cell.into_inner().unwrap();
                assert_eq!(
                    end,
                    ChildEnd::Exited(CHILD_OK),
                    "{what}: the child did not exit cleanly"
                );
                for (slot, seed) in slots.iter().zip([3u8, 9]) {
                    let back = read_slot(&s, slot).unwrap();
                    assert!(
                        back.as_slice() == pattern(slot.len() as usize, seed).as_slice(),
                        "{what}: the parent's stored bytes changed"
                    );
                }
                // Still the parent's, locked: a second open here is busy, naming this process.
                if named {
                    let again = SwapStore::builder().open(s.path());
                    assert!(
                        matches!(&again, Err(IoError::StoreBusy { holder: Some(h), .. }) if h.contains(&format!("pid {parent}"))),
                        "{what}: {again:?}"
                    );
                }
                for slot in slots {
                    s.release(slot);
                }
            }
        }
    }
}
