//! Address spaces: the pager's public face ([`AddressSpace`], [`Buffer`], [`Ticket`]) and its bookkeeping, split by
//! concern: `entry` (a buffer's state, with its copy outside memory), `shared` (the table, charges, quota),
//! `ticket` (operations in flight), `paging` (page-out, page-in, finish), `access` (copies and direct access to a
//! stored copy) and `stream_order` (uses recorded on the caller's streams). Where a copy lives, and whether it is
//! checksummed, is the tiers' (`crate::tier`).

mod access;
mod entry;
mod paging;
mod shared;
mod stream_order;
mod ticket;

// The names below are shared with the submodules, which `use super::*`.
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use oversub_accel::{round_up, AccelError, DeviceMemory, DevicePtr, Fence, Reservation};
use oversub_arbiter::WorkKind;
use oversub_io::{Direction, IoError};

pub(crate) use oversub_base::sync::lock;

use crate::pool::PoolShared;
use crate::tier::{SharedCopy, StoredCopy, TierIo};
use crate::transfer::gated::{MmLane, Prelude};
use crate::transfer::{TransferCallback, TransferError};
use crate::PagerError;

use entry::{Entry, Phase, SpaceState, State};
pub(crate) use shared::{SpaceShared, SpaceUsage};
pub use ticket::Ticket;
use ticket::{failure_to_error, Completion, Failed, OpFailure, OpState};

/// A stable handle to a buffer of an address space. Handles are never reused, so a stale one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Buffer {
    space: u32,
    index: u64,
}

impl Buffer {
    /// The address space the buffer belongs to.
    pub fn space_id(&self) -> u32 {
        self.space
    }
}

impl std::fmt::Display for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "as{}/buf{}", self.space, self.index)
    }
}

/// How a buffer may be paged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferFlags {
    /// The contents never change after the first page-out: it is written to the store once and later page-outs just
    /// release the memory (saving time and SSD write cycles, as for model weights).
    pub read_only: bool,
    /// Pinned zero-copy memory: never paged; paging calls are refused.
    pub unpageable: bool,
}

impl BufferFlags {
    /// An ordinary read-write, pageable buffer.
    pub const DEFAULT: BufferFlags = BufferFlags {
        read_only: false,
        unpageable: false,
    };
    /// A read-only buffer.
    pub const READ_ONLY: BufferFlags = BufferFlags {
        read_only: true,
        unpageable: false,
    };
    /// An unpageable buffer.
    pub const UNPAGEABLE: BufferFlags = BufferFlags {
        read_only: false,
        unpageable: true,
    };
}

/// Where a buffer's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferState {
    /// In device memory, accessible.
    Resident,
    /// A page-out has started and not been finished.
    PagingOut,
    /// On the store only; its memory is given back.
    PagedOut,
    /// A page-in has started and not been finished.
    PagingIn,
}

impl std::fmt::Display for BufferState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BufferState::Resident => "resident",
            BufferState::PagingOut => "paging out",
            BufferState::PagedOut => "paged out",
            BufferState::PagingIn => "paging in",
        })
    }
}

/// A snapshot of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferInfo {
    /// The handle.
    pub buffer: Buffer,
    /// Device address; the same for the buffer's whole life.
    pub addr: DevicePtr,
    /// Size the user asked for.
    pub size_bytes: u64,
    /// Device memory it takes when resident (size rounded to the device granularity).
    pub reserved_bytes: u64,
    /// Paging flags.
    pub flags: BufferFlags,
    /// Current state.
    pub state: BufferState,
    /// Whether the store or the host tier holds a valid copy (paged out, or read-only and written once).
    pub stored: bool,
    /// Whether that copy is in the host-memory tier rather than on the store.
    pub in_host_tier: bool,
}

/// Which operation a ticket stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Page-in.
    PageIn,
    /// Page-out.
    PageOut,
}

/// A set of buffers paged together (one per accelerator context), guarded by its own lock.
/// Clones share the same space.
#[derive(Debug, Clone)]
pub struct AddressSpace {
    shared: Arc<SpaceShared>,
}

impl AddressSpace {
    pub(crate) fn new(id: u32, pool: Arc<PoolShared>, tenant: bool) -> Self {
        AddressSpace {
            shared: Arc::new(SpaceShared {
                id,
                pool,
                state: Mutex::new(SpaceState::default()),
                idle: Condvar::new(),
                usage: Arc::new(SpaceUsage::default()),
                tenant,
            }),
        }
    }

    pub(crate) fn from_shared(shared: Arc<SpaceShared>) -> Self {
        AddressSpace { shared }
    }

    pub(crate) fn shared(&self) -> &Arc<SpaceShared> {
        &self.shared
    }

    /// Device memory this space's buffers hold now (resident buffers and operations in flight), in bytes.
    pub fn charged_bytes(&self) -> u64 {
        self.shared.usage.charged_bytes.load(Ordering::Acquire)
    }

    /// The most device memory this space may hold: its resident quota when the tenant planner made it a victim,
    /// `None` when unlimited. Allocations past it are placed on the store, and page-ins past it are refused
    /// ([`PagerError::QuotaExceeded`]); reach such buffers with [`read_direct`](Self::read_direct) and
    /// [`write_direct`](Self::write_direct).
    pub fn resident_limit(&self) -> Option<u64> {
        match self.shared.usage.limit_bytes.load(Ordering::Acquire) {
            u64::MAX => None,
            limit => Some(limit),
        }
    }

    /// This space's id, as shown in buffer handles.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// Allocates a resident buffer of `size_bytes`, zero-filled, charged to the pool in whole granules.
    pub fn alloc(&self, size_bytes: u64, flags: BufferFlags) -> Result<Buffer, PagerError> {
        let pool = &self.shared.pool;
        pool.check_fork()?;
        if size_bytes == 0 {
            return Err(PagerError::InvalidSize(
                "a buffer needs at least one byte".into(),
            ));
        }
        let alignment = pool.store.alignment() as u64;
        let io_bytes = round_up(size_bytes, alignment)
            .ok_or_else(|| PagerError::InvalidSize(format!("{size_bytes} bytes overflows")))?;
        let reserve_len = usize::try_from(io_bytes)
            .map_err(|_| PagerError::InvalidSize(format!("{size_bytes} bytes overflows")))?;
        let granularity = pool.device.granularity() as u64;
        let charged = round_up(io_bytes, granularity)
            .ok_or_else(|| PagerError::InvalidSize(format!("{size_bytes} bytes overflows")))?;
        match self.shared.charge(charged) {
            Ok(()) => {}
            // A victim tenant past its quota: the buffer lives on the store from the start.
            Err(PagerError::QuotaExceeded { .. }) if !flags.unpageable => {
                return self.alloc_on_store(size_bytes, io_bytes, reserve_len, flags)
            }
            Err(e) => return Err(e),
        }
        let reservation = match pool.device.reserve(reserve_len) {
            Ok(r) => r,
            Err(e) => {
                self.shared.refund(charged);
                return Err(e.into());
            }
        };
        if reservation.len as u64 != charged {
            // Keep the accounting exact even if a backend rounds differently than its granularity says.
            self.shared.refund(charged);
            if let Err(e) = self.shared.charge(reservation.len as u64) {
                // SAFETY: the range was reserved just now and nobody has seen it.
                let _ = unsafe { pool.device.unreserve(reservation) };
                return Err(e);
            }
        }
        if let Err(e) = pool
            .device
            .commit(&reservation)
            .and_then(|()| pool.device.zero_new(&reservation))
        {
            self.shared.refund(reservation.len as u64);
            // SAFETY: as above.
            let _ = unsafe { pool.device.unreserve(reservation) };
            return Err(e.into());
        }
        let buffer = self.shared.insert(Entry {
            reservation,
            size_bytes,
            io_bytes,
            flags,
            state: State::Resident(None),
            busy: false,
            free_pending: false,
            charged: true,
            last_use: 0,
            stream_uses: Vec::new(),
        });
        tracing::debug!(%buffer, size_bytes, addr = %reservation.addr, "alloc");
        Ok(buffer)
    }

    /// Allocates a read-only buffer of `len` bytes whose stored copy is `file`'s bytes from `offset` (a model
    /// checkpoint), so nothing is written to the store: the buffer starts paged out, its first page-in reads the
    /// file (one direct read of the range, split as the store splits its own), and page-out only gives the memory
    /// back. `offset` and `len` must be multiples of the store's alignment when the store is direct, and lie inside
    /// the file ([`SwapStore::external_slot`](oversub_io::SwapStore::external_slot)). `flags` must be read-only.
    /// The pager takes no checksum of such a buffer (that would read the whole file at start-up); a file modified
    /// after it was opened fails the next page-in with `ExternalChanged`.
    pub fn alloc_external(
        &self,
        file: &Arc<oversub_io::ExternalFile>,
        offset: u64,
        len: u64,
        flags: BufferFlags,
    ) -> Result<Buffer, PagerError> {
        let pool = &self.shared.pool;
        pool.check_fork()?;
        if !flags.read_only {
            return Err(PagerError::Unsupported(
                "a buffer backed by an external file must be read-only: oversub never writes to the file".into(),
            ));
        }
        if flags.unpageable {
            return Err(PagerError::Unsupported(
                "a buffer backed by an external file starts paged out, so it cannot be unpageable"
                    .into(),
            ));
        }
        let mut slot = pool.store.external_slot(file, offset, len)?;
        slot.set_priority(Arc::clone(&self.shared.usage.io_priority));
        let reserve_len = usize::try_from(len)
            .map_err(|_| PagerError::InvalidSize(format!("{len} bytes overflows")))?;
        let (copy, reservation) = self.shared.adopt_reserved(slot, reserve_len)?;
        let buffer = self
            .shared
            .insert(Entry::stored_on(reservation, len, len, flags, copy));
        tracing::debug!(%buffer, offset, len, file = %file.path().display(), addr = %reservation.addr, "alloc on an external file");
        Ok(buffer)
    }

    /// Allocates a buffer that starts paged out: an address, and a zero-filled store slot instead of memory.
    fn alloc_on_store(
        &self,
        size_bytes: u64,
        io_bytes: u64,
        reserve_len: usize,
        flags: BufferFlags,
    ) -> Result<Buffer, PagerError> {
        let pool = &self.shared.pool;
        let mut slot = pool.store.allocate(io_bytes)?;
        slot.set_priority(Arc::clone(&self.shared.usage.io_priority));
        if let Err(e) = crate::tier::store::zero_slot(&pool.store, &slot) {
            pool.store.release(slot);
            return Err(e);
        }
        let (copy, reservation) = self.shared.adopt_reserved(slot, reserve_len)?;
        let buffer = self.shared.insert(Entry::stored_on(
            reservation,
            size_bytes,
            io_bytes,
            flags,
            copy,
        ));
        tracing::debug!(%buffer, size_bytes, addr = %reservation.addr, "alloc on the store (past the space's quota)");
        Ok(buffer)
    }

    /// Frees a buffer: its memory, its store slot and its address. A buffer with an operation in flight (or a copy
    /// running on another thread) is gone for callers at once and released when that ends: the operation's ticket
    /// still finishes, and nothing leaks whichever of the two comes last. In a forked child of the pool's creator
    /// it does nothing: the buffer's memory there is a copy that goes with the child, and its store slot is the
    /// parent's.
    pub fn free(&self, buffer: Buffer) -> Result<(), PagerError> {
        if self.shared.pool.forked() {
            // A forked child: the buffer's stored copy is the parent's (releasing its slot could discard it), and
            // the child's copy of its memory goes when the child exits. Nothing to do.
            return Ok(());
        }
        let entry = {
            let mut st = lock(&self.shared.state);
            let e = self.shared.entry_mut(&mut st, buffer)?;
            if e.state.in_flight() || e.busy {
                e.free_pending = true;
                tracing::debug!(%buffer, "free deferred until its operation ends");
                return Ok(());
            }
            st.buffers
                .remove(&buffer.index)
                .ok_or(PagerError::UnknownBuffer(buffer))?
        };
        self.shared.release_entry(entry)
    }

    /// Snapshot of a buffer.
    pub fn info(&self, buffer: Buffer) -> Result<BufferInfo, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.entry_mut(&mut st, buffer)?;
        Ok(BufferInfo {
            buffer,
            addr: e.reservation.addr,
            size_bytes: e.size_bytes,
            reserved_bytes: e.reservation.len as u64,
            flags: e.flags,
            state: e.state.public(),
            stored: e.state.stored(),
            in_host_tier: e.state.copy().is_some_and(StoredCopy::in_host_memory),
        })
    }

    /// Handles of all live buffers, in allocation order.
    pub fn buffers(&self) -> Vec<Buffer> {
        let st = lock(&self.shared.state);
        st.buffers
            .iter()
            .filter(|(_, e)| !e.free_pending)
            .map(|(&index, _)| Buffer {
                space: self.shared.id,
                index,
            })
            .collect()
    }
}

/// Finishes every ticket and returns the first error, if any.
pub(crate) fn finish_all(tickets: Vec<Ticket>) -> Result<(), PagerError> {
    let mut first = None;
    for t in tickets {
        if let Err(e) = t.finish() {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}
