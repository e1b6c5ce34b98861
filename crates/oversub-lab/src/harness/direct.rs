//! The files an experiment reads and writes beside the pager: descriptors opened with `O_DIRECT` (or not), single
//! `read()`/`write()` calls over a whole buffer, and the store files a run makes for itself.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::LabError;

/// A file descriptor closed on drop.
#[derive(Debug)]
pub struct Fd(pub libc::c_int);

impl Fd {
    /// `open(path, flags | O_CLOEXEC)`.
    pub fn open(path: &Path, flags: libc::c_int) -> Result<Fd, LabError> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            LabError::InvalidOption(format!("{} contains a NUL byte", path.display()))
        })?;
        // SAFETY: c is a valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(LabError::last_os(format!("open {}", path.display())));
        }
        Ok(Fd(fd))
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Removes the experiment's own store files when the run ends, however it ends.
#[derive(Debug)]
pub struct RemoveOnDrop(pub Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Loops a single `pread()`/`pwrite()` over short transfers (one call for the whole size in practice).
///
/// # Safety
///
/// `ptr..ptr + len` must be valid for reads (`write`) or writes (read) for the whole call, and not accessed by
/// anything else meanwhile.
pub unsafe fn rw_all(
    fd: libc::c_int,
    ptr: *mut u8,
    len: usize,
    write: bool,
) -> Result<(), LabError> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: ptr+done..ptr+len lies inside memory the caller vouched for.
        let n = unsafe {
            let p = ptr.add(done);
            if write {
                libc::pwrite(fd, p.cast(), len - done, done as libc::off_t)
            } else {
                libc::pread(fd, p.cast(), len - done, done as libc::off_t)
            }
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(LabError::os(if write { "write" } else { "read" }, err));
        }
        if n == 0 {
            return Err(LabError::Unfit("unexpected end of store".into()));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether `path` is a block device.
pub fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Where the store goes: `store` itself when it does not exist yet or `force` allows overwriting it, a new file
/// in it when it is a directory, a new file in the temporary directory when `None`. The flag says whether the
/// run creates the file (and so removes it afterwards).
pub fn resolve_store(store: Option<&Path>, force: bool) -> Result<(PathBuf, bool), LabError> {
    let fresh_name = || format!("oversub-bench-{}.swap", std::process::id());
    let Some(p) = store else {
        return Ok((std::env::temp_dir().join(fresh_name()), true));
    };
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((p.to_path_buf(), true)),
        Err(e) => Err(LabError::os(format!("--store {}", p.display()), e)),
        Ok(m) if m.is_dir() => Ok((p.join(fresh_name()), true)),
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            let kind = if m.file_type().is_block_device() {
                "block device"
            } else {
                "file"
            };
            if !force {
                return Err(LabError::InvalidOption(format!(
                    "--store {} is an existing {kind}; the benchmark overwrites its contents. Add --force-store to allow it",
                    p.display()
                )));
            }
            Ok((p.to_path_buf(), false))
        }
    }
}
