//! A buffer's entry in its address space: where its copy is kept (`Backing`) and its state (`State`), enums so that
//! impossible combinations cannot be built.

use super::*;

/// Where a buffer's copy is kept, if it has one: a store slot or room in the host tier, never both.
#[derive(Debug)]
pub(super) enum Backing {
    /// No copy: a resident buffer never stored (or whose stored copy went stale); also a paged-out buffer while a
    /// direct store access borrows its slot (the buffer is `busy` then, so paging calls wait).
    None,
    /// A slot of the swap store, with the checksum of its bytes when one was taken (checksums on,
    /// host-addressable memory).
    Store {
        slot: Slot,
        checksum: Option<Checksums>,
    },
    /// Room in the host-memory tier (never checksummed).
    Host(HostCopy),
}

impl Backing {
    /// A store slot without a checksum.
    pub(super) fn store(slot: Slot) -> Backing {
        Backing::Store {
            slot,
            checksum: None,
        }
    }
}

/// A buffer's state, with the operation in flight when there is one (so an in-flight state without its operation,
/// or an operation on a settled buffer, cannot be built).
#[derive(Debug)]
pub(super) enum State {
    Resident,
    PagingOut(Arc<OpState>),
    PagedOut,
    PagingIn(Arc<OpState>),
}

impl State {
    /// The state as callers see it.
    pub(super) fn public(&self) -> BufferState {
        match self {
            State::Resident => BufferState::Resident,
            State::PagingOut(_) => BufferState::PagingOut,
            State::PagedOut => BufferState::PagedOut,
            State::PagingIn(_) => BufferState::PagingIn,
        }
    }

    /// Whether an operation is in flight.
    pub(super) fn in_flight(&self) -> bool {
        matches!(self, State::PagingOut(_) | State::PagingIn(_))
    }
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) reservation: Reservation,
    pub(super) size_bytes: u64,
    /// Bytes moved to and from the store: the size rounded up to the store's alignment.
    pub(super) io_bytes: u64,
    pub(super) flags: BufferFlags,
    pub(super) state: State,
    /// Where the buffer's copy is kept.
    pub(super) backing: Backing,
    /// The backing holds the buffer's current bytes.
    pub(super) stored: bool,
    /// A direct store transfer or a copy is using the buffer without the space lock (see [`AccessGuard`]); paging
    /// calls wait for it to end. While a direct store transfer runs, the guard holds the entry's slot.
    pub(super) busy: bool,
    /// The buffer was freed while an operation or access used it: callers no longer see it, and it is released
    /// when that ends.
    pub(super) free_pending: bool,
    /// The reservation's memory counts against the pool: from alloc or page-in start until the memory is known to
    /// be released (a decommit that failed leaves it charged, so the accounting never undercounts).
    pub(super) charged: bool,
    /// The space's access clock at the buffer's last use (alloc, access, page-in).
    pub(super) last_use: u64,
}

impl Entry {
    /// A buffer that starts paged out, its bytes already in `slot` (no memory, nothing charged yet).
    pub(super) fn stored_on(
        reservation: Reservation,
        size_bytes: u64,
        io_bytes: u64,
        flags: BufferFlags,
        slot: Slot,
    ) -> Entry {
        Entry {
            reservation,
            size_bytes,
            io_bytes,
            flags,
            state: State::PagedOut,
            backing: Backing::store(slot),
            stored: true,
            busy: false,
            free_pending: false,
            charged: false,
            last_use: 0,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct SpaceState {
    pub(super) next_index: u64,
    pub(super) buffers: BTreeMap<u64, Entry>,
}

/// Keeps the checksum a finished page-out took with the entry's store copy (only store copies are checksummed).
pub(super) fn keep_checksum(e: &mut Entry, op: &OpState) {
    if let Some(sums) = lock(&op.checksum).take() {
        if let Backing::Store { checksum, .. } = &mut e.backing {
            *checksum = Some(sums);
        }
    }
}
