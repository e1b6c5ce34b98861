//! Where the arbiter's state lives: a `#[repr(C)]` block of atomics, in this process's heap or in a file under
//! /dev/shm mapped by every process that uses it. All-zero bytes are a valid (empty) state, so a freshly
//! truncated file needs no initialisation beyond its header.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::ArbiterError;

/// Task slots of one arbiter: more than cores on any embedded board, small enough to scan on every request.
pub const MAX_TASKS: usize = 64;
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"OVSARB01");
/// Version of the shared layout; a file of another version is refused.
pub const LAYOUT_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) slot_count: AtomicU32,
    pub(crate) stale_after_ns: AtomicU64,
    pub(crate) chunk_time_ns: AtomicU64,
    pub(crate) chunk_bytes: AtomicU64,
    pub(crate) poll_ns: AtomicU64,
    /// Bumped by every announcement, so a transfer side notices that its grant may have changed.
    pub(crate) generation: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) grants: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) expired: AtomicU64,
}

#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    pub(crate) word: AtomicU64,
    pub(crate) pid: AtomicU32,
    pub(crate) _reserved: AtomicU32,
    pub(crate) announcements: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) header: Header,
    pub(crate) slots: [TaskSlot; MAX_TASKS],
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            header: Header::default(),
            slots: std::array::from_fn(|_| TaskSlot::default()),
        }
    }
}

/// The state's storage.
#[derive(Debug)]
pub(crate) enum Region {
    Heap(Box<Layout>),
    Shared {
        ptr: NonNull<Layout>,
        path: PathBuf,
        /// The creator removes the file when its last handle goes.
        unlink: bool,
    },
}

// SAFETY: the mapping is only accessed through atomics, which are safe to share between threads (and processes).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

const LAYOUT_BYTES: usize = std::mem::size_of::<Layout>();

impl Region {
    pub(crate) fn layout(&self) -> &Layout {
        match self {
            Region::Heap(b) => b,
            // SAFETY: ptr is a live MAP_SHARED mapping of LAYOUT_BYTES bytes, page-aligned, unmapped only in Drop;
            // every field is an atomic, and all bit patterns are valid atomics.
            Region::Shared { ptr, .. } => unsafe { ptr.as_ref() },
        }
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Region::Heap(_) => None,
            Region::Shared { path, .. } => Some(path),
        }
    }

    /// Creates `path` (which must not exist) with mode 0600, sized and mapped.
    pub(crate) fn create(path: &Path) -> Result<Region, ArbiterError> {
        let fd = open(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, "create")?;
        let result = (|| {
            // The umask may only have removed bits; make sure nobody else can read or write the state.
            // SAFETY: fchmod on our own open descriptor.
            if unsafe { libc::fchmod(fd.0, 0o600) } != 0 {
                return Err(os("fchmod", path));
            }
            // SAFETY: ftruncate on our own open descriptor; the new bytes read as zero.
            if unsafe { libc::ftruncate(fd.0, LAYOUT_BYTES as libc::off_t) } != 0 {
                return Err(os("ftruncate", path));
            }
            map(fd.0, path, true)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Maps an existing arbiter file after checking its size; the caller checks the header.
    pub(crate) fn open(path: &Path) -> Result<Region, ArbiterError> {
        let fd = open(path, libc::O_RDWR, "open")?;
        let meta = std::fs::metadata(path).map_err(|source| ArbiterError::Os {
            op: "stat",
            path: path.display().to_string(),
            source,
        })?;
        if meta.len() != LAYOUT_BYTES as u64 {
            return Err(ArbiterError::Incompatible {
                path: path.display().to_string(),
                expected: LAYOUT_VERSION,
                reason: format!("size {} bytes, expected {LAYOUT_BYTES}", meta.len()),
            });
        }
        let region = map(fd.0, path, false)?;
        let h = &region.layout().header;
        let magic = h.magic.load(Ordering::Acquire);
        let version = h.version.load(Ordering::Acquire);
        let slots = h.slot_count.load(Ordering::Acquire);
        let reason = if magic != MAGIC {
            Some("bad magic (not an arbiter, or not initialised yet)".to_string())
        } else if version != LAYOUT_VERSION {
            Some(format!("layout version {version}"))
        } else if slots as usize != MAX_TASKS {
            Some(format!("{slots} task slots, expected {MAX_TASKS}"))
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ArbiterError::Incompatible {
                path: path.display().to_string(),
                expected: LAYOUT_VERSION,
                reason,
            }),
            None => Ok(region),
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Region::Shared { ptr, path, unlink } = self {
            // SAFETY: we mapped exactly LAYOUT_BYTES at ptr and nothing references it past this handle's life.
            unsafe { libc::munmap(ptr.as_ptr().cast(), LAYOUT_BYTES) };
            if *unlink {
                let _ = std::fs::remove_file(&*path);
            }
        }
    }
}

struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor; the mapping stays valid after close.
        unsafe { libc::close(self.0) };
    }
}

fn os(op: &'static str, path: &Path) -> ArbiterError {
    ArbiterError::Os {
        op,
        path: path.display().to_string(),
        source: std::io::Error::last_os_error(),
    }
}

fn open(path: &Path, flags: libc::c_int, op: &'static str) -> Result<Fd, ArbiterError> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| ArbiterError::Os {
        op,
        path: path.display().to_string(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: c is a valid NUL-terminated path; the mode is used only with O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(os(op, path));
    }
    Ok(Fd(fd))
}

fn map(fd: libc::c_int, path: &Path, unlink: bool) -> Result<Region, ArbiterError> {
    // SAFETY: a new shared mapping of LAYOUT_BYTES of an open file sized to at least that; no existing memory is
    // affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LAYOUT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(os("mmap", path));
    }
    let ptr = NonNull::new(ptr.cast::<Layout>()).ok_or_else(|| os("mmap", path))?;
    Ok(Region::Shared {
        ptr,
        path: path.to_path_buf(),
        unlink,
    })
}
