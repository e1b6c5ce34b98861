//! Tiers: where a paged-out buffer's copy lives, and what happens to its bytes on the way there and back.
//!
//! Each tier implements [`Tier`]: it reserves room for a copy, moves a buffer's bytes between device memory and
//! that room (through a transfer path of `transfer/`), reads and writes the room directly, and gives it back. One
//! implementation per sibling file:
//!
//! - [`store`]: a slot of the swap store, through the pool's store path (direct or staged, gated or not);
//! - [`host`]: room in the host-memory tier, through its copy thread;
//! - [`hashed`]: a wrapper around any tier ([`Hashed<T>`]), as `transfer::gated::Gated` wraps any path: a checksum
//!   of each piece at the write, verified at the read.
//!
//! The pool composes its tiers once, when it is made, into [`Tiers`]: an ordered list that a page-out tries in turn
//! (the host tier first, when configured, the store last, which takes every copy). What a buffer's entry holds is a
//! [`StoredCopy`]: its tier and an opaque handle, so the pager never asks where a copy lives. `tier/` uses
//! `transfer/` and never `space/`.

pub(crate) mod hashed;
pub(crate) mod host;
pub(crate) mod store;

#[cfg(test)]
mod tests;

use std::any::Any;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use oversub_accel::Reservation;
use oversub_io::{Direction, IoCallback, IoError, IoVec, Slot};

use crate::transfer::gated::Prelude;
use crate::transfer::{Transfer, TransferCallback};
use crate::PagerError;

pub(crate) use hashed::Hashed;
pub(crate) use host::Host;
pub(crate) use store::Store;

/// One move of a buffer's bytes between its device memory and a copy.
pub(crate) struct TierIo<'a> {
    /// `Write`: device memory → copy (a page-out); `Read`: copy → device memory (a page-in).
    pub(crate) direction: Direction,
    /// The buffer's device range.
    pub(crate) range: &'a Reservation,
    /// Bytes to move: the size rounded up to the store's alignment.
    pub(crate) io_bytes: u64,
    /// The buffer's size (what a checksum covers).
    pub(crate) size_bytes: u64,
    /// A page-in's commit the move must wait for (given only under a gate, whose worker runs it).
    pub(crate) after: Option<Arc<Prelude>>,
    /// Runs once, when the move is over.
    pub(crate) on_done: TransferCallback,
}

impl<'a> TierIo<'a> {
    /// The transfer path's request for this move of `copy` (what the store and the host tier submit as is).
    pub(crate) fn onto<'b, C>(self, copy: &'b C) -> Transfer<'b, C>
    where
        'a: 'b,
    {
        Transfer {
            direction: self.direction,
            range: self.range,
            copy,
            io_bytes: self.io_bytes,
            after: self.after,
            on_done: self.on_done,
        }
    }
}

/// A place a paged-out buffer's copy can live.
pub(crate) trait Tier: Send + Sync + std::fmt::Debug + 'static {
    /// What the tier keeps of one buffer (its room there).
    type Copy: Send + Sync + std::fmt::Debug + 'static;

    /// Whether copies live in host memory (what [`BufferInfo::in_host_tier`](crate::BufferInfo) reports).
    fn in_host_memory(&self) -> bool {
        false
    }

    /// Room for a copy of `io_bytes`, its store transfers at `priority`; `None` when the tier is full and the next
    /// one takes the copy.
    fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<Option<Self::Copy>, PagerError>;

    /// A store slot that already holds a buffer's bytes (a range of an external file, a slot zeroed at birth)
    /// as a copy of this tier, or the slot back when the tier does not keep store slots.
    fn adopt(&self, slot: Slot) -> Result<Self::Copy, Slot> {
        Err(slot)
    }

    /// Gives the room back.
    fn release(&self, copy: Self::Copy);

    /// Whether a large page-in from this tier should be started on the pool's starter thread (commit, then queue
    /// the read), because queueing it costs the caller more than a hand-over.
    fn deferred_start(&self) -> bool {
        false
    }

    /// Queues `io` between the buffer's device memory and `copy`; its completion runs once. `Err` means nothing
    /// was queued (then the completion never runs).
    ///
    /// # Safety
    /// As [`TransferPath::submit`](crate::transfer::TransferPath::submit): the device range is committed (with
    /// `after`: once that commit succeeded) and nothing else uses it, and `copy` stays reserved and otherwise
    /// untouched, until the completion has run.
    unsafe fn submit(&self, copy: &Self::Copy, io: TierIo<'_>) -> Result<(), PagerError>;

    /// Whether the tier takes a move piece by piece ([`submit_piece`](Self::submit_piece)), so that a wrapper can
    /// act on each piece as its own I/O completes.
    fn by_pieces(&self) -> bool {
        false
    }

    /// Queues the move of `mem` (host-addressable device memory) to or from the part of `copy` that starts at
    /// `offset`, one piece of a larger move; under a gate, after the commit `after`. Tiers that do not take pieces
    /// refuse.
    ///
    /// # Safety
    /// As [`SwapStore::submit`](oversub_io::SwapStore::submit): `mem` stays valid (for reads, otherwise
    /// untouched) and `copy` reserved until `on_done` has run.
    unsafe fn submit_piece(
        &self,
        _copy: &Self::Copy,
        _direction: Direction,
        _offset: u64,
        _mem: IoVec,
        _after: Option<Arc<Prelude>>,
        _on_done: IoCallback,
    ) -> Result<(), IoError> {
        Err(IoError::InvalidArgument(
            "this tier moves whole buffers only".into(),
        ))
    }

    /// Whether direct reads and writes of a copy are quick enough to run under the space's lock (memory copies),
    /// rather than outside it with the buffer marked busy (storage I/O).
    fn quick_access(&self) -> bool {
        false
    }

    /// Copies bytes of the copy from `offset` into `out`.
    fn read_at(&self, copy: &Self::Copy, offset: u64, out: &mut [u8]) -> Result<(), PagerError>;

    /// Copies `data` into the copy at `offset`.
    fn write_at(&self, copy: &Self::Copy, offset: u64, data: &[u8]) -> Result<(), PagerError>;
}

/// A tier's copy behind a type-erased handle, so that tiers of different kinds stand in one list. Shared (an
/// `Arc`) only while a direct access or a deferred page-in runs outside the space's lock.
type Handle = Arc<dyn Any + Send + Sync>;

/// [`Tier`] with its copies behind [`Handle`]s: what the pool's list holds (implemented for every tier).
pub(crate) trait AnyTier: Send + Sync + std::fmt::Debug {
    fn in_host_memory(&self) -> bool;
    fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<Option<Handle>, PagerError>;
    fn adopt(&self, slot: Slot) -> Result<Handle, Slot>;
    fn release(&self, handle: Handle);
    fn deferred_start(&self) -> bool;
    /// # Safety
    /// As [`Tier::submit`].
    unsafe fn submit(&self, handle: &Handle, io: TierIo<'_>) -> Result<(), PagerError>;
    fn quick_access(&self) -> bool;
    fn read_at(&self, handle: &Handle, offset: u64, out: &mut [u8]) -> Result<(), PagerError>;
    fn write_at(&self, handle: &Handle, offset: u64, data: &[u8]) -> Result<(), PagerError>;
}

/// The copy behind `handle`, which `StoredCopy` only ever pairs with the tier that made it.
fn typed<T: Tier>(handle: &Handle) -> Result<&T::Copy, PagerError> {
    (**handle)
        .downcast_ref::<T::Copy>()
        .ok_or(PagerError::Internal(
            "a copy handed to a tier that did not make it",
        ))
}

impl<T: Tier> AnyTier for T {
    fn in_host_memory(&self) -> bool {
        Tier::in_host_memory(self)
    }

    fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<Option<Handle>, PagerError> {
        Ok(Tier::reserve(self, io_bytes, priority)?.map(|c| Arc::new(c) as Handle))
    }

    fn adopt(&self, slot: Slot) -> Result<Handle, Slot> {
        Tier::adopt(self, slot).map(|c| Arc::new(c) as Handle)
    }

    fn release(&self, handle: Handle) {
        match handle.downcast::<T::Copy>().map(Arc::into_inner) {
            Ok(Some(copy)) => Tier::release(self, copy),
            // Only a direct access or a deferred page-in shares a copy, and each lets go before its buffer can give
            // the copy back; never reached, but a leak is the safe outcome (the sharer may still be using it).
            Ok(None) => {
                tracing::error!("a copy was still shared when given back; its room is leaked")
            }
            Err(_) => tracing::error!("a copy was given back to a tier that did not make it"),
        }
    }

    fn deferred_start(&self) -> bool {
        Tier::deferred_start(self)
    }

    unsafe fn submit(&self, handle: &Handle, io: TierIo<'_>) -> Result<(), PagerError> {
        let copy = typed::<T>(handle)?;
        // SAFETY: forwarded from our caller.
        unsafe { Tier::submit(self, copy, io) }
    }

    fn quick_access(&self) -> bool {
        Tier::quick_access(self)
    }

    fn read_at(&self, handle: &Handle, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        Tier::read_at(self, typed::<T>(handle)?, offset, out)
    }

    fn write_at(&self, handle: &Handle, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        Tier::write_at(self, typed::<T>(handle)?, offset, data)
    }
}

/// A buffer's copy outside device memory: its tier, and what the tier keeps of it. The entry that holds it is the
/// only one that can give it back ([`release`](Self::release)); others get a [`SharedCopy`] for a while.
#[derive(Debug)]
pub(crate) struct StoredCopy {
    tier: Arc<dyn AnyTier>,
    handle: Handle,
}

impl StoredCopy {
    /// Whether the copy lives in host memory.
    pub(crate) fn in_host_memory(&self) -> bool {
        self.tier.in_host_memory()
    }

    /// Whether a large page-in from this copy is started on the pool's starter thread.
    pub(crate) fn deferred_start(&self) -> bool {
        self.tier.deferred_start()
    }

    /// Whether direct reads and writes of the copy may run under the space's lock.
    pub(crate) fn quick_access(&self) -> bool {
        self.tier.quick_access()
    }

    /// Queues `io` between the buffer's device memory and the copy.
    ///
    /// # Safety
    /// As [`Tier::submit`].
    pub(crate) unsafe fn submit(&self, io: TierIo<'_>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.tier.submit(&self.handle, io) }
    }

    /// Copies bytes of the copy from `offset` into `out` (no move of the buffer is in flight).
    pub(crate) fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.tier.read_at(&self.handle, offset, out)
    }

    /// Copies `data` into the copy at `offset` (as [`read_at`](Self::read_at)).
    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.tier.write_at(&self.handle, offset, data)
    }

    /// The copy, shared with work that runs outside the space's lock while its buffer is pinned (busy, or in
    /// flight); it lets go before the buffer can give the copy back.
    pub(crate) fn share(&self) -> SharedCopy {
        SharedCopy(StoredCopy {
            tier: Arc::clone(&self.tier),
            handle: Arc::clone(&self.handle),
        })
    }

    /// Gives the room back to its tier.
    pub(crate) fn release(self) {
        self.tier.release(self.handle);
    }
}

/// A [`StoredCopy`] shared for a while: usable, never given back.
#[derive(Debug)]
pub(crate) struct SharedCopy(StoredCopy);

impl std::ops::Deref for SharedCopy {
    type Target = StoredCopy;

    fn deref(&self) -> &StoredCopy {
        &self.0
    }
}

/// The pool's tiers, in the order a page-out tries them; the last (the store) takes every copy or fails.
#[derive(Debug)]
pub(crate) struct Tiers(Vec<Arc<dyn AnyTier>>);

impl Tiers {
    /// `tiers`, tried in this order.
    pub(crate) fn new(tiers: Vec<Arc<dyn AnyTier>>) -> Self {
        Tiers(tiers)
    }

    /// Room for a new copy of `io_bytes` in the first tier that has it.
    pub(crate) fn reserve(
        &self,
        io_bytes: u64,
        priority: &Arc<AtomicI64>,
    ) -> Result<StoredCopy, PagerError> {
        for tier in &self.0 {
            if let Some(handle) = tier.reserve(io_bytes, priority)? {
                return Ok(StoredCopy {
                    tier: Arc::clone(tier),
                    handle,
                });
            }
        }
        Err(PagerError::Internal("no tier took the copy"))
    }

    /// `slot`, which already holds a buffer's bytes, as a copy of the first tier that keeps store slots; the slot
    /// back when none does.
    pub(crate) fn adopt(&self, mut slot: Slot) -> Result<StoredCopy, Slot> {
        for tier in &self.0 {
            match tier.adopt(slot) {
                Ok(handle) => {
                    return Ok(StoredCopy {
                        tier: Arc::clone(tier),
                        handle,
                    })
                }
                Err(back) => slot = back,
            }
        }
        Err(slot)
    }
}
