//! The direct path, for devices whose memory the host can address (the host backend, an integrated GPU): the store
//! reads and writes the buffer's device memory itself, with no copy in between. Under a gate the I/O goes to the
//! gated worker instead, which admits it in batches of chunks.

use std::sync::Arc;

use oversub_accel::DeviceMemory;
use oversub_io::{Direction, IoCallback, IoError, IoVec, Slot, SwapStore};

use super::gated::{Gated, Pacer, Prelude};
use super::{PacedPath, Transfer, TransferError, TransferPath};
use crate::PagerError;

/// Store I/O straight between host-addressable device memory and a slot.
#[derive(Debug)]
pub(crate) struct Direct {
    device: Arc<dyn DeviceMemory>,
    store: Arc<SwapStore>,
}

impl Direct {
    /// The direct path of `device` (whose memory the host can address) to `store`.
    pub(crate) fn new(device: Arc<dyn DeviceMemory>, store: Arc<SwapStore>) -> Self {
        Direct { device, store }
    }

    /// The buffer's memory as one I/O vector.
    fn iovec(&self, transfer: &Transfer<'_, Slot>) -> Result<IoVec, PagerError> {
        let ptr = self
            .device
            .host_ptr(transfer.range)
            .ok_or(PagerError::Internal(
                "device memory is not host-addressable on the direct path",
            ))?;
        Ok(IoVec {
            ptr,
            len: usize::try_from(transfer.io_bytes)
                .map_err(|_| PagerError::InvalidSize("buffer too large".into()))?,
        })
    }
}

/// The completion of a whole-buffer I/O, as the transfer's.
fn io_done(on_done: super::TransferCallback) -> IoCallback {
    Box::new(move |r| on_done(r.map(|_| ()).map_err(TransferError::Io)))
}

/// A transfer that waits for a gated commit, in a pool without a gate (a bug: refused rather than run into memory
/// that is not committed).
fn ungated_prelude() -> IoError {
    IoError::InvalidArgument("a transfer waits for a gated commit, but the pool has no gate".into())
}

impl TransferPath for Direct {
    type Copy = Slot;

    fn name(&self) -> &'static str {
        "direct"
    }

    unsafe fn submit(&self, transfer: Transfer<'_, Slot>) -> Result<(), PagerError> {
        let mem = self.iovec(&transfer)?;
        if transfer.after.is_some() {
            return Err(ungated_prelude().into());
        }
        // SAFETY: forwarded from our caller; host-addressable memory is the range itself.
        Ok(unsafe {
            self.store.submit(
                transfer.direction,
                transfer.copy,
                &[mem],
                io_done(transfer.on_done),
            )
        }?)
    }
}

impl PacedPath for Direct {
    unsafe fn submit_paced(
        &self,
        transfer: Transfer<'_, Slot>,
        pacer: &Arc<Pacer>,
    ) -> Result<(), PagerError> {
        let mem = self.iovec(&transfer)?;
        // SAFETY: forwarded from our caller.
        Ok(unsafe {
            pacer.submit_io(
                transfer.direction,
                transfer.copy,
                0,
                mem,
                transfer.after,
                io_done(transfer.on_done),
            )
        }?)
    }
}

/// A direct path that also takes a buffer's transfer piece by piece (for checksums, hashed per piece as its own I/O
/// completes).
pub(crate) trait PiecePath: Send + Sync + std::fmt::Debug {
    /// Submits the transfer of `mem` to or from the part of `slot` that starts at `offset`; under a gate, after
    /// the commit `after` (given only under a gate).
    ///
    /// # Safety
    /// As [`SwapStore::submit`]: `mem` stays valid (for reads, otherwise untouched) until `on_done` has run.
    unsafe fn submit_piece(
        &self,
        direction: Direction,
        slot: &Slot,
        offset: u64,
        mem: IoVec,
        after: Option<Arc<Prelude>>,
        on_done: IoCallback,
    ) -> Result<(), IoError>;
}

impl PiecePath for Direct {
    unsafe fn submit_piece(
        &self,
        direction: Direction,
        slot: &Slot,
        offset: u64,
        mem: IoVec,
        after: Option<Arc<Prelude>>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        if after.is_some() {
            return Err(ungated_prelude());
        }
        let view = slot.view(offset, mem.len as u64)?;
        // SAFETY: forwarded from our caller.
        unsafe { self.store.submit_view(direction, &view, &[mem], on_done) }
    }
}

impl PiecePath for Gated<Direct> {
    unsafe fn submit_piece(
        &self,
        direction: Direction,
        slot: &Slot,
        offset: u64,
        mem: IoVec,
        after: Option<Arc<Prelude>>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        // SAFETY: forwarded from our caller.
        unsafe {
            self.pacer()
                .submit_io(direction, slot, offset, mem, after, on_done)
        }
    }
}
