//! The store tier: a copy is a slot of the swap store, moved through the pool's store path (direct or staged, gated
//! or not) and read or written directly through an aligned bounce buffer.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use oversub_accel::round_up;
use oversub_arbiter::{Gate, WorkKind};
use oversub_io::{Direction, IoCallback, IoError, IoVec, Slot, SwapStore};

use super::{Tier, TierIo};
use crate::transfer::direct::PiecePath;
use crate::transfer::gated::{copy_chunked, Prelude};
use crate::transfer::TransferPath;
use crate::PagerError;

/// The most bytes one direct store transfer moves (and the size of its bounce buffer).
pub(crate) const DIRECT_PIECE_BYTES: usize = 8 << 20;

/// Copies kept in slots of the swap store.
#[derive(Debug)]
pub(crate) struct Store {
    store: Arc<SwapStore>,
    /// How buffers move to and from the store (chosen by the pool).
    path: Arc<dyn TransferPath<Copy = Slot>>,
    /// The same path piece by piece, where it takes pieces (the direct path).
    pieces: Option<Arc<dyn PiecePath>>,
    /// The arbiter's gate the pool obeys, which admits direct reads and writes chunk by chunk.
    gate: Option<Arc<Gate>>,
}

impl Store {
    /// Slots of `store`, moved through `path` (and piece by piece through `pieces` where given).
    pub(crate) fn new(
        store: Arc<SwapStore>,
        path: Arc<dyn TransferPath<Copy = Slot>>,
        pieces: Option<Arc<dyn PiecePath>>,
        gate: Option<Arc<Gate>>,
    ) -> Self {
        Store {
            store,
            path,
            pieces,
            gate,
        }
    }

    /// Reads or writes `offset..` of a slot through an aligned bounce buffer, in pieces of at most
    /// [`DIRECT_PIECE_BYTES`] (and, under an arbiter, in admitted chunks).
    fn range(&self, slot: &Slot, offset: u64, access: StoreAccess<'_>) -> Result<(), PagerError> {
        store_range(&self.store, self.gate.as_deref(), slot, offset, access)
    }
}

impl Tier for Store {
    type Copy = Slot;

    fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<Option<Slot>, PagerError> {
        let mut slot = self.store.allocate(io_bytes)?;
        slot.set_priority(Arc::clone(priority));
        Ok(Some(slot))
    }

    fn adopt(&self, slot: Slot) -> Result<Slot, Slot> {
        Ok(slot)
    }

    fn release(&self, slot: Slot) {
        self.store.release(slot);
    }

    fn deferred_start(&self) -> bool {
        true
    }

    unsafe fn submit(&self, slot: &Slot, io: TierIo<'_>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.path.submit(io.onto(slot)) }
    }

    fn by_pieces(&self) -> bool {
        self.pieces.is_some()
    }

    unsafe fn submit_piece(
        &self,
        slot: &Slot,
        direction: Direction,
        offset: u64,
        mem: IoVec,
        after: Option<Arc<Prelude>>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        match &self.pieces {
            // SAFETY: forwarded from our caller.
            Some(pieces) => unsafe {
                pieces.submit_piece(direction, slot, offset, mem, after, on_done)
            },
            None => Err(IoError::InvalidArgument(
                "the store path moves whole buffers only".into(),
            )),
        }
    }

    fn read_at(&self, slot: &Slot, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.range(slot, offset, StoreAccess::Read(out))
    }

    fn write_at(&self, slot: &Slot, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.range(slot, offset, StoreAccess::Write(data))
    }
}

/// The two directions of a direct store access, with the caller's bytes.
enum StoreAccess<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl StoreAccess<'_> {
    fn len(&self) -> usize {
        match self {
            StoreAccess::Read(b) => b.len(),
            StoreAccess::Write(b) => b.len(),
        }
    }
}

/// Writes zeros over a new slot, so a buffer allocated on the store reads back as zeros like one in memory.
pub(crate) fn zero_slot(store: &SwapStore, slot: &Slot) -> Result<(), PagerError> {
    let piece = DIRECT_PIECE_BYTES.min(slot.len() as usize);
    let mut zeros =
        oversub_io::AlignedBuf::new(piece, store.alignment()).map_err(oversub_io::IoError::from)?;
    let mut offset = 0u64;
    while offset < slot.len() {
        let n = (slot.len() - offset).min(piece as u64);
        let view = slot.view(offset, n)?;
        let mem = IoVec {
            ptr: zeros.iovec().ptr,
            len: n as usize,
        };
        // SAFETY: `zeros` outlives the blocking transfer and is only read by it.
        unsafe { store.transfer_view(Direction::Write, &view, &[mem]) }?;
        offset += n;
    }
    Ok(())
}

/// Reads or writes `offset..` of a slot of `store` through an aligned bounce buffer (straight from and into the
/// caller's memory when everything is aligned), in pieces of at most [`DIRECT_PIECE_BYTES`], in admitted chunks
/// under `gate`.
fn store_range(
    store: &SwapStore,
    gate: Option<&Gate>,
    slot: &Slot,
    offset: u64,
    mut access: StoreAccess<'_>,
) -> Result<(), PagerError> {
    let len = access.len() as u64;
    if len == 0 {
        return Ok(());
    }
    let align = store.alignment() as u64;
    let start = offset / align * align;
    let end = round_up(offset + len, align)
        .ok_or_else(|| PagerError::InvalidSize(format!("range {offset}+{len} overflows")))?
        .min(slot.len());
    let user_ptr = match &access {
        StoreAccess::Read(out) => out.as_ptr() as usize,
        StoreAccess::Write(data) => data.as_ptr() as usize,
    };
    if offset % align == 0 && len % align == 0 && user_ptr % store.alignment() == 0 {
        // Aligned on both sides: straight between the caller's memory and the store, no bounce buffer.
        return copy_chunked(gate, len as usize, WorkKind::Transfer, |off, n| {
            let mut pos = 0usize;
            while pos < n {
                let piece = (n - pos).min(DIRECT_PIECE_BYTES);
                let at = off + pos;
                let view = slot.view(offset + at as u64, piece as u64)?;
                let (direction, ptr) = match &mut access {
                    StoreAccess::Read(out) => (Direction::Read, out[at..].as_mut_ptr()),
                    // The engine only reads the memory of a write.
                    StoreAccess::Write(data) => (Direction::Write, data[at..].as_ptr().cast_mut()),
                };
                let mem = IoVec { ptr, len: piece };
                // SAFETY: `mem` lies inside the caller's slice, which this blocking transfer borrows for its whole
                // duration (mutably for a read).
                unsafe { store.transfer_view(direction, &view, &[mem]) }?;
                pos += piece;
            }
            Ok::<(), PagerError>(())
        });
    }
    let piece_cap = DIRECT_PIECE_BYTES.min((end - start) as usize);
    let mut bounce = oversub_io::AlignedBuf::new(piece_cap, store.alignment())
        .map_err(oversub_io::IoError::from)?;
    let mut one_piece = |piece_start: u64, piece_len: u64| -> Result<(), PagerError> {
        let view = slot.view(piece_start, piece_len)?;
        let mem = IoVec {
            ptr: bounce.as_ptr(),
            len: piece_len as usize,
        };
        // The overlap of this piece with the caller's range, in both coordinates.
        let lo = piece_start.max(offset);
        let hi = (piece_start + piece_len).min(offset + len);
        let (in_piece, in_user, n) = (
            (lo - piece_start) as usize,
            (lo - offset) as usize,
            (hi - lo) as usize,
        );
        match &mut access {
            StoreAccess::Read(out) => {
                // SAFETY: the bounce buffer outlives the blocking transfer and nothing else uses it.
                unsafe { store.transfer_view(Direction::Read, &view, &[mem]) }?;
                out[in_user..in_user + n]
                    .copy_from_slice(&bounce.as_slice()[in_piece..in_piece + n]);
            }
            StoreAccess::Write(data) => {
                if n as u64 != piece_len {
                    // A partial block: keep the bytes around the caller's range.
                    // SAFETY: as above.
                    unsafe { store.transfer_view(Direction::Read, &view, &[mem]) }?;
                }
                bounce.as_mut_slice()[in_piece..in_piece + n]
                    .copy_from_slice(&data[in_user..in_user + n]);
                // SAFETY: as above; the write only reads the bounce buffer.
                unsafe { store.transfer_view(Direction::Write, &view, &[mem]) }?;
            }
        }
        Ok(())
    };
    copy_chunked(
        gate,
        (end - start) as usize,
        WorkKind::Transfer,
        |off, n| {
            let mut pos = start + off as u64;
            let stop = pos + n as u64;
            while pos < stop {
                let piece = (stop - pos).min(piece_cap as u64);
                one_piece(pos, piece)?;
                pos += piece;
            }
            Ok::<(), PagerError>(())
        },
    )
}
