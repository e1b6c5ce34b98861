#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 17: no store is shared by accident, no byte comes back silently wrong. Exclusive stores (flock, O_EXCL),
//! recognition of what a file or device holds before it is overwritten, private modes, the scrub at close.
//! Real files with O_DIRECT; block-device tests run on loop devices where the machine allows (root, losetup),
//! and say they were skipped elsewhere.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};

use oversub_io::testing::AlignedBuf;
use oversub_io::{Direction, IoEngine, IoError, PsyncEngine, Scrub, Slot, StoreBuilder, SwapStore};
use oversub_testkit::{require, LoopDevice};

const MIB: u64 = 1 << 20;
const HOLD_ENV: &str = "OVERSUB_TEST_HOLD_STORE";

fn engine() -> Arc<dyn IoEngine> {
    Arc::new(PsyncEngine::new(2).unwrap())
}

fn builder() -> StoreBuilder {
    SwapStore::builder().engine(engine())
}

fn open(path: &Path) -> Result<SwapStore, IoError> {
    builder().open(path)
}

fn sparse_file(path: &Path, len: u64) {
    File::create(path).unwrap().set_len(len).unwrap();
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The reason of a `StoreRefused`, after checking that its message tells how to override.
fn refused(r: Result<SwapStore, IoError>) -> String {
    match r {
        Err(e @ IoError::StoreRefused { .. }) => {
            let msg = e.to_string();
            for hint in ["force(true)", "--force-store", "force_store=True"] {
                assert!(msg.contains(hint), "{msg}");
            }
            let IoError::StoreRefused { reason, .. } = e else {
                unreachable!()
            };
            reason
        }
        other => panic!("expected StoreRefused, got {other:?}"),
    }
}

/// The holder of a `StoreBusy`.
fn busy(r: Result<SwapStore, IoError>, path: &Path) -> String {
    match r {
        Err(e @ IoError::StoreBusy { .. }) => {
            let msg = e.to_string();
            let IoError::StoreBusy { path: p, holder } = e else {
                unreachable!()
            };
            assert_eq!(p, path);
            let holder = holder.expect("the holder should be known here");
            assert!(msg.contains(&holder), "{msg}");
            holder
        }
        other => panic!("expected StoreBusy, got {other:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(len, 4096).unwrap();
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed) | 1;
    }
    b
}

/// Writes a non-zero pattern into a new slot of `len` bytes.
fn write_slot(s: &SwapStore, len: u64) -> Slot {
    let slot = s.allocate(len).unwrap();
    let mut m = pattern(slot.len() as usize, 7);
    // SAFETY: m outlives the blocking transfer.
    unsafe { s.transfer(Direction::Write, &slot, &[m.iovec()]) }.unwrap();
    slot
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

// ---- the header, by hand, as documented in store/header.rs ----

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn header(version: u32, uid: u32, capacity: u64, created: u64) -> Vec<u8> {
    let mut h = vec![0u8; 4096];
    h[0..8].copy_from_slice(b"\x89OVERSUB");
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&4096u32.to_le_bytes());
    h[16..20].copy_from_slice(&uid.to_le_bytes());
    h[24..32].copy_from_slice(&capacity.to_le_bytes());
    h[32..40].copy_from_slice(&created.to_le_bytes());
    let crc = crc32(&h[..40]);
    h[40..44].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

// ---- exclusive ----

/// A child that shares this process's descriptors for a while, as one does between fork and exec when another
/// thread spawns a process, and then exits.
fn fork_a_child_sharing_our_descriptors_for(ms: u64) -> libc::pid_t {
    // SAFETY: the child calls only async-signal-safe functions (nanosleep, _exit) before it exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let t = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        // SAFETY: see above; `t` is a valid timespec and `_exit` never returns.
        unsafe {
            libc::nanosleep(&t, std::ptr::null_mut());
            libc::_exit(0)
        }
    }
    pid
}

#[test]
fn a_reopen_waits_out_a_spawning_childs_copy_of_the_closed_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.swap");
    let s = builder()
        .capacity_bytes(MIB)
        .keep(true)
        .create(&path)
        .unwrap();
    let child = fork_a_child_sharing_our_descriptors_for(200);
    drop(s);
    // The child still holds our closed store's lock, in our name; the reopen waits for it instead of failing.
    let reopened = open(&path);
    let mut status = 0;
    // SAFETY: child is our own child process; status is a valid out pointer.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    drop(reopened.unwrap());
}

#[test]
fn second_open_in_the_same_process_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.swap");
    let s = builder()
        .capacity_bytes(MIB)
        .keep(true)
        .create(&path)
        .unwrap();
    let holder = busy(open(&path), &path);
    assert!(
        holder.starts_with(&format!("pid {} (", std::process::id())),
        "{holder}"
    );
    // create() refuses an existing path before it gets to the lock.
    let again = builder().capacity_bytes(MIB).create(&path);
    assert!(
        matches!(&again, Err(e) if e.raw_os_error() == Some(libc::EEXIST)),
        "{again:?}"
    );
    drop(s);
    // The lock goes with the store.
    let s = open(&path).unwrap();
    busy(open(&path), &path);
    drop(s);
}

#[test]
fn unlinked_temp_store_is_locked_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = builder()
        .capacity_bytes(MIB)
        .create_temp(dir.path())
        .unwrap();
    assert!(!s.path().exists());
    // The only way back to an unlinked file: its /proc fd link, which opens a new file description. A link is
    // refused unless forced; forced, the lock still keeps it out.
    let link = PathBuf::from(format!("/proc/self/fd/{}", s.fd()));
    assert!(refused(open(&link)).contains("symbolic link"));
    let holder = busy(builder().force(true).open(&link), &link);
    assert!(
        holder.contains(&format!("pid {}", std::process::id())),
        "{holder}"
    );
}

/// Not a test of its own: the child process of `lock_held_by_another_process`, which holds a store open until
/// its stdin closes.
#[test]
fn child_holds_store() {
    let Some(path) = std::env::var_os(HOLD_ENV) else {
        return;
    };
    let s = open(Path::new(&path)).unwrap();
    println!("HOLDING {}", std::process::id());
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(s);
}

#[test]
fn lock_held_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.swap");
    drop(
        builder()
            .capacity_bytes(MIB)
            .keep(true)
            .create(&path)
            .unwrap(),
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_store",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD_ENV, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pid = None;
    for line in lines.by_ref() {
        // libtest prints "test child_holds_store ... " before the child's own output on the same line.
        if let Some((_, p)) = line.unwrap().split_once("HOLDING ") {
            pid = Some(p.trim().parse::<u32>().unwrap());
            break;
        }
    }
    let pid = pid.expect("the child never held the store (see its output above)");
    assert_eq!(pid, child.id());
    let holder = busy(open(&path), &path);
    assert!(holder.starts_with(&format!("pid {pid} (")), "{holder}");
    eprintln!("holder named: {holder}");
    drop(child.stdin.take());
    // Read the child's remaining output, so it does not die of a broken pipe.
    lines.for_each(drop);
    assert!(child.wait().unwrap().success());
    drop(open(&path).unwrap());
}

/// Issue 33: right after a holder is SIGKILLed, its lock can outlive it for a while (until the kernel drops the
/// last reference to the open file: an io_uring's teardown, a loop device's release), still named after the dead
/// pid. Made deterministic here: a child takes the lock, forks a grandchild that keeps the open file for 300 ms,
/// and exits. The reopen waits for the lock instead of reporting the dead child as the holder.
#[test]
fn a_reopen_waits_out_the_lock_of_a_holder_that_has_ended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.swap");
    drop(
        builder()
            .capacity_bytes(MIB)
            .keep(true)
            .create(&path)
            .unwrap(),
    );
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the child and the grandchild call only async-signal-safe functions (open, flock, fork, nanosleep,
    // _exit) on memory prepared before the fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        // SAFETY: see above.
        unsafe {
            let fd = libc::open(cpath.as_ptr(), libc::O_RDWR);
            // Blocking: another test's forked child may still share the creating store's descriptor for a moment.
            if fd < 0 || libc::flock(fd, libc::LOCK_EX) != 0 {
                libc::_exit(2);
            }
            if libc::fork() == 0 {
                let t = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 300_000_000,
                };
                libc::nanosleep(&t, std::ptr::null_mut());
                libc::_exit(0);
            }
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: child is our own child process; status is a valid out pointer.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child could not lock the store"
    );
    // The lock is still held (by the grandchild's copy of the description), in the name of the child, which is gone.
    match open(&path) {
        Ok(s) => drop(s),
        Err(e) => panic!("the reopen did not wait out a holder that has ended: {e}"),
    }
}

/// Another program's lock, taken with util-linux flock(1): exclusive, and shared (as udev takes while probing a
/// block device), which open waits out for a moment before it gives up.
#[test]
fn lock_held_by_the_flock_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flocked.swap");
    drop(
        builder()
            .capacity_bytes(MIB)
            .keep(true)
            .create(&path)
            .unwrap(),
    );
    for mode in ["--exclusive", "--shared"] {
        let spawned = Command::new("flock")
            .arg(mode)
            .arg(&path)
            .args(["-c", "echo locked; read x || true"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn();
        let mut child = require!(spawned, "the flock command is not installed");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "locked");
        let holder = busy(open(&path), &path);
        assert_eq!(holder, format!("pid {} (flock)", child.id()), "{mode}");
        drop(child.stdin.take());
        lines.for_each(drop);
        assert!(child.wait().unwrap().success());
    }
    drop(open(&path).unwrap());
}

// ---- recognition ----

type Sig = (&'static str, &'static [(u64, &'static [u8])]);

const SIGNATURES: &[Sig] = &[
    ("ext4", &[(1080, &[0x53, 0xef])]),
    ("XFS", &[(0, b"XFSB")]),
    ("btrfs", &[(65600, b"_BHRfS_M")]),
    ("swap", &[(4096 - 10, b"SWAPSPACE2")]),
    ("MBR", &[(510, &[0x55, 0xaa])]),
    ("GPT", &[(510, &[0x55, 0xaa]), (512, b"EFI PART")]),
    ("LUKS", &[(0, b"LUKS\xba\xbe")]),
    ("LVM", &[(512, b"LABELONE")]),
    ("mdraid", &[(4096, &[0xfc, 0x4e, 0x2b, 0xa9])]),
    ("NTFS", &[(3, b"NTFS    "), (510, &[0x55, 0xaa])]),
    ("FAT", &[(54, b"FAT16   "), (510, &[0x55, 0xaa])]),
    ("FAT", &[(82, b"FAT32   "), (510, &[0x55, 0xaa])]),
    ("ISO 9660", &[(32769, b"CD001")]),
    ("squashfs", &[(0, b"hsqs")]),
];

#[test]
fn signatures_are_refused_by_name_and_accepted_with_force() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, parts)) in SIGNATURES.iter().enumerate() {
        let path = dir.path().join(format!("sig{i}"));
        sparse_file(&path, 4 * MIB);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        for &(off, bytes) in *parts {
            write_at(&path, off, bytes);
        }
        let reason = refused(open(&path));
        assert!(reason.contains(name), "{name}: {reason}");
        // A refusal changes nothing: contents, size and mode are as they were.
        for &(off, bytes) in *parts {
            assert_eq!(read_at(&path, off, bytes.len()), bytes, "{name}");
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * MIB);
        assert_eq!(mode(&path), 0o644, "{name}");
        // Forced, it becomes an oversub store, which later opens accept without force.
        let s = builder().force(true).open(&path).unwrap();
        assert_eq!(s.capacity_bytes(), 4 * MIB - s.data_offset());
        drop(s);
        drop(open(&path).unwrap());
    }
}

/// Signatures written by the real tools, where they are installed.
#[test]
fn real_file_systems_and_swap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tools: [(&str, &[&str], &str); 2] = [
        ("mkfs.ext4", &["-q", "-F"], "ext4"),
        ("mkswap", &["-q"], "swap"),
    ];
    for (tool, args, name) in tools {
        let path = dir.path().join(tool);
        sparse_file(&path, 16 * MIB);
        let ok = Command::new(tool)
            .args(args)
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped {tool}: not installed or it failed here");
            continue;
        }
        let reason = refused(open(&path));
        assert!(reason.contains(name), "{tool}: {reason}");
    }
}

#[test]
fn other_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Random bytes.
    let path = dir.path().join("random");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let reason = refused(open(&path));
    eprintln!("random bytes: {reason}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    drop(builder().force(true).open(&path).unwrap());

    // A short text file.
    let path = dir.path().join("text");
    std::fs::write(&path, b"hello\n").unwrap();
    let reason = refused(builder().capacity_bytes(MIB).open(&path));
    assert!(reason.contains("not written by oversub"), "{reason}");

    // A sparse file whose only data lies past the first MiB: found through SEEK_DATA.
    let path = dir.path().join("sparse");
    sparse_file(&path, 8 * MIB);
    write_at(&path, 5 * MIB + 4096, b"data");
    let reason = refused(open(&path));
    assert!(
        reason.contains(&format!("offset {}", 5 * MIB + 4096)),
        "{reason}"
    );
}

/// Issue 33: zeros written over the first MiB (or more) and data after them used to pass as blank, and the
/// scrub at close then wiped the data. The whole file is sampled now (SEEK_DATA, then a stride).
#[test]
fn data_behind_a_zeroed_prefix_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for at_mib in [1u64, 2, 64] {
        let path = dir.path().join(format!("zeros-then-data-at-{at_mib}"));
        let user = pattern(8 * MIB as usize, 3);
        {
            let mut f = File::create(&path).unwrap();
            f.write_all(&vec![0u8; (at_mib * MIB) as usize]).unwrap();
            f.write_all(user.as_slice()).unwrap();
        }
        let reason = refused(open(&path));
        assert!(
            reason.contains(&format!("offset {}", at_mib * MIB)),
            "data at {at_mib} MiB: {reason}"
        );
        assert_eq!(read_at(&path, at_mib * MIB, user.len()), user.as_slice());
    }

    // A file system placed at 1 MiB behind a wiped first MiB is named.
    let path = dir.path().join("ext4-at-1MiB");
    sparse_file(&path, 16 * MIB);
    write_at(&path, 0, &vec![0u8; MIB as usize]);
    write_at(&path, MIB + 1080, &[0x53, 0xef]);
    let reason = refused(open(&path));
    assert!(
        reason.contains("ext2/ext3/ext4") && reason.contains("at offset"),
        "{reason}"
    );
}

/// What the sampling misses is not wiped: a store opened on a file accepted as blank scrubs only what it wrote.
#[test]
fn the_scrub_leaves_what_the_store_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missed");
    // Zeros, and a few bytes between two sample points (1 MiB + 64 KiB reads nothing past 1 MiB + 64 KiB).
    std::fs::write(&path, vec![0u8; 8 * MIB as usize]).unwrap();
    let hidden_at = 4 * MIB + 512 * 1024;
    write_at(&path, hidden_at, b"the user's bytes");
    let s = open(&path).unwrap();
    let slot = write_slot(&s, 3 * 4096);
    assert!(slot.extents()[0].offset + slot.len() < hidden_at);
    s.release(slot);
    drop(s);
    assert_eq!(read_at(&path, hidden_at, 16), b"the user's bytes");
}

/// Env var naming the store file a child writes and is then SIGKILLed on (see `killed_while_holding`).
const KILL_ENV: &str = "OVERSUB_TEST_KILL_STORE";

/// Run only as the child of `a_store_killed_before_its_scrub_is_scrubbed_by_the_next`: opens the store named
/// by `KILL_ENV`, fills 5 MiB of it with data, and kills itself, so no scrub runs.
#[test]
#[ignore = "a child process of a_store_killed_before_its_scrub_is_scrubbed_by_the_next"]
fn killed_while_holding() {
    let Ok(path) = std::env::var(KILL_ENV) else {
        return;
    };
    let s = builder()
        .capacity_bytes(6 * MIB)
        .open(Path::new(&path))
        .unwrap();
    let slots: Vec<Slot> = (0..5).map(|_| write_slot(&s, MIB)).collect();
    assert_eq!(slots.len(), 5);
    // SAFETY: kill on our own pid; nothing runs after it.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Issue 33: a pool SIGKILLed before its scrub left its bytes past the next store's (smaller) capacity, and the
/// next store's clean close scrubbed only its own capacity. The header records how far the data area was used.
#[test]
fn a_store_killed_before_its_scrub_is_scrubbed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.swap");
    drop(
        builder()
            .capacity_bytes(6 * MIB)
            .keep(true)
            .create(&path)
            .unwrap(),
    );
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_while_holding",
            "--ignored",
            "--nocapture",
        ])
        .env(KILL_ENV, &path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let off = u64::from(u32_at(&read_at(&path, 0, 52), 12));
    // The killed store's bytes are there, past the capacity the next store asks for.
    assert!(!all_zero(&read_at(&path, off + 4 * MIB, 4096)));
    let header = read_at(&path, 0, 52);
    assert!(
        u64_at(&header, 40) >= off + 5 * MIB,
        "scrub end {}",
        u64_at(&header, 40)
    );

    let s = builder().capacity_bytes(2 * MIB).open(&path).unwrap();
    drop(s);
    for at in (0..5).map(|i| off + i * MIB) {
        assert!(
            all_zero(&read_at(&path, at, MIB as usize)),
            "bytes left at {at}"
        );
    }
    assert_eq!(u64_at(&read_at(&path, 0, 52), 40), off);
}

#[test]
fn blank_files_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let check = |path: &Path, s: SwapStore, capacity: u64| {
        assert_eq!(s.capacity_bytes(), capacity);
        assert!(s.is_kept());
        drop(s);
        let h = read_at(path, 0, 44);
        assert_eq!(&h[..8], b"\x89OVERSUB");
        assert_eq!(u32_at(&h, 16), euid());
        assert_eq!(mode(path), 0o600);
    };

    // Empty: needs a capacity.
    let path = dir.path().join("empty");
    File::create(&path).unwrap();
    assert!(matches!(open(&path), Err(IoError::InvalidArgument(_))));
    let s = builder().capacity_bytes(2 * MIB).open(&path).unwrap();
    let off = s.data_offset();
    check(&path, s, 2 * MIB);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), off + 2 * MIB);

    // A hole.
    let path = dir.path().join("hole");
    sparse_file(&path, 4 * MIB);
    let s = open(&path).unwrap();
    let off = s.data_offset();
    check(&path, s, 4 * MIB - off);

    // Fallocated, never written (unwritten extents: no data for SEEK_DATA).
    let path = dir.path().join("fallocated");
    let f = File::create(&path).unwrap();
    // SAFETY: plain syscall on an open file.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 4 << 20) }, 0);
    drop(f);
    let s = open(&path).unwrap();
    let off = s.data_offset();
    check(&path, s, 4 * MIB - off);

    // Zeros actually written (data extents that read as zeros).
    let path = dir.path().join("zeros");
    std::fs::write(&path, vec![0u8; 3 * MIB as usize]).unwrap();
    let s = open(&path).unwrap();
    let off = s.data_offset();
    check(&path, s, 3 * MIB - off);
}

#[test]
fn own_store_reopens_and_the_header_is_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("own.swap");
    let s = builder()
        .capacity_bytes(3 * MIB)
        .keep(true)
        .create(&path)
        .unwrap();
    let (off, cap) = (s.data_offset(), s.capacity_bytes());
    drop(s);
    let h = read_at(&path, 0, off as usize);
    assert_eq!(&h[..8], b"\x89OVERSUB");
    assert_eq!(u32_at(&h, 8), 2);
    assert_eq!(u64::from(u32_at(&h, 12)), off);
    assert_eq!(u32_at(&h, 16), euid());
    assert_eq!(u32_at(&h, 20), 0);
    assert_eq!(u64_at(&h, 24), cap);
    assert!(u64_at(&h, 32) > 1_600_000_000);
    // Closed cleanly (scrubbed): nothing left for the next store to scrub.
    assert_eq!(u64_at(&h, 40), off);
    assert_eq!(u32_at(&h, 48), crc32(&h[..48]));
    assert!(all_zero(&h[52..]));

    // Reopened: accepted; the creation time stays, the capacity is rewritten.
    let s = builder().capacity_bytes(5 * MIB).open(&path).unwrap();
    drop(s);
    let h2 = read_at(&path, 0, 44);
    assert_eq!(u64_at(&h2, 32), u64_at(&h, 32));
    assert_eq!(u64_at(&h2, 24), 5 * MIB);

    // A header written by hand is recognised; its creation time is kept.
    let path = dir.path().join("by-hand.swap");
    sparse_file(&path, 4 * MIB);
    write_at(&path, 0, &header(1, euid(), 123, 1_234_567));
    let s = open(&path).unwrap();
    assert_eq!(s.data_offset(), 4096, "this test assumes 4 KiB headers");
    let cap = s.capacity_bytes();
    drop(s);
    let h = read_at(&path, 0, 44);
    assert_eq!(u64_at(&h, 32), 1_234_567);
    assert_eq!(u64_at(&h, 24), cap);
}

#[test]
fn another_users_store_and_damaged_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = if euid() == 4242 { 4243 } else { 4242 };
    let path = dir.path().join("theirs.swap");
    sparse_file(&path, 4 * MIB);
    write_at(&path, 0, &header(1, other, 4 * MIB - 4096, 1));
    let reason = refused(open(&path));
    assert!(
        reason.contains("another user") && reason.contains(&format!("uid {other}")),
        "{reason}"
    );
    // Forced, it becomes ours.
    drop(builder().force(true).open(&path).unwrap());
    assert_eq!(u32_at(&read_at(&path, 0, 44), 16), euid());
    drop(open(&path).unwrap());

    let path = dir.path().join("damaged.swap");
    sparse_file(&path, 4 * MIB);
    let mut h = header(1, euid(), 4 * MIB - 4096, 1);
    h[30] ^= 0x10;
    write_at(&path, 0, &h);
    assert!(refused(open(&path)).contains("damaged"));

    let path = dir.path().join("future.swap");
    sparse_file(&path, 4 * MIB);
    write_at(&path, 0, &header(3, euid(), 4 * MIB - 4096, 1));
    assert!(refused(open(&path)).contains("version 3"));
}

/// Issue 33: a store closed while idle gives its file up at once (a second `with Pool(store=f)` after the first
/// block), refuses new slots, and its later drop leaves the file, by then another store's, alone.
#[test]
fn a_store_closed_while_idle_gives_its_file_up_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("closed.swap");
    let first = builder()
        .capacity_bytes(2 * MIB)
        .keep(true)
        .create(&path)
        .unwrap();
    let slot = write_slot(&first, 8192);
    let e = slot.extents()[0];
    assert!(!first.close_if_idle(), "a slot is still allocated");
    busy(open(&path), &path);
    first.release(slot);
    assert!(first.close_if_idle());
    assert!(
        first.close_if_idle() && first.is_closed(),
        "closing again changes nothing"
    );
    assert!(matches!(
        first.allocate(4096),
        Err(IoError::StoreClosed { .. })
    ));
    // Scrubbed at the close, as at a drop.
    assert!(all_zero(&read_at(&path, e.offset, e.len as usize)));
    // Free for another store while the first still exists; the first's drop neither scrubs nor unlocks it.
    let second = open(&path).unwrap();
    let slot = write_slot(&second, 8192);
    drop(first);
    let mut back = AlignedBuf::new(slot.len() as usize, 4096).unwrap();
    // SAFETY: back outlives the blocking transfer.
    unsafe { second.transfer(Direction::Read, &slot, &[back.iovec()]) }.unwrap();
    assert_eq!(back.as_slice(), pattern(slot.len() as usize, 7).as_slice());
    busy(open(&path), &path);
    second.release(slot);
}

// ---- private ----

/// Issue 33: a symbolic link at a store's name is refused unless forced (another user may have planted it,
/// pointing at a file of ours), a dangling one too (not "File exists"), and forced a link to a blank file of ours
/// is followed.
#[test]
fn a_symbolic_link_at_the_name_is_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.swap");
    sparse_file(&target, 2 * MIB);
    let link = dir.path().join("link.swap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let reason = refused(open(&link));
    assert!(reason.contains("symbolic link"), "{reason}");
    // Through build, the rule front ends apply, too.
    let reason = refused(builder().build(std::slice::from_ref(&link)));
    assert!(reason.contains("symbolic link"), "{reason}");
    drop(builder().force(true).open(&link).unwrap());
    assert_eq!(&read_at(&target, 0, 8), b"\x89OVERSUB");

    let dangling = dir.path().join("dangling.swap");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
    let reason = refused(
        builder()
            .capacity_bytes(MIB)
            .build(std::slice::from_ref(&dangling)),
    );
    assert!(reason.contains("symbolic link"), "{reason}");
    assert!(
        !dir.path().join("nothing").exists(),
        "nothing was created behind the link"
    );
}

/// Issue 33: a blank file that belongs to another user is refused unless forced: its owner could read what is
/// swapped to it (the narrowed mode does not change the owner). Needs root to give a file away.
#[test]
fn another_users_blank_file_is_refused_unless_forced() {
    require!(
        oversub_testkit::is_root(),
        "needs root to give a file to another user"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("theirs.swap");
    sparse_file(&path, 2 * MIB);
    let other = 65534;
    std::os::unix::fs::chown(&path, Some(other), Some(other)).unwrap();
    let reason = refused(open(&path));
    assert!(reason.contains(&format!("uid {other}")), "{reason}");
    assert!(all_zero(&read_at(&path, 0, 4096)), "refused untouched");
    drop(builder().force(true).open(&path).unwrap());
}

#[test]
fn wide_files_are_narrowed_to_0600() {
    let dir = tempfile::tempdir().unwrap();
    for wide in [0o644, 0o640, 0o606, 0o666] {
        let path = dir.path().join(format!("m{wide:o}"));
        sparse_file(&path, 2 * MIB);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wide)).unwrap();
        drop(open(&path).unwrap());
        assert_eq!(mode(&path), 0o600, "{wide:o}");
    }
    // Owner-only modes are left alone.
    let path = dir.path().join("m700");
    sparse_file(&path, 2 * MIB);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    drop(open(&path).unwrap());
    assert_eq!(mode(&path), 0o700);
}

// ---- scrub ----

/// A kept store with one written slot, dropped with `scrub`; returns the path, the slot's (offset, len) and the
/// data offset.
fn written_then_dropped(dir: &Path, scrub: Scrub) -> (PathBuf, u64, usize, u64) {
    let path = dir.join(format!("{scrub:?}.swap"));
    let s = builder()
        .capacity_bytes(4 * MIB)
        .keep(true)
        .scrub(scrub)
        .create(&path)
        .unwrap();
    assert_eq!(s.scrub_mode(), scrub);
    let slot = write_slot(&s, 3 * 4096);
    let e = slot.extents()[0];
    assert!(e.offset >= s.data_offset());
    let off = s.data_offset();
    s.release(slot);
    drop(s);
    (path, e.offset, e.len as usize, off)
}

#[test]
fn scrub_on_close_discards_the_data_area_and_keeps_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let (path, at, len, data_offset) = written_then_dropped(dir.path(), Scrub::OnClose);
    assert!(all_zero(&read_at(&path, at, len)));
    assert_eq!(&read_at(&path, 0, 8), b"\x89OVERSUB");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        data_offset + 4 * MIB
    );
    // Reopened, the punched data area is preallocated again.
    let s = open(&path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().blocks() * 512 >= s.capacity_bytes());
}

#[test]
fn scrub_keep_leaves_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let (path, at, len, _) = written_then_dropped(dir.path(), Scrub::Keep);
    let want = pattern(len, 7);
    assert_eq!(read_at(&path, at, len), want.as_slice());
}

#[test]
fn scrub_on_release_discards_each_released_slot() {
    let dir = tempfile::tempdir().unwrap();
    for (scrub, discarded) in [(Scrub::OnRelease, true), (Scrub::OnClose, false)] {
        let path = dir.path().join(format!("rel-{scrub:?}"));
        let s = builder()
            .capacity_bytes(4 * MIB)
            .keep(true)
            .scrub(scrub)
            .create(&path)
            .unwrap();
        let slot = write_slot(&s, 8192);
        let e = slot.extents()[0];
        s.release(slot);
        // OnClose leaves freed ranges alone while the store is open.
        assert_eq!(
            all_zero(&read_at(&path, e.offset, e.len as usize)),
            discarded,
            "{scrub:?}"
        );
        // The range can be used again.
        let again = write_slot(&s, 8192);
        assert_eq!(again.extents()[0], e);
        s.release(again);
    }
}

/// The scrub waits for the last in-flight batch: it runs when the batch's reference to the file goes, before
/// its callback reports.
#[test]
fn scrub_runs_after_the_last_in_flight_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inflight.swap");
    let s = builder()
        .capacity_bytes(32 * MIB)
        .keep(true)
        .create(&path)
        .unwrap();
    let slot = s.allocate(16 * MIB).unwrap();
    let e = slot.extents()[0];
    let mut m = pattern(16 * MIB as usize, 3);
    let (tx, rx) = mpsc::channel();
    // SAFETY: m is only dropped after the callback reported.
    unsafe {
        s.submit(
            Direction::Write,
            &slot,
            &[m.iovec()],
            Box::new(move |r| tx.send(r).unwrap()),
        )
    }
    .unwrap();
    drop(slot);
    drop(s);
    assert_eq!(rx.recv().unwrap().unwrap().bytes, 16 * MIB);
    drop(m);
    assert!(all_zero(&read_at(&path, e.offset, e.len as usize)));
}

// ---- block devices (loop devices; root only) ----

/// A mount undone on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A loop device over a sparse image in /var/tmp (a real disk file system, unlike a tmpfs /tmp).
fn loop_device(len: u64) -> Option<(tempfile::TempDir, LoopDevice)> {
    if euid() != 0 {
        return None;
    }
    let dir = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .ok()?;
    let image = dir.path().join("disk.img");
    sparse_file(&image, len);
    let dev = LoopDevice::attach(&image)?;
    Some((dir, dev))
}

#[test]
fn blank_loop_device_is_used_exclusively_and_scrubbed() {
    let (_dir, dev) = require!(
        loop_device(64 * MIB),
        "no loop device can be attached here (needs root and losetup)"
    );
    let s = open(dev.path()).unwrap();
    assert!(s.is_block_device());
    assert_eq!(s.capacity_bytes(), 64 * MIB - s.data_offset());
    // O_EXCL refuses the second open; the first store's lock names it.
    let holder = busy(open(dev.path()), dev.path());
    eprintln!("busy loop device: {holder}");
    assert!(
        holder.starts_with(&format!("pid {} (", std::process::id())),
        "{holder}"
    );
    // force does not override the kernel's refusal.
    busy(builder().force(true).open(dev.path()), dev.path());
    let slot = write_slot(&s, 64 * 1024);
    let e = slot.extents()[0];
    let mut back = AlignedBuf::new(e.len as usize, 4096).unwrap();
    // SAFETY: back outlives the blocking transfer.
    unsafe { s.transfer(Direction::Read, &slot, &[back.iovec()]) }.unwrap();
    assert_eq!(back.as_slice(), pattern(e.len as usize, 7).as_slice());
    drop(slot);
    drop(s);
    // Scrubbed with BLKDISCARD (a loop device punches its image), header kept, and ours again.
    assert!(all_zero(&read_at(dev.path(), e.offset, e.len as usize)));
    assert_eq!(&read_at(dev.path(), 0, 8), b"\x89OVERSUB");
    drop(open(dev.path()).unwrap());
}

/// Issue 33: a loop device over a store file in use was accepted as a second store, and its page-outs overwrote
/// the first pool's buffers; the file behind a loop-device store in use opened too. One storage, one store.
#[test]
fn a_loop_device_and_its_backing_file_are_one_store() {
    let (dir, dev) = require!(
        loop_device(16 * MIB),
        "no loop device can be attached here (needs root and losetup)"
    );
    let image = dir.path().join("disk.img");
    // The file is a store in use: its loop device is busy, and says why.
    let file_store = builder().force(true).open(&image).unwrap();
    let holder = busy(open(dev.path()), dev.path());
    assert!(
        holder.contains("loop device over") && holder.contains("disk.img"),
        "{holder}"
    );
    drop(file_store);
    // The loop device is a store in use: its backing file is busy.
    let dev_store = open(dev.path()).unwrap();
    busy(open(&image), &image);
    busy(builder().force(true).open(&image), &image);
    drop(dev_store);
    // Both free again, one after the other.
    drop(open(&image).unwrap());
    drop(open(dev.path()).unwrap());
}

#[test]
fn ext4_loop_device_is_busy_while_mounted_and_refused_after() {
    let (dir, dev) = require!(
        loop_device(64 * MIB),
        "no loop device can be attached here (needs root and losetup)"
    );
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(dev.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    require!(
        mkfs.is_ok_and(|s| s.success()),
        "mkfs.ext4 is missing or failed"
    );
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .arg(dev.path())
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        let m = Mount(mnt.clone());
        let holder = busy(builder().force(true).open(dev.path()), dev.path());
        assert_eq!(holder, format!("mounted at {}", mnt.display()));
        drop(m);
    } else {
        eprintln!("skipped the mounted case: mount failed here");
    }
    let reason = refused(open(dev.path()));
    assert!(reason.contains("ext4"), "{reason}");
    // The refusal wrote nothing: the superblock is intact.
    assert_eq!(read_at(dev.path(), 1080, 2), [0x53, 0xef]);
    drop(builder().force(true).open(dev.path()).unwrap());
    drop(open(dev.path()).unwrap());
}
