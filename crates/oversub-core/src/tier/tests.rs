//! One test body, [`round_trip`], run against each tier: the store, the host tier, and both wrapped in [`Hashed`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::AtomicI64;
use std::sync::mpsc::channel;
use std::sync::Arc;

use oversub_accel::{DeviceMemory, HostMemory, Reservation};
use oversub_io::{Direction, PsyncEngine, SwapStore};

use super::{AnyTier, Hashed, Host, Store, Tier, TierIo, Tiers};
use crate::transfer::direct::Direct;
use crate::transfer::host_tier::{HostTier, HostTierConfig};
use crate::transfer::TransferError;
use crate::workers::Workers;

/// Two checksum pieces, the second one short, and a size that is not a multiple of the store's alignment.
const SIZE: u64 = (8 << 20) + 3 * 4096 + 100;

struct Fixture {
    device: Arc<dyn DeviceMemory>,
    store: Arc<SwapStore>,
    hasher: Arc<Workers>,
}

fn fixture() -> Fixture {
    let store = SwapStore::builder()
        .capacity_bytes(64 << 20)
        .engine(Arc::new(PsyncEngine::new(4).unwrap()))
        .create_temp(&std::env::temp_dir())
        .unwrap();
    Fixture {
        device: Arc::new(HostMemory::default()),
        store: Arc::new(store),
        hasher: Arc::new(
            Workers::start("test-hash", "spawning a checksum thread", 1, false).unwrap(),
        ),
    }
}

impl Fixture {
    /// The store tier on the direct path (which takes pieces).
    fn store_tier(&self) -> Store {
        let direct = Arc::new(Direct::new(
            Arc::clone(&self.device),
            Arc::clone(&self.store),
        ));
        Store::new(Arc::clone(&self.store), direct.clone(), Some(direct), None)
    }

    /// A host tier of `capacity` bytes (unpinned), with its memory.
    fn host_tier(&self, capacity: u64) -> (Host, Arc<HostTier>) {
        let config = HostTierConfig {
            capacity_bytes: capacity,
            pinned: false,
        };
        let memory = Arc::new(HostTier::new(config, Arc::clone(&self.device)).unwrap());
        (
            Host::new(Arc::clone(&memory), Box::new(Arc::clone(&memory))),
            memory,
        )
    }

    fn hashed<T: Tier>(&self, inner: T) -> Hashed<T> {
        Hashed::new(inner, Arc::clone(&self.device), Arc::clone(&self.hasher))
    }

    fn io_bytes(&self) -> u64 {
        SIZE.next_multiple_of(self.store.alignment() as u64)
    }
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Moves the buffer at `range` to or from `copy` and waits for the outcome.
fn run<T: Tier>(
    tier: &T,
    copy: &T::Copy,
    direction: Direction,
    range: &Reservation,
    io_bytes: u64,
) -> Result<(), TransferError> {
    let (tx, rx) = channel();
    let io = TierIo {
        direction,
        range,
        io_bytes,
        size_bytes: SIZE,
        after: None,
        on_done: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    };
    // SAFETY: the range is committed and only this test uses it; the copy stays reserved and untouched until the
    // completion is received below.
    unsafe { tier.submit(copy, io) }.unwrap();
    rx.recv().unwrap()
}

/// Writes a buffer into a new copy of `tier` and reads it back; reads part of the copy directly; changes a byte
/// of the copy behind the tier's back (`write_raw`) and reads again (a checksum mismatch when `hashed`, else the
/// changed byte); writes the byte back through the tier and reads once more (a write through the tier is trusted
/// again). Giving the copy back leaves the tier's free bytes (`free`) as they were.
fn round_trip<T: Tier>(
    f: &Fixture,
    tier: &T,
    write_raw: impl Fn(&T::Copy, u64, &[u8]),
    hashed: bool,
    free: impl Fn() -> u64,
) {
    let io_bytes = f.io_bytes();
    let before = free();
    let range = f.device.reserve(io_bytes as usize).unwrap();
    f.device.commit(&range).unwrap();
    let ptr = f.device.host_ptr(&range).unwrap();
    // SAFETY: the range is committed, `io_bytes` long (what callers pass), and used by this test alone; this runs
    // only between moves.
    let fill =
        |bytes: &[u8]| unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    // SAFETY: as above; the range is longer than `SIZE`.
    let memory = || unsafe { std::slice::from_raw_parts(ptr, SIZE as usize) }.to_vec();
    let zeros = vec![0u8; io_bytes as usize];
    let bytes = pattern(io_bytes as usize);
    fill(&bytes);

    let copy = tier
        .reserve(io_bytes, &Arc::new(AtomicI64::new(0)))
        .unwrap()
        .expect("room for the copy");
    assert!(free() < before, "the copy takes room");
    run(tier, &copy, Direction::Write, &range, io_bytes).unwrap();
    fill(&zeros);
    run(tier, &copy, Direction::Read, &range, io_bytes).unwrap();
    assert!(memory() == bytes[..SIZE as usize], "read back");

    let mut part = [0u8; 100];
    tier.read_at(&copy, 4096 + 7, &mut part).unwrap();
    assert_eq!(part[..], bytes[4103..4203]);

    write_raw(&copy, 5, &[!bytes[5]]);
    fill(&zeros);
    let corrupted = run(tier, &copy, Direction::Read, &range, io_bytes);
    if hashed {
        assert!(
            matches!(corrupted, Err(TransferError::Checksum { .. })),
            "a changed byte is a mismatch: {corrupted:?}"
        );
    } else {
        corrupted.unwrap();
        assert_eq!(memory()[5], !bytes[5]);
    }

    tier.write_at(&copy, 5, &bytes[5..6]).unwrap();
    fill(&zeros);
    run(tier, &copy, Direction::Read, &range, io_bytes).unwrap();
    assert!(
        memory() == bytes[..SIZE as usize],
        "read back after a write through the tier"
    );

    tier.release(copy);
    assert_eq!(free(), before, "the room went back");
    // SAFETY: the moves are over; nothing uses the range.
    unsafe {
        f.device.decommit(&range).unwrap();
        f.device.unreserve(range).unwrap();
    }
}

#[test]
fn store() {
    let f = fixture();
    let tier = f.store_tier();
    round_trip(
        &f,
        &tier,
        |c, at, d| Tier::write_at(&tier, c, at, d).unwrap(),
        false,
        || f.store.free_bytes(),
    );
}

#[test]
fn host() {
    let f = fixture();
    let (tier, memory) = f.host_tier(32 << 20);
    round_trip(
        &f,
        &tier,
        |c, at, d| Tier::write_at(&tier, c, at, d).unwrap(),
        false,
        || memory.free_bytes(),
    );
}

#[test]
fn hashed_store() {
    let f = fixture();
    let tier = f.hashed(f.store_tier());
    round_trip(
        &f,
        &tier,
        |c, at, d| Tier::write_at(tier.inner(), c.inner(), at, d).unwrap(),
        true,
        || f.store.free_bytes(),
    );
}

#[test]
fn hashed_host() {
    let f = fixture();
    let (host, memory) = f.host_tier(32 << 20);
    let tier = f.hashed(host);
    round_trip(
        &f,
        &tier,
        |c, at, d| Tier::write_at(tier.inner(), c.inner(), at, d).unwrap(),
        true,
        || memory.free_bytes(),
    );
}

#[test]
fn a_full_tier_passes_the_copy_to_the_next() {
    let f = fixture();
    let (host, memory) = f.host_tier(1 << 20);
    let tiers = Tiers::new(vec![
        Arc::new(host) as Arc<dyn AnyTier>,
        Arc::new(f.store_tier()) as Arc<dyn AnyTier>,
    ]);
    let priority = Arc::new(AtomicI64::new(0));
    let (host_free, store_free) = (memory.free_bytes(), f.store.free_bytes());
    let small = tiers.reserve(4096, &priority).unwrap();
    let large = tiers.reserve(4 << 20, &priority).unwrap();
    assert!(small.in_host_memory());
    assert!(!large.in_host_memory());
    small.release();
    large.release();
    assert_eq!(
        (memory.free_bytes(), f.store.free_bytes()),
        (host_free, store_free)
    );
}
