#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Stores striped over several files (and loop devices, where the machine allows): the layout on disk, round
//! trips, views across stripe units, a full store, release and reuse, a failing member, and `StoreBuilder::build`'s
//! clean-up when a location fails.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use oversub_io::testing::{AlignedBuf, CountingEngine, FailingFdEngine, RecordingEngine};
use oversub_io::{Direction, IoEngine, IoError, PsyncEngine, Scrub, Slot, StoreBuilder, SwapStore};
use oversub_testkit::{engines, random_bytes as random, require, LoopDevice};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Stripe unit of most tests: small, so a few MiB span many units.
const UNIT: u64 = 64 * KIB;

fn dirs(n: usize) -> Vec<tempfile::TempDir> {
    (0..n).map(|_| tempfile::tempdir().unwrap()).collect()
}

fn paths(dirs: &[tempfile::TempDir]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.path().to_path_buf()).collect()
}

fn builder(engine: &Arc<dyn IoEngine>) -> StoreBuilder {
    SwapStore::builder()
        .engine(engine.clone())
        .stripe_bytes(UNIT)
        // Smaller than the unit for some tests' requests, so both cuts happen.
        .max_io_bytes(32 * KIB as usize)
}

/// Writes `data` through `slot`, reads it back into fresh memory and returns what came back.
fn write_read(store: &SwapStore, slot: &Slot, data: &[u8]) -> Result<Vec<u8>, IoError> {
    let align = store.alignment();
    let len = slot.len() as usize;
    let mut src = AlignedBuf::new(len, align).unwrap();
    src.as_mut_slice()[..data.len()].copy_from_slice(data);
    // SAFETY: src outlives the blocking transfer.
    unsafe { store.transfer(Direction::Write, slot, &[src.iovec()]) }?;
    read(store, slot)
}

fn read(store: &SwapStore, slot: &Slot) -> Result<Vec<u8>, IoError> {
    let mut dst = AlignedBuf::new(slot.len() as usize, store.alignment()).unwrap();
    // SAFETY: dst outlives the blocking transfer.
    unsafe { store.transfer(Direction::Read, slot, &[dst.iovec()]) }?;
    Ok(dst.as_slice().to_vec())
}

/// Reads byte `i` of `slot` straight from the member file it should be on.
fn on_disk(store: &SwapStore, files: &[std::fs::File], slot: &Slot, i: u64) -> u8 {
    let mut pos = i;
    for e in slot.extents() {
        if pos < e.len {
            let (m, at) = store.member_location(e.offset + pos).unwrap();
            let mut b = [0u8; 1];
            files[m].read_exact_at(&mut b, at).unwrap();
            return b[0];
        }
        pos -= e.len;
    }
    panic!("byte {i} is outside the slot");
}

#[test]
fn round_trips_on_one_two_and_three_members() {
    for (name, engine) in engines(8, 32) {
        for n in 1..=3 {
            let dirs = dirs(n);
            let store = builder(&engine)
                .capacity_bytes(8 * MIB)
                .keep(true)
                .scrub(Scrub::Keep)
                .build(&paths(&dirs))
                .unwrap();
            assert_eq!(store.member_count(), n, "{name}");
            assert_eq!(store.stripe_bytes(), UNIT);
            assert!(store.capacity_bytes() >= 8 * MIB);
            assert_eq!(store.capacity_bytes() % (n as u64 * UNIT), 0);
            let members = store.member_paths();
            for (m, d) in members.iter().zip(&dirs) {
                assert_eq!(m.parent().unwrap(), d.path());
            }
            assert_eq!(store.path(), members[0]);
            let fds = store.member_fds();
            assert_eq!(store.fd(), fds[0]);
            if n > 1 {
                assert_eq!(
                    store.data_offset(),
                    0,
                    "striped slots carry logical offsets"
                );
            }
            let files: Vec<std::fs::File> = members
                .iter()
                .map(|p| std::fs::File::open(p).unwrap())
                .collect();
            let align = store.alignment() as u64;
            // Below one unit, one unit, several, and lengths that end mid-unit.
            let sizes = [
                align,
                UNIT / 2,
                UNIT,
                3 * UNIT,
                5 * UNIT + align,
                MIB + 3 * align,
            ];
            for (k, &size) in sizes.iter().enumerate() {
                let slot = store.allocate(size).unwrap();
                let data = random(size as usize, (n * 100 + k) as u64);
                let back = write_read(&store, &slot, &data).unwrap();
                assert!(back == data, "{name}, {n} members, {size} bytes");
                // Where the map says, on disk.
                for i in (0..size).step_by(997).chain([size - 1]) {
                    assert_eq!(on_disk(&store, &files, &slot, i), data[i as usize]);
                }
                store.release(slot);
            }
            assert_eq!(store.free_bytes(), store.capacity_bytes());
        }
    }
}

#[test]
fn one_location_is_todays_store() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let built = builder(&engine)
        .capacity_bytes(3 * MIB + 4096)
        .build(&[dir.path().to_path_buf()])
        .unwrap();
    let made = builder(&engine)
        .capacity_bytes(3 * MIB + 4096)
        .create_temp(dir.path())
        .unwrap();
    assert_eq!(built.member_count(), 1);
    assert_eq!(built.capacity_bytes(), made.capacity_bytes());
    assert_eq!(
        built.capacity_bytes(),
        3 * MIB + 4096,
        "no rounding to the stripe"
    );
    assert_eq!(built.data_offset(), made.data_offset());
    let a = built.allocate(2 * MIB).unwrap();
    let b = made.allocate(2 * MIB).unwrap();
    assert_eq!(a.extents(), b.extents());
    assert_eq!(a.extents()[0].offset, built.data_offset());
    assert_eq!(
        built.member_location(a.extents()[0].offset),
        Some((0, built.data_offset()))
    );
    assert!(built.member_location(0).is_none());
}

#[test]
fn one_batch_with_requests_on_every_member() {
    let inner: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(8).unwrap());
    let recording = Arc::new(RecordingEngine::new(inner));
    let counting = Arc::new(CountingEngine::new(recording.clone()));
    let engine: Arc<dyn IoEngine> = counting.clone();
    let d = dirs(3);
    let store = builder(&engine)
        .max_io_bytes(MIB as usize)
        .capacity_bytes(4 * MIB)
        .build(&paths(&d))
        .unwrap();
    let slot = store.allocate(6 * UNIT).unwrap();
    let data = random(slot.len() as usize, 7);
    assert!(write_read(&store, &slot, &data).unwrap() == data);
    assert_eq!(counting.write_batches(), 1);
    assert_eq!(counting.read_batches(), 1);
    let reqs = recording.requests();
    let writes: Vec<_> = reqs
        .iter()
        .filter(|r| r.direction == Direction::Write)
        .collect();
    // Six units, one request each (the unit is below max_io), dealt round-robin over the members.
    assert_eq!(writes.len(), 6);
    let fds = store.member_fds();
    let order: Vec<usize> = writes
        .iter()
        .map(|r| fds.iter().position(|&f| f == r.fd).unwrap())
        .collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2]);
    assert!(writes.iter().all(|r| r.len == UNIT));
}

#[test]
fn full_store_views_and_reuse() {
    for (name, engine) in engines(8, 32) {
        let d = dirs(3);
        let store = builder(&engine)
            .capacity_bytes(2 * MIB)
            .build(&paths(&d))
            .unwrap();
        let cap = store.capacity_bytes();
        assert_eq!(cap % (3 * UNIT), 0);
        // The whole store, then not one block more.
        let all = store.allocate(cap).unwrap();
        match store.allocate(store.alignment() as u64) {
            Err(IoError::StoreFull { free: 0, .. }) => {}
            other => panic!("{name}: expected StoreFull, got {other:?}"),
        }
        let data = random(cap as usize, 11);
        assert!(write_read(&store, &all, &data).unwrap() == data);

        // Views across unit boundaries: rewrite a range that starts mid-unit and spans three members.
        let align = store.alignment() as u64;
        let (off, len) = (UNIT / 2 + align, 2 * UNIT + 3 * align);
        let view = all.view(off, len).unwrap();
        let patch = random(len as usize, 12);
        let mut buf = AlignedBuf::new(len as usize, align as usize).unwrap();
        buf.as_mut_slice().copy_from_slice(&patch);
        // SAFETY: buf outlives the blocking transfer.
        unsafe { store.transfer_view(Direction::Write, &view, &[buf.iovec()]) }.unwrap();
        let mut want = data.clone();
        want[off as usize..(off + len) as usize].copy_from_slice(&patch);
        assert!(read(&store, &all).unwrap() == want, "{name}: view write");
        // And read back through a view of its own.
        let mut back = AlignedBuf::new(len as usize, align as usize).unwrap();
        // SAFETY: as above.
        unsafe { store.transfer_view(Direction::Read, &view, &[back.iovec()]) }.unwrap();
        assert!(back.as_slice() == patch.as_slice(), "{name}: view read");

        // Release and reuse: the space comes back and carries new data.
        store.release(all);
        assert_eq!(store.free_bytes(), cap);
        let a = store.allocate(cap / 3).unwrap();
        let b = store.allocate(cap - cap / 3).unwrap();
        let (da, db) = (random(a.len() as usize, 13), random(b.len() as usize, 14));
        assert!(write_read(&store, &a, &da).unwrap() == da);
        assert!(write_read(&store, &b, &db).unwrap() == db);
        assert!(read(&store, &a).unwrap() == da, "{name}: a after b");
        store.release(a);
        store.release(b);
    }
}

#[test]
fn a_failing_member_fails_the_transfer_and_is_named() {
    let inner: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(8).unwrap());
    let failing = Arc::new(FailingFdEngine::new(inner));
    let engine: Arc<dyn IoEngine> = failing.clone();
    let d = dirs(3);
    let store = builder(&engine)
        .capacity_bytes(4 * MIB)
        .build(&paths(&d))
        .unwrap();
    let early = store.allocate(6 * UNIT).unwrap();
    let early_data = random(early.len() as usize, 21);
    assert!(write_read(&store, &early, &early_data).unwrap() == early_data);
    // A slot on the first member only (one unit at a logical multiple of 3 units).
    let pad = store.allocate(UNIT * 3).unwrap();
    let on_first = store.allocate(UNIT).unwrap();
    assert_eq!(
        store
            .member_location(on_first.extents()[0].offset)
            .unwrap()
            .0,
        0
    );
    let first_data = random(UNIT as usize, 22);
    assert!(write_read(&store, &on_first, &first_data).unwrap() == first_data);

    let bad = store.member_paths()[1].to_path_buf();
    failing.fail_fd(Some(store.member_fds()[1]));
    let later = store.allocate(6 * UNIT).unwrap();
    let err = write_read(&store, &later, &random(later.len() as usize, 23)).unwrap_err();
    match &err {
        IoError::Member { path, source } => {
            assert_eq!(path, &bad);
            assert!(
                matches!(**source, IoError::Io { op: "pwritev", .. }),
                "{source:?}"
            );
        }
        other => panic!("expected a member error, got {other:?}"),
    }
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    let msg = err.to_string();
    assert!(msg.contains(&bad.display().to_string()), "{msg}");
    // The OS error is the end of the source chain.
    let mut last: &dyn std::error::Error = &err;
    while let Some(s) = last.source() {
        last = s;
    }
    let os = last
        .downcast_ref::<std::io::Error>()
        .expect("an io::Error at the end");
    assert_eq!(os.raw_os_error(), Some(libc::EIO));
    // Reads touching the member fail the same way; data on the other members still reads back.
    assert!(matches!(read(&store, &early), Err(IoError::Member { .. })));
    assert!(read(&store, &on_first).unwrap() == first_data);
    // Once the member works again, the earlier write is all there.
    failing.fail_fd(None);
    assert!(read(&store, &early).unwrap() == early_data);
    assert!(failing.injected() > 0);
    for s in [early, pad, on_first, later] {
        store.release(s);
    }
    assert_eq!(store.free_bytes(), store.capacity_bytes());
}

#[test]
fn a_real_os_error_names_the_member_on_both_engines() {
    // A member file that cannot be read past its end: truncate one member under the store, so a read there
    // returns end of file rather than data.
    for (name, engine) in engines(8, 32) {
        let d = dirs(2);
        let store = builder(&engine)
            .capacity_bytes(2 * MIB)
            .keep(true)
            .build(&paths(&d))
            .unwrap();
        let slot = store.allocate(4 * UNIT).unwrap();
        let data = random(slot.len() as usize, 31);
        assert!(write_read(&store, &slot, &data).unwrap() == data);
        let victim = store.member_paths()[1].to_path_buf();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&victim)
            .unwrap()
            .set_len(0)
            .unwrap();
        match read(&store, &slot) {
            Err(IoError::Member { path, source }) => {
                assert_eq!(path, victim, "{name}");
                assert!(
                    matches!(*source, IoError::UnexpectedEof { .. }),
                    "{name}: {source:?}"
                );
            }
            other => panic!("{name}: expected a member error, got {other:?}"),
        }
        store.release(slot);
    }
}

#[test]
fn build_cleans_up_when_a_location_fails() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    for keep in [false, true] {
        let first = tempfile::tempdir().unwrap();
        let missing = first.path().join("no/such/dir/swap");
        let err = builder(&engine)
            .capacity_bytes(2 * MIB)
            .keep(keep)
            .build(&[first.path().to_path_buf(), missing.clone()])
            .unwrap_err();
        match &err {
            IoError::Member { path, source } => {
                assert_eq!(path, &missing);
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
            }
            other => panic!("expected a member error, got {other:?}"),
        }
        assert!(err.to_string().contains("no/such/dir/swap"), "{err}");
        let left: Vec<_> = std::fs::read_dir(first.path()).unwrap().collect();
        assert!(left.is_empty(), "keep {keep}: left behind {left:?}");
    }

    // A busy second member: the first (a named file this call creates) is removed again, and the busy one's
    // holder keeps its store.
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let holder = builder(&engine)
        .capacity_bytes(MIB)
        .keep(true)
        .create(&b.path().join("held.swap"))
        .unwrap();
    let first_file = a.path().join("new.swap");
    let err = builder(&engine)
        .capacity_bytes(2 * MIB)
        .keep(true)
        .build(&[first_file.clone(), b.path().join("held.swap")])
        .unwrap_err();
    assert!(matches!(err, IoError::StoreBusy { .. }), "{err:?}");
    assert!(!first_file.exists(), "the first member's new file was left");
    drop(holder);
    // Now the same call works, and the lock of the failed attempt is gone.
    let s = builder(&engine)
        .capacity_bytes(2 * MIB)
        .build(&[first_file.clone(), b.path().join("held.swap")])
        .unwrap();
    assert_eq!(s.member_count(), 2);
}

#[test]
fn the_same_file_or_directory_twice_is_refused() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("s.swap");
    let b = builder(&engine).capacity_bytes(2 * MIB);
    for locs in [
        vec![d.path().to_path_buf(), d.path().to_path_buf()],
        vec![file.clone(), d.path().join(".").join("s.swap")],
    ] {
        match b.clone().build(&locs) {
            Err(IoError::InvalidArgument(msg)) => assert!(msg.contains("the same"), "{msg}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Also when the file exists (through a symbolic link).
    drop(b.clone().keep(true).create(&file).unwrap());
    let link = d.path().join("link.swap");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    match b.clone().build(&[file.clone(), link]) {
        Err(IoError::InvalidArgument(msg)) => assert!(msg.contains("same file"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        b.clone().build(&[]),
        Err(IoError::InvalidArgument(_))
    ));
    assert!(
        std::fs::read_dir(d.path()).unwrap().count() == 2,
        "nothing else created"
    );
}

#[test]
fn reopened_members_keep_their_data_and_scrub_at_close() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    let d = dirs(2);
    let files: Vec<PathBuf> = d.iter().map(|d| d.path().join("m.swap")).collect();
    let data;
    let extents;
    {
        let s = builder(&engine)
            .capacity_bytes(2 * MIB)
            .keep(true)
            .scrub(Scrub::Keep)
            .build(&files)
            .unwrap();
        assert!(s.is_kept());
        assert!(!s.is_block_device());
        let slot = s.allocate(5 * UNIT).unwrap();
        data = random(slot.len() as usize, 41);
        assert!(write_read(&s, &slot, &data).unwrap() == data);
        extents = slot.extents().to_vec();
    }
    // Open again (no capacity: each member's file size); the data is where it was.
    let s = builder(&engine).build(&files).unwrap();
    assert_eq!(s.capacity_bytes(), 2 * MIB);
    let slot = s.allocate(5 * UNIT).unwrap();
    assert_eq!(slot.extents(), extents.as_slice());
    assert!(read(&s, &slot).unwrap() == data);
    s.release(slot);
    let header = s.alignment().max(4096);
    drop(s);
    // Scrubbed at close (the default): every member's data area reads as zeros, the headers stay.
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(
            bytes[header..].iter().all(|&b| b == 0),
            "{} not scrubbed",
            f.display()
        );
        assert!(bytes[..8].iter().any(|&b| b != 0));
    }
}

#[test]
fn discard_at_release_reaches_every_member() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    let d = dirs(3);
    let s = builder(&engine)
        .capacity_bytes(3 * MIB)
        .keep(true)
        .scrub(Scrub::OnRelease)
        .build(&paths(&d))
        .unwrap();
    let files: Vec<std::fs::File> = s
        .member_paths()
        .iter()
        .map(|p| std::fs::File::open(p).unwrap())
        .collect();
    let slot = s.allocate(7 * UNIT + UNIT / 2).unwrap();
    let data = random(slot.len() as usize, 51);
    assert!(write_read(&s, &slot, &data).unwrap() == data);
    let probe: Vec<u64> = (0..slot.len()).step_by(4099).collect();
    let extents = slot.extents().to_vec();
    s.release(slot);
    for i in probe {
        let (m, at) = s.member_location(extents[0].offset + i).unwrap();
        let mut b = [0xffu8; 1];
        files[m].read_exact_at(&mut b, at).unwrap();
        assert_eq!(b[0], 0, "byte {i} (member {m}) not discarded");
    }
}

#[test]
fn stripe_unit_must_suit_the_alignment() {
    let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(4).unwrap());
    let d = dirs(2);
    let err = SwapStore::builder()
        .engine(engine.clone())
        .capacity_bytes(2 * MIB)
        .keep(true)
        .stripe_bytes(1000)
        .build(&paths(&d))
        .unwrap_err();
    assert!(matches!(err, IoError::InvalidArgument(_)), "{err:?}");
    for dir in &d {
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
    // The default unit is the read request size.
    let s = SwapStore::builder()
        .engine(engine)
        .capacity_bytes(16 * MIB)
        .build(&paths(&d))
        .unwrap();
    assert_eq!(s.stripe_bytes(), s.max_io_bytes() as u64);
    assert_eq!(s.stripe_bytes(), 4 * MIB);
    assert_eq!(s.capacity_bytes(), 16 * MIB);
}

#[test]
fn striped_over_two_loop_devices() {
    let dir = tempfile::tempdir().unwrap();
    let mut loops = Vec::new();
    for (i, size) in [16 * MIB, 20 * MIB].into_iter().enumerate() {
        let image = dir.path().join(format!("disk{i}.img"));
        std::fs::File::create(&image)
            .unwrap()
            .set_len(size)
            .unwrap();
        let dev = require!(
            LoopDevice::attach(&image),
            "no loop device can be attached here (needs root and losetup)"
        );
        loops.push(dev);
    }
    let devs: Vec<PathBuf> = loops.iter().map(|l| l.path().to_path_buf()).collect();
    for (name, engine) in engines(8, 32) {
        let s = SwapStore::builder()
            .engine(engine)
            .stripe_bytes(MIB)
            .build(&devs)
            .unwrap();
        assert!(s.is_block_device(), "{name}");
        assert_eq!(s.member_count(), 2);
        // Each device less its header, the smaller one rounded down to whole units, twice.
        let header = s.alignment().max(4096) as u64;
        assert_eq!(s.capacity_bytes(), 2 * ((16 * MIB - header) / MIB) * MIB);
        let slot = s.allocate(s.capacity_bytes()).unwrap();
        let data = random(slot.len() as usize, 61);
        assert!(write_read(&s, &slot, &data).unwrap() == data, "{name}");
        s.release(slot);
        // The same device twice (two names for it are caught by device number).
        match SwapStore::builder().build(&[devs[0].clone(), devs[0].clone()]) {
            Err(IoError::InvalidArgument(msg)) => assert!(msg.contains("same block device")),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
