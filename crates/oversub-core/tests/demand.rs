//! Demand-paged buffers (`oversub_core::demand`): data survives eviction, eviction really empties memory, every
//! page touched after it is a major fault, errors instead of panics, and the speed measurement.
//!
//! Eviction is only real on a disk file system, so these tests use the system's temporary directory (or /var/tmp)
//! and skip, saying why, where both are tmpfs. No test asserts a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use oversub_core::{
    measure_demand_bandwidths, measure_demand_bandwidths_with, thread_faults, DemandAccess,
    DemandBufferId, DemandError, DemandSpace, Readahead,
};

const TMPFS_MAGIC: i64 = 0x0102_1994;

fn is_tmpfs(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: c is a valid NUL-terminated path and st has room for the struct.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    assert_eq!(rc, 0, "statfs {}", dir.display());
    // SAFETY: statfs succeeded.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as i64;
    kind == TMPFS_MAGIC
}

/// A directory on a real disk, or None (printing why) where there is none.
fn disk_dir() -> Option<PathBuf> {
    for dir in [std::env::temp_dir(), PathBuf::from("/var/tmp")] {
        if dir.is_dir() && !is_tmpfs(&dir) {
            return Some(dir);
        }
    }
    eprintln!("skipped: the temporary directory and /var/tmp are tmpfs, where eviction keeps pages in memory");
    None
}

fn pattern(buffer: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 12) ^ buffer.wrapping_mul(97)) as u8
}

fn write_pattern(space: &DemandSpace, b: DemandBufferId) {
    let len = space.len(b).unwrap();
    let data: Vec<u8> = (0..len).map(|i| pattern(b.0, i)).collect();
    let ptr = space.as_ptr(b).unwrap();
    // SAFETY: ptr is valid for len bytes while space lives; this test is its only user.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, len) };
}

fn read_back(space: &DemandSpace, b: DemandBufferId) -> Vec<u8> {
    let len = space.len(b).unwrap();
    let mut out = vec![0u8; len];
    let ptr = space.as_ptr(b).unwrap();
    // SAFETY: as in write_pattern.
    unsafe { std::ptr::copy_nonoverlapping(ptr, out.as_mut_ptr(), len) };
    out
}

const ODD_SIZES: [u64; 6] = [1, 4095, 4097, 100_003, 3 * 4096 + 17, 1 << 20];

#[test]
fn data_survives_eviction_and_starts_zeroed() {
    let Some(dir) = disk_dir() else { return };
    let space = DemandSpace::create(Some(&dir), &ODD_SIZES).unwrap();
    assert_eq!(space.buffer_count(), ODD_SIZES.len());
    for b in space.buffer_ids() {
        assert_eq!(space.len(b).unwrap() as u64, ODD_SIZES[b.0]);
        assert_eq!(space.as_ptr(b).unwrap() as usize % space.page_size(), 0);
        assert!(
            read_back(&space, b).iter().all(|&x| x == 0),
            "{b} starts zeroed"
        );
        write_pattern(&space, b);
    }
    for b in space.buffer_ids() {
        let pages = (space.len(b).unwrap()).div_ceil(space.page_size());
        let stats = space.evict(b).unwrap();
        assert_eq!(stats.resident_pages_before, pages, "{b}: {stats:?}");
        if let Some(dirty) = stats.dirty_pages_before {
            assert_eq!(dirty, pages, "{b}: every written page is dirty: {stats:?}");
            assert_eq!(
                stats.written_back_bytes,
                Some((pages * space.page_size()) as u64)
            );
        }
        assert!(stats.fully_evicted(), "{b}: {stats:?}");
        assert_eq!(space.resident_pages(b).unwrap(), 0);
    }
    assert_eq!(space.resident_bytes().unwrap(), 0);
    for b in space.buffer_ids() {
        let back = read_back(&space, b);
        assert!(
            back.iter().enumerate().all(|(i, &x)| x == pattern(b.0, i)),
            "{b} reads back what was written"
        );
    }
    // A second eviction of clean pages writes nothing back and still empties memory.
    let again = space.evict(DemandBufferId(5)).unwrap();
    assert_eq!(again.dirty_pages_before.unwrap_or(0), 0, "{again:?}");
    assert!(again.fully_evicted());
    assert_eq!(
        read_back(&space, DemandBufferId(5)),
        read_back(&space, DemandBufferId(5))
    );
}

#[test]
fn every_page_touched_after_eviction_is_a_major_fault() {
    let Some(dir) = disk_dir() else { return };
    let bytes = 8u64 << 20;
    let space = DemandSpace::create(Some(&dir), &[bytes, 4096 * 5 + 1]).unwrap();
    let b = DemandBufferId(0);
    let pages = (bytes as usize).div_ceil(space.page_size());
    write_pattern(&space, b);
    let evicted = space.evict(b).unwrap();
    assert!(evicted.fully_evicted(), "{evicted:?}");

    let read = space.touch(b, DemandAccess::Read).unwrap();
    assert_eq!(read.pages, pages);
    eprintln!(
        "read walk of {pages} evicted pages: {} major, {} minor faults, {:?}",
        read.faults.major, read.faults.minor, read.elapsed
    );
    assert!(
        read.faults.major >= pages as u64,
        "MADV_RANDOM: one major fault per page, got {} for {pages} pages",
        read.faults.major
    );
    assert_eq!(space.resident_pages(b).unwrap(), pages);
    // Resident now: walking again faults nothing in.
    let warm = space.touch(b, DemandAccess::Read).unwrap();
    assert_eq!(warm.faults.major, 0, "{warm:?}");
    assert_eq!(warm.sum, read.sum);

    // A write walk of an evicted buffer faults every page in and dirties every page, bytes unchanged.
    space.evict(b).unwrap();
    let write = space.touch(b, DemandAccess::Write).unwrap();
    eprintln!(
        "write walk of {pages} evicted pages: {} major, {} minor faults",
        write.faults.major, write.faults.minor
    );
    assert!(write.faults.major >= pages as u64, "{write:?}");
    assert_eq!(write.sum, read.sum);
    let stats = space.evict(b).unwrap();
    if let Some(dirty) = stats.dirty_pages_before {
        // Every page was dirtied, but the kernel's flusher may have written some back before the eviction counted
        // them (1,974 of 2,048 once, while another process wrote gigabytes to the same disk).
        assert!(
            dirty > 0 && dirty <= pages,
            "a write walk dirties the pages: {stats:?}"
        );
    }
    assert!(stats.fully_evicted());
    assert!(read_back(&space, b)
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, i)));
    // The other buffer was never touched by any of this.
    assert_eq!(space.resident_pages(DemandBufferId(1)).unwrap(), 0);
}

#[test]
fn thread_faults_count_this_thread_only() {
    let before = thread_faults();
    let other = std::thread::spawn(|| {
        let v = vec![1u8; 16 << 20];
        std::hint::black_box(&v);
        thread_faults()
    })
    .join()
    .unwrap();
    assert!(other.minor > 0, "{other:?}");
    let mine = thread_faults().since(before);
    assert!(mine.minor < other.minor, "{mine:?} vs {other:?}");
}

#[test]
fn bad_index_is_an_error() {
    let space = DemandSpace::create(None, &[4096, 10]).unwrap();
    let bad = DemandBufferId(2);
    let check = |e: DemandError| {
        assert!(
            matches!(e, DemandError::NoSuchBuffer { index: 2, count: 2 }),
            "{e:?}"
        );
        assert!(e.to_string().contains("no demand-paged buffer 2"), "{e}");
    };
    check(space.len(bad).unwrap_err());
    check(space.as_ptr(bad).unwrap_err());
    check(space.evict(bad).unwrap_err());
    check(space.resident_pages(bad).unwrap_err());
    check(space.touch(bad, DemandAccess::Read).unwrap_err());
}

#[test]
fn missing_directory_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("no-such-dir");
    let e = DemandSpace::create(Some(&missing), &[4096]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&*missing.to_string_lossy()), "{msg}");
    match e {
        DemandError::Os { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn empty_spaces_and_buffers_work() {
    let none = DemandSpace::create(None, &[]).unwrap();
    assert_eq!(none.buffer_count(), 0);
    assert_eq!(none.resident_bytes().unwrap(), 0);
    let space = DemandSpace::create(None, &[0, 4096, 0]).unwrap();
    assert_eq!(space.len(DemandBufferId(0)).unwrap(), 0);
    let stats = space.evict(DemandBufferId(2)).unwrap();
    assert_eq!(stats.resident_pages_before, 0);
    assert_eq!(
        space
            .touch(DemandBufferId(0), DemandAccess::Write)
            .unwrap()
            .pages,
        0
    );
}

#[test]
fn the_store_is_unlinked_and_drop_releases_it() {
    let space = DemandSpace::create(None, &[1 << 16]).unwrap();
    let path = space.path().to_path_buf();
    assert!(!path.exists(), "{} is unlinked at once", path.display());
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mapped = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .contains(&name)
    };
    let open = || {
        std::fs::read_dir("/proc/self/fd").unwrap().any(|e| {
            std::fs::read_link(e.unwrap().path())
                .map(|t| t.to_string_lossy().contains(&name))
                .unwrap_or(false)
        })
    };
    assert!(mapped() && open());
    drop(space);
    assert!(!mapped(), "unmapped");
    assert!(!open(), "closed");
}

#[test]
fn tmpfs_reports_that_it_cannot_evict() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !is_tmpfs(shm) {
        eprintln!("skipped: no tmpfs at /dev/shm");
        return;
    }
    let space = DemandSpace::create(Some(shm), &[64 << 10]).unwrap();
    let b = DemandBufferId(0);
    write_pattern(&space, b);
    let stats = space.evict(b).unwrap();
    eprintln!("tmpfs eviction: {stats:?}");
    assert!(!stats.fully_evicted(), "{stats:?}");
    assert!(read_back(&space, b)
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, i)));
    let e = measure_demand_bandwidths(Some(shm), 1 << 20, 1).unwrap_err();
    assert!(matches!(e, DemandError::NotEvictable { .. }), "{e:?}");
}

#[test]
fn measured_speeds_are_positive_and_finite() {
    let Some(dir) = disk_dir() else { return };
    let speeds = measure_demand_bandwidths(Some(&dir), 16 << 20, 2).unwrap();
    eprintln!(
        "demand paging, 16 MiB: fault-in {:.0} MiB/s, write-back {:.0} MiB/s, {:.2} major faults/page",
        speeds.read_bytes_per_s / (1 << 20) as f64,
        speeds.write_bytes_per_s / (1 << 20) as f64,
        speeds.major_faults_per_page
    );
    assert!(speeds.read_bytes_per_s.is_finite() && speeds.read_bytes_per_s > 0.0);
    assert!(speeds.write_bytes_per_s.is_finite() && speeds.write_bytes_per_s > 0.0);
    assert_eq!(speeds.bytes, 16 << 20);
    assert_eq!(speeds.rounds, 2);
    assert_eq!(speeds.readahead, Readahead::Off);
    assert!(speeds.major_faults_per_page >= 1.0, "{speeds:?}");
    assert!(matches!(
        measure_demand_bandwidths(Some(&dir), 0, 1),
        Err(DemandError::InvalidArgument(_))
    ));
    assert!(matches!(
        measure_demand_bandwidths(Some(&dir), 4096, 0),
        Err(DemandError::InvalidArgument(_))
    ));
}

#[test]
fn kernel_readahead_is_there_for_comparison() {
    let Some(dir) = disk_dir() else { return };
    let space = DemandSpace::create(Some(&dir), &[4 << 20]).unwrap();
    space.set_readahead(Readahead::Kernel).unwrap();
    let b = DemandBufferId(0);
    write_pattern(&space, b);
    assert!(space.evict(b).unwrap().fully_evicted());
    let walk = space.touch(b, DemandAccess::Read).unwrap();
    eprintln!(
        "readahead on, walk of {} evicted pages: {} major, {} minor faults",
        walk.pages, walk.faults.major, walk.faults.minor
    );
    assert!(walk.faults.major >= 1, "{walk:?}");
    assert!(read_back(&space, b)
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, i)));
    let speeds =
        measure_demand_bandwidths_with(Some(&dir), 16 << 20, 1, Readahead::Kernel).unwrap();
    eprintln!(
        "demand paging with readahead, 16 MiB: fault-in {:.0} MiB/s, {:.3} major faults/page",
        speeds.read_bytes_per_s / (1 << 20) as f64,
        speeds.major_faults_per_page
    );
    assert_eq!(speeds.readahead, Readahead::Kernel);
    assert!(speeds.read_bytes_per_s.is_finite() && speeds.read_bytes_per_s > 0.0);
}

#[test]
fn space_is_send_and_sync_and_touchable_from_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DemandSpace>();
    let space = DemandSpace::create(None, &[1 << 20, 1 << 20]).unwrap();
    std::thread::scope(|s| {
        for b in space.buffer_ids() {
            let space = &space;
            s.spawn(move || {
                let t = space.touch(b, DemandAccess::Write).unwrap();
                assert_eq!(t.pages, (1 << 20) / space.page_size());
                space.evict(b).unwrap();
            });
        }
    });
}
