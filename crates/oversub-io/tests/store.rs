#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Store and engine behaviour, run against both engines.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use oversub_io::testing::{AlignedBuf, CountingEngine, FailingEngine};
use oversub_io::{
    select_engine, submit_wait, Direction, EngineChoice, IoEngine, IoError, IoRequest, IoVec,
    PsyncEngine, SwapStore, UringEngine,
};

const MIB: u64 = 1 << 20;

fn fill(buf: &mut [u8], seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = (i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(seed)
            .to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn check(buf: &[u8], seed: u64) {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, seed);
    if let Some(pos) = buf.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("data mismatch at byte {pos} (seed {seed})");
    }
}

fn store(engine: &Arc<dyn IoEngine>, dir: &Path, capacity: u64, max_io: usize) -> SwapStore {
    SwapStore::builder()
        .capacity_bytes(capacity)
        .max_io_bytes(max_io)
        .engine(engine.clone())
        .create_temp(dir)
        .unwrap()
}

/// Writes `len` bytes through a fresh slot, reads them back into a zeroed buffer.
fn round_trip(store: &SwapStore, len: u64, seed: u64) {
    let align = store.alignment();
    let before_free = store.free_bytes();
    let slot = store.allocate(len).unwrap();
    assert_eq!(slot.len(), len.next_multiple_of(align as u64));
    let mut src = AlignedBuf::new(slot.len() as usize, align).unwrap();
    fill(src.as_mut_slice(), seed);
    // SAFETY: src outlives the blocking transfer.
    let done = unsafe { store.transfer(Direction::Write, &slot, &[src.iovec()]) }.unwrap();
    assert_eq!(store.free_bytes() + slot.len(), before_free);
    assert_eq!(done.bytes, slot.len());
    let mut dst = AlignedBuf::new(slot.len() as usize, align).unwrap();
    // SAFETY: as above.
    let done = unsafe { store.transfer(Direction::Read, &slot, &[dst.iovec()]) }.unwrap();
    assert_eq!(done.bytes, slot.len());
    check(dst.as_slice(), seed);
    store.release(slot);
}

fn round_trips(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 128 * MIB, 64 << 10);
    assert!(s.is_direct(), "ext4 should allow O_DIRECT");
    eprintln!("ext4 store alignment: {}", s.alignment());
    let before = engine.counters();
    for (i, len) in [4096, 4096 * 3, MIB + 4096, 64 * MIB]
        .into_iter()
        .enumerate()
    {
        round_trip(&s, len, i as u64 + 1);
    }
    assert_eq!(s.free_bytes(), s.capacity_bytes());
    let after = engine.counters();
    let total = 4096 + 4096 * 3 + MIB + 4096 + 64 * MIB;
    assert_eq!(after.bytes_written - before.bytes_written, total);
    assert_eq!(after.bytes_read - before.bytes_read, total);
    // 64 MiB at 64 KiB per request alone is 1024 requests each way.
    assert!(after.writes - before.writes >= 1024 + 16 + 3);
    assert_eq!(after.errors, before.errors);
}

fn multiple_slots(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 16 * MIB, 256 << 10);
    let align = s.alignment();
    let lens = [4096u64, 3 * MIB, 12288, MIB, 5 * MIB];
    let slots: Vec<_> = lens.iter().map(|&l| s.allocate(l).unwrap()).collect();
    let mut bufs = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let mut b = AlignedBuf::new(slot.len() as usize, align).unwrap();
        fill(b.as_mut_slice(), 100 + i as u64);
        // SAFETY: b outlives the transfer.
        unsafe { s.transfer(Direction::Write, slot, &[b.iovec()]) }.unwrap();
        bufs.push(b);
    }
    // Read back in reverse order to catch slots overlapping each other.
    for (i, slot) in slots.iter().enumerate().rev() {
        let mut b = AlignedBuf::new(slot.len() as usize, align).unwrap();
        // SAFETY: b outlives the transfer.
        unsafe { s.transfer(Direction::Read, slot, &[b.iovec()]) }.unwrap();
        check(b.as_slice(), 100 + i as u64);
    }
    for slot in slots {
        s.release(slot);
    }
    assert_eq!(s.free_bytes(), s.capacity_bytes());
}

fn fragmented(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 4 * MIB, 64 << 10);
    let align = s.alignment();
    let a = s.allocate(MIB).unwrap();
    let b = s.allocate(MIB).unwrap();
    let c = s.allocate(MIB).unwrap();
    s.release(b);
    // 1 MiB hole + 1 MiB tail: 1.5 MiB must span two extents.
    let len = MIB + MIB / 2;
    let d = s.allocate(len).unwrap();
    assert!(d.extents().len() >= 2, "extents {:?}", d.extents());
    // Memory in three uneven pieces so requests straddle iovec boundaries.
    let mut m = AlignedBuf::new(len as usize, align).unwrap();
    fill(m.as_mut_slice(), 7);
    let p = m.as_ptr();
    let cuts = [0usize, 40960, 40960 + MIB as usize, len as usize];
    let iov: Vec<IoVec> = cuts
        .windows(2)
        .map(|w| IoVec {
            ptr: p.wrapping_add(w[0]),
            len: w[1] - w[0],
        })
        .collect();
    // SAFETY: m outlives the transfer.
    unsafe { s.transfer(Direction::Write, &d, &iov) }.unwrap();
    // The neighbours must not have been clobbered: write them, then re-check d.
    round_trip(&s, 4096, 9);
    let mut r = AlignedBuf::new(len as usize, align).unwrap();
    // SAFETY: r outlives the transfer.
    unsafe { s.transfer(Direction::Read, &d, &[r.iovec()]) }.unwrap();
    check(r.as_slice(), 7);
    for slot in [a, c, d] {
        s.release(slot);
    }
    assert_eq!(s.free_bytes(), s.capacity_bytes());
    assert_eq!(s.largest_free(), s.capacity_bytes());
}

/// Chunks of a fragmented slot, read through views, give back the bytes written whole; bad views are refused.
fn views(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 4 * MIB, 64 << 10);
    let align = s.alignment() as u64;
    let a = s.allocate(MIB).unwrap();
    let b = s.allocate(MIB).unwrap();
    let _c = s.allocate(MIB).unwrap();
    s.release(a);
    let len = MIB + MIB / 2;
    let d = s.allocate(len).unwrap();
    assert!(d.extents().len() >= 2);
    let mut whole = AlignedBuf::new(len as usize, align as usize).unwrap();
    fill(whole.as_mut_slice(), 31);
    // SAFETY: whole outlives the blocking transfer.
    unsafe { s.transfer(Direction::Write, &d, &[whole.iovec()]) }.unwrap();
    let chunk = 256 * 1024;
    let mut back = AlignedBuf::new(len as usize, align as usize).unwrap();
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off);
        let view = d.view(off, n).unwrap();
        assert_eq!(view.len(), n);
        let iov = IoVec {
            ptr: back.as_mut_slice()[off as usize..].as_mut_ptr(),
            len: n as usize,
        };
        // SAFETY: back outlives the blocking transfer; the slot is allocated.
        unsafe { s.transfer_view(Direction::Read, &view, &[iov]) }.unwrap();
        off += n;
    }
    check(back.as_slice(), 31);
    assert!(matches!(
        d.view(len - 4096, 8192),
        Err(IoError::InvalidArgument(_))
    ));
    assert!(matches!(d.view(0, 0), Err(IoError::InvalidArgument(_))));
    if s.is_direct() && align > 512 {
        let v = d.view(512, align).unwrap();
        let mut m = AlignedBuf::new(align as usize, align as usize).unwrap();
        // SAFETY: m outlives the call (which is refused before any I/O).
        let r = unsafe { s.transfer_view(Direction::Read, &v, &[m.iovec()]) };
        assert!(matches!(r, Err(IoError::Misaligned { .. })), "{r:?}");
    }
    s.release(b);
    s.release(d);
}

fn concurrent(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(store(&engine, dir.path(), 64 * MIB, 128 << 10));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let align = s.alignment();
                for round in 0..10u64 {
                    let len = (t + 1) * 512 * 1024 + round * 4096;
                    let slot = s.allocate(len).unwrap();
                    let seed = t * 1000 + round;
                    let mut src = AlignedBuf::new(slot.len() as usize, align).unwrap();
                    fill(src.as_mut_slice(), seed);
                    // Asynchronous submit: wait on a channel fed by the callback.
                    let (tx, rx) = mpsc::channel();
                    // SAFETY: we block on rx until on_done ran, src lives until then.
                    unsafe {
                        s.submit(
                            Direction::Write,
                            &slot,
                            &[src.iovec()],
                            Box::new(move |r| tx.send(r).unwrap()),
                        )
                    }
                    .unwrap();
                    rx.recv().unwrap().unwrap();
                    let mut dst = AlignedBuf::new(slot.len() as usize, align).unwrap();
                    // SAFETY: dst outlives the blocking transfer.
                    unsafe { s.transfer(Direction::Read, &slot, &[dst.iovec()]) }.unwrap();
                    check(dst.as_slice(), seed);
                    s.release(slot);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.free_bytes(), s.capacity_bytes());
}

fn store_full_and_misaligned(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), MIB, 64 << 10);
    match s.allocate(2 * MIB) {
        Err(IoError::StoreFull { needed, free }) => {
            assert_eq!(needed, 2 * MIB);
            assert_eq!(free, MIB);
        }
        other => panic!("expected StoreFull, got {other:?}"),
    }
    let a = s.allocate(MIB - 4096).unwrap();
    assert!(matches!(
        s.allocate(8192),
        Err(IoError::StoreFull {
            needed: 8192,
            free: 4096
        })
    ));
    assert!(matches!(s.allocate(0), Err(IoError::InvalidArgument(_))));
    s.release(a);

    let slot = s.allocate(8192).unwrap();
    let mut m = AlignedBuf::new(8192 + 4096, 4096).unwrap();
    let bad = IoVec {
        ptr: m.as_ptr().wrapping_add(1),
        len: 8192,
    };
    assert!(s.is_direct());
    // SAFETY: rejected before any I/O.
    let r = unsafe { s.transfer(Direction::Write, &slot, &[bad]) };
    assert!(
        matches!(
            r,
            Err(IoError::Misaligned {
                what: "iovec pointer",
                ..
            })
        ),
        "{r:?}"
    );
    // Wrong total length is rejected too.
    let short = IoVec {
        ptr: m.as_ptr(),
        len: 4096,
    };
    // SAFETY: rejected before any I/O.
    let r = unsafe { s.transfer(Direction::Write, &slot, &[short]) };
    assert!(matches!(r, Err(IoError::InvalidArgument(_))), "{r:?}");
    let _ = m.iovec();
    s.release(slot);
}

fn failing_and_counting(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    // Request #3 fails: the first batch has 2 requests, the second contains #3.
    let failing: Arc<dyn IoEngine> = Arc::new(FailingEngine::new(engine.clone(), 3));
    let counting = Arc::new(CountingEngine::new(failing));
    let s = store(
        &(counting.clone() as Arc<dyn IoEngine>),
        dir.path(),
        4 * MIB,
        64 << 10,
    );
    let slot = s.allocate(128 << 10).unwrap();
    let mut m = AlignedBuf::new(128 << 10, s.alignment()).unwrap();
    fill(m.as_mut_slice(), 5);
    // SAFETY: m outlives the blocking transfers.
    unsafe { s.transfer(Direction::Write, &slot, &[m.iovec()]) }.unwrap();
    // SAFETY: as above.
    let r = unsafe { s.transfer(Direction::Read, &slot, &[m.iovec()]) };
    assert!(matches!(r, Err(IoError::Injected { nth: 3 })), "{r:?}");
    // Later batches work again.
    // SAFETY: as above.
    unsafe { s.transfer(Direction::Read, &slot, &[m.iovec()]) }.unwrap();
    check(m.as_slice(), 5);
    assert_eq!(counting.write_batches(), 1);
    assert_eq!(counting.read_batches(), 2);
    assert_eq!(counting.write_requests(), 2);
    assert_eq!(counting.read_requests(), 4);
    assert_eq!(counting.bytes_written(), 128 << 10);
    assert_eq!(counting.bytes_read(), 256 << 10);
    s.release(slot);

    // fail_every_after: the batch fails on every request after the first n.
    let f = Arc::new(FailingEngine::fail_every_after(engine.clone(), 1));
    let s2 = store(&(f.clone() as Arc<dyn IoEngine>), dir.path(), MIB, 64 << 10);
    let slot = s2.allocate(128 << 10).unwrap();
    // SAFETY: as above.
    let r = unsafe { s2.transfer(Direction::Write, &slot, &[m.iovec()]) };
    assert!(matches!(r, Err(IoError::Injected { nth: 2 })), "{r:?}");
    assert_eq!(f.injected(), 1);
    s2.release(slot);
}

fn temp_file_mode_and_unlink(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), MIB, 64 << 10);
    assert!(!s.is_kept());
    assert!(!s.path().exists(), "unkept file must be unlinked");
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", s.fd())).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    // The header comes before the data area, on top of the capacity.
    assert_eq!(s.capacity_bytes(), MIB);
    assert_eq!(meta.len(), s.data_offset() + MIB);
    assert!(s.data_offset() >= 4096 && s.data_offset() % s.alignment() as u64 == 0);
    round_trip(&s, 8192, 1);

    let kept = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine.clone())
        .keep(true)
        .create_temp(dir.path())
        .unwrap();
    assert!(kept.is_kept());
    let meta = std::fs::metadata(kept.path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    let path = kept.path().to_path_buf();
    drop(kept);
    assert!(path.exists());

    // create() refuses an existing file; open() reuses it.
    let again = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine.clone())
        .create(&path);
    assert!(
        matches!(&again, Err(e) if e.raw_os_error() == Some(libc_eexist())),
        "{again:?}"
    );
    // A kept store is oversub's own: open() accepts it, and its capacity is the file less the header.
    let opened = SwapStore::builder()
        .engine(engine.clone())
        .open(&path)
        .unwrap();
    assert_eq!(opened.capacity_bytes(), MIB);
    assert!(opened.is_kept());
    round_trip(&opened, MIB, 3);
    drop(opened);
    let grown = SwapStore::builder()
        .engine(engine.clone())
        .capacity_bytes(2 * MIB)
        .open(&path)
        .unwrap();
    assert_eq!(grown.capacity_bytes(), 2 * MIB);
    round_trip(&grown, 2 * MIB, 4);
    drop(grown);

    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let r = SwapStore::builder().engine(engine.clone()).open(&empty);
    assert!(matches!(r, Err(IoError::InvalidArgument(_))), "{r:?}");
    let r = SwapStore::builder().engine(engine).create_temp(dir.path());
    assert!(matches!(r, Err(IoError::InvalidArgument(_))), "{r:?}");
}

fn libc_eexist() -> i32 {
    17
}

fn tmpfs_store(engine: Arc<dyn IoEngine>) {
    let s = store(&engine, Path::new("/dev/shm"), 8 * MIB, 64 << 10);
    eprintln!(
        "/dev/shm store: direct={} alignment={}",
        s.is_direct(),
        s.alignment()
    );
    round_trip(&s, 4 * MIB + 4096, 11);
    s.drop_cache().unwrap();
    // Buffered fallback explicitly requested.
    let b = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine)
        .direct(false)
        .create_temp(Path::new("/dev/shm"))
        .unwrap();
    assert!(!b.is_direct());
    assert_eq!(b.alignment(), 4096);
    round_trip(&b, 12288, 12);
}

/// Raw engine use: async batches, empty batches, errors, >IOV_MAX iovecs.
fn raw_engine(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let fd = file.as_raw_fd();

    // Empty batch still completes via the callback.
    // SAFETY: no memory involved.
    let done = unsafe { submit_wait(engine.as_ref(), Vec::new()) }.unwrap();
    assert_eq!(done.bytes, 0);

    // 2000 iovecs of 512 bytes in one request: more than IOV_MAX.
    let n = 2000usize;
    let mut src = AlignedBuf::new(n * 512, 4096).unwrap();
    fill(src.as_mut_slice(), 21);
    let iov = |b: &AlignedBuf| -> Vec<IoVec> {
        (0..n)
            .map(|i| IoVec {
                ptr: b.as_ptr().wrapping_add(i * 512),
                len: 512,
            })
            .collect()
    };
    let req = IoRequest {
        fd,
        direction: Direction::Write,
        offset: 4096,
        iovecs: iov(&src),
    };
    // SAFETY: src outlives the blocking call.
    let done = unsafe { submit_wait(engine.as_ref(), vec![req]) }.unwrap();
    assert_eq!(done.bytes, (n * 512) as u64);
    let dst = AlignedBuf::new(n * 512, 4096).unwrap();
    let req = IoRequest {
        fd,
        direction: Direction::Read,
        offset: 4096,
        iovecs: iov(&dst),
    };
    // SAFETY: dst outlives the blocking call.
    unsafe { submit_wait(engine.as_ref(), vec![req]) }.unwrap();
    check(dst.as_slice(), 21);

    // Reading past the end: UnexpectedEof at the file end.
    let end = 4096 + (n * 512) as u64;
    let mut buf = AlignedBuf::new(8192, 4096).unwrap();
    let reqs = vec![
        IoRequest {
            fd,
            direction: Direction::Read,
            offset: end - 4096,
            iovecs: vec![buf.iovec()],
        },
        IoRequest {
            fd,
            direction: Direction::Read,
            offset: 0,
            iovecs: vec![IoVec {
                ptr: dst.as_ptr(),
                len: 4096,
            }],
        },
    ];
    // SAFETY: buffers outlive the blocking call.
    let r = unsafe { submit_wait(engine.as_ref(), reqs) };
    assert!(
        matches!(r, Err(IoError::UnexpectedEof { offset }) if offset == end),
        "{r:?}"
    );

    // A bad fd gives an Io error, counted.
    let errors = engine.counters().errors;
    let r = unsafe {
        // SAFETY: buf outlives the blocking call.
        submit_wait(
            engine.as_ref(),
            vec![IoRequest {
                fd: 1_000_000,
                direction: Direction::Read,
                offset: 0,
                iovecs: vec![buf.iovec()],
            }],
        )
    };
    assert!(
        matches!(&r, Err(IoError::Io { source, .. }) if source.raw_os_error() == Some(9)),
        "{r:?}"
    );
    assert!(engine.counters().errors > errors);
    drop(file);
}

/// Many batches in flight at once from one thread, completing asynchronously.
fn many_async_batches(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 64 * MIB, 64 << 10);
    let align = s.alignment();
    let (tx, rx) = mpsc::channel();
    let mut keep = Vec::new();
    for i in 0..32u64 {
        let slot = s.allocate(MIB).unwrap();
        let mut b = AlignedBuf::new(MIB as usize, align).unwrap();
        fill(b.as_mut_slice(), 500 + i);
        let tx = tx.clone();
        // SAFETY: every buffer is kept alive until all 32 callbacks arrived.
        unsafe {
            s.submit(
                Direction::Write,
                &slot,
                &[b.iovec()],
                Box::new(move |r| tx.send((i, r)).unwrap()),
            )
        }
        .unwrap();
        keep.push((slot, b));
    }
    for _ in 0..32 {
        let (_, r) = rx.recv().unwrap();
        assert_eq!(r.unwrap().bytes, MIB);
    }
    for (i, (slot, _)) in keep.iter().enumerate() {
        let mut b = AlignedBuf::new(MIB as usize, align).unwrap();
        // SAFETY: b outlives the blocking transfer.
        unsafe { s.transfer(Direction::Read, slot, &[b.iovec()]) }.unwrap();
        check(b.as_slice(), 500 + i as u64);
    }
    for (slot, _) in keep {
        s.release(slot);
    }
}

/// Dropping the store while a batch is in flight is fine: the batch keeps the fd open.
fn drop_while_in_flight(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 32 * MIB, 64 << 10);
    let slot = s.allocate(16 * MIB).unwrap();
    let mut b = AlignedBuf::new(16 * MIB as usize, s.alignment()).unwrap();
    let (tx, rx) = mpsc::channel();
    // SAFETY: b is only dropped after the callback reported.
    unsafe {
        s.submit(
            Direction::Write,
            &slot,
            &[b.iovec()],
            Box::new(move |r| tx.send(r).unwrap()),
        )
    }
    .unwrap();
    drop(slot);
    drop(s);
    assert_eq!(rx.recv().unwrap().unwrap().bytes, 16 * MIB);
    drop(b);
}

/// A tuned store splits reads and writes at their own request sizes.
fn tuned_points(engine: Arc<dyn IoEngine>) {
    use oversub_io::tuning::IoPoint;
    let dir = tempfile::tempdir().unwrap();
    let s = SwapStore::builder()
        .capacity_bytes(16 * MIB)
        .io_points(
            IoPoint {
                block_bytes: 256 << 10,
                queue_depth: 8,
            },
            IoPoint {
                block_bytes: 2 << 20,
                queue_depth: 4,
            },
        )
        .engine(engine.clone())
        .create_temp(dir.path())
        .unwrap();
    assert_eq!(s.max_io_bytes(), 256 << 10);
    assert_eq!(s.max_write_io_bytes(), 2 << 20);
    let before = engine.counters();
    round_trip(&s, 8 * MIB, 9);
    let after = engine.counters();
    assert_eq!(after.writes - before.writes, 4, "8 MiB in 2 MiB writes");
    assert_eq!(after.reads - before.reads, 32, "8 MiB in 256 KiB reads");
}

macro_rules! engine_tests {
    ($modname:ident, $make:expr) => {
        mod $modname {
            use super::*;

            fn engine() -> Arc<dyn IoEngine> {
                $make
            }

            #[test]
            fn tuned_points() {
                super::tuned_points(engine());
            }

            #[test]
            fn round_trips() {
                super::round_trips(engine());
            }
            #[test]
            fn batches_under_deferred_wakes_all_complete() {
                super::batches_under_deferred_wakes_all_complete(engine());
            }
            #[test]
            fn multiple_slots() {
                super::multiple_slots(engine());
            }
            #[test]
            fn fragmented() {
                super::fragmented(engine());
            }
            #[test]
            fn concurrent() {
                super::concurrent(engine());
            }
            #[test]
            fn views() {
                super::views(engine());
            }
            #[test]
            fn store_full_and_misaligned() {
                super::store_full_and_misaligned(engine());
            }
            #[test]
            fn failing_and_counting() {
                super::failing_and_counting(engine());
            }
            #[test]
            fn temp_file_mode_and_unlink() {
                super::temp_file_mode_and_unlink(engine());
            }
            #[test]
            fn tmpfs_store() {
                super::tmpfs_store(engine());
            }
            #[test]
            fn raw_engine() {
                super::raw_engine(engine());
            }
            #[test]
            fn many_async_batches() {
                super::many_async_batches(engine());
            }
            #[test]
            fn drop_while_in_flight() {
                super::drop_while_in_flight(engine());
            }
            #[test]
            fn engine_drop_completes_callbacks() {
                super::engine_drop_completes_callbacks(engine());
            }
        }
    };
}

/// Batches submitted while a `DeferredWakes` guard lives (nested too) all complete once it is dropped, with the
/// right bytes: the worker is woken once for them, not never.
fn batches_under_deferred_wakes_all_complete(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&engine, dir.path(), 16 * MIB, 256 << 10);
    let piece = MIB;
    let slot = s.allocate(8 * piece).unwrap();
    let mut src = AlignedBuf::new(slot.len() as usize, s.alignment()).unwrap();
    fill(src.as_mut_slice(), 77);
    // SAFETY: src outlives the blocking transfer.
    unsafe { s.transfer(Direction::Write, &slot, &[src.iovec()]) }.unwrap();
    let mut dst = AlignedBuf::new(slot.len() as usize, s.alignment()).unwrap();
    let (tx, rx) = mpsc::channel();
    {
        let _outer = oversub_io::engine::DeferredWakes::begin();
        let _inner = oversub_io::engine::DeferredWakes::begin();
        for k in 0..8 {
            let view = slot.view(k * piece, piece).unwrap();
            let mem = IoVec {
                // SAFETY: inside dst, which outlives the batches (they are all received below).
                ptr: unsafe { dst.as_mut_slice().as_mut_ptr().add((k * piece) as usize) },
                len: piece as usize,
            };
            let tx = tx.clone();
            // SAFETY: dst outlives the batches, received below before it drops.
            unsafe {
                s.submit_view(
                    Direction::Read,
                    &view,
                    &[mem],
                    Box::new(move |r| tx.send(r).unwrap()),
                )
            }
            .unwrap();
        }
    }
    drop(tx);
    let results: Vec<_> = rx.iter().collect();
    assert_eq!(results.len(), 8);
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    check(dst.as_slice(), 77);
    s.release(slot);
}

/// The engine's own drop finishes queued batches and runs their callbacks.
fn engine_drop_completes_callbacks(engine: Arc<dyn IoEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let file = std::fs::File::create(&path).unwrap();
    let mut b = AlignedBuf::new(4 * MIB as usize, 4096).unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..8u64 {
        let tx = tx.clone();
        let req = IoRequest {
            fd: file.as_raw_fd(),
            direction: Direction::Write,
            offset: i * 4 * MIB,
            iovecs: vec![b.iovec()],
        };
        // SAFETY: b and file outlive the engine, whose drop waits for the batches.
        unsafe { engine.submit(vec![req], Box::new(move |r| tx.send(r).unwrap())) }.unwrap();
    }
    drop(tx);
    drop(engine);
    let results: Vec<_> = rx.iter().collect();
    assert_eq!(results.len(), 8);
    assert!(results.iter().all(|r| r.is_ok()));
}

engine_tests!(uring, Arc::new(UringEngine::new(32).unwrap()));
engine_tests!(psync, Arc::new(PsyncEngine::new(8).unwrap()));

#[test]
fn auto_engine() {
    let e = select_engine(EngineChoice::Auto, 16).unwrap();
    eprintln!("select_engine(Auto) picked {}", e.name());
    assert!(e.name() == "io_uring" || e.name() == "psync");
    assert_eq!(e.queue_depth(), 16);
    assert_eq!(
        select_engine(EngineChoice::Psync, 4).unwrap().name(),
        "psync"
    );
    assert!(matches!(
        select_engine(EngineChoice::Auto, 0),
        Err(IoError::InvalidArgument(_))
    ));
    // Default builder path: Auto engine, default sizes.
    let dir = tempfile::tempdir().unwrap();
    let s = SwapStore::builder()
        .capacity_bytes(MIB)
        .create_temp(dir.path())
        .unwrap();
    assert_eq!(s.max_io_bytes(), 4 << 20);
    assert_eq!(s.engine().queue_depth(), 32);
    round_trip(&s, MIB, 77);
}

/// Hundreds of MiB in one batch; `cargo test -- --ignored --nocapture` prints rates.
#[test]
#[ignore = "slow: 512 MiB per engine"]
fn large_batch_throughput() {
    let engines: Vec<Arc<dyn IoEngine>> = vec![
        Arc::new(UringEngine::new(32).unwrap()),
        Arc::new(PsyncEngine::new(32).unwrap()),
    ];
    for engine in engines {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&engine, dir.path(), 512 * MIB, 4 << 20);
        let slot = s.allocate(512 * MIB).unwrap();
        let mut m = AlignedBuf::new(512 * MIB as usize, s.alignment()).unwrap();
        fill(m.as_mut_slice(), 42);
        let t = std::time::Instant::now();
        // SAFETY: m outlives the blocking transfer.
        unsafe { s.transfer(Direction::Write, &slot, &[m.iovec()]) }.unwrap();
        let w = t.elapsed();
        m.as_mut_slice().fill(0);
        let t = std::time::Instant::now();
        // SAFETY: as above.
        unsafe { s.transfer(Direction::Read, &slot, &[m.iovec()]) }.unwrap();
        let r = t.elapsed();
        check(m.as_slice(), 42);
        eprintln!(
            "{}: write {:.0} MiB/s, read {:.0} MiB/s",
            engine.name(),
            512.0 / w.as_secs_f64(),
            512.0 / r.as_secs_f64()
        );
        s.release(slot);
    }
}
