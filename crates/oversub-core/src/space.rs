use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use oversub_accel::{round_up, AccelError, DevicePtr, Reservation};
use oversub_io::{Direction, IoError, IoVec, Slot};

use crate::pool::PoolShared;
use crate::PagerError;

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
    /// Whether the store holds a valid copy (paged out, or read-only and written once).
    pub stored: bool,
}

/// Which operation a ticket stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Page-in.
    PageIn,
    /// Page-out.
    PageOut,
}

/// An asynchronous operation in flight: the I/O has been submitted. [`Ticket::finish`] (or
/// [`AddressSpace::finish`]) waits for it if needed and completes the mapping or the release. A ticket dropped
/// unfinished is finished by its drop (which may block), so no buffer is left in an in-flight state.
#[derive(Debug)]
#[must_use = "an unfinished ticket blocks in its drop; call finish() to see the result"]
pub struct Ticket {
    space: Arc<SpaceShared>,
    buffer: Buffer,
    kind: OpKind,
    op: Arc<OpState>,
    finished: bool,
}

impl Ticket {
    /// The buffer being paged.
    pub fn buffer(&self) -> Buffer {
        self.buffer
    }

    /// Page-in or page-out.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Whether the I/O has completed, so that `finish` will not wait.
    pub fn is_complete(&self) -> bool {
        self.op.is_complete()
    }

    /// When the I/O side completed, if it has.
    pub fn completed_at(&self) -> Option<std::time::Instant> {
        *lock(&self.op.completed_at)
    }

    /// Waits for the I/O if it is still running and completes the operation.
    pub fn finish(mut self) -> Result<(), PagerError> {
        self.finished = true;
        self.space.finish(self.buffer, self.kind, &self.op)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.finished {
            if let Err(e) = self.space.finish(self.buffer, self.kind, &self.op) {
                tracing::warn!(buffer = %self.buffer, "dropped unfinished ticket failed: {e}");
            }
        }
    }
}

/// How an operation ended on the I/O side, before `finish` settles the buffer's state.
#[derive(Debug)]
enum OpFailure {
    Io(IoError),
    Checksum { expected: u64, actual: u64 },
    Release(AccelError),
}

/// A failed operation and whether its memory is already given back.
#[derive(Debug)]
struct Failed {
    cause: OpFailure,
    memory_released: bool,
}

impl Failed {
    fn kept_memory(cause: OpFailure) -> Self {
        Failed {
            cause,
            memory_released: false,
        }
    }
}

#[derive(Debug, Default)]
struct OpState {
    outcome: Mutex<Option<Result<(), Failed>>>,
    done: Condvar,
    /// When the I/O side completed (for timelines: the I/O may end long before `finish` is called).
    completed_at: Mutex<Option<std::time::Instant>>,
}

impl OpState {
    fn complete(&self, outcome: Result<(), Failed>) {
        *lock(&self.completed_at) = Some(std::time::Instant::now());
        *lock(&self.outcome) = Some(outcome);
        self.done.notify_all();
    }

    fn is_complete(&self) -> bool {
        lock(&self.outcome).is_some()
    }

    fn wait(&self) -> Result<(), Failed> {
        let mut guard = lock(&self.outcome);
        loop {
            if let Some(outcome) = guard.take() {
                return outcome;
            }
            guard = self
                .done
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// Our critical sections leave the state consistent at every step, so a panic elsewhere while holding the lock is
/// no reason to stop paging: recover the guard.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug)]
struct Entry {
    reservation: Reservation,
    size_bytes: u64,
    /// Bytes moved to and from the store: the size rounded up to the store's alignment.
    io_bytes: u64,
    flags: BufferFlags,
    state: BufferState,
    slot: Option<Slot>,
    /// The slot holds the buffer's current bytes.
    stored: bool,
    checksum: Option<u64>,
    op: Option<Arc<OpState>>,
    /// The reservation's memory counts against the pool: from alloc or page-in start until the memory is known to
    /// be released (a decommit that failed leaves it charged, so the accounting never undercounts).
    charged: bool,
}

#[derive(Debug, Default)]
struct SpaceState {
    next_index: u64,
    buffers: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct SpaceShared {
    id: u32,
    pool: Arc<PoolShared>,
    state: Mutex<SpaceState>,
}

/// A set of buffers paged together (one per accelerator context), guarded by its own lock.
/// Clones share the same space.
#[derive(Debug, Clone)]
pub struct AddressSpace {
    shared: Arc<SpaceShared>,
}

/// A raw pointer that may cross to the I/O engine's thread.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: the pointer is only dereferenced while its buffer is pinned in an in-flight state (see the submit calls).
unsafe impl Send for SendPtr {}

fn checksum(ptr: SendPtr, len: u64) -> u64 {
    // SAFETY: callers pass a committed range of at least `len` bytes that nothing writes during the call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.0, len as usize) };
    xxhash_rust::xxh3::xxh3_64(bytes)
}

impl AddressSpace {
    pub(crate) fn new(id: u32, pool: Arc<PoolShared>) -> Self {
        AddressSpace {
            shared: Arc::new(SpaceShared {
                id,
                pool,
                state: Mutex::new(SpaceState::default()),
            }),
        }
    }

    /// This space's id, as shown in buffer handles.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// Allocates a resident buffer of `size_bytes`, zero-filled, charged to the pool in whole granules.
    pub fn alloc(&self, size_bytes: u64, flags: BufferFlags) -> Result<Buffer, PagerError> {
        let pool = &self.shared.pool;
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
        pool.charge(charged)?;
        let reservation = match pool.device.reserve(reserve_len) {
            Ok(r) => r,
            Err(e) => {
                pool.refund(charged);
                return Err(e.into());
            }
        };
        if reservation.len as u64 != charged {
            // Keep the accounting exact even if a backend rounds differently than its granularity says.
            pool.refund(charged);
            if let Err(e) = pool.charge(reservation.len as u64) {
                // SAFETY: the range was reserved just now and nobody has seen it.
                let _ = unsafe { pool.device.unreserve(reservation) };
                return Err(e);
            }
        }
        if let Err(e) = pool.device.commit(&reservation) {
            pool.refund(reservation.len as u64);
            // SAFETY: as above.
            let _ = unsafe { pool.device.unreserve(reservation) };
            return Err(e.into());
        }
        let mut st = lock(&self.shared.state);
        let index = st.next_index;
        st.next_index += 1;
        st.buffers.insert(
            index,
            Entry {
                reservation,
                size_bytes,
                io_bytes,
                flags,
                state: BufferState::Resident,
                slot: None,
                stored: false,
                checksum: None,
                op: None,
                charged: true,
            },
        );
        let buffer = Buffer {
            space: self.shared.id,
            index,
        };
        tracing::debug!(%buffer, size_bytes, addr = %reservation.addr, "alloc");
        Ok(buffer)
    }

    /// Frees a resident or paged-out buffer: its memory, its store slot and its address.
    pub fn free(&self, buffer: Buffer) -> Result<(), PagerError> {
        let entry = {
            let mut st = lock(&self.shared.state);
            let e = self.shared.entry_mut(&mut st, buffer)?;
            if e.op.is_some() {
                return Err(PagerError::OperationInFlight {
                    buffer,
                    state: e.state,
                });
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
            state: e.state,
            stored: e.stored,
        })
    }

    /// Handles of all live buffers, in allocation order.
    pub fn buffers(&self) -> Vec<Buffer> {
        let st = lock(&self.shared.state);
        st.buffers
            .keys()
            .map(|&index| Buffer {
                space: self.shared.id,
                index,
            })
            .collect()
    }

    /// Bytes of the buffer physically in memory now, where the backend can tell.
    pub fn resident_bytes(&self, buffer: Buffer) -> Result<Option<u64>, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.entry_mut(&mut st, buffer)?;
        Ok(self.shared.pool.device.resident_bytes(&e.reservation)?)
    }

    /// Copies `data` into a resident buffer at `offset`.
    pub fn write(&self, buffer: Buffer, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self
            .shared
            .accessible(&mut st, buffer, offset, data.len() as u64)?;
        if e.flags.read_only && e.stored {
            return Err(PagerError::ReadOnly(buffer));
        }
        let dst = e.reservation.addr.offset(offset);
        let device = &self.shared.pool.device;
        self.shared.pool.copy_chunked(data.len(), |off, n| {
            // SAFETY: the span was checked to lie inside the buffer, which is resident (committed); the space lock
            // keeps paging calls on it out until the copy is done.
            unsafe { device.copy_from_host(dst.offset(off as u64), &data[off..off + n]) }
        })?;
        Ok(())
    }

    /// Copies bytes of a resident buffer from `offset` into `out`.
    pub fn read(&self, buffer: Buffer, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self
            .shared
            .accessible(&mut st, buffer, offset, out.len() as u64)?;
        let src = e.reservation.addr.offset(offset);
        let device = &self.shared.pool.device;
        self.shared.pool.copy_chunked(out.len(), |off, n| {
            // SAFETY: as in `write`.
            unsafe { device.copy_to_host(src.offset(off as u64), &mut out[off..off + n]) }
        })?;
        Ok(())
    }

    /// The host address of a resident buffer, for backends whose memory the host can address (the host backend).
    /// The pointer is valid for `size_bytes` while the buffer stays resident; accessing it after a page-out faults.
    pub fn host_ptr(&self, buffer: Buffer) -> Result<*mut u8, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.accessible(&mut st, buffer, 0, 0)?;
        self.shared
            .pool
            .device
            .host_ptr(&e.reservation)
            .ok_or(PagerError::Unsupported(
                "device memory is not host-addressable".into(),
            ))
    }

    /// Pages a buffer out and waits: write to the store, then release its memory.
    pub fn page_out(&self, buffer: Buffer) -> Result<(), PagerError> {
        self.page_out_async(buffer)?.finish()
    }

    /// Pages a buffer in and waits: commit memory at the same address, then read from the store.
    pub fn page_in(&self, buffer: Buffer) -> Result<(), PagerError> {
        self.page_in_async(buffer)?.finish()
    }

    /// Starts a page-out: the write is submitted when this returns; the memory is released by the I/O side as soon
    /// as the write completes, and [`Ticket::finish`] marks the buffer paged out.
    pub fn page_out_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        let mut st = lock(&shared.state);
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        match e.state {
            BufferState::Resident => {}
            BufferState::PagedOut => return Err(PagerError::AlreadyPagedOut(buffer)),
            state => return Err(PagerError::OperationInFlight { buffer, state }),
        }
        // Outstanding accelerator work may still write the buffer.
        pool.device.synchronize()?;
        let op = Arc::new(OpState::default());
        if e.flags.read_only && e.stored {
            // The store already holds these bytes: only the memory goes.
            // SAFETY: the buffer is resident with no operation in flight and the space lock is held, so nothing of
            // ours uses its memory; callers' own pointers are void once they page the buffer out.
            let released = unsafe { pool.device.decommit(&e.reservation) };
            op.complete(released.map_err(|e| Failed::kept_memory(OpFailure::Release(e))));
        } else {
            let ptr = SendPtr(
                pool.device
                    .host_ptr(&e.reservation)
                    .ok_or(PagerError::Internal("resident buffer has no host pointer"))?,
            );
            let slot = pool.store.allocate(e.io_bytes)?;
            let checksum_before = pool.verify_checksums.then(|| checksum(ptr, e.size_bytes));
            let mem = IoVec {
                ptr: ptr.0,
                len: e.io_bytes as usize,
            };
            let on_done = {
                let device = Arc::clone(&pool.device);
                let op = Arc::clone(&op);
                let reservation = e.reservation;
                Box::new(move |result: Result<oversub_io::IoDone, IoError>| {
                    let outcome = match result {
                        // SAFETY: the write is complete and the buffer is PagingOut, so nothing uses its memory.
                        Ok(_) => unsafe { device.decommit(&reservation) }
                            .map_err(|e| Failed::kept_memory(OpFailure::Release(e))),
                        Err(err) => Err(Failed::kept_memory(OpFailure::Io(err))),
                    };
                    op.complete(outcome);
                })
            };
            // SAFETY: the memory stays committed until on_done has run: the buffer is marked PagingOut below (under
            // the same lock), `free` refuses buffers with an operation in flight, and the address space is kept
            // alive by the ticket, whose finish waits for on_done.
            if let Err(err) = unsafe { pool.submit_io(Direction::Write, &slot, mem, on_done) } {
                pool.store.release(slot);
                return Err(err.into());
            }
            e.slot = Some(slot);
            e.checksum = checksum_before;
        }
        e.state = BufferState::PagingOut;
        e.op = Some(Arc::clone(&op));
        tracing::debug!(%buffer, "page-out started");
        Ok(Ticket {
            space: Arc::clone(shared),
            buffer,
            kind: OpKind::PageOut,
            op,
            finished: false,
        })
    }

    /// Starts a page-in: memory is committed at the buffer's address and the read submitted when this returns;
    /// [`Ticket::finish`] waits for the read (and the checksum, if on) and marks the buffer resident.
    pub fn page_in_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        let mut st = lock(&shared.state);
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        match e.state {
            BufferState::PagedOut => {}
            BufferState::Resident => return Err(PagerError::AlreadyResident(buffer)),
            state => return Err(PagerError::OperationInFlight { buffer, state }),
        }
        let slot = e
            .slot
            .as_ref()
            .ok_or(PagerError::Internal("paged-out buffer has no store slot"))?;
        let charge_bytes = e.reservation.len as u64;
        // A buffer whose last release failed is still charged; never count it twice.
        let newly_charged = !e.charged;
        if newly_charged {
            pool.charge(charge_bytes)?;
        }
        let undo = |err: PagerError| {
            // SAFETY: the read was not submitted, so nothing uses the memory just committed.
            if unsafe { pool.device.decommit(&e.reservation) }.is_ok() && newly_charged {
                pool.refund(charge_bytes);
            }
            err
        };
        pool.device
            .commit(&e.reservation)
            .map_err(|x| undo(x.into()))?;
        let ptr =
            SendPtr(pool.device.host_ptr(&e.reservation).ok_or_else(|| {
                undo(PagerError::Internal("committed buffer has no host pointer"))
            })?);
        let op = Arc::new(OpState::default());
        let on_done = {
            let device = Arc::clone(&pool.device);
            let op = Arc::clone(&op);
            let reservation = e.reservation;
            let expected = e.checksum;
            let size = e.size_bytes;
            Box::new(move |result: Result<oversub_io::IoDone, IoError>| {
                let mut outcome = result.map(|_| ()).map_err(OpFailure::Io);
                if let (Ok(()), Some(expected)) = (&outcome, expected) {
                    let actual = checksum(ptr, size);
                    if actual != expected {
                        outcome = Err(OpFailure::Checksum { expected, actual });
                    }
                }
                let mut released = false;
                if outcome.is_err() {
                    // Give the memory back now; finish only has to settle the state.
                    // SAFETY: the read is over and the buffer is PagingIn, so nothing uses its memory.
                    match unsafe { device.decommit(&reservation) } {
                        Ok(()) => released = true,
                        Err(err) => tracing::warn!("decommit after a failed page-in: {err}"),
                    }
                }
                op.complete(outcome.map_err(|cause| Failed {
                    cause,
                    memory_released: released,
                }));
            })
        };
        let mem = IoVec {
            ptr: ptr.0,
            len: e.io_bytes as usize,
        };
        // SAFETY: as in page_out_async: the buffer is PagingIn (set below under this lock) until its ticket's
        // finish has waited for on_done, and nothing else touches the memory meanwhile.
        unsafe { pool.submit_io(Direction::Read, slot, mem, on_done) }
            .map_err(|err| undo(err.into()))?;
        e.state = BufferState::PagingIn;
        e.charged = true;
        e.op = Some(Arc::clone(&op));
        tracing::debug!(%buffer, "page-in started");
        Ok(Ticket {
            space: Arc::clone(shared),
            buffer,
            kind: OpKind::PageIn,
            op,
            finished: false,
        })
    }

    /// Completes an operation started by this space (same as [`Ticket::finish`]).
    pub fn finish(&self, ticket: Ticket) -> Result<(), PagerError> {
        if ticket.space.id != self.shared.id || !Arc::ptr_eq(&ticket.space, &self.shared) {
            return Err(PagerError::WrongAddressSpace(ticket.buffer));
        }
        ticket.finish()
    }

    /// Starts a page-out of every resident pageable buffer. Buffers that other threads free or page meanwhile are
    /// skipped. If one cannot start (full store, I/O error), those already started are finished and the error is
    /// returned.
    pub fn page_out_all_async(&self) -> Result<Vec<Ticket>, PagerError> {
        self.start_all(BufferState::Resident, |b| self.page_out_async(b))
    }

    /// Starts a page-in of every paged-out buffer, as [`page_out_all_async`](Self::page_out_all_async).
    pub fn page_in_all_async(&self) -> Result<Vec<Ticket>, PagerError> {
        self.start_all(BufferState::PagedOut, |b| self.page_in_async(b))
    }

    /// Pages out every resident pageable buffer and waits; unpageable buffers stay.
    pub fn page_out_all(&self) -> Result<(), PagerError> {
        finish_all(self.page_out_all_async()?)
    }

    /// Pages in every paged-out buffer and waits.
    pub fn page_in_all(&self) -> Result<(), PagerError> {
        finish_all(self.page_in_all_async()?)
    }

    fn start_all(
        &self,
        from: BufferState,
        start: impl Fn(Buffer) -> Result<Ticket, PagerError>,
    ) -> Result<Vec<Ticket>, PagerError> {
        let targets: Vec<Buffer> = {
            let st = lock(&self.shared.state);
            st.buffers
                .iter()
                .filter(|(_, e)| e.state == from && !e.flags.unpageable)
                .map(|(&index, _)| Buffer {
                    space: self.shared.id,
                    index,
                })
                .collect()
        };
        let mut tickets = Vec::with_capacity(targets.len());
        for buffer in targets {
            match start(buffer) {
                Ok(t) => tickets.push(t),
                // Another thread freed or paged this buffer since the list was taken: not ours to do any more.
                Err(
                    PagerError::UnknownBuffer(_)
                    | PagerError::AlreadyPagedOut(_)
                    | PagerError::AlreadyResident(_)
                    | PagerError::OperationInFlight { .. },
                ) => {}
                Err(e) => {
                    let _ = finish_all(tickets);
                    return Err(e);
                }
            }
        }
        Ok(tickets)
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

impl SpaceShared {
    fn entry_mut<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
    ) -> Result<&'a mut Entry, PagerError> {
        if buffer.space != self.id {
            return Err(PagerError::UnknownBuffer(buffer));
        }
        st.buffers
            .get_mut(&buffer.index)
            .ok_or(PagerError::UnknownBuffer(buffer))
    }

    fn accessible<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
        offset: u64,
        len: u64,
    ) -> Result<&'a Entry, PagerError> {
        let e = self.entry_mut(st, buffer)?;
        if e.state != BufferState::Resident {
            return Err(PagerError::NotResident {
                buffer,
                state: e.state,
            });
        }
        if offset.checked_add(len).is_none_or(|end| end > e.size_bytes) {
            return Err(PagerError::OutOfBounds {
                buffer,
                offset,
                len,
                size: e.size_bytes,
            });
        }
        Ok(e)
    }

    /// Settles a buffer after its I/O side is done.
    fn finish(&self, buffer: Buffer, kind: OpKind, op: &Arc<OpState>) -> Result<(), PagerError> {
        let outcome = op.wait();
        let pool = &self.pool;
        let mut st = lock(&self.state);
        let e = self.entry_mut(&mut st, buffer)?;
        if !e
            .op
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, op))
        {
            return Err(PagerError::Internal(
                "ticket does not match the buffer's operation",
            ));
        }
        e.op = None;
        let bytes = e.reservation.len as u64;
        let uncharge = |e: &mut Entry| {
            if e.charged {
                pool.refund(bytes);
                e.charged = false;
            }
        };
        let result = match (kind, outcome) {
            (OpKind::PageOut, Ok(())) => {
                e.state = BufferState::PagedOut;
                e.stored = true;
                uncharge(e);
                Ok(())
            }
            (
                OpKind::PageOut,
                Err(Failed {
                    cause: OpFailure::Release(err),
                    ..
                }),
            ) => {
                // The bytes are safely stored, so the buffer counts as out; its memory may not be released, so it
                // stays charged until a page-in (which commits the range again) or free.
                e.state = BufferState::PagedOut;
                e.stored = true;
                Err(err.into())
            }
            (OpKind::PageOut, Err(failed)) => {
                // The memory was never released, so the buffer is intact where it was; the slot goes back.
                e.state = BufferState::Resident;
                if !e.stored {
                    if let Some(slot) = e.slot.take() {
                        pool.store.release(slot);
                    }
                    e.checksum = None;
                }
                Err(failure_to_error(buffer, failed.cause))
            }
            (OpKind::PageIn, Ok(())) => {
                e.state = BufferState::Resident;
                if !e.flags.read_only {
                    // The bytes may change from now on, so the stored copy is stale: free its space.
                    if let Some(slot) = e.slot.take() {
                        pool.store.release(slot);
                    }
                    e.stored = false;
                    e.checksum = None;
                }
                Ok(())
            }
            (OpKind::PageIn, Err(failed)) => {
                // The stored copy is untouched; the memory was given back by on_done unless that failed.
                e.state = BufferState::PagedOut;
                if failed.memory_released {
                    uncharge(e);
                }
                Err(failure_to_error(buffer, failed.cause))
            }
        };
        tracing::debug!(%buffer, ?kind, ok = result.is_ok(), "finished");
        result
    }

    /// Gives back everything an entry holds.
    fn release_entry(&self, e: Entry) -> Result<(), PagerError> {
        if let Some(slot) = e.slot {
            self.pool.store.release(slot);
        }
        if e.charged {
            self.pool.refund(e.reservation.len as u64);
        }
        // SAFETY: the entry is out of the table with no operation in flight, so nothing of ours uses the range.
        unsafe { self.pool.device.unreserve(e.reservation) }?;
        Ok(())
    }
}

fn failure_to_error(buffer: Buffer, failure: OpFailure) -> PagerError {
    match failure {
        OpFailure::Io(err) => err.into(),
        OpFailure::Checksum { expected, actual } => PagerError::ChecksumMismatch {
            buffer,
            expected,
            actual,
        },
        OpFailure::Release(err) => err.into(),
    }
}

impl Drop for SpaceShared {
    fn drop(&mut self) {
        // Tickets hold the space alive, so no operation is in flight here: every buffer can be released.
        let st = std::mem::take(self.state.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (_, e) in st.buffers {
            if let Err(err) = self.release_entry(e) {
                tracing::warn!(space = self.id, "releasing a buffer at drop: {err}");
            }
        }
    }
}
