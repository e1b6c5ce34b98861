//! The OS calls on a store's descriptors: stat, direct-I/O alignment and switching, preallocation, the header
//! write, mode narrowing, whole reads and writes, block-device sizes.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::header::Header;
use super::DEFAULT_ALIGNMENT;
use crate::error::IoError;
use oversub_base::mem::AlignedBuf;

/// `_IOR(0x12, 114, size_t)`; not exported by libc.
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272;

pub(super) fn warn_buffered(path: &Path, why: &str) {
    tracing::warn!(
        path = %path.display(),
        "{why}; swap I/O will be buffered (page cache) instead of direct"
    );
}

pub(super) fn c_path(path: &Path) -> Result<CString, IoError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| IoError::InvalidArgument(format!("path {} contains NUL", path.display())))
}

pub(super) fn fstat(fd: RawFd) -> Result<libc::stat, IoError> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(IoError::last_os("fstat"));
    }
    Ok(st)
}

/// Direct-I/O alignment of an open file from statx: `Some(0)` when the file system
/// reports no direct-I/O support, `None` when it does not say (old kernel).
pub(super) fn dio_alignment(fd: RawFd) -> Option<usize> {
    // SAFETY: an all-zero statx is a valid value to be overwritten.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: empty path with AT_EMPTY_PATH stats the fd itself; stx is a valid out
    // pointer.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc < 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    if stx.stx_dio_offset_align == 0 {
        return Some(0);
    }
    // One alignment serves offsets, lengths and addresses: take the stricter.
    let a = stx.stx_dio_offset_align.max(stx.stx_dio_mem_align) as usize;
    Some(a.checked_next_power_of_two().unwrap_or(DEFAULT_ALIGNMENT))
}

#[cfg(test)]
thread_local! {
    /// Lets unit tests take the buffered-fallback path on kernels whose file systems
    /// all accept O_DIRECT.
    pub(super) static REFUSE_DIRECT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn direct_refused_for_test() -> bool {
    #[cfg(test)]
    {
        REFUSE_DIRECT.with(|r| r.get())
    }
    #[cfg(not(test))]
    {
        false
    }
}

pub(super) fn set_direct(fd: RawFd, on: bool) -> Result<(), IoError> {
    if on && direct_refused_for_test() {
        return Err(IoError::from_errno("fcntl(F_SETFL)", libc::EINVAL));
    }
    // SAFETY: plain fcntl on an open fd.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(IoError::last_os("fcntl(F_GETFL)"));
    }
    let new = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, new) } < 0 {
        return Err(IoError::last_os("fcntl(F_SETFL)"));
    }
    Ok(())
}

/// Reserves the first `len` bytes of the store at `path`; `fallocate` where supported so writes cannot hit ENOSPC
/// later, else `ftruncate` (sparse). Never shrinks the file. A failure is [`IoError::StoreIo`] naming `path` and
/// `len` (with the space free there when the file system is full).
pub(super) fn preallocate(fd: RawFd, path: &Path, len: u64) -> Result<(), IoError> {
    let off = libc::off_t::try_from(len)
        .map_err(|_| IoError::InvalidArgument(format!("capacity {len} too large")))?;
    loop {
        // SAFETY: plain syscall on an open fd.
        if unsafe { libc::fallocate(fd, 0, 0, off) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => break,
            _ => return Err(store_io("fallocate", path, err, Doing::Reserve(len))),
        }
    }
    if fstat(fd)?.st_size >= off {
        return Ok(());
    }
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::ftruncate(fd, off) } < 0 {
        let err = std::io::Error::last_os_error();
        return Err(store_io("ftruncate", path, err, Doing::Reserve(len)));
    }
    Ok(())
}

/// What a system call on a store's file or device was for, as [`store_io`] words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Doing {
    /// Creating a new file (`open` with `O_CREAT | O_EXCL`).
    Create,
    /// Opening an existing file or device.
    Open,
    /// Reserving this many bytes (the header and the data area).
    Reserve(u64),
    /// Any other call on the open store, named by its `op`.
    Call,
}

/// The system calls on a store's file or device whose [`IoError::Io`] [`on_store`] turns into
/// [`IoError::StoreIo`] (not, for example, a memory mapping's).
const STORE_OPS: [&str; 13] = [
    "open",
    "fstat",
    "flock",
    "unlink",
    "fchmod",
    "fcntl(F_GETFL)",
    "fcntl(F_SETFL)",
    "fallocate",
    "ftruncate",
    "pread",
    "pwrite",
    "ioctl(BLKGETSIZE64)",
    "ioctl(BLKSSZGET)",
];

/// [`IoError::StoreIo`]: `op` failed with `source` on the store at `path` while `doing`, worded for the user, with
/// a hint where the error says what would help.
pub(super) fn store_io(
    op: &'static str,
    path: &Path,
    source: std::io::Error,
    doing: Doing,
) -> IoError {
    let what = match (doing, op) {
        (Doing::Create, _) => "cannot create the swap store file".to_string(),
        (Doing::Open, _) => "cannot open the swap store".to_string(),
        (Doing::Reserve(n), _) => format!(
            "cannot reserve {} for the swap store",
            oversub_base::format_bytes(n)
        ),
        (Doing::Call, "fstat") => "cannot read the status of the swap store".to_string(),
        (Doing::Call, "flock") => "cannot lock the swap store".to_string(),
        (Doing::Call, "unlink") => "cannot remove the name of the new swap store file".to_string(),
        (Doing::Call, "fchmod") => "cannot set mode 0600 on the swap store".to_string(),
        (Doing::Call, "fcntl(F_GETFL)" | "fcntl(F_SETFL)") => {
            "cannot switch direct I/O for the swap store".to_string()
        }
        (Doing::Call, "fallocate" | "ftruncate") => {
            "cannot reserve space for the swap store".to_string()
        }
        (Doing::Call, "pread") => "cannot read the swap store".to_string(),
        (Doing::Call, "pwrite") => "cannot write the header of the swap store".to_string(),
        (Doing::Call, "ioctl(BLKGETSIZE64)" | "ioctl(BLKSSZGET)") => {
            "cannot read the size of the block device".to_string()
        }
        (Doing::Call, op) => format!("{op} failed on the swap store"),
    };
    let hint = hint(path, &source, doing);
    IoError::StoreIo {
        op,
        what,
        path: path.to_path_buf(),
        source,
        hint,
    }
}

/// Turns an [`IoError::Io`] of a system call on the store at `path` into [`IoError::StoreIo`] naming it; every
/// other error is returned unchanged.
pub(super) fn on_store(path: &Path) -> impl Fn(IoError) -> IoError + '_ {
    move |e| match e {
        IoError::Io { op, source } if STORE_OPS.contains(&op) => {
            store_io(op, path, source, Doing::Call)
        }
        e => e,
    }
}

/// What to do about `source`, where it tells: a full file system (with the space free there), a missing or
/// read-only folder, missing permissions.
fn hint(path: &Path, source: &std::io::Error, doing: Doing) -> Option<String> {
    const ELSEWHERE: &str = "give a smaller capacity or another store location";
    let folder = folder_of(path);
    let errno = source.raw_os_error()?;
    Some(match (errno, doing) {
        (libc::ENOSPC, Doing::Reserve(_)) => match free_bytes(path) {
            Some(free) => format!(
                "free: {} on that file system; {ELSEWHERE}",
                oversub_base::format_bytes(free)
            ),
            None => format!("the file system is full; {ELSEWHERE}"),
        },
        (libc::ENOSPC, _) => "the file system is full; give another store location".to_string(),
        (libc::EDQUOT, _) => format!("your disk quota on that file system is used up; {ELSEWHERE}"),
        (libc::EFBIG, _) => {
            format!("more than the file system allows in one file; {ELSEWHERE}")
        }
        (libc::ENOENT, Doing::Create) if !folder.is_dir() => format!(
            "the folder {} does not exist: give an existing folder, file or device",
            folder.display()
        ),
        (libc::ENOENT, Doing::Create) => format!(
            "{} does not take new files: give another store location",
            folder.display()
        ),
        (libc::ENOENT, _) => {
            "it does not exist: give an existing folder, file or device".to_string()
        }
        (libc::ENOTDIR, _) => format!("{} is not a folder", folder.display()),
        (libc::EROFS, _) => {
            "it is on a read-only file system: give another store location".to_string()
        }
        (libc::EACCES | libc::EPERM, Doing::Create) => format!(
            "this user may not create files in {}: give another store location",
            folder.display()
        ),
        (libc::EACCES | libc::EPERM, Doing::Open) => {
            "this user may not read and write it: change its permissions or give another store location"
                .to_string()
        }
        _ => return None,
    })
}

/// Bytes free to this user on the file system holding `path` (its folder when the file was unlinked or not yet
/// created).
pub(super) fn free_bytes(path: &Path) -> Option<u64> {
    let at = |p: &Path| -> Option<u64> {
        let c = c_path(p).ok()?;
        // SAFETY: an all-zero statvfs is a valid value to be overwritten.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is a valid NUL-terminated path and st a valid out pointer.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } < 0 {
            return None;
        }
        (st.f_bavail as u64).checked_mul(st.f_frsize as u64)
    };
    at(path).or_else(|| at(folder_of(path)))
}

/// The folder holding `path` (`.` for a bare file name).
pub(super) fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `header` into the first `header.header_bytes` bytes (the rest of them zero).
pub(super) fn write_header(fd: RawFd, alignment: usize, header: &Header) -> Result<(), IoError> {
    let len = header.header_bytes as usize;
    let mut buf = AlignedBuf::new(len, alignment)?;
    header.encode_into(buf.as_mut_slice());
    pwrite_all(fd, buf.as_slice(), 0)
}

/// The header a store writes when it takes a file or device: owner this process's euid, `created` kept from an
/// earlier oversub store, `scrub_end` never below what the file held before (`previous_end`).
pub(super) fn fresh_header(
    header_bytes: u64,
    capacity: u64,
    created: u64,
    previous_end: u64,
) -> Result<Header, IoError> {
    Ok(Header {
        header_bytes: u32::try_from(header_bytes)
            .map_err(|_| IoError::InvalidArgument(format!("header of {header_bytes} bytes")))?,
        owner_uid: euid(),
        capacity,
        created,
        scrub_end: previous_end.max(header_bytes),
    })
}

/// Narrows a regular file to 0600 when group or others have any access: swapped-out buffers are the
/// process's memory. Refused when not allowed (not the owner), unless forced.
pub(super) fn narrow_mode(
    fd: RawFd,
    path: &Path,
    st: &libc::stat,
    force: bool,
) -> Result<(), IoError> {
    let mode = st.st_mode & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::fchmod(fd, 0o600) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let reason = format!("its mode is {mode:04o} and cannot be narrowed to 0600 ({err})");
    if force {
        tracing::warn!(
            path = %path.display(),
            "{reason}; swapped-out data will be readable by other users"
        );
        return Ok(());
    }
    Err(IoError::StoreRefused {
        path: path.to_path_buf(),
        reason,
    })
}

/// Reads up to `len` bytes at `offset` (a multiple of `alignment`; the fd may be O_DIRECT), fewer at the end of
/// the file.
pub(super) fn pread_full(
    fd: RawFd,
    offset: u64,
    len: u64,
    alignment: usize,
) -> Result<Vec<u8>, IoError> {
    let want = usize::try_from(len)
        .map_err(|_| IoError::InvalidArgument(format!("read of {len} bytes")))?;
    let mut buf = AlignedBuf::new(want.next_multiple_of(alignment), alignment)?;
    let mut done = 0usize;
    while done < want {
        let rest = &mut buf.as_mut_slice()[done..];
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| IoError::InvalidArgument(format!("offset {offset} too large")))?;
        // SAFETY: `rest` is writable memory of rest.len() bytes, exclusively ours.
        let n = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(IoError::Io {
                op: "pread",
                source: err,
            });
        }
        if n == 0 {
            break;
        }
        done += n as usize;
        // Direct reads return whole blocks except at the end of the file.
        if done % alignment != 0 {
            break;
        }
    }
    Ok(buf.as_slice()[..done.min(want)].to_vec())
}

/// Writes all of `data` at `offset`.
pub(super) fn pwrite_all(fd: RawFd, data: &[u8], offset: u64) -> Result<(), IoError> {
    let mut done = 0usize;
    while done < data.len() {
        let rest = &data[done..];
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| IoError::InvalidArgument(format!("offset {offset} too large")))?;
        // SAFETY: `rest` is readable memory of rest.len() bytes.
        let n = unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), at) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(IoError::Io {
                op: "pwrite",
                source: err,
            });
        }
        if n == 0 {
            return Err(IoError::Io {
                op: "pwrite",
                source: std::io::ErrorKind::WriteZero.into(),
            });
        }
        done += n as usize;
    }
    Ok(())
}

pub(super) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads one aligned block at offset 0: some file systems accept O_DIRECT at open
/// time but fail direct reads with EINVAL. Ok(false) on EINVAL.
pub(super) fn probe_direct_read(fd: RawFd, alignment: usize) -> Result<bool, IoError> {
    let buf = AlignedBuf::new(alignment, alignment)?;
    loop {
        // SAFETY: buf is valid for `alignment` bytes and exclusively ours.
        let n = unsafe { libc::pread(fd, buf.as_ptr().cast(), alignment, 0) };
        if n >= 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EINVAL) => return Ok(false),
            _ => {
                return Err(IoError::Io {
                    op: "pread",
                    source: err,
                })
            }
        }
    }
}

pub(super) fn block_size64(fd: RawFd) -> Result<u64, IoError> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer.
    if unsafe { libc::ioctl(fd, BLKGETSIZE64, &mut size) } < 0 {
        return Err(IoError::last_os("ioctl(BLKGETSIZE64)"));
    }
    Ok(size)
}

pub(super) fn logical_block_size(fd: RawFd) -> Result<usize, IoError> {
    let mut bs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int to the pointer.
    if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut bs) } < 0 {
        return Err(IoError::last_os("ioctl(BLKSSZGET)"));
    }
    match usize::try_from(bs) {
        Ok(b) if b > 0 && b.is_power_of_two() => Ok(b),
        _ => Err(IoError::Unsupported(format!("odd logical block size {bs}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn a_full_file_system_names_the_store_the_size_and_the_space_free() {
        let dir = std::env::temp_dir();
        let path = dir.join("oversub-swap-test.swap");
        let e = store_io(
            "fallocate",
            &path,
            os(libc::ENOSPC),
            Doing::Reserve(256 << 20),
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot reserve 256.00 MiB for the swap store {}: ",
                path.display()
            )),
            "{text}"
        );
        assert!(text.contains("(free: "), "{text}");
        assert!(
            text.ends_with(
                "on that file system; give a smaller capacity or another store location)"
            ),
            "{text}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source, Some(os(libc::ENOSPC).to_string()));
    }

    #[test]
    fn hints_say_what_to_do() {
        let path = Path::new("/no/such/folder/swap");
        let text = store_io("open", path, os(libc::ENOENT), Doing::Create).to_string();
        assert!(
            text.starts_with("cannot create the swap store file /no/such/folder/swap: "),
            "{text}"
        );
        assert!(
            text.ends_with(
                "(the folder /no/such/folder does not exist: give an existing folder, file or device)"
            ),
            "{text}"
        );
        let text = store_io("open", path, os(libc::EACCES), Doing::Open).to_string();
        assert!(
            text.starts_with("cannot open the swap store /no/such/folder/swap: "),
            "{text}"
        );
        assert!(text.contains("change its permissions"), "{text}");
        let text = store_io("open", path, os(libc::EACCES), Doing::Create).to_string();
        assert!(
            text.contains("may not create files in /no/such/folder"),
            "{text}"
        );
        // No hint where the error does not tell what would help.
        let e = store_io("pread", path, os(libc::EIO), Doing::Call);
        assert!(matches!(e, IoError::StoreIo { hint: None, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read the swap store /no/such/folder/swap: {}",
                os(libc::EIO)
            )
        );
        // Errors of other calls (a memory mapping) are left as they are.
        let other = on_store(path)(IoError::Io {
            op: "mmap",
            source: os(libc::ENOMEM),
        });
        assert!(matches!(other, IoError::Io { op: "mmap", .. }), "{other:?}");
        let named = on_store(path)(IoError::Io {
            op: "fstat",
            source: os(libc::EIO),
        });
        assert!(
            matches!(&named, IoError::StoreIo { op: "fstat", path: p, .. } if p == path),
            "{named:?}"
        );
        assert_eq!(folder_of(Path::new("swap.bin")), Path::new("."));
    }
}
