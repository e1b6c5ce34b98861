//! One store, one user: the lock every store takes, and who holds a store when it is busy.
//!
//! Every store's file or device node is locked with `flock(LOCK_EX | LOCK_NB)`. flock locks belong to the
//! open file description, so two opens of one file conflict even inside one process (two pools on one file
//! must), and the lock goes away with the last descriptor, even when the process is killed. Block devices are
//! also opened `O_EXCL`, with which the kernel refuses a device that is mounted, an active swap area, part of a
//! device-mapper or md device, or opened `O_EXCL` by anyone else (`EBUSY`).
//!
//! A loop device and the file behind it are one storage under two names. A store on a loop device also locks
//! the backing file (found with `LOOP_GET_STATUS64`, opened through sysfs's `backing_file` and checked to be the
//! same inode), so a store on that file is busy while the device's store lives, and a loop-device store over a
//! file that is a store in use is busy in turn.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use oversub_base::process::Creator;

use crate::error::IoError;

/// Holder text when the kernel refuses a device and nothing more can be found out.
const EXCLUSIVE_ELSEWHERE: &str = "another program has it open exclusively";

/// How often, and how far apart, `lock` tries again while only shared locks, copies of our own closed
/// descriptors (see [`OPEN_HERE`]) or the locks of processes that have ended (see [`holder_ended`]) are in the
/// way. udev takes a shared lock while it probes a block device
/// (systemd's block-device locking convention), for instance right after a store on it was closed; that lasts
/// milliseconds, so it is waited out, up to about a second. Stores hold exclusive locks, which are never waited
/// for.
pub(crate) const SHARED_LOCK_RETRIES: u32 = 50;
pub(crate) const SHARED_LOCK_PAUSE: Duration = Duration::from_millis(20);

/// The nodes (`st_dev`, `st_ino`) of the stores open in this process, one entry per open store.
///
/// A lock held in our own name is not always one of our stores: a child process that another thread is spawning
/// shares every descriptor of ours between its fork and its exec (`O_CLOEXEC` closes them only at the exec), so a
/// store closed and reopened at that moment finds its old descriptor still locked, by "this process". That is
/// waited out like udev's shared lock; a store this process really has open is busy at once.
static OPEN_HERE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

fn open_here() -> std::sync::MutexGuard<'static, Vec<(u64, u64)>> {
    // The list stays consistent whatever panicked while holding it: pushes and removals are single steps.
    oversub_base::sync::lock(&OPEN_HERE)
}

/// This process's claim on a store's node, from [`lock`] until the store's descriptor is closed.
#[derive(Debug)]
pub(crate) struct Held {
    node: (u64, u64),
    /// The process that opened the store: a forked child has a copy of this claim, which is not its own.
    creator: Creator,
    /// Set once the claim was given up before the drop (the store was closed while idle).
    released: AtomicBool,
    /// For a loop device: the backing file, open and locked for as long as the device's store.
    backing: Option<Box<(Held, OwnedFd)>>,
}

impl Held {
    /// Whether the calling process opened the store (false in a forked child, whose copy of the store must leave
    /// the file alone).
    pub(crate) fn is_creator(&self) -> bool {
        self.creator.is_current()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // In a forked child the list is a copy that names the parent's stores, and its lock may have been held
        // by a thread that did not survive the fork: leave it.
        if self.is_creator() {
            self.release();
        }
    }
}

impl Held {
    /// Takes the node off this process's list of open stores, once (at close, or at the drop).
    pub(crate) fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(backing) = &self.backing {
            let (held, fd) = &**backing;
            // SAFETY: plain syscall on our open fd (the store was closed early; only the creator gets here).
            unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
            held.release();
        }
        let mut here = open_here();
        if let Some(i) = here.iter().position(|n| *n == self.node) {
            here.swap_remove(i);
        }
    }

    /// For a loop device's store: locks the file behind the device too (module docs). `StoreBusy` naming the file
    /// when it is a store in use; a device that is not a loop device, or whose file cannot be found or opened
    /// (a file deleted while attached, a namespace that hides it), is taken as it is.
    pub(crate) fn lock_loop_backing(
        &mut self,
        fd: libc::c_int,
        path: &Path,
        rdev: u64,
    ) -> Result<(), IoError> {
        let Some(backing) = loop_backing(fd, rdev) else {
            return Ok(());
        };
        let cpath = match std::ffi::CString::new(backing.as_os_str().as_encoded_bytes()) {
            Ok(c) => c,
            Err(_) => return Ok(()),
        };
        // SAFETY: cpath is a valid NUL-terminated string.
        let raw = unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if raw < 0 {
            tracing::warn!(
                path = %path.display(),
                "cannot open the loop device's backing file {} to lock it ({}); a store on that file would not be refused",
                backing.display(),
                std::io::Error::last_os_error()
            );
            return Ok(());
        }
        // SAFETY: open just returned this descriptor.
        let file = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: plain syscall on an open fd with a valid out pointer.
        if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Ok(());
        }
        // SAFETY: fstat succeeded, so it filled `st`.
        let st = unsafe { st.assume_init() };
        if !loop_is_backed_by(fd, st.st_dev, st.st_ino) {
            // The name now leads to another file (the attached one was renamed over or deleted).
            return Ok(());
        }
        match lock(file.as_raw_fd(), &backing, &st) {
            Ok(held) => {
                self.backing = Some(Box::new((held, file)));
                Ok(())
            }
            Err(IoError::StoreBusy { holder, .. }) => Err(IoError::StoreBusy {
                path: path.to_path_buf(),
                holder: Some(format!(
                    "it is a loop device over {}, which is a swap store in use{}",
                    backing.display(),
                    holder.map(|h| format!(" ({h})")).unwrap_or_default()
                )),
            }),
            Err(e) => Err(e),
        }
    }
}

/// `LOOP_GET_STATUS64`, from linux/loop.h; not exported by libc.
const LOOP_GET_STATUS64: libc::Ioctl = 0x4C05;

/// `struct loop_info64` of linux/loop.h (only the first two fields are read).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The (device, inode) of the file attached to loop device `fd`, or `None` for any other device.
fn loop_status(fd: libc::c_int) -> Option<(u64, u64)> {
    let mut info = std::mem::MaybeUninit::<LoopInfo64>::zeroed();
    // SAFETY: LOOP_GET_STATUS64 writes one loop_info64 to the pointer; other devices fail it (ENOTTY) and write
    // nothing. The zeroed struct is a valid value either way (plain integers and arrays).
    let r = unsafe { libc::ioctl(fd, LOOP_GET_STATUS64, info.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: zero-initialised and then filled by the kernel: every bit pattern is valid for these fields.
    let info = unsafe { info.assume_init() };
    Some((info.lo_device, info.lo_inode))
}

/// Whether loop device `fd` is attached to the file (dev, ino). The kernel encodes `lo_device` as the new
/// userspace `dev_t`, so major and minor are compared.
fn loop_is_backed_by(fd: libc::c_int, dev: u64, ino: u64) -> bool {
    loop_status(fd).is_some_and(|(lo_dev, lo_ino)| {
        lo_ino == ino
            && libc::major(lo_dev) == libc::major(dev)
            && libc::minor(lo_dev) == libc::minor(dev)
    })
}

/// The path of the file behind loop device `fd` (node `rdev`), from sysfs; `None` when it is not a loop device.
fn loop_backing(fd: libc::c_int, rdev: u64) -> Option<PathBuf> {
    loop_status(fd)?;
    let sys = format!(
        "/sys/dev/block/{}:{}/loop/backing_file",
        libc::major(rdev),
        libc::minor(rdev)
    );
    let text = std::fs::read_to_string(sys).ok()?;
    let name = text.trim_end_matches('\n');
    (!name.is_empty()).then(|| PathBuf::from(name))
}

/// Whether a lock on (dev, ino) held in this process's name is only a copy of a closed descriptor of ours in a
/// child that has not exec'd yet (see [`OPEN_HERE`]).
fn held_by_a_child_copy(holder: Option<LockHolder>, dev: u64, ino: u64) -> bool {
    holder.is_some_and(|h| h.pid == std::process::id()) && !open_here().contains(&(dev, ino))
}

/// Whether the process a lock is held in the name of has ended (gone, or a zombie): the lock then lives on only
/// until the kernel closes its last reference to the file, which after a SIGKILL can take a while (an io_uring's
/// teardown, a loop device's release: 6-153 ms measured), so it is waited out.
pub(crate) fn holder_ended(holder: Option<LockHolder>) -> bool {
    holder.is_some_and(|h| process_ended(h.pid))
}

/// Whether process `pid` no longer runs: no /proc entry, or a zombie (`Z`) or dead (`X`) state.
pub(crate) fn process_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        // "1234 (comm) S ...": the state follows the last ')' (a comm may contain one).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

/// Whether a block device's `EBUSY` comes only from a child's copy of a descriptor this process has closed, or
/// from a holder that has ended, so that the open is worth trying again in a moment.
pub(crate) fn busy_with_a_child_copy(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| {
        let holder = flock_holder(m.dev(), m.ino());
        held_by_a_child_copy(holder, m.dev(), m.ino()) || holder_ended(holder)
    })
}

/// Takes the store's lock on `fd`; `StoreBusy` naming the holder when another open file description has it.
/// File systems without flock support (some network file systems) are used unlocked, with a warning.
pub(crate) fn lock(fd: libc::c_int, path: &Path, st: &libc::stat) -> Result<Held, IoError> {
    let node = (st.st_dev, st.st_ino);
    let held = || {
        open_here().push(node);
        Held {
            node,
            creator: Creator::current(),
            released: AtomicBool::new(false),
            backing: None,
        }
    };
    let mut retries = 0;
    loop {
        // SAFETY: plain syscall on an open fd.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(held());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                let holder = flock_holder(st.st_dev, st.st_ino);
                // No holder in /proc/locks: the lock went away between our attempt and the lookup (as a spawned
                // child's copy does at its exec), so try again. A holder that has ended releases it soon.
                let transient = holder.is_none_or(|h| h.shared)
                    || held_by_a_child_copy(holder, st.st_dev, st.st_ino)
                    || holder_ended(holder);
                if transient && retries < SHARED_LOCK_RETRIES {
                    retries += 1;
                    std::thread::sleep(SHARED_LOCK_PAUSE);
                    continue;
                }
                return Err(IoError::StoreBusy {
                    path: path.to_path_buf(),
                    holder: holder.map(|h| describe_pid(h.pid)),
                });
            }
            Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                tracing::warn!(
                    path = %path.display(),
                    "the file system cannot lock the swap store ({err}); another process could open it too"
                );
                return Ok(held());
            }
            _ => {
                return Err(IoError::Io {
                    op: "flock",
                    source: err,
                })
            }
        }
    }
}

/// `StoreBusy` for a block device whose `O_EXCL` open failed with `EBUSY`, naming what holds it: a mount (of the
/// device or one of its partitions), swap, a stacked device, another oversub store's lock, else
/// [`EXCLUSIVE_ELSEWHERE`].
pub(crate) fn device_busy(path: &Path) -> IoError {
    let holder = std::fs::metadata(path)
        .ok()
        .and_then(|m| device_holder(m.rdev(), m.dev(), m.ino()))
        .unwrap_or_else(|| EXCLUSIVE_ELSEWHERE.to_string());
    IoError::StoreBusy {
        path: path.to_path_buf(),
        holder: Some(holder),
    }
}

fn device_holder(rdev: u64, node_dev: u64, node_ino: u64) -> Option<String> {
    let mut devs = vec![(libc::major(rdev), libc::minor(rdev))];
    devs.extend(partitions(devs[0]));
    if let Some(mp) = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|t| mount_point(&t, &devs))
    {
        return Some(format!("mounted at {mp}"));
    }
    if is_active_swap(&devs) {
        return Some("it is an active swap area".into());
    }
    let holders = sysfs_holders(devs[0]);
    if !holders.is_empty() {
        return Some(format!("held by {}", holders.join(", ")));
    }
    flock_holder(node_dev, node_ino).map(|h| describe_pid(h.pid))
}

/// A process holding a flock, from /proc/locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockHolder {
    pub pid: u32,
    /// A shared (`LOCK_SH`) lock, as udev takes while probing; stores take exclusive ones.
    pub shared: bool,
}

/// The holder of the flock on (dev, ino), from /proc/locks.
fn flock_holder(dev: u64, ino: u64) -> Option<LockHolder> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    lock_holder(&text, libc::major(dev), libc::minor(dev), ino)
}

/// The holder of the flock on (major, minor, ino) in /proc/locks text, an exclusive one where there are several.
/// /proc/locks prints the superblock's device, which differs from `st_dev` on btrfs subvolumes; an inode-only
/// match is accepted when all its locks belong to one process.
pub(crate) fn lock_holder(text: &str, major: u32, minor: u32, ino: u64) -> Option<LockHolder> {
    let mut exact = Vec::new();
    let mut by_ino = Vec::new();
    for line in text.lines() {
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; blocked waiters have "->" after the id.
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else {
            continue;
        };
        let mut id = f[5].split(':');
        let (Some(ma), Some(mi), Some(i)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        if i.parse::<u64>() != Ok(ino) || pid == 0 {
            continue;
        }
        let holder = LockHolder {
            pid,
            shared: f[3] == "READ",
        };
        // Major and minor are printed in hex.
        if u32::from_str_radix(ma, 16) == Ok(major) && u32::from_str_radix(mi, 16) == Ok(minor) {
            exact.push(holder);
        } else {
            by_ino.push(holder);
        }
    }
    let pick = |v: &[LockHolder]| v.iter().find(|h| !h.shared).or(v.first()).copied();
    if !exact.is_empty() {
        return pick(&exact);
    }
    let one_process = by_ino.windows(2).all(|w| w[0].pid == w[1].pid);
    one_process.then(|| pick(&by_ino)).flatten()
}

fn describe_pid(pid: u32) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => format!("pid {pid} ({})", comm.trim_end()),
        Err(_) => format!("pid {pid}"),
    }
}

/// The partitions of a whole disk, from sysfs (an O_EXCL open of the disk fails while a partition is in use).
fn partitions((major, minor): (u32, u32)) -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir(format!("/sys/dev/block/{major}:{minor}")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| e.path().join("partition").exists())
        .filter_map(|e| std::fs::read_to_string(e.path().join("dev")).ok())
        .filter_map(|d| parse_dev(d.trim()))
        .collect()
}

fn sysfs_holders((major, minor): (u32, u32)) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/sys/dev/block/{major}:{minor}/holders")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn is_active_swap(devs: &[(u32, u32)]) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/swaps") else {
        return false;
    };
    text.lines().skip(1).any(|line| {
        line.split_whitespace()
            .next()
            .and_then(|p| std::fs::metadata(unescape(p)).ok())
            .is_some_and(|m| {
                let r = m.rdev();
                devs.contains(&(libc::major(r), libc::minor(r)))
            })
    })
}

fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (ma, mi) = s.split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

/// The mount point of the first mount in /proc/self/mountinfo text whose device is one of `devs`.
pub(crate) fn mount_point(mountinfo: &str, devs: &[(u32, u32)]) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        // "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw"
        let f: Vec<&str> = line.split(' ').collect();
        let dev = parse_dev(f.get(2)?)?;
        let mount_point = f.get(4)?;
        devs.contains(&dev).then(|| unescape(mount_point))
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space) in /proc paths.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], oct) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_locks() {
        let text = "1: POSIX  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 4321 fd:01:5678 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 77 00:2a:42 0 EOF\n";
        let pid = |ma, mi, ino| lock_holder(text, ma, mi, ino).map(|h| h.pid);
        assert_eq!(pid(0xfd, 1, 5678), Some(1234));
        // Unique inode with another device number (btrfs subvolume): still found.
        assert_eq!(pid(0, 99, 42), Some(77));
        assert_eq!(pid(0xfd, 1, 1), None);
        // Shared locks (udev probing) are told apart; an exclusive holder is named first.
        let shared = "1: FLOCK  ADVISORY  READ 10 07:00:9 0 EOF\n\
                      2: FLOCK  ADVISORY  READ 11 07:00:9 0 EOF\n";
        assert_eq!(
            lock_holder(shared, 7, 0, 9),
            Some(LockHolder {
                pid: 10,
                shared: true
            })
        );
        let mixed = "1: FLOCK  ADVISORY  READ 10 07:00:9 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 12 07:00:9 0 EOF\n";
        assert_eq!(lock_holder(mixed, 7, 0, 9).map(|h| h.shared), Some(false));
        assert_eq!(lock_holder(mixed, 7, 0, 9).map(|h| h.pid), Some(12));
    }

    #[test]
    fn tells_a_process_that_ended_from_one_that_runs() {
        assert!(!process_ended(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not yet waited for: a zombie.
        let mut polls = 0;
        while !process_ended(pid) && polls < 10_000 {
            std::thread::sleep(Duration::from_millis(1));
            polls += 1;
        }
        assert!(process_ended(pid), "a zombie counts as ended");
        child.wait().unwrap();
        assert!(process_ended(pid));
        assert!(holder_ended(Some(LockHolder { pid, shared: false })));
        assert!(!holder_ended(None));
    }

    #[test]
    fn parses_mountinfo() {
        let text = "22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    90 22 7:3 / /mnt/my\\040disk rw,relatime shared:50 - ext4 /dev/loop3 rw\n";
        assert_eq!(
            mount_point(text, &[(7, 3)]).as_deref(),
            Some("/mnt/my disk")
        );
        assert_eq!(mount_point(text, &[(7, 4), (253, 1)]).as_deref(), Some("/"));
        assert_eq!(mount_point(text, &[(8, 0)]), None);
        assert_eq!(unescape("a\\134b"), "a\\b");
        assert_eq!(unescape("tail\\"), "tail\\");
    }
}
