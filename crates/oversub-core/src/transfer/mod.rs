//! The transfer paths: how a buffer's bytes move between device memory and where its copy is kept while it is out.
//!
//! Each path implements [`TransferPath`]: it is handed a [`Transfer`] (a direction, the buffer's device range, the
//! copy and a completion) and queues the work, calling the completion once. There is one path per way of moving
//! bytes:
//!
//! - [`direct`]: store I/O straight from and into device memory the host can address (the host backend, an
//!   integrated GPU);
//! - [`staged`]: through the ring of host staging buffers, or cuFile, for devices the host cannot address;
//! - [`host_tier`]: copies to and from the pinned host-memory tier.
//!
//! Under a memory arbiter a path is wrapped in [`Gated`](gated::Gated), which hands it the gate's [`Pacer`]: the
//! path then runs its work as steps the pacer admits one by one, and never looks at the gate itself. The pool picks
//! and composes the paths once, when it is made, so the pager never asks which one it has.

pub(crate) mod direct;
pub(crate) mod gated;
pub(crate) mod host_tier;
pub(crate) mod staged;

use std::sync::Arc;

use oversub_accel::{AccelError, Reservation};
use oversub_io::{Direction, IoError};

use crate::PagerError;
use gated::{Pacer, Prelude};

/// Why a transfer failed.
#[derive(Debug)]
pub(crate) enum TransferError {
    /// The store's I/O failed.
    Io(IoError),
    /// A device copy failed.
    Copy(AccelError),
    /// The bytes read back are not those written: a piece's checksum differs from the one taken at the write
    /// (`tier::Hashed`).
    Checksum { expected: u64, actual: u64 },
}

/// What runs once when a transfer is over.
pub(crate) type TransferCallback = Box<dyn FnOnce(Result<(), TransferError>) + Send>;

/// One transfer of a buffer: its `io_bytes` between its device memory and `copy`.
pub(crate) struct Transfer<'a, C> {
    /// `Write`: device memory → copy (a page-out); `Read`: copy → device memory (a page-in).
    pub(crate) direction: Direction,
    /// The buffer's device range.
    pub(crate) range: &'a Reservation,
    /// Where its copy is kept.
    pub(crate) copy: &'a C,
    /// Bytes to move: the size rounded up to the store's alignment.
    pub(crate) io_bytes: u64,
    /// A page-in's commit the transfer must wait for (given only under a gate, whose worker runs it).
    pub(crate) after: Option<Arc<Prelude>>,
    /// Runs once, when the transfer is over.
    pub(crate) on_done: TransferCallback,
}

/// A way of moving a buffer's bytes between device memory and its copy (`Copy`: a store slot, or a host-tier slot).
/// Which place a copy goes to, and what else happens on the way (checksums), is the tiers' (`crate::tier`).
pub(crate) trait TransferPath: Send + Sync + std::fmt::Debug {
    /// Where this path keeps a buffer's copy.
    type Copy;

    /// How the path is named in [`crate::Pool::transfer_path`].
    fn name(&self) -> &'static str;

    /// Size of one chunk of a staged transfer (`None` for paths that do not stage).
    fn chunk_bytes(&self) -> Option<u64> {
        None
    }

    /// Queues `transfer`; its completion runs once, when it is over. `Err` means nothing was queued (then the
    /// completion never runs).
    ///
    /// # Safety
    /// The device range is committed (with `after`: once that commit succeeded) and nothing else uses it, and the
    /// copy stays allocated and otherwise untouched, until the completion has run.
    unsafe fn submit(&self, transfer: Transfer<'_, Self::Copy>) -> Result<(), PagerError>;
}

/// A path that can run its transfers as steps admitted one by one by a gate's [`Pacer`]: what
/// [`Gated`](gated::Gated) wraps.
pub(crate) trait PacedPath: TransferPath {
    /// As [`TransferPath::submit`], each step admitted by `pacer`.
    ///
    /// # Safety
    /// As [`TransferPath::submit`].
    unsafe fn submit_paced(
        &self,
        transfer: Transfer<'_, Self::Copy>,
        pacer: &Arc<Pacer>,
    ) -> Result<(), PagerError>;
}

/// A shared path is a path (the host tier is shared between its path and the pool's accounting of its memory).
impl<P: TransferPath + ?Sized> TransferPath for Arc<P> {
    type Copy = P::Copy;

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn chunk_bytes(&self) -> Option<u64> {
        (**self).chunk_bytes()
    }

    unsafe fn submit(&self, transfer: Transfer<'_, Self::Copy>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { (**self).submit(transfer) }
    }
}

impl<P: PacedPath + ?Sized> PacedPath for Arc<P> {
    unsafe fn submit_paced(
        &self,
        transfer: Transfer<'_, Self::Copy>,
        pacer: &Arc<Pacer>,
    ) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { (**self).submit_paced(transfer, pacer) }
    }
}
