//! The OS calls on a store's descriptors: stat, direct-I/O alignment and switching, preallocation, the header
//! write, mode narrowing, whole reads and writes, block-device sizes.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::header::Header;
use super::DEFAULT_ALIGNMENT;
use crate::error::IoError;
use crate::mem::AlignedBuf;

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

/// Reserves the first `len` bytes; `fallocate` where supported so writes cannot hit ENOSPC
/// later, else `ftruncate` (sparse). Never shrinks the file.
pub(super) fn preallocate(fd: RawFd, len: u64) -> Result<(), IoError> {
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
            _ => {
                return Err(IoError::Io {
                    op: "fallocate",
                    source: err,
                })
            }
        }
    }
    if fstat(fd)?.st_size >= off {
        return Ok(());
    }
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::ftruncate(fd, off) } < 0 {
        return Err(IoError::last_os("ftruncate"));
    }
    Ok(())
}

/// Writes a fresh header (owner: this process's euid) into the first `header_bytes` bytes.
pub(super) fn write_header(
    fd: RawFd,
    alignment: usize,
    header_bytes: u64,
    capacity: u64,
    created: u64,
) -> Result<(), IoError> {
    let too_large = || IoError::InvalidArgument(format!("header of {header_bytes} bytes"));
    let len = usize::try_from(header_bytes).map_err(|_| too_large())?;
    let mut buf = AlignedBuf::new(len, alignment)?;
    Header {
        header_bytes: u32::try_from(header_bytes).map_err(|_| too_large())?,
        owner_uid: euid(),
        capacity,
        created,
    }
    .encode_into(buf.as_mut_slice());
    pwrite_all(fd, buf.as_slice(), 0)
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
