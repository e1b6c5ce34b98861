use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use oversub_accel::{round_up, AccelError, DeviceMemory, DevicePtr, Reservation};
use oversub_arbiter::WorkKind;
use oversub_io::{Direction, IoError, IoVec, Slot};

use crate::pool::{Checksummed, PoolShared};
use crate::transfer::gated::{MmLane, Prelude};
use crate::transfer::host_tier::HostCopy;
use crate::transfer::{Transfer, TransferCallback, TransferError};
use crate::PagerError;

/// The most bytes one direct store transfer moves (and the size of its bounce buffer).
const DIRECT_PIECE_BYTES: usize = 8 << 20;

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

/// An asynchronous operation in flight: the I/O has been submitted. [`Ticket::finish`] (or
/// [`AddressSpace::finish`]) waits for it if needed and completes the mapping or the release. A ticket dropped
/// unfinished is finished by its drop (which may block), so no buffer is left in an in-flight state. The ticket
/// owns its buffer until then: a buffer freed meanwhile is released when the ticket finishes.
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

    /// Waits up to `timeout` for the I/O side to complete, without finishing the operation; true when it has
    /// (then [`finish`](Self::finish) does not block). Lets a caller wait in slices, e.g. to answer signals.
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> bool {
        self.op.wait_complete(timeout)
    }

    /// Runs `callback` once when the I/O side completes (so that [`finish`](Self::finish) will not block): at once
    /// on the calling thread if it already has, else on the thread that completes it, typically an I/O engine
    /// thread, so the callback must be short and must not finish this ticket itself. Futures and event loops use
    /// it to be woken by the completion instead of polling.
    pub fn on_complete(&self, callback: impl FnOnce() + Send + 'static) {
        self.op.on_complete(Box::new(callback));
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
    Copy(AccelError),
    Checksum {
        expected: u64,
        actual: u64,
    },
    Release(AccelError),
    /// The commit before a page-in failed (under an arbiter, where it runs on the gated worker).
    Commit(AccelError),
    /// The completion never ran to its end (a backend or engine thread panicked, or a worker dropped it).
    Lost(&'static str),
}

impl From<TransferError> for OpFailure {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Io(e) => OpFailure::Io(e),
            TransferError::Copy(e) => OpFailure::Copy(e),
        }
    }
}

/// The completion of a page-out's copy away (to the store or the host tier): release the memory (under an arbiter,
/// as a gated memory operation), then settle.
fn release_when_copied(
    device: Arc<dyn DeviceMemory>,
    mm: Option<MmLane>,
    done: Completion,
    reservation: Reservation,
) -> TransferCallback {
    Box::new(move |result: Result<(), TransferError>| match result {
        // SAFETY: the copy is complete and the buffer is PagingOut, so nothing uses its memory.
        Ok(()) => unsafe {
            release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                done.complete(r.map_err(|e| Failed::kept_memory(OpFailure::Release(e))))
            })
        },
        Err(err) => done.complete(Err(Failed::kept_memory(err.into()))),
    })
}

/// Releases the memory of `reservation`, then calls `then` with the outcome: here and now without an arbiter;
/// under one, as a gated memory operation on the pool's gated worker, admitted for its measured worst-case cost
/// (this thread does not wait for the grant, and `then` runs on the worker).
///
/// # Safety
/// As [`DeviceMemory::decommit`]: nothing uses the range's memory any more.
unsafe fn release_then(
    mm: Option<&MmLane>,
    device: &dyn DeviceMemory,
    reservation: Reservation,
    then: impl FnOnce(Result<(), AccelError>) + Send + 'static,
) {
    match mm {
        // SAFETY: forwarded from our caller.
        Some(mm) => unsafe { mm.decommit(reservation, then) },
        // SAFETY: forwarded from our caller.
        None => then(unsafe { device.decommit(&reservation) }),
    }
}

/// Completes its operation exactly once: with the outcome it is given or, when it is dropped unused (the callback
/// that owned it unwound from a panic, or a worker dropped it), with a failure, so that no waiter hangs.
#[derive(Debug)]
struct Completion {
    op: Arc<OpState>,
    done: bool,
}

impl Completion {
    fn new(op: &Arc<OpState>) -> Self {
        Completion {
            op: Arc::clone(op),
            done: false,
        }
    }

    fn complete(mut self, outcome: Result<(), Failed>) {
        self.done = true;
        self.op.complete(outcome);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.done {
            self.op.complete(Err(Failed::kept_memory(OpFailure::Lost(
                "its completion was dropped (a panic in a device backend, engine or worker thread)",
            ))));
        }
    }
}

/// Bytes hashed as one piece. A checksummed transfer is submitted in pieces of this size; a page-in's pieces are
/// hashed as soon as their own reads are done, while the later pieces are still in flight, and a page-out's from
/// the start, beside their writes. Either way the hash overlaps the transfer instead of adding a pass over the
/// buffer after it. (4 and 8 MiB came out alike in one noisy `bench paging` run; 1 and 32 MiB worse.)
const CHECKSUM_PIECE_BYTES: u64 = 8 << 20;

/// A buffer's checksum: the xxh3 of each [`CHECKSUM_PIECE_BYTES`] piece of its bytes, in order.
type Checksums = Arc<[u64]>;

fn piece_count(size_bytes: u64) -> usize {
    size_bytes.div_ceil(CHECKSUM_PIECE_BYTES).max(1) as usize
}

/// The pieces of one checksummed transfer: their hashes as they come in, the first failure, and what runs when the
/// last piece is done. If a piece's callback is lost, the last reference to this drops `finish`, whose own
/// [`Completion`] then fails the operation.
struct PieceSet {
    remaining: std::sync::atomic::AtomicUsize,
    hashes: Mutex<Vec<u64>>,
    failure: Mutex<Option<OpFailure>>,
    finish: Mutex<Option<PiecesDone>>,
}

type PiecesDone = Box<dyn FnOnce(Result<Checksums, OpFailure>) + Send>;

impl PieceSet {
    /// A set of `pieces` hashes that completes after `events` calls of [`done`](Self::done).
    fn new(pieces: usize, events: usize, finish: PiecesDone) -> Arc<Self> {
        Arc::new(PieceSet {
            remaining: std::sync::atomic::AtomicUsize::new(events),
            hashes: Mutex::new(vec![0; pieces]),
            failure: Mutex::new(None),
            finish: Mutex::new(Some(finish)),
        })
    }

    fn fail(&self, cause: OpFailure) {
        lock(&self.failure).get_or_insert(cause);
    }

    /// Counts `n` pieces as done; the last one runs `finish`.
    fn done(&self, n: usize) {
        if self.remaining.fetch_sub(n, Ordering::AcqRel) == n {
            let outcome = match lock(&self.failure).take() {
                Some(cause) => Err(cause),
                None => Ok(Checksums::from(std::mem::take(&mut *lock(&self.hashes)))),
            };
            if let Some(finish) = lock(&self.finish).take() {
                finish(outcome);
            }
        }
    }
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

/// A callback run once when the I/O side of an operation completes.
type CompletionCallback = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct OpState {
    outcome: Mutex<Option<Result<(), Failed>>>,
    done: Condvar,
    /// Run by [`complete`](Self::complete) on the thread that completes the I/O (an engine thread), or at once by
    /// [`on_complete`](Self::on_complete) when it had already completed.
    callbacks: Mutex<Vec<CompletionCallback>>,
    /// When the I/O side completed (for timelines: the I/O may end long before `finish` is called).
    completed_at: Mutex<Option<std::time::Instant>>,
    /// The checksum a page-out took on the I/O side, for `finish` to keep with the buffer.
    checksum: Mutex<Option<Checksums>>,
}

impl std::fmt::Debug for OpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpState")
            .field("complete", &self.is_complete())
            .field("callbacks", &lock(&self.callbacks).len())
            .finish_non_exhaustive()
    }
}

impl OpState {
    fn complete(&self, outcome: Result<(), Failed>) {
        *lock(&self.completed_at) = Some(std::time::Instant::now());
        // The callbacks are taken under the outcome's lock, so `on_complete` either queues before this point (and
        // is run below) or sees the outcome (and runs its callback itself): never both, never neither.
        let callbacks = {
            let mut outcome_slot = lock(&self.outcome);
            *outcome_slot = Some(outcome);
            std::mem::take(&mut *lock(&self.callbacks))
        };
        self.done.notify_all();
        for callback in callbacks {
            callback();
        }
    }

    /// Runs `callback` once the I/O side completes: at once on this thread if it has, else on the completing one.
    fn on_complete(&self, callback: CompletionCallback) {
        {
            let outcome_slot = lock(&self.outcome);
            if outcome_slot.is_none() {
                lock(&self.callbacks).push(callback);
                return;
            }
        }
        callback();
    }

    fn is_complete(&self) -> bool {
        lock(&self.outcome).is_some()
    }

    /// Waits up to `timeout` for the outcome without taking it; true when it is there.
    fn wait_complete(&self, timeout: std::time::Duration) -> bool {
        let guard = lock(&self.outcome);
        let (guard, _) = self
            .done
            .wait_timeout_while(guard, timeout, |o| o.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.is_some()
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

pub(crate) use oversub_base::sync::lock;

/// Where a buffer's copy is kept, if it has one: a store slot or room in the host tier, never both.
#[derive(Debug)]
enum Backing {
    /// No copy: a resident read-write buffer (or one whose page-out failed before it got one).
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
    fn store(slot: Slot) -> Backing {
        Backing::Store {
            slot,
            checksum: None,
        }
    }
}

/// A buffer's state, with the operation in flight when there is one (so an in-flight state without its operation,
/// or an operation on a settled buffer, cannot be built).
#[derive(Debug)]
enum State {
    Resident,
    PagingOut(Arc<OpState>),
    PagedOut,
    PagingIn(Arc<OpState>),
}

impl State {
    /// The state as callers see it.
    fn public(&self) -> BufferState {
        match self {
            State::Resident => BufferState::Resident,
            State::PagingOut(_) => BufferState::PagingOut,
            State::PagedOut => BufferState::PagedOut,
            State::PagingIn(_) => BufferState::PagingIn,
        }
    }

    /// Whether an operation is in flight.
    fn in_flight(&self) -> bool {
        matches!(self, State::PagingOut(_) | State::PagingIn(_))
    }
}

#[derive(Debug)]
struct Entry {
    reservation: Reservation,
    size_bytes: u64,
    /// Bytes moved to and from the store: the size rounded up to the store's alignment.
    io_bytes: u64,
    flags: BufferFlags,
    state: State,
    /// Where the buffer's copy is kept.
    backing: Backing,
    /// The backing holds the buffer's current bytes.
    stored: bool,
    /// A direct store transfer or a copy is using the buffer without the space lock (see [`AccessGuard`]); paging
    /// calls wait for it to end. While a direct store transfer runs, the guard holds the entry's slot.
    busy: bool,
    /// The buffer was freed while an operation or access used it: callers no longer see it, and it is released
    /// when that ends.
    free_pending: bool,
    /// The reservation's memory counts against the pool: from alloc or page-in start until the memory is known to
    /// be released (a decommit that failed leaves it charged, so the accounting never undercounts).
    charged: bool,
    /// The space's access clock at the buffer's last use (alloc, access, page-in).
    last_use: u64,
}

impl Entry {
    /// A buffer that starts paged out, its bytes already in `slot` (no memory, nothing charged yet).
    fn stored_on(
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
struct SpaceState {
    next_index: u64,
    buffers: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
pub(crate) struct SpaceShared {
    id: u32,
    pool: Arc<PoolShared>,
    state: Mutex<SpaceState>,
    /// Signalled when an access ends (a buffer stops being `busy`).
    idle: Condvar,
    /// Bytes of device memory this space's buffers are charged for, and the most it may hold: its resident quota
    /// when it is a tenant the planner made a victim, otherwise unlimited.
    pub(crate) usage: Arc<SpaceUsage>,
    /// Set for spaces made by [`crate::Pool::tenant_space`]: they leave the tenant plan when dropped.
    pub(crate) tenant: bool,
}

/// A space's charged bytes and its limit, shared with the pool's tenant registry.
#[derive(Debug)]
pub(crate) struct SpaceUsage {
    pub(crate) charged_bytes: std::sync::atomic::AtomicU64,
    pub(crate) limit_bytes: std::sync::atomic::AtomicU64,
    /// A clock of accesses, for choosing which buffers a shrinking quota pages out first.
    pub(crate) clock: std::sync::atomic::AtomicU64,
    /// The priority of this space's store transfers (larger first, on a store with priority I/O): 0, or minus the
    /// tenant's rank. Every slot of the space reads it at each submission, so a new plan applies at once.
    pub(crate) io_priority: Arc<std::sync::atomic::AtomicI64>,
}

impl SpaceUsage {
    /// The next value of the access clock.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Default for SpaceUsage {
    fn default() -> Self {
        SpaceUsage {
            charged_bytes: std::sync::atomic::AtomicU64::new(0),
            limit_bytes: std::sync::atomic::AtomicU64::new(u64::MAX),
            clock: std::sync::atomic::AtomicU64::new(0),
            io_priority: Arc::new(std::sync::atomic::AtomicI64::new(0)),
        }
    }
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

impl SendPtr {
    /// The address `bytes` further on (a method, so closures capture the whole `SendPtr`, not its raw field).
    fn add(self, bytes: u64) -> SendPtr {
        SendPtr(self.0.wrapping_add(bytes as usize))
    }
}

fn checksum(ptr: SendPtr, len: u64) -> u64 {
    // SAFETY: callers pass a committed range of at least `len` bytes that nothing writes during the call.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.0, len as usize) };
    xxhash_rust::xxh3::xxh3_64(bytes)
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
            state: State::Resident,
            backing: Backing::None,
            stored: false,
            busy: false,
            free_pending: false,
            charged: true,
            last_use: 0,
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
        let reservation = pool.device.reserve(reserve_len)?;
        let buffer = self
            .shared
            .insert(Entry::stored_on(reservation, len, len, flags, slot));
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
        if let Err(e) = self.shared.zero_slot(&slot) {
            pool.store.release(slot);
            return Err(e);
        }
        let reservation = match pool.device.reserve(reserve_len) {
            Ok(r) => r,
            Err(e) => {
                pool.store.release(slot);
                return Err(e.into());
            }
        };
        let buffer = self.shared.insert(Entry::stored_on(
            reservation,
            size_bytes,
            io_bytes,
            flags,
            slot,
        ));
        tracing::debug!(%buffer, size_bytes, addr = %reservation.addr, "alloc on the store (past the space's quota)");
        Ok(buffer)
    }

    /// Frees a buffer: its memory, its store slot and its address. A buffer with an operation in flight (or a copy
    /// running on another thread) is gone for callers at once and released when that ends: the operation's ticket
    /// still finishes, and nothing leaks whichever of the two comes last.
    pub fn free(&self, buffer: Buffer) -> Result<(), PagerError> {
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
            stored: e.stored,
            in_host_tier: matches!(e.backing, Backing::Host(_)),
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

    /// Bytes of the buffer physically in memory now, where the backend can tell.
    pub fn resident_bytes(&self, buffer: Buffer) -> Result<Option<u64>, PagerError> {
        let mut st = lock(&self.shared.state);
        let e = self.shared.entry_mut(&mut st, buffer)?;
        Ok(self.shared.pool.device.resident_bytes(&e.reservation)?)
    }

    /// Copies `data` into a resident buffer at `offset`.
    pub fn write(&self, buffer: Buffer, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let (dst, _access) = {
            let mut st = self.shared.lock_idle(buffer)?;
            let e = self
                .shared
                .accessible(&mut st, buffer, offset, data.len() as u64)?;
            if e.flags.read_only && e.stored {
                return Err(PagerError::ReadOnly(buffer));
            }
            let dst = e.reservation.addr.offset(offset);
            (dst, self.shared.begin_access(e, buffer))
        };
        let device = &self.shared.pool.device;
        self.shared
            .pool
            .copy_chunked(data.len(), WorkKind::Copy, |off, n| {
                // SAFETY: the span was checked to lie inside the buffer, which is resident (committed); the access guard
                // keeps paging calls on it waiting until the copy is done.
                unsafe { device.copy_from_host(dst.offset(off as u64), &data[off..off + n]) }
            })?;
        Ok(())
    }

    /// Copies bytes of a resident buffer from `offset` into `out`.
    pub fn read(&self, buffer: Buffer, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let (src, _access) = {
            let mut st = self.shared.lock_idle(buffer)?;
            let e = self
                .shared
                .accessible(&mut st, buffer, offset, out.len() as u64)?;
            let src = e.reservation.addr.offset(offset);
            (src, self.shared.begin_access(e, buffer))
        };
        let device = &self.shared.pool.device;
        self.shared
            .pool
            .copy_chunked(out.len(), WorkKind::Copy, |off, n| {
                // SAFETY: as in `write`.
                unsafe { device.copy_to_host(src.offset(off as u64), &mut out[off..off + n]) }
            })?;
        Ok(())
    }

    /// Copies bytes of a buffer from `offset` into `out` without making it resident: from memory when it is
    /// resident, otherwise straight from its copy on the store (rounded out to the store's alignment and trimmed).
    /// This is how a victim tenant reads the part of its data the planner keeps on the store.
    pub fn read_direct(
        &self,
        buffer: Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let mut st = self.shared.lock_idle(buffer)?;
        let e = self
            .shared
            .in_bounds(&mut st, buffer, offset, out.len() as u64)?;
        match e.state {
            State::Resident => {
                let src = e.reservation.addr.offset(offset);
                let _access = self.shared.begin_access(e, buffer);
                drop(st);
                let device = &self.shared.pool.device;
                self.shared
                    .pool
                    .copy_chunked(out.len(), WorkKind::Copy, |off, n| {
                        // SAFETY: as in `read`.
                        unsafe {
                            device.copy_to_host(src.offset(off as u64), &mut out[off..off + n])
                        }
                    })?;
                Ok(())
            }
            State::PagedOut => match std::mem::replace(&mut e.backing, Backing::None) {
                Backing::Host(copy) => {
                    // A memory copy: quick enough to do under the lock.
                    copy.read(offset, out);
                    e.backing = Backing::Host(copy);
                    Ok(())
                }
                Backing::Store { slot, checksum } => {
                    let access = self.shared.lend_slot(e, buffer, slot, checksum);
                    drop(st);
                    access.store_range(offset, StoreAccess::Read(out))
                }
                Backing::None => Err(PagerError::Internal("paged-out buffer has no stored copy")),
            },
            State::PagingOut(_) | State::PagingIn(_) => Err(PagerError::OperationInFlight {
                buffer,
                state: e.state.public(),
            }),
        }
    }

    /// Copies `data` into a buffer at `offset` without making it resident: into memory when it is resident,
    /// otherwise straight into its copy on the store (partial blocks at either end are read, patched and written
    /// back). The counterpart of [`read_direct`](Self::read_direct).
    pub fn write_direct(&self, buffer: Buffer, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.shared.pool.check_fork()?;
        let mut st = self.shared.lock_idle(buffer)?;
        let e = self
            .shared
            .in_bounds(&mut st, buffer, offset, data.len() as u64)?;
        if e.flags.read_only && e.stored {
            return Err(PagerError::ReadOnly(buffer));
        }
        match e.state {
            State::Resident => {
                let dst = e.reservation.addr.offset(offset);
                let _access = self.shared.begin_access(e, buffer);
                drop(st);
                let device = &self.shared.pool.device;
                self.shared
                    .pool
                    .copy_chunked(data.len(), WorkKind::Copy, |off, n| {
                        // SAFETY: as in `write`.
                        unsafe {
                            device.copy_from_host(dst.offset(off as u64), &data[off..off + n])
                        }
                    })?;
                Ok(())
            }
            State::PagedOut => match std::mem::replace(&mut e.backing, Backing::None) {
                Backing::Host(copy) => {
                    copy.write(offset, data);
                    e.backing = Backing::Host(copy);
                    Ok(())
                }
                // The checksum taken at page-out no longer describes the stored bytes (even if this write fails
                // half-way, so it is dropped first).
                Backing::Store { slot, .. } => {
                    let access = self.shared.lend_slot(e, buffer, slot, None);
                    drop(st);
                    access.store_range(offset, StoreAccess::Write(data))
                }
                Backing::None => Err(PagerError::Internal("paged-out buffer has no stored copy")),
            },
            State::PagingOut(_) | State::PagingIn(_) => Err(PagerError::OperationInFlight {
                buffer,
                state: e.state.public(),
            }),
        }
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
    /// as the write completes, and [`Ticket::finish`] marks the buffer paged out. With checksums on, the bytes are
    /// hashed on the I/O side, piece by piece as their writes complete.
    pub fn page_out_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        pool.check_fork()?;
        // Outstanding accelerator work may still write the buffer. A device-wide wait, so not under the space lock.
        pool.device.synchronize()?;
        let mut st = shared.lock_idle(buffer)?;
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        match e.state {
            State::Resident => {}
            State::PagedOut => return Err(PagerError::AlreadyPagedOut(buffer)),
            State::PagingOut(_) | State::PagingIn(_) => {
                return Err(PagerError::OperationInFlight {
                    buffer,
                    state: e.state.public(),
                })
            }
        }
        let op = Arc::new(OpState::default());
        // Under an arbiter the decommit that ends a page-out is a gated memory operation on the gated worker.
        let mm = pool.mm_lane();
        if e.flags.read_only && e.stored {
            // The store already holds these bytes: only the memory goes.
            let done = Completion::new(&op);
            // SAFETY: the buffer is resident with no operation or access in flight and the space lock is held, so
            // nothing of ours uses its memory; callers' own pointers are void once they page the buffer out. It is
            // PagingOut (below, under this lock) until the decommit has completed the operation.
            unsafe {
                release_then(mm.as_ref(), pool.device.as_ref(), e.reservation, move |r| {
                    done.complete(r.map_err(|e| Failed::kept_memory(OpFailure::Release(e))))
                })
            };
        } else if let Some(copy) = pool.host_tier.as_ref().and_then(|t| t.allocate(e.io_bytes)) {
            let on_done = release_when_copied(
                Arc::clone(&pool.device),
                mm,
                Completion::new(&op),
                e.reservation,
            );
            // SAFETY: as for the store below: the buffer is PagingOut until on_done has run, and the tier slot is
            // the entry's alone.
            let submitted =
                unsafe { copy.submit(Direction::Write, &e.reservation, e.io_bytes, None, on_done) };
            if let Err(err) = submitted {
                copy.release();
                return Err(err);
            }
            e.backing = Backing::Host(copy);
        } else {
            let mut slot = pool.store.allocate(e.io_bytes)?;
            slot.set_priority(Arc::clone(&shared.usage.io_priority));
            // Checksums are taken where the host can read the buffer (not through the staging path).
            let hashed = pool.checksummed.as_ref().and_then(|sums| {
                pool.device
                    .host_ptr(&e.reservation)
                    .map(|ptr| (sums, SendPtr(ptr)))
            });
            // Both submits below rely on this: the memory stays committed and unchanged until the completion has
            // run: the buffer is marked PagingOut below (under the same lock), `free` defers while an operation is
            // in flight, and the address space is kept alive by the ticket, whose finish waits for the completion.
            let submitted = match hashed {
                Some((sums, ptr)) => {
                    let device = Arc::clone(&pool.device);
                    let done = Completion::new(&op);
                    let reservation = e.reservation;
                    // Runs where the last piece ends (the I/O side or a checksum thread); under an arbiter the
                    // decommit is queued to the gated worker from there.
                    let finish: PiecesDone = Box::new(move |hashed| match hashed {
                        Ok(sums) => {
                            *lock(&done.op.checksum) = Some(sums);
                            // SAFETY: every piece is written and the buffer is PagingOut: nothing uses it.
                            unsafe {
                                release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                                    done.complete(
                                        r.map_err(|e| Failed::kept_memory(OpFailure::Release(e))),
                                    )
                                })
                            }
                        }
                        Err(cause) => done.complete(Err(Failed::kept_memory(cause))),
                    });
                    // SAFETY: see above.
                    unsafe {
                        submit_hashed(
                            sums,
                            Direction::Write,
                            &slot,
                            ptr,
                            e.io_bytes,
                            e.size_bytes,
                            None,
                            None,
                            finish,
                        )
                    }
                }
                None => {
                    let on_done = release_when_copied(
                        Arc::clone(&pool.device),
                        mm,
                        Completion::new(&op),
                        e.reservation,
                    );
                    // SAFETY: see above.
                    unsafe {
                        pool.store_path.submit(Transfer {
                            direction: Direction::Write,
                            range: &e.reservation,
                            copy: &slot,
                            io_bytes: e.io_bytes,
                            after: None,
                            on_done,
                        })
                    }
                }
            };
            if let Err(err) = submitted {
                pool.store.release(slot);
                return Err(err);
            }
            e.backing = Backing::store(slot);
        }
        e.state = State::PagingOut(Arc::clone(&op));
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
    /// [`Ticket::finish`] waits for the read (and the checksum, if on, verified piece by piece on the I/O side)
    /// and marks the buffer resident.
    pub fn page_in_async(&self, buffer: Buffer) -> Result<Ticket, PagerError> {
        let shared = &self.shared;
        let pool = &shared.pool;
        pool.check_fork()?;
        let mut st = shared.lock_idle(buffer)?;
        let e = shared.entry_mut(&mut st, buffer)?;
        if e.flags.unpageable {
            return Err(PagerError::Unpageable(buffer));
        }
        match e.state {
            State::PagedOut => {}
            State::Resident => return Err(PagerError::AlreadyResident(buffer)),
            State::PagingOut(_) | State::PagingIn(_) => {
                return Err(PagerError::OperationInFlight {
                    buffer,
                    state: e.state.public(),
                })
            }
        }
        if let Backing::None = e.backing {
            return Err(PagerError::Internal("paged-out buffer has no stored copy"));
        }
        let charge_bytes = e.reservation.len as u64;
        // A buffer whose last release failed is still charged; never count it twice.
        let newly_charged = !e.charged;
        if newly_charged {
            shared
                .charge(charge_bytes)
                .map_err(|err| err.with_buffer(buffer))?;
        }
        // Under an arbiter the commit is a gated memory operation on the gated worker, admitted for its measured
        // cost: it is queued below once the transfer is, and the transfer waits for it (`prelude`), so this thread
        // never waits for a grant, and a transfer that cannot be queued leaves no commit to undo.
        let mm = pool.mm_lane();
        let prelude = mm.as_ref().map(|_| Arc::new(Prelude::default()));
        let undo = |err: PagerError| {
            match &prelude {
                // Nothing was committed.
                Some(_) => {
                    if newly_charged {
                        shared.refund(charge_bytes);
                    }
                }
                None => {
                    // SAFETY: the read was not submitted, so nothing uses the memory just committed.
                    if unsafe { pool.device.decommit(&e.reservation) }.is_ok() && newly_charged {
                        shared.refund(charge_bytes);
                    }
                }
            }
            err
        };
        if prelude.is_none() {
            pool.device
                .commit(&e.reservation)
                .map_err(|x| undo(x.into()))?;
        }
        let op = Arc::new(OpState::default());
        let settle = {
            let device = Arc::clone(&pool.device);
            let done = Completion::new(&op);
            let reservation = e.reservation;
            let mm = mm.clone();
            let prelude = prelude.clone();
            move |outcome: Result<(), OpFailure>| {
                // A failed commit is the cause, whatever its transfer reported (it did not run).
                let outcome = match prelude.as_ref().and_then(|p| p.take_failure()) {
                    Some(Some(err)) => Err(OpFailure::Commit(err)),
                    Some(None) => Err(OpFailure::Lost(
                        "the commit before the page-in never ran (a panic in a device backend or worker)",
                    )),
                    None => outcome,
                };
                match outcome {
                    Ok(()) => done.complete(Ok(())),
                    Err(cause) => {
                        // Give the memory back now (under an arbiter, as a gated memory operation); finish only has
                        // to settle the state.
                        // SAFETY: the read is over (or never ran) and the buffer is PagingIn, so nothing uses its
                        // memory.
                        unsafe {
                            release_then(mm.as_ref(), device.as_ref(), reservation, move |r| {
                                let released = match r {
                                    Ok(()) => true,
                                    Err(err) => {
                                        tracing::warn!("decommit after a failed page-in: {err}");
                                        false
                                    }
                                };
                                done.complete(Err(Failed {
                                    cause,
                                    memory_released: released,
                                }));
                            })
                        }
                    }
                }
            }
        };
        match &e.backing {
            Backing::Host(copy) => {
                let on_done: TransferCallback =
                    Box::new(move |r| settle(r.map_err(OpFailure::from)));
                // SAFETY: as below.
                unsafe {
                    copy.submit(
                        Direction::Read,
                        &e.reservation,
                        e.io_bytes,
                        prelude.clone(),
                        on_done,
                    )
                }
                .map_err(undo)?;
            }
            Backing::Store { slot, checksum } => {
                let hashed = pool.checksummed.as_ref().and_then(|sums| {
                    pool.device
                        .host_ptr(&e.reservation)
                        .map(|ptr| (sums, SendPtr(ptr)))
                        .zip(checksum.clone())
                });
                match hashed {
                    Some(((sums, ptr), expected)) => {
                        let finish: PiecesDone = Box::new(move |r| settle(r.map(|_| ())));
                        // SAFETY: as in page_out_async: the buffer is PagingIn (set below under this lock) until
                        // its ticket's finish has waited for the completion, and nothing else touches the memory
                        // meanwhile; under an arbiter the pieces wait for the commit.
                        unsafe {
                            submit_hashed(
                                sums,
                                Direction::Read,
                                slot,
                                ptr,
                                e.io_bytes,
                                e.size_bytes,
                                Some(expected),
                                prelude.clone(),
                                finish,
                            )
                        }
                        .map_err(undo)?;
                    }
                    None => {
                        let on_done: TransferCallback =
                            Box::new(move |r| settle(r.map_err(OpFailure::from)));
                        // SAFETY: as above.
                        unsafe {
                            pool.store_path.submit(Transfer {
                                direction: Direction::Read,
                                range: &e.reservation,
                                copy: slot,
                                io_bytes: e.io_bytes,
                                after: prelude.clone(),
                                on_done,
                            })
                        }
                        .map_err(undo)?;
                    }
                }
            }
            // Refused above, before anything was charged.
            Backing::None => {
                return Err(undo(PagerError::Internal(
                    "paged-out buffer has no stored copy",
                )))
            }
        }
        if let (Some(mm), Some(prelude)) = (&mm, &prelude) {
            // The transfer is queued and waits for this.
            mm.commit(e.reservation, prelude);
        }
        e.state = State::PagingIn(Arc::clone(&op));
        e.charged = true;
        e.last_use = shared.usage.tick();
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
                .filter(|(_, e)| e.state.public() == from && !e.flags.unpageable && !e.free_pending)
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
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Takes `bytes` of this space's quota and of the pool's capacity, or neither.
    fn charge(&self, bytes: u64) -> Result<(), PagerError> {
        let usage = &self.usage;
        let limit = usage.limit_bytes.load(Ordering::Acquire);
        usage
            .charged_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= limit)
            })
            .map_err(|used| PagerError::QuotaExceeded {
                space: self.id,
                buffer: None,
                needed_bytes: bytes,
                charged_bytes: used,
                limit_bytes: limit,
            })?;
        if let Err(e) = self.pool.charge(bytes) {
            Self::release_usage(usage, bytes);
            return Err(e);
        }
        Ok(())
    }

    /// Gives `bytes` back to this space's quota and to the pool.
    fn refund(&self, bytes: u64) {
        Self::release_usage(&self.usage, bytes);
        self.pool.refund(bytes);
    }

    fn release_usage(usage: &SpaceUsage, bytes: u64) {
        let _ = usage
            .charged_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Adds an entry under a fresh handle.
    fn insert(&self, mut entry: Entry) -> Buffer {
        entry.last_use = self.usage.tick();
        let mut st = lock(&self.state);
        let index = st.next_index;
        st.next_index += 1;
        st.buffers.insert(index, entry);
        Buffer {
            space: self.id,
            index,
        }
    }

    /// Writes zeros over a new slot, so a buffer allocated on the store reads back as zeros like one in memory.
    fn zero_slot(&self, slot: &Slot) -> Result<(), PagerError> {
        let store = &self.pool.store;
        let piece = DIRECT_PIECE_BYTES.min(slot.len() as usize);
        let mut zeros = oversub_io::AlignedBuf::new(piece, store.alignment())?;
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

    /// Resident buffers a shrinking quota may page out, least recently used first, with their charged bytes.
    pub(crate) fn eviction_candidates(&self) -> Vec<(Buffer, u64)> {
        let st = lock(&self.state);
        let mut found: Vec<(u64, Buffer, u64)> = st
            .buffers
            .iter()
            .filter(|(_, e)| {
                // A resident buffer has no operation in flight.
                matches!(e.state, State::Resident)
                    && !e.flags.unpageable
                    && !e.busy
                    && !e.free_pending
            })
            .map(|(&index, e)| {
                (
                    e.last_use,
                    Buffer {
                        space: self.id,
                        index,
                    },
                    e.reservation.len as u64,
                )
            })
            .collect();
        found.sort_unstable_by_key(|(last_use, ..)| *last_use);
        found.into_iter().map(|(_, b, bytes)| (b, bytes)).collect()
    }

    /// The live entry of `buffer`: one freed while in use is unknown to callers.
    fn entry_mut<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
    ) -> Result<&'a mut Entry, PagerError> {
        self.any_entry_mut(st, buffer)
            .filter(|e| !e.free_pending)
            .ok_or(PagerError::UnknownBuffer(buffer))
    }

    /// The entry of `buffer`, freed or not (for settling its operation or access).
    fn any_entry_mut<'a>(&self, st: &'a mut SpaceState, buffer: Buffer) -> Option<&'a mut Entry> {
        if buffer.space != self.id {
            return None;
        }
        st.buffers.get_mut(&buffer.index)
    }

    /// The space's lock, once no copy or direct store transfer (an [`AccessGuard`]) is using `buffer`.
    fn lock_idle(&self, buffer: Buffer) -> Result<MutexGuard<'_, SpaceState>, PagerError> {
        let mut st = lock(&self.state);
        while self.entry_mut(&mut st, buffer)?.busy {
            st = self
                .idle
                .wait(st)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(st)
    }

    /// Marks `e` busy for a copy that runs after the space lock is dropped. The entry must not be busy (callers
    /// hold the guard of [`lock_idle`](Self::lock_idle)).
    fn begin_access(&self, e: &mut Entry, buffer: Buffer) -> AccessGuard<'_> {
        e.busy = true;
        AccessGuard {
            space: self,
            buffer,
            lent: None,
        }
    }

    /// As [`begin_access`](Self::begin_access), for a direct store transfer on `slot`, taken out of `e`'s
    /// backing: the guard holds it (with `checksum`) until it puts it back.
    fn lend_slot(
        &self,
        e: &mut Entry,
        buffer: Buffer,
        slot: Slot,
        checksum: Option<Checksums>,
    ) -> AccessGuard<'_> {
        e.busy = true;
        AccessGuard {
            space: self,
            buffer,
            lent: Some((slot, checksum)),
        }
    }

    /// Removes a freed entry whose last user is done; the caller releases it outside the lock.
    fn take_if_freed(&self, st: &mut SpaceState, buffer: Buffer) -> Option<Entry> {
        let e = self.any_entry_mut(st, buffer)?;
        if e.free_pending && !e.state.in_flight() && !e.busy {
            st.buffers.remove(&buffer.index)
        } else {
            None
        }
    }

    fn release_logged(&self, buffer: Buffer, entry: Entry) {
        tracing::debug!(%buffer, "releasing a buffer freed while in use");
        if let Err(err) = self.release_entry(entry) {
            tracing::warn!(%buffer, "releasing a buffer freed while in use: {err}");
        }
    }

    /// The entry, if `offset..offset + len` lies inside it (in any state); counts as a use.
    fn in_bounds<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
        offset: u64,
        len: u64,
    ) -> Result<&'a mut Entry, PagerError> {
        let e = self.entry_mut(st, buffer)?;
        if offset.checked_add(len).is_none_or(|end| end > e.size_bytes) {
            return Err(PagerError::OutOfBounds {
                buffer,
                offset,
                len,
                size: e.size_bytes,
            });
        }
        e.last_use = self.usage.tick();
        Ok(e)
    }

    /// Reads or writes `offset..` of a slot through an aligned bounce buffer, in pieces of at most
    /// [`DIRECT_PIECE_BYTES`] (and, under an arbiter, in admitted chunks).
    fn store_range(
        &self,
        slot: &Slot,
        offset: u64,
        mut access: StoreAccess<'_>,
    ) -> Result<(), PagerError> {
        let len = access.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let store = &self.pool.store;
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
            return self
                .pool
                .copy_chunked(len as usize, WorkKind::Transfer, |off, n| {
                    let mut pos = 0usize;
                    while pos < n {
                        let piece = (n - pos).min(DIRECT_PIECE_BYTES);
                        let at = off + pos;
                        let view = slot.view(offset + at as u64, piece as u64)?;
                        let (direction, ptr) = match &mut access {
                            StoreAccess::Read(out) => (Direction::Read, out[at..].as_mut_ptr()),
                            // The engine only reads the memory of a write.
                            StoreAccess::Write(data) => {
                                (Direction::Write, data[at..].as_ptr().cast_mut())
                            }
                        };
                        let mem = IoVec { ptr, len: piece };
                        // SAFETY: `mem` lies inside the caller's slice, which this blocking transfer borrows for its
                        // whole duration (mutably for a read).
                        unsafe { store.transfer_view(direction, &view, &[mem]) }?;
                        pos += piece;
                    }
                    Ok::<(), PagerError>(())
                });
        }
        let piece_cap = DIRECT_PIECE_BYTES.min((end - start) as usize);
        let mut bounce = oversub_io::AlignedBuf::new(piece_cap, store.alignment())?;
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
        self.pool
            .copy_chunked((end - start) as usize, WorkKind::Transfer, |off, n| {
                let mut pos = start + off as u64;
                let stop = pos + n as u64;
                while pos < stop {
                    let piece = (stop - pos).min(piece_cap as u64);
                    one_piece(pos, piece)?;
                    pos += piece;
                }
                Ok::<(), PagerError>(())
            })
    }

    fn accessible<'a>(
        &self,
        st: &'a mut SpaceState,
        buffer: Buffer,
        offset: u64,
        len: u64,
    ) -> Result<&'a mut Entry, PagerError> {
        let e = self.entry_mut(st, buffer)?;
        e.last_use = self.usage.tick();
        if !matches!(e.state, State::Resident) {
            return Err(PagerError::NotResident {
                buffer,
                state: e.state.public(),
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
        let e = self
            .any_entry_mut(&mut st, buffer)
            .ok_or(PagerError::UnknownBuffer(buffer))?;
        let ours = match &e.state {
            State::PagingOut(current) | State::PagingIn(current) => Arc::ptr_eq(current, op),
            State::Resident | State::PagedOut => false,
        };
        if !ours {
            return Err(PagerError::Internal(
                "ticket does not match the buffer's operation",
            ));
        }
        let bytes = e.reservation.len as u64;
        let uncharge = |e: &mut Entry| {
            if e.charged {
                self.refund(bytes);
                e.charged = false;
            }
        };
        let result = match (kind, outcome) {
            (OpKind::PageOut, Ok(())) => {
                e.state = State::PagedOut;
                e.stored = true;
                keep_checksum(e, op);
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
                e.state = State::PagedOut;
                e.stored = true;
                keep_checksum(e, op);
                Err(err.into())
            }
            (OpKind::PageOut, Err(failed)) => {
                // The memory was never released, so the buffer is intact where it was; the slot goes back.
                e.state = State::Resident;
                if !e.stored {
                    self.release_backing(e);
                }
                Err(failure_to_error(buffer, failed.cause))
            }
            (OpKind::PageIn, Ok(())) => {
                e.state = State::Resident;
                if !e.flags.read_only {
                    // The bytes may change from now on, so the stored copy is stale: free its space.
                    self.release_backing(e);
                    e.stored = false;
                }
                Ok(())
            }
            (OpKind::PageIn, Err(failed)) => {
                // The stored copy is untouched; the memory was given back by the completion unless that failed or
                // never ran to its end: then, without an arbiter, try once more here, so that a lost completion
                // leaks nothing. Under an arbiter a decommit here would run outside any grant (and wait for one
                // under the space's lock), so the buffer stays charged instead, as after a failed release at
                // page-out: its next page-in commits the range again, and free releases it.
                e.state = State::PagedOut;
                let retry_release = || {
                    // SAFETY: the operation is over (its outcome is in) and the buffer is not resident, so nothing
                    // of ours uses the memory.
                    pool.gated.is_none() && unsafe { pool.device.decommit(&e.reservation) }.is_ok()
                };
                if failed.memory_released || retry_release() {
                    uncharge(e);
                }
                Err(failure_to_error(buffer, failed.cause))
            }
        };
        tracing::debug!(%buffer, ?kind, ok = result.is_ok(), "finished");
        let freed = self.take_if_freed(&mut st, buffer);
        drop(st);
        if let Some(entry) = freed {
            self.release_logged(buffer, entry);
        }
        result
    }

    /// Gives the entry's copy back (its store slot or its room in the host tier), if it has one.
    fn release_backing(&self, e: &mut Entry) {
        match std::mem::replace(&mut e.backing, Backing::None) {
            Backing::None => {}
            Backing::Store { slot, .. } => self.pool.store.release(slot),
            Backing::Host(copy) => copy.release(),
        }
    }

    /// Gives back everything an entry holds.
    fn release_entry(&self, mut e: Entry) -> Result<(), PagerError> {
        self.release_backing(&mut e);
        if e.charged {
            self.refund(e.reservation.len as u64);
        }
        // SAFETY: the entry is out of the table with no operation in flight, so nothing of ours uses the range.
        unsafe { self.pool.device.unreserve(e.reservation) }?;
        Ok(())
    }
}

/// A copy or direct store transfer running on a buffer without the space lock. While it lives the buffer is
/// `busy` (paging calls on it wait, `free` defers) and, for a direct store transfer, its slot is lent here;
/// dropping it puts the slot back, wakes the waiters and releases the buffer if it was freed meanwhile.
struct AccessGuard<'a> {
    space: &'a SpaceShared,
    buffer: Buffer,
    /// The entry's store slot and checksum, lent for a direct store transfer.
    lent: Option<(Slot, Option<Checksums>)>,
}

impl AccessGuard<'_> {
    /// Reads or writes `offset..` of the lent slot (nothing is lent only for copies, which never call this).
    fn store_range(&self, offset: u64, access: StoreAccess<'_>) -> Result<(), PagerError> {
        match &self.lent {
            Some((slot, _)) => self.space.store_range(slot, offset, access),
            None => Err(PagerError::Internal("no store slot lent to the access")),
        }
    }
}

impl Drop for AccessGuard<'_> {
    fn drop(&mut self) {
        let freed = {
            let mut st = lock(&self.space.state);
            if let Some(e) = self.space.any_entry_mut(&mut st, self.buffer) {
                e.busy = false;
                if let Some((slot, checksum)) = self.lent.take() {
                    e.backing = Backing::Store { slot, checksum };
                }
            }
            self.space.take_if_freed(&mut st, self.buffer)
        };
        self.space.idle.notify_all();
        if let Some(entry) = freed {
            self.space.release_logged(self.buffer, entry);
        }
    }
}

/// Submits the transfer of host-addressable memory at `ptr` to or from `slot` in [`CHECKSUM_PIECE_BYTES`] pieces,
/// each hashed on the I/O thread when its own I/O is done (after a write: the bytes written, which do not change
/// while the buffer is in flight; after a read: the bytes read) and compared with `expected` when given. `finish`
/// runs once, after the last piece, with the hashes or the first failure. Returns `Err` only when nothing was
/// submitted (then `finish` never runs). Under an arbiter, with `after`, every piece waits for that commit.
///
/// # Safety
/// As [`TransferPath::submit`](crate::transfer::TransferPath::submit): `ptr..ptr + io_bytes` stays valid and
/// otherwise untouched, and the slot allocated, until `finish` has run.
#[allow(clippy::too_many_arguments)]
unsafe fn submit_hashed(
    sums: &Checksummed,
    direction: Direction,
    slot: &Slot,
    ptr: SendPtr,
    io_bytes: u64,
    size_bytes: u64,
    expected: Option<Checksums>,
    after: Option<Arc<Prelude>>,
    finish: PiecesDone,
) -> Result<(), PagerError> {
    let pieces = piece_count(size_bytes);
    if expected.as_ref().is_some_and(|e| e.len() != pieces) {
        return Err(PagerError::Internal(
            "stored checksum does not match the buffer's size",
        ));
    }
    // A write's bytes do not change while it is in flight, so its pieces are hashed alongside their I/O from the
    // start; a read's only once they have arrived. Each piece then counts twice: its I/O and its hash.
    let hash_early = direction == Direction::Write;
    let set = PieceSet::new(pieces, 2 * pieces, finish);
    for k in 0..pieces {
        let start = k as u64 * CHECKSUM_PIECE_BYTES;
        let end = if k + 1 == pieces {
            io_bytes
        } else {
            start + CHECKSUM_PIECE_BYTES
        };
        let at = ptr.add(start);
        let hash = {
            let hashed_len = end.min(size_bytes).saturating_sub(start);
            let want = expected.as_ref().map(|e| e[k]);
            let piece_set = Arc::clone(&set);
            move || {
                let actual = checksum(at, hashed_len);
                lock(&piece_set.hashes)[k] = actual;
                if let Some(expected) = want.filter(|&w| w != actual) {
                    piece_set.fail(OpFailure::Checksum { expected, actual });
                }
                piece_set.done(1);
            }
        };
        let hasher = Arc::clone(&sums.hasher);
        // On a checksum thread, so the engine's thread goes back to its queue at once.
        let run_hash = move |hash: Box<dyn FnOnce() + Send>| hasher.run(hash);
        let (on_done, later_hash): (oversub_io::IoCallback, Option<Box<dyn FnOnce() + Send>>) =
            if hash_early {
                let piece_set = Arc::clone(&set);
                let on_done: oversub_io::IoCallback = Box::new(move |result| {
                    if let Err(e) = result {
                        piece_set.fail(OpFailure::Io(e));
                    }
                    piece_set.done(1);
                });
                (on_done, Some(Box::new(hash)))
            } else {
                let piece_set = Arc::clone(&set);
                let run_hash = run_hash.clone();
                let on_done: oversub_io::IoCallback = Box::new(move |result| match result {
                    Ok(_) => {
                        piece_set.done(1);
                        run_hash(Box::new(hash));
                    }
                    Err(e) => {
                        piece_set.fail(OpFailure::Io(e));
                        // Nothing to hash: count the piece's hash as done too.
                        piece_set.done(2);
                    }
                });
                (on_done, None)
            };
        let mem = IoVec {
            ptr: at.0,
            len: usize::try_from(end - start)
                .map_err(|_| PagerError::InvalidSize("buffer too large".into()))?,
        };
        // SAFETY: forwarded from our caller; the piece lies inside the range and the slot.
        match unsafe {
            sums.pieces
                .submit_piece(direction, slot, start, mem, after.clone(), on_done)
        } {
            // A read's piece is hashed by its completion.
            Ok(()) => {
                if let Some(hash) = later_hash {
                    run_hash(hash);
                }
            }
            // Nothing is in flight yet: the caller undoes the operation.
            Err(e) if k == 0 => return Err(e.into()),
            // Earlier pieces are in flight: fail the operation once they are done.
            Err(e) => {
                set.fail(OpFailure::Io(e));
                set.done(2 * (pieces - k));
                break;
            }
        }
    }
    Ok(())
}

/// Keeps the checksum a finished page-out took with the entry's store copy (only store copies are checksummed).
fn keep_checksum(e: &mut Entry, op: &OpState) {
    if let Some(sums) = lock(&op.checksum).take() {
        if let Backing::Store { checksum, .. } = &mut e.backing {
            *checksum = Some(sums);
        }
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
        OpFailure::Release(err) | OpFailure::Commit(err) => err.into(),
        OpFailure::Copy(err) => err.into(),
        OpFailure::Lost(reason) => PagerError::CompletionLost { buffer, reason },
    }
}

impl Drop for SpaceShared {
    fn drop(&mut self) {
        if self.tenant {
            self.pool.tenant_left(self.id);
        }
        // Tickets hold the space alive, so no operation is in flight here: every buffer can be released.
        let st = std::mem::take(self.state.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (_, e) in st.buffers {
            if let Err(err) = self.release_entry(e) {
                tracing::warn!(space = self.id, "releasing a buffer at drop: {err}");
            }
        }
    }
}
