use oversub_accel::AccelError;
use oversub_io::IoError;

use crate::{Buffer, BufferState};

/// Everything the pager can refuse or fail with. A refused call changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PagerError {
    /// The handle names no live buffer of this address space (never allocated, freed, or of another space).
    #[error("unknown buffer {0}")]
    UnknownBuffer(Buffer),
    /// A ticket was handed to an address space other than the one that issued it.
    #[error("ticket for {0} belongs to another address space")]
    WrongAddressSpace(Buffer),
    /// The buffer is marked unpageable (the stand-in for pinned zero-copy host memory, which is mapped on both the
    /// CPU and the accelerator and cannot be moved).
    #[error("buffer {0} is unpageable (pinned zero-copy memory cannot be paged)")]
    Unpageable(Buffer),
    /// Page-in of a buffer that is already resident.
    #[error("buffer {0} is already resident")]
    AlreadyResident(Buffer),
    /// Page-out of a buffer that is already paged out.
    #[error("buffer {0} is already paged out")]
    AlreadyPagedOut(Buffer),
    /// The buffer has a paging operation in flight; finish its ticket first.
    #[error("buffer {buffer} has an operation in flight ({state}); finish its ticket first")]
    OperationInFlight {
        /// The buffer.
        buffer: Buffer,
        /// Its state.
        state: BufferState,
    },
    /// The buffer's bytes are not accessible in its current state.
    #[error("buffer {buffer} is not resident ({state})")]
    NotResident {
        /// The buffer.
        buffer: Buffer,
        /// Its state.
        state: BufferState,
    },
    /// A write to a read-only buffer whose bytes are already on the store (they would silently be lost).
    #[error("buffer {0} is read-only and already stored; its bytes cannot change")]
    ReadOnly(Buffer),
    /// The pool has not enough free capacity.
    #[error("pool capacity exceeded: needed {needed_bytes} bytes, {available_bytes} of {capacity_bytes} available")]
    OutOfMemory {
        /// Bytes the operation needs.
        needed_bytes: u64,
        /// Bytes free in the pool.
        available_bytes: u64,
        /// The pool's capacity.
        capacity_bytes: u64,
    },
    /// The address space is a victim tenant at its resident quota (see [`crate::Pool::tenant_space`]): the
    /// buffer cannot become resident now; read and write it on the store with `read_direct`/`write_direct`.
    #[error("{} space as{space} is at its resident quota: {charged_bytes} of {limit_bytes} bytes held, {needed_bytes} more needed; use read_direct/write_direct", buffer.map(|b| format!("buffer {b}:")).unwrap_or_default())]
    QuotaExceeded {
        /// The space.
        space: u32,
        /// The buffer, when a page-in was refused.
        buffer: Option<Buffer>,
        /// Bytes the operation needs.
        needed_bytes: u64,
        /// Bytes the space holds now.
        charged_bytes: u64,
        /// Its quota.
        limit_bytes: u64,
    },
    /// A tenant the plan cannot take, or a planner input that cannot work.
    #[error(transparent)]
    Tenant(#[from] oversub_tenants::TenantError),
    /// An access outside the buffer.
    #[error("range {offset}+{len} lies outside buffer {buffer} of {size} bytes")]
    OutOfBounds {
        /// The buffer.
        buffer: Buffer,
        /// Start of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A zero or overflowing size.
    #[error("invalid size: {0}")]
    InvalidSize(String),
    /// The bytes read back at page-in differ from those written at page-out; the buffer stays paged out.
    #[error(
        "checksum mismatch at page-in of {buffer}: expected {expected:#018x}, read {actual:#018x}"
    )]
    ChecksumMismatch {
        /// The buffer.
        buffer: Buffer,
        /// Checksum taken at page-out.
        expected: u64,
        /// Checksum of the bytes read back.
        actual: u64,
    },
    /// The configuration cannot work.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// The swap store failed or is full.
    #[error(transparent)]
    Store(#[from] IoError),
    /// The device-memory backend failed.
    #[error(transparent)]
    Device(#[from] AccelError),
    /// The pool was created in another process: this is a forked child, which has the parent's memory but not its
    /// I/O threads, so any transfer would wait forever. Create a new pool in the child (Python's multiprocessing:
    /// the "spawn" or "forkserver" start method).
    #[error("this pool belongs to process {pool_pid}, and process {pid} is a fork of it: a forked child cannot page (the pool's I/O threads did not survive the fork); create a new pool in the child")]
    Forked {
        /// The process that created the pool.
        pool_pid: u32,
        /// This process.
        pid: u32,
    },
    /// The completion of a transfer never ran: a device backend, an I/O engine or a staging thread panicked
    /// while finishing it. The operation failed; the buffer keeps its earlier state (a stored copy is never
    /// given up).
    #[error("the transfer of {buffer} failed without completing: {reason}")]
    CompletionLost {
        /// The buffer.
        buffer: Buffer,
        /// What was lost.
        reason: &'static str,
    },
    /// Internal bookkeeping broke an invariant; reported instead of panicking.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl PagerError {
    /// Names the buffer in a quota refusal.
    pub(crate) fn with_buffer(self, b: Buffer) -> Self {
        match self {
            PagerError::QuotaExceeded {
                space,
                needed_bytes,
                charged_bytes,
                limit_bytes,
                ..
            } => PagerError::QuotaExceeded {
                space,
                buffer: Some(b),
                needed_bytes,
                charged_bytes,
                limit_bytes,
            },
            other => other,
        }
    }
}
