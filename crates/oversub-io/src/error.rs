//! Typed errors of the I/O layer.

use std::os::fd::RawFd;
use std::path::PathBuf;

/// Everything that can go wrong in `oversub-io`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// A system call failed; `op` names it ("open", "fallocate", "preadv", ...).
    #[error("{op} failed: {source}")]
    Io {
        /// The failing operation.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A system call on a swap store's file or device failed while the store was being created, opened, checked or
    /// sized: what oversub was doing (`what`, e.g. "cannot reserve 256.00 MiB for the swap store"), the file or
    /// device, the OS error (also the [`source`](std::error::Error::source)) and, where one helps, what to do
    /// (`hint`, e.g. the space free on that file system).
    #[error("{what} {}: {source}{}", .path.display(), hint_suffix(.hint))]
    StoreIo {
        /// The failing system call ("open", "fallocate", ...).
        op: &'static str,
        /// What was being done, as a phrase the path follows.
        what: String,
        /// The file or device (for a new file in a folder: the file's path in it).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
        /// What to do about it, where the error says enough to tell.
        hint: Option<String>,
    },
    /// The swap store has too little free space for an allocation.
    #[error("swap store full: needed {needed} bytes, {free} free")]
    StoreFull {
        /// Bytes requested (rounded up to the store alignment).
        needed: u64,
        /// Bytes free at the time of the request (possibly fragmented).
        free: u64,
    },
    /// A pointer, length or offset does not meet the direct-I/O alignment.
    #[error("{what} {value:#x} is not aligned to {alignment} bytes")]
    Misaligned {
        /// What was misaligned ("iovec pointer", "iovec length", ...).
        what: &'static str,
        /// The offending value.
        value: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// A read hit end of file before the request was complete.
    #[error("unexpected end of file at offset {offset}")]
    UnexpectedEof {
        /// File offset at which the read returned 0.
        offset: u64,
    },
    /// The engine no longer accepts work.
    #[error("I/O engine is shut down")]
    Shutdown,
    /// The store was closed ([`SwapStore::close_if_idle`](crate::SwapStore::close_if_idle)): its file or device
    /// may already belong to another store.
    #[error("swap store {path} is closed")]
    StoreClosed {
        /// The store's (first member's) path.
        path: PathBuf,
    },
    /// Work submitted in a forked child to an engine its parent made: the engine's threads did not survive the
    /// fork, so the work would never run.
    #[error("this I/O engine belongs to process {owner_pid}, and process {pid} is a fork of it: its threads did not survive the fork; make a new engine (or store) in the child")]
    Forked {
        /// The process that made the engine.
        owner_pid: u32,
        /// This process.
        pid: u32,
    },
    /// A requested feature is not available on this system.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A caller passed an invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The swap store is in use: another open of it holds its lock (in this process or another), or the kernel
    /// refused the block device's exclusive open (mounted, swap, stacked device, another exclusive opener).
    /// [`StoreBuilder::force`](crate::StoreBuilder::force) cannot override this.
    #[error("swap store {} is already in use{}", .path.display(), holder_suffix(.holder))]
    StoreBusy {
        /// The file or device.
        path: PathBuf,
        /// Who holds it, where the OS tells: "pid N (comm)", "mounted at /mnt/x", "another program has it open
        /// exclusively", ...
        holder: Option<String>,
    },
    /// `open` will not write over what the file or device holds: a file system, partition table or other data
    /// not written by oversub, another user's store, or a mode that cannot be narrowed to 0600.
    #[error(
        "refusing to use {} as a swap store: {reason}; if its contents may be destroyed, override with \
         StoreBuilder::force(true) (CLI: --force-store, Python: force_store=True)",
        .path.display()
    )]
    StoreRefused {
        /// The file or device.
        path: PathBuf,
        /// Why, as "it holds an ext2/ext3/ext4 file system", "it is another user's oversub swap store (...)".
        reason: String,
    },
    /// One member of a striped store (a store over several files or devices, see
    /// [`StoreBuilder::build`](crate::StoreBuilder::build)) failed: a request of a transfer on it, or creating or
    /// opening it. The member's own error (for I/O, the OS error) is the source.
    #[error("swap store member {}: {source}", .path.display())]
    Member {
        /// The member's file or device.
        path: PathBuf,
        /// What failed there.
        #[source]
        source: Box<IoError>,
    },
    /// A request of a batch submitted with [`IoEngine::submit_tagged`](crate::IoEngine::submit_tagged) failed:
    /// the request's file descriptor and file offset, and its error as the source. Callers that put several files
    /// into one batch (a striped [`SwapStore`](crate::SwapStore)) use it to say which file failed; the store turns
    /// it into [`IoError::Member`] (or, for a store of one file, back into the source itself).
    #[error("request on fd {fd} at offset {offset}: {source}")]
    Request {
        /// The request's file descriptor.
        fd: RawFd,
        /// The request's first file offset.
        offset: u64,
        /// Why it failed.
        #[source]
        source: Box<IoError>,
    },
    /// A file read through [`SwapStore::external_slot`](crate::SwapStore::external_slot) (a model checkpoint) was
    /// modified after it was opened, so its bytes may no longer be the ones its buffers were made from.
    #[error("{} changed after oversub opened it ({what}); reopen it to use the new contents", .path.display())]
    ExternalChanged {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// A failure injected by the test double `testing::FailingEngine` (behind the `testing` feature).
    #[error("injected failure on request #{nth}")]
    Injected {
        /// 1-based number of the request that was made to fail.
        nth: u64,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref()
        .map_or_else(String::new, |h| format!(" ({h})"))
}

fn holder_suffix(holder: &Option<String>) -> String {
    holder
        .as_ref()
        .map_or_else(String::new, |h| format!(": {h}"))
}

/// An aligned buffer that could not be allocated, as the errors `AlignedBuf::new` returned when it lived here: a bad
/// layout is an invalid argument, no memory an `alloc` failure of kind `OutOfMemory`.
impl From<oversub_base::mem::AllocError> for IoError {
    fn from(e: oversub_base::mem::AllocError) -> IoError {
        match e {
            oversub_base::mem::AllocError::OutOfMemory { .. } => IoError::Io {
                op: "alloc",
                source: std::io::ErrorKind::OutOfMemory.into(),
            },
            other => IoError::InvalidArgument(other.to_string()),
        }
    }
}

impl IoError {
    /// `Io` error from `errno` of the last libc call.
    pub(crate) fn last_os(op: &'static str) -> Self {
        IoError::Io {
            op,
            source: std::io::Error::last_os_error(),
        }
    }

    /// `Io` error from a raw (positive) errno value.
    pub(crate) fn from_errno(op: &'static str, errno: i32) -> Self {
        IoError::Io {
            op,
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    /// The raw OS error, if this is an `Io` or `StoreIo` error carrying one (also inside [`IoError::Member`] and
    /// [`IoError::Request`]).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            IoError::Io { source, .. } | IoError::StoreIo { source, .. } => source.raw_os_error(),
            IoError::Member { source, .. } | IoError::Request { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }

    /// Strips [`IoError::Request`] wrappers: the error of the request itself.
    pub(crate) fn untagged(self) -> IoError {
        match self {
            IoError::Request { source, .. } => source.untagged(),
            other => other,
        }
    }
}
