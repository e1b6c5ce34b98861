#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Slots over files the store does not own (a model checkpoint): reads at their offsets on every engine and on a
//! striped store, views, writes and misaligned or out-of-file ranges refused, release frees nothing, and a file
//! modified after it was opened is a typed error.

use std::io::Write;
use std::sync::Arc;

use oversub_io::testing::AlignedBuf;
use oversub_io::{Direction, ExternalFile, IoError, Slot, SwapStore};
use oversub_testkit::{engines, random_bytes as random};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A "checkpoint" of `len` random bytes in `dir`.
fn checkpoint(dir: &std::path::Path, len: usize) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.join("model.safetensors");
    let data = random(len, 7);
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

fn read(store: &SwapStore, slot: &Slot) -> Result<Vec<u8>, IoError> {
    let mut dst = AlignedBuf::new(slot.len() as usize, store.alignment()).unwrap();
    // SAFETY: dst outlives the blocking transfer.
    unsafe { store.transfer(Direction::Read, slot, &[dst.iovec()]) }?;
    Ok(dst.as_slice().to_vec())
}

#[test]
fn reads_come_from_the_file_at_their_offsets() {
    for (name, engine) in engines(4, 16) {
        let dir = tempfile::tempdir().unwrap();
        let (path, data) = checkpoint(dir.path(), (3 * MIB + 100) as usize);
        // Small requests, so one slot is many of them.
        let store = SwapStore::builder()
            .engine(engine.clone())
            .capacity_bytes(4 * MIB)
            .max_io_bytes(64 * KIB as usize)
            .create_temp(dir.path())
            .unwrap();
        let file = Arc::new(ExternalFile::open(&path).unwrap());
        assert_eq!(file.len(), data.len() as u64);
        let (at, len) = (8 * KIB, 2 * MIB);
        let slot = store.external_slot(&file, at, len).unwrap();
        assert!(slot.external().is_some());
        let got = read(&store, &slot).unwrap();
        assert!(
            got == data[at as usize..(at + len) as usize],
            "{name}: wrong bytes"
        );
        // A view reads its part of the file.
        let view = slot.view(64 * KIB, 128 * KIB).unwrap();
        assert!(view.external().is_some());
        let mut part = AlignedBuf::new(128 * KIB as usize, store.alignment()).unwrap();
        // SAFETY: part outlives the blocking transfer.
        unsafe { store.transfer_view(Direction::Read, &view, &[part.iovec()]) }.unwrap();
        let from = (at + 64 * KIB) as usize;
        assert!(part.as_slice() == &data[from..from + 128 * KIB as usize]);
        // Asynchronously: the slot's file stays open until the callback, even if the slot is gone by then.
        let mut dst = AlignedBuf::new(len as usize, store.alignment()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // SAFETY: dst outlives the batch: we wait for the callback below.
        unsafe {
            store.submit(
                Direction::Read,
                &slot,
                &[dst.iovec()],
                Box::new(move |r| tx.send(r.map(|_| ())).unwrap()),
            )
        }
        .unwrap();
        store.release(slot);
        drop(file);
        rx.recv().unwrap().unwrap();
        assert!(dst.as_slice() == &data[at as usize..(at + len) as usize]);
        // Releasing it gave nothing to, and took nothing from, the store's own space.
        assert_eq!(store.free_bytes(), 4 * MIB);
    }
}

#[test]
fn a_striped_store_reads_external_slots_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = checkpoint(dir.path(), MIB as usize);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = SwapStore::builder()
        .capacity_bytes(4 * MIB)
        .stripe_bytes(64 * KIB)
        .build(&[a.path().to_path_buf(), b.path().to_path_buf()])
        .unwrap();
    let file = Arc::new(ExternalFile::open(&path).unwrap());
    let slot = store.external_slot(&file, 0, 512 * KIB).unwrap();
    assert!(read(&store, &slot).unwrap() == data[..512 * KIB as usize]);
}

#[test]
fn writes_bad_ranges_and_changed_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = checkpoint(dir.path(), (MIB + 10) as usize);
    let store = SwapStore::builder()
        .capacity_bytes(MIB)
        .create_temp(dir.path())
        .unwrap();
    let file = Arc::new(ExternalFile::open(&path).unwrap());
    let align = store.alignment() as u64;
    if store.is_direct() {
        assert!(matches!(
            store.external_slot(&file, 1, align),
            Err(IoError::Misaligned { .. })
        ));
        assert!(matches!(
            store.external_slot(&file, 0, align + 1),
            Err(IoError::Misaligned { .. })
        ));
    }
    // The file's last, partial block cannot be read as a whole block.
    let err = store.external_slot(&file, MIB, align).unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");
    assert!(matches!(
        store.external_slot(&file, 0, 0),
        Err(IoError::InvalidArgument(_))
    ));

    let slot = store.external_slot(&file, 0, 64 * KIB).unwrap();
    let mut src = AlignedBuf::new(64 * KIB as usize, store.alignment()).unwrap();
    // SAFETY: src outlives the blocking transfer (which is refused before any I/O).
    let err = unsafe { store.transfer(Direction::Write, &slot, &[src.iovec()]) }.unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(std::fs::read(&path).unwrap()[..16] == random(16, 7)[..]);

    // Rewritten in place after it was opened: the next read says so instead of returning other bytes.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    match read(&store, &slot) {
        Err(IoError::ExternalChanged { path: p, what }) => {
            assert_eq!(p, path);
            assert!(what.contains("size changed"), "{what}");
        }
        other => panic!("expected ExternalChanged, got {other:?}"),
    }
}

#[test]
fn only_regular_files_open() {
    let dir = tempfile::tempdir().unwrap();
    let err = ExternalFile::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, IoError::StoreIo { .. } | IoError::InvalidArgument(_)),
        "{err}"
    );
    let missing = dir.path().join("missing");
    let err = ExternalFile::open(&missing).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(2)); // ENOENT
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}

/// Issue 33: a rewrite with the modification time put back returned the modified bytes. The change time, which a
/// user cannot set back, gives it away; a deleted or chmodded file, which moves the change time too, still reads.
#[test]
fn a_rewrite_with_the_modification_time_put_back_is_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = SwapStore::builder()
        .capacity_bytes(MIB)
        .create_temp(dir.path())
        .unwrap();

    // Deleted and chmodded: the open file's bytes are the ones the slot was made from.
    let (path, bytes) = checkpoint(dir.path(), MIB as usize);
    let file = Arc::new(ExternalFile::open(&path).unwrap());
    let slot = store.external_slot(&file, 0, 64 * KIB).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(read(&store, &slot).unwrap(), bytes[..64 * KIB as usize]);

    // Rewritten in place, its modification time put back.
    let (path, _) = checkpoint(dir.path(), MIB as usize);
    let file = Arc::new(ExternalFile::open(&path).unwrap());
    let slot = store.external_slot(&file, 0, 64 * KIB).unwrap();
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    // Coarse change-time clocks (some file systems tick every few ms) must see the rewrite as later.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"tampered", 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    match read(&store, &slot) {
        Err(IoError::ExternalChanged { what, .. }) => {
            assert!(what.contains("change time"), "{what}")
        }
        other => panic!("expected ExternalChanged, got {other:?}"),
    }
}
