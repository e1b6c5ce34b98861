//! Round trips, misuse and failure handling of the pager, each body run on every I/O engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_core::{BufferFlags, BufferState, PagerError, Pool, PoolConfig};
use oversub_io::testing::{CountingEngine, FailingEngine};
use oversub_io::IoError;

fn round_trip_sizes(engine: Arc<dyn oversub_io::IoEngine>) {
    let pool = pool_with(engine, 512 * MIB, 512 * MIB);
    let space = pool.address_space();
    let sizes: &[u64] = &[
        1,
        7,
        4095,
        4096,
        4097,
        65_537,
        MIB + 3,
        3 * MIB,
        33 * MIB + 123,
        200 * MIB,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        let buf = space.alloc(size, BufferFlags::DEFAULT).unwrap();
        let data = pattern(i as u64, size as usize);
        space.write(buf, 0, &data).unwrap();
        let before = space.info(buf).unwrap();
        space.page_out(buf).unwrap();
        let out = space.info(buf).unwrap();
        assert_eq!(out.state, BufferState::PagedOut);
        assert_eq!(space.resident_bytes(buf).unwrap(), Some(0), "size {size}");
        assert!(space.read(buf, 0, &mut [0u8; 1]).is_err());
        space.page_in(buf).unwrap();
        let after = space.info(buf).unwrap();
        assert_eq!(after.addr, before.addr, "address kept for size {size}");
        assert_eq!(after.state, BufferState::Resident);
        let mut back = vec![0u8; size as usize];
        space.read(buf, 0, &mut back).unwrap();
        assert!(
            back == data,
            "bytes differ after round trip of {size} bytes"
        );
        space.free(buf).unwrap();
    }
    assert_eq!(pool.stats().used_bytes, 0);
    assert_eq!(
        pool.stats().store_free_bytes,
        pool.stats().store_capacity_bytes
    );
}

#[test]
fn round_trips_keep_bytes_and_address() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        round_trip_sizes(engine);
    }
}

fn async_and_all(engine: Arc<dyn oversub_io::IoEngine>) {
    let pool = pool_with(engine, 64 * MIB, 256 * MIB);
    let space = pool.address_space();
    let bufs: Vec<_> = (0..6)
        .map(|i| {
            let b = space
                .alloc(5 * MIB + i * 1000, BufferFlags::DEFAULT)
                .unwrap();
            space
                .write(b, 0, &pattern(i, (5 * MIB + i * 1000) as usize))
                .unwrap();
            b
        })
        .collect();
    let pinned = space.alloc(4096, BufferFlags::UNPAGEABLE).unwrap();
    let used = pool.stats().used_bytes;
    // Async page-out of one buffer, then the rest with page_out_all.
    let t = space.page_out_async(bufs[0]).unwrap();
    assert_eq!(space.info(bufs[0]).unwrap().state, BufferState::PagingOut);
    assert!(matches!(
        space.page_out_async(bufs[0]),
        Err(PagerError::OperationInFlight { .. })
    ));
    assert!(matches!(
        space.page_in(bufs[0]),
        Err(PagerError::OperationInFlight { .. })
    ));
    space.finish(t).unwrap();
    space.page_out_all().unwrap();
    for &b in &bufs {
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    }
    assert_eq!(space.info(pinned).unwrap().state, BufferState::Resident);
    assert!(pool.stats().used_bytes < used);
    let tickets = space.page_in_all_async().unwrap();
    assert_eq!(tickets.len(), bufs.len());
    for t in tickets {
        t.finish().unwrap();
    }
    for (i, &b) in bufs.iter().enumerate() {
        let mut back = vec![0u8; (5 * MIB + i as u64 * 1000) as usize];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == pattern(i as u64, back.len()));
    }
    assert_eq!(pool.stats().used_bytes, used);
}

/// A buffer freed while its page-out or page-in is in flight disappears for callers at once and is released when
/// the ticket finishes (or is dropped), whichever order: nothing stays charged or allocated.
fn free_in_flight(engine: Arc<dyn oversub_io::IoEngine>) {
    let pool = pool_with(engine, 64 * MIB, 256 * MIB);
    let store_free = pool.stats().store_free_bytes;
    let space = pool.address_space();
    for (finish_by_drop, read_only) in [(false, false), (true, false), (false, true), (true, true)]
    {
        let flags = if read_only {
            BufferFlags::READ_ONLY
        } else {
            BufferFlags::DEFAULT
        };
        let b = space.alloc(9 * MIB + 5, flags).unwrap();
        space.write(b, 0, &pattern(7, 4096)).unwrap();
        let out = space.page_out_async(b).unwrap();
        space.free(b).unwrap();
        assert!(matches!(space.info(b), Err(PagerError::UnknownBuffer(_))));
        assert!(matches!(space.free(b), Err(PagerError::UnknownBuffer(_))));
        assert!(space.buffers().is_empty());
        if finish_by_drop {
            drop(out);
        } else {
            out.finish().unwrap();
        }
        assert_eq!(pool.stats().used_bytes, 0);
        assert_eq!(pool.stats().store_free_bytes, store_free);
        // The same during a page-in.
        let b = space.alloc(9 * MIB + 5, flags).unwrap();
        space.page_out(b).unwrap();
        let back = space.page_in_async(b).unwrap();
        space.free(b).unwrap();
        if finish_by_drop {
            drop(back);
        } else {
            back.finish().unwrap();
        }
        assert_eq!(pool.stats().used_bytes, 0, "page-in, read_only={read_only}");
        assert_eq!(pool.stats().store_free_bytes, store_free);
        assert_eq!(space.charged_bytes(), 0);
    }
}

#[test]
fn freeing_a_buffer_in_flight_releases_it_when_the_operation_ends() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        free_in_flight(engine);
    }
}

#[test]
fn async_operations_and_page_all() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        async_and_all(engine);
    }
}

#[test]
fn misuse_is_refused_without_change() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 16 * MIB, 16 * MIB);
    let space = pool.address_space();
    let other = pool.address_space();
    let b = space.alloc(10_000, BufferFlags::DEFAULT).unwrap();
    space.write(b, 0, &[9u8; 10_000]).unwrap();
    assert!(matches!(
        space.page_in(b),
        Err(PagerError::AlreadyResident(_))
    ));
    space.page_out(b).unwrap();
    assert!(matches!(
        space.page_out(b),
        Err(PagerError::AlreadyPagedOut(_))
    ));
    assert!(matches!(
        other.page_in(b),
        Err(PagerError::UnknownBuffer(_))
    ));
    assert!(matches!(
        space.write(b, 0, &[1]),
        Err(PagerError::NotResident { .. })
    ));
    space.page_in(b).unwrap();
    assert!(matches!(
        space.write(b, 9_999, &[1, 2]),
        Err(PagerError::OutOfBounds { .. })
    ));
    assert!(matches!(
        space.alloc(0, BufferFlags::DEFAULT),
        Err(PagerError::InvalidSize(_))
    ));
    let pinned = space.alloc(100, BufferFlags::UNPAGEABLE).unwrap();
    assert!(matches!(
        space.page_out(pinned),
        Err(PagerError::Unpageable(_))
    ));
    assert!(matches!(
        space.page_out_async(pinned),
        Err(PagerError::Unpageable(_))
    ));
    // A ticket handed to the wrong space is refused (and finished by its drop).
    let t = space.page_out_async(b).unwrap();
    assert!(matches!(
        other.finish(t),
        Err(PagerError::WrongAddressSpace(_))
    ));
    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    space.free(b).unwrap();
    assert!(matches!(space.free(b), Err(PagerError::UnknownBuffer(_))));
    assert!(matches!(space.info(b), Err(PagerError::UnknownBuffer(_))));
    // Capacity is enforced by accounting.
    let err = space.alloc(17 * MIB, BufferFlags::DEFAULT).unwrap_err();
    assert!(matches!(err, PagerError::OutOfMemory { .. }), "{err}");
    let mut back = [0u8; 100];
    space.read(pinned, 0, &mut back).unwrap();
}

#[test]
fn capacity_is_needed_to_page_in() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 8 * MIB, 32 * MIB);
    let space = pool.address_space();
    let a = space.alloc(6 * MIB, BufferFlags::DEFAULT).unwrap();
    space.write(a, 0, &pattern(1, (6 * MIB) as usize)).unwrap();
    space.page_out(a).unwrap();
    let b = space.alloc(6 * MIB, BufferFlags::DEFAULT).unwrap();
    assert!(matches!(
        space.page_in(a),
        Err(PagerError::OutOfMemory { .. })
    ));
    assert_eq!(space.info(a).unwrap().state, BufferState::PagedOut);
    space.page_out(b).unwrap();
    space.page_in(a).unwrap();
    let mut back = vec![0u8; (6 * MIB) as usize];
    space.read(a, 0, &mut back).unwrap();
    assert!(back == pattern(1, back.len()));
}

fn read_only_written_once(engine: Arc<dyn oversub_io::IoEngine>) {
    let counting = Arc::new(CountingEngine::new(engine));
    let pool = pool_with(counting.clone(), 32 * MIB, 64 * MIB);
    let space = pool.address_space();
    let weights = space.alloc(3 * MIB + 5, BufferFlags::READ_ONLY).unwrap();
    let scratch = space.alloc(MIB, BufferFlags::DEFAULT).unwrap();
    let data = pattern(42, (3 * MIB + 5) as usize);
    space.write(weights, 0, &data).unwrap();
    for _ in 0..5 {
        space.page_out(weights).unwrap();
        space.page_in(weights).unwrap();
        space.page_out(scratch).unwrap();
        space.page_in(scratch).unwrap();
    }
    // Weights written by one batch; scratch by one batch per cycle.
    assert_eq!(counting.write_batches(), 1 + 5);
    assert_eq!(counting.read_batches(), 5 + 5);
    let mut back = vec![0u8; data.len()];
    space.read(weights, 0, &mut back).unwrap();
    assert!(back == data);
    assert!(
        space.info(weights).unwrap().stored,
        "read-only copy kept while resident"
    );
    space.free(weights).unwrap();
    space.free(scratch).unwrap();
    assert_eq!(
        pool.stats().store_free_bytes,
        pool.stats().store_capacity_bytes
    );
}

#[test]
fn read_only_buffers_are_written_once() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        read_only_written_once(engine);
    }
}

fn failures_lose_nothing(engine: Arc<dyn oversub_io::IoEngine>) {
    // max I/O of 1 MiB: a 4 MiB buffer takes 4 requests per transfer.
    for nth in 1..=10u64 {
        let failing = Arc::new(FailingEngine::new(engine.clone(), nth));
        let pool = pool_with(failing, 32 * MIB, 32 * MIB);
        let space = pool.address_space();
        let b = space.alloc(4 * MIB, BufferFlags::DEFAULT).unwrap();
        let data = pattern(nth, (4 * MIB) as usize);
        space.write(b, 0, &data).unwrap();
        let free_before = pool.stats().store_free_bytes;
        // Cycle until the injected failure has hit.
        for _ in 0..3 {
            match space.page_out(b) {
                Ok(()) => {}
                Err(e) => {
                    assert!(
                        matches!(e, PagerError::Store(IoError::Injected { .. })),
                        "{e}"
                    );
                    assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
                    assert_eq!(pool.stats().store_free_bytes, free_before, "slot leaked");
                    continue;
                }
            }
            match space.page_in(b) {
                Ok(()) => {}
                Err(e) => {
                    assert!(
                        matches!(e, PagerError::Store(IoError::Injected { .. })),
                        "{e}"
                    );
                    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
                    assert_eq!(space.resident_bytes(b).unwrap(), Some(0));
                    space.page_in(b).unwrap();
                }
            }
        }
        if space.info(b).unwrap().state == BufferState::PagedOut {
            space.page_in(b).unwrap();
        }
        let mut back = vec![0u8; data.len()];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == data, "bytes lost with failure at I/O {nth}");
        assert_eq!(pool.stats().store_free_bytes, free_before);
        space.free(b).unwrap();
        assert_eq!(pool.stats().used_bytes, 0);
    }
}

#[test]
fn failed_io_loses_nothing_and_leaks_no_slot() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        failures_lose_nothing(engine);
    }
}

#[test]
fn full_store_is_a_clear_error() {
    for (_, engine) in engines() {
        let pool = pool_with(engine, 64 * MIB, 8 * MIB);
        let space = pool.address_space();
        let a = space.alloc(6 * MIB, BufferFlags::DEFAULT).unwrap();
        let b = space.alloc(6 * MIB, BufferFlags::DEFAULT).unwrap();
        space.write(b, 0, &pattern(7, (6 * MIB) as usize)).unwrap();
        space.page_out(a).unwrap();
        let err = space.page_out(b).unwrap_err();
        match err {
            PagerError::Store(IoError::StoreFull { needed, free }) => {
                assert_eq!(needed, 6 * MIB);
                assert_eq!(free, 2 * MIB);
            }
            other => panic!("expected StoreFull, got {other}"),
        }
        assert!(err_text_mentions_full(&space.page_out(b).unwrap_err()));
        assert_eq!(space.info(b).unwrap().state, BufferState::Resident);
        let mut back = vec![0u8; (6 * MIB) as usize];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == pattern(7, back.len()));
    }
}

fn err_text_mentions_full(e: &PagerError) -> bool {
    e.to_string().contains("full")
}

#[test]
fn corrupted_store_is_caught_by_the_checksum() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 16 * MIB, 16 * MIB);
    let space = pool.address_space();
    let b = space.alloc(MIB, BufferFlags::READ_ONLY).unwrap();
    space.write(b, 0, &pattern(3, MIB as usize)).unwrap();
    space.page_out(b).unwrap();
    // Scribble over the whole store behind the pager's back (buffered write, then drop it from the cache).
    let fd = pool.store().fd();
    let len = (16 * MIB) as usize;
    // Aligned because the store may be opened O_DIRECT.
    let mut junk = oversub_io::AlignedBuf::new(len, 1 << 12).unwrap();
    junk.as_mut_slice().fill(0x5A);
    // SAFETY: junk holds len readable bytes; pwrite reads them into our own store file.
    let n = unsafe { libc::pwrite(fd, junk.as_ptr().cast(), len, 0) };
    assert_eq!(n, len as isize);
    let err = space.page_in(b).unwrap_err();
    assert!(matches!(err, PagerError::ChecksumMismatch { .. }), "{err}");
    assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
    assert_eq!(space.resident_bytes(b).unwrap(), Some(0));
    assert_eq!(pool.stats().used_bytes, 0);
}

/// One flipped bit in the third 8 MiB piece of a buffer is caught at page-in (checksums are per piece), the buffer
/// stays paged out, and once the bit is put back the page-in succeeds with every byte.
#[test]
fn a_flipped_bit_in_a_later_piece_is_caught() {
    for (name, engine) in engines() {
        eprintln!("{name}");
        let pool = pool_with(engine, 32 * MIB, 64 * MIB);
        let space = pool.address_space();
        let len = (20 * MIB) as usize;
        let bytes = pattern(11, len);
        let b = space.alloc(len as u64, BufferFlags::DEFAULT).unwrap();
        space.write(b, 0, &bytes).unwrap();
        space.page_out(b).unwrap();
        // Find the buffer's bytes at 17 MiB + 5 in the store file, whatever its layout, and flip one bit there
        // (through a buffered descriptor of the same, already unlinked, file).
        let buffered = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", pool.store().fd()))
            .unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&buffered);
        let file_len = pool.store().capacity_bytes() as usize + (1 << 20);
        let mut file = vec![0u8; file_len];
        // SAFETY: `file` has `file_len` writable bytes; a buffered pread of our own store.
        let read = unsafe { libc::pread(fd, file.as_mut_ptr().cast(), file_len, 0) };
        assert!(read > 0);
        let at = 17 * MIB as usize + 5;
        let needle = &bytes[at..at + 64];
        let pos = file[..read as usize]
            .windows(64)
            .position(|w| w == needle)
            .expect("the buffer's bytes are in the store");
        let flip = |bit: u8| {
            let mut byte = [file[pos] ^ bit];
            // SAFETY: one byte from a live array into our own store file.
            let n = unsafe { libc::pwrite(fd, byte.as_mut_ptr().cast(), 1, pos as libc::off_t) };
            assert_eq!(n, 1);
        };
        flip(0x10);
        let err = space.page_in(b).unwrap_err();
        assert!(matches!(err, PagerError::ChecksumMismatch { .. }), "{err}");
        assert_eq!(space.info(b).unwrap().state, BufferState::PagedOut);
        assert_eq!(pool.stats().used_bytes, 0);
        flip(0);
        space.page_in(b).unwrap();
        let mut back = vec![0u8; len];
        space.read(b, 0, &mut back).unwrap();
        assert!(back == bytes);
    }
}

#[test]
fn a_dropped_space_gives_everything_back() {
    let (_, engine) = engines().remove(0);
    let pool = pool_with(engine, 32 * MIB, 32 * MIB);
    {
        let space = pool.address_space();
        let a = space.alloc(2 * MIB, BufferFlags::DEFAULT).unwrap();
        let b = space.alloc(2 * MIB, BufferFlags::READ_ONLY).unwrap();
        space.page_out(a).unwrap();
        let _unfinished = space.page_out_async(b).unwrap();
    }
    assert_eq!(pool.stats().used_bytes, 0);
    assert_eq!(
        pool.stats().store_free_bytes,
        pool.stats().store_capacity_bytes
    );
}

#[test]
fn handles_from_another_pool_are_unknown() {
    let (_, engine) = engines().remove(0);
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
    let p1 = Pool::new(
        PoolConfig::new(MIB),
        device.clone(),
        store_with(engine.clone(), MIB, 1 << 20),
    )
    .unwrap();
    let p2 = Pool::new(
        PoolConfig::new(MIB),
        device,
        store_with(engine, MIB, 1 << 20),
    )
    .unwrap();
    let s1 = p1.address_space();
    let s2 = p2.address_space();
    let b = s1.alloc(10, BufferFlags::DEFAULT).unwrap();
    assert!(matches!(s2.free(b), Err(PagerError::UnknownBuffer(_))));
}

fn completion_callbacks_run_once(engine: Arc<dyn oversub_io::IoEngine>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pool = pool_with(engine, 64 * MIB, 64 * MIB);
    let space = pool.address_space();
    let buf = space.alloc(8 * MIB, BufferFlags::DEFAULT).unwrap();
    space.write(buf, 0, &pattern(3, 8 * MIB as usize)).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let ticket = space.page_out_async(buf).unwrap();
    let c = Arc::clone(&calls);
    ticket.on_complete(move || {
        c.fetch_add(1, Ordering::SeqCst);
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the completion callback ran");
    assert!(ticket.is_complete());
    // Registered after completion: runs at once, on this thread.
    let c = Arc::clone(&calls);
    ticket.on_complete(move || {
        c.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    ticket.finish().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    space.free(buf).unwrap();
}

#[test]
fn completion_callbacks_run_once_per_registration() {
    for (name, engine) in engines() {
        eprintln!("engine {name}");
        completion_callbacks_run_once(engine);
    }
}

/// A checksummed host tier (`PoolConfig::checksum_host_tier`): buffers round-trip through it, page-out after
/// page-out, read-only ones kept and checked again; direct writes re-arm the checksum.
#[test]
fn checksummed_host_tier_round_trips() {
    use oversub_core::HostTierConfig;
    let (_, engine) = engines().remove(0);
    let pool = Pool::new(
        PoolConfig::new(64 * MIB)
            .host_tier(HostTierConfig {
                capacity_bytes: 32 * MIB,
                pinned: false,
            })
            .checksum_host_tier(true),
        Arc::new(HostMemory::default()),
        store_with(engine, 64 * MIB, 1 << 20),
    )
    .unwrap();
    let space = pool.address_space();
    let size = 9 * MIB as usize + 123;
    let rw = space.alloc(size as u64, BufferFlags::DEFAULT).unwrap();
    let ro = space.alloc(4096, BufferFlags::READ_ONLY).unwrap();
    space.write(rw, 0, &pattern(7, size)).unwrap();
    space.write(ro, 0, &pattern(8, 4096)).unwrap();
    for round in 0..2 {
        space.page_out_all().unwrap();
        assert!(space.info(rw).unwrap().in_host_tier, "round {round}");
        assert!(space.info(ro).unwrap().in_host_tier, "round {round}");
        if round == 1 {
            space.write_direct(rw, 5, b"tier").unwrap();
        }
        space.page_in_all().unwrap();
    }
    let mut back = vec![0u8; size];
    space.read(rw, 0, &mut back).unwrap();
    let mut want = pattern(7, size);
    want[5..9].copy_from_slice(b"tier");
    assert!(back == want);
    let mut small = vec![0u8; 4096];
    space.read(ro, 0, &mut small).unwrap();
    assert!(small == pattern(8, 4096));
    space.free(rw).unwrap();
    space.free(ro).unwrap();
    assert_eq!(pool.host_tier_bytes(), Some((32 * MIB, 32 * MIB)));
}
