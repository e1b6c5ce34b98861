//! A buffer's entry in its address space: its state, with the operation in flight and the copy outside device
//! memory tied to it (`State`, `Phase`; the copy is a tier's opaque `StoredCopy`), enums so that impossible
//! combinations (a paged-out buffer without its copy, an in-flight state without its operation) cannot be built.

use super::*;

/// A buffer's state, with its copy outside device memory where it has one.
#[derive(Debug)]
pub(super) enum State {
    /// In device memory, accessible. `Some` when a read-only buffer keeps the copy it was written to once (a
    /// read-write buffer's copy goes stale at page-in and is given back then).
    Resident(Option<StoredCopy>),
    /// Paging out to `copy`, paged out in it, or paging in from it: a buffer not (only) in memory always has it.
    Stored { copy: StoredCopy, phase: Phase },
}

/// Where a buffer with a copy outside memory stands, with the operation in flight when there is one (so an
/// in-flight state without its operation, or an operation on a settled buffer, cannot be built).
#[derive(Debug)]
pub(super) enum Phase {
    /// A page-out is in flight. `kept`: the copy already held these bytes (a read-only buffer written before),
    /// so only the memory goes, and a failed page-out keeps the copy.
    PagingOut {
        op: Arc<OpState>,
        kept: bool,
    },
    PagedOut,
    PagingIn(Arc<OpState>),
}

impl State {
    /// A buffer paged out to `copy`.
    pub(super) fn paged_out(copy: StoredCopy) -> State {
        State::Stored {
            copy,
            phase: Phase::PagedOut,
        }
    }

    /// The state as callers see it.
    pub(super) fn public(&self) -> BufferState {
        match self {
            State::Resident(_) => BufferState::Resident,
            State::Stored { phase, .. } => match phase {
                Phase::PagingOut { .. } => BufferState::PagingOut,
                Phase::PagedOut => BufferState::PagedOut,
                Phase::PagingIn(_) => BufferState::PagingIn,
            },
        }
    }

    /// The operation in flight, if any.
    pub(super) fn op(&self) -> Option<&Arc<OpState>> {
        match self {
            State::Stored {
                phase: Phase::PagingOut { op, .. } | Phase::PagingIn(op),
                ..
            } => Some(op),
            State::Resident(_)
            | State::Stored {
                phase: Phase::PagedOut,
                ..
            } => None,
        }
    }

    /// Whether an operation is in flight.
    pub(super) fn in_flight(&self) -> bool {
        self.op().is_some()
    }

    /// The copy outside device memory, if any.
    pub(super) fn copy(&self) -> Option<&StoredCopy> {
        match self {
            State::Resident(kept) => kept.as_ref(),
            State::Stored { copy, .. } => Some(copy),
        }
    }

    /// Whether the copy holds the buffer's current bytes (paged out, paging in, or read-only and written once).
    pub(super) fn stored(&self) -> bool {
        match self {
            State::Resident(kept) => kept.is_some(),
            State::Stored { phase, .. } => match phase {
                Phase::PagingOut { kept, .. } => *kept,
                Phase::PagedOut | Phase::PagingIn(_) => true,
            },
        }
    }

    /// The copy, given up by a buffer that goes.
    pub(super) fn into_copy(self) -> Option<StoredCopy> {
        match self {
            State::Resident(kept) => kept,
            State::Stored { copy, .. } => Some(copy),
        }
    }
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) reservation: Reservation,
    pub(super) size_bytes: u64,
    /// Bytes moved to and from the store: the size rounded up to the store's alignment.
    pub(super) io_bytes: u64,
    pub(super) flags: BufferFlags,
    /// Its state, with its copy outside device memory.
    pub(super) state: State,
    /// A direct transfer of the stored copy or a copy of memory is using the buffer without the space lock (see
    /// [`AccessGuard`](super::access::AccessGuard)); paging calls wait for it to end. While a direct transfer runs,
    /// its guard shares the entry's copy.
    pub(super) busy: bool,
    /// The buffer was freed while an operation or access used it: callers no longer see it, and it is released
    /// when that ends.
    pub(super) free_pending: bool,
    /// The reservation's memory counts against the pool: from alloc or page-in start until the memory is known to
    /// be released (a decommit that failed leaves it charged, so the accounting never undercounts).
    pub(super) charged: bool,
    /// The space's access clock at the buffer's last use (alloc, access, page-in).
    pub(super) last_use: u64,
    /// The last use recorded on each caller stream ([`AddressSpace::record_use`](super::AddressSpace::record_use)),
    /// by stream handle: a page-out or free waits for these instead of the whole device.
    pub(super) stream_uses: Vec<(u64, Fence)>,
}

impl Entry {
    /// A buffer that starts paged out, its bytes already in `copy` (no memory, nothing charged yet).
    pub(super) fn stored_on(
        reservation: Reservation,
        size_bytes: u64,
        io_bytes: u64,
        flags: BufferFlags,
        copy: StoredCopy,
    ) -> Entry {
        Entry {
            reservation,
            size_bytes,
            io_bytes,
            flags,
            state: State::paged_out(copy),
            busy: false,
            free_pending: false,
            charged: false,
            last_use: 0,
            stream_uses: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct SpaceState {
    pub(super) next_index: u64,
    pub(super) buffers: BTreeMap<u64, Entry>,
}
