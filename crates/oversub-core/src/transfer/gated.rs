//! The gate around the transfer paths: one worker thread runs every direct storage transfer of the pool in chunks,
//! asking the arbiter's gate before each one, like a copy engine that is only allowed on the bus during compute phases; and it runs the
//! memory-map operations of paging (the commit before a page-in, the decommit after a page-out) as gated memory
//! operations, each admitted for its own measured worst-case cost ([`Gate::admit_for`]).
//!
//! The transfer paths obey the gate through [`Gated`], a wrapper around any [`TransferPath`] that hands it the
//! gate's [`Pacer`]: the staged path and the host tier run each chunk as a step the pacer admits, and the direct
//! path queues its store I/O to the worker here, which admits it in batches of chunks.
//!
//! A page-out or page-in waiting for a grant never blocks the caller: the ticket completes when the last chunk
//! (and the decommit after it) has. Memory-map operations have a lane of their own that the worker serves before
//! the next transfer, so a decommit follows the last chunk of its page-out, not the transfers queued behind it.
//! A page-in's transfer waits for its commit through a [`Prelude`]: the caller queues the transfer first and the
//! commit after it, so a transfer that cannot be queued leaves nothing to undo.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use oversub_accel::{AccelError, DeviceMemory, Reservation};
use oversub_arbiter::{Gate, WorkKind};
use oversub_base::process::Creator;
use oversub_io::{Direction, IoCallback, IoDone, IoError, IoVec, Slot, SlotView, SwapStore};

use super::{PacedPath, Transfer, TransferPath};
use crate::PagerError;
use oversub_base::sync::lock;

/// Most chunks submitted together when the grant has room for them all (their worst case counted one after
/// another): enough queue depth to keep a storage device busy, few enough to stop soon at a window's end.
const MAX_BATCH_CHUNKS: usize = 32;

const MIB: u64 = 1 << 20;

/// Ranges below this are mapped with small pages by backends that use huge pages for larger ones (the host
/// backend's transparent huge pages), which makes them the slowest per byte to decommit.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The large range the per-byte cost is measured on (at least; eight granules where those are larger).
const LARGE_CALIBRATION_BYTES: usize = 16 << 20;

/// The worst-case time of a memory-map operation of `len` bytes: `fixed + per_mib × len / 1 MiB`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MmCost {
    /// The part that does not depend on the length (at least the slowest small range measured).
    pub fixed: Duration,
    /// The part per MiB of the range.
    pub per_mib: Duration,
}

impl MmCost {
    /// No cost at all.
    pub const ZERO: MmCost = MmCost {
        fixed: Duration::ZERO,
        per_mib: Duration::ZERO,
    };

    /// A cost of `fixed` plus `per_mib` per MiB.
    pub const fn new(fixed: Duration, per_mib: Duration) -> MmCost {
        MmCost { fixed, per_mib }
    }

    /// The operation's worst-case time on a range of `len` bytes (rounded up to the nanosecond).
    pub fn time(&self, len: u64) -> Duration {
        let per_mib = self.per_mib.as_nanos();
        let scaled = (per_mib * u128::from(len)).div_ceil(u128::from(MIB));
        let fixed = self.fixed.as_nanos();
        Duration::from_nanos(u64::try_from(fixed.saturating_add(scaled)).unwrap_or(u64::MAX))
    }
}

/// The costs a pool's gate admits its work with: T(Q) for each chunk of storage I/O or copy, and the worst-case
/// times of the memory-map operations (measured when the pool starts, or given in
/// [`PoolConfig::gate_mm_costs`](crate::PoolConfig::gate_mm_costs)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateCosts {
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// T(Q): the worst-case time of one chunk.
    pub chunk_time: Duration,
    /// Committing a range (the start of a page-in).
    pub commit: MmCost,
    /// Decommitting a range whose pages were all touched (the end of a page-out).
    pub decommit: MmCost,
}

impl GateCosts {
    /// The worst-case time of committing `len` bytes.
    pub fn commit_time(&self, len: u64) -> Duration {
        self.commit.time(len)
    }

    /// The worst-case time of decommitting `len` bytes.
    pub fn decommit_time(&self, len: u64) -> Duration {
        self.decommit.time(len)
    }
}

/// A page-in's commit, which its transfer waits for: resolved by the gated worker once the commit has run (or
/// as failed when the commit was dropped without running).
#[derive(Debug, Default)]
pub(crate) struct Prelude {
    state: Mutex<PreludeState>,
    resolved: Condvar,
}

#[derive(Debug, Default)]
enum PreludeState {
    #[default]
    Pending,
    Committed,
    /// The commit failed (with its error, until [`Prelude::take_failure`] takes it), or never ran (`None`).
    Failed(Option<AccelError>),
}

impl Prelude {
    fn resolve(&self, outcome: Result<(), Option<AccelError>>) {
        let mut state = lock(&self.state);
        if matches!(*state, PreludeState::Pending) {
            *state = match outcome {
                Ok(()) => PreludeState::Committed,
                Err(e) => PreludeState::Failed(e),
            };
            self.resolved.notify_all();
        }
    }

    fn is_pending(&self) -> bool {
        matches!(*lock(&self.state), PreludeState::Pending)
    }

    /// Waits until the commit has run; true when the memory is committed.
    pub(crate) fn wait(&self) -> bool {
        let mut state = lock(&self.state);
        while matches!(*state, PreludeState::Pending) {
            state = self
                .resolved
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        matches!(*state, PreludeState::Committed)
    }

    /// `Some` when the commit failed: with its error (the first time), or `None` when it never ran.
    pub(crate) fn take_failure(&self) -> Option<Option<AccelError>> {
        match &mut *lock(&self.state) {
            PreludeState::Failed(e) => Some(e.take()),
            _ => None,
        }
    }

    /// The error a transfer reports when it did not run because its commit failed (the page-in's outcome names
    /// the commit's own error instead).
    pub(crate) fn not_committed() -> IoError {
        IoError::InvalidArgument("the memory of the page-in was not committed".into())
    }
}

/// Resolves its prelude as failed if the commit is dropped before it runs.
struct Resolver(Arc<Prelude>);

impl Drop for Resolver {
    fn drop(&mut self) {
        self.0.resolve(Err(None));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MmKind {
    Commit,
    Decommit,
}

type MmDone = Box<dyn FnOnce(Result<(), AccelError>) + Send>;

/// A memory-map operation waiting for the worker.
struct MmOp {
    kind: MmKind,
    range: Reservation,
    then: MmDone,
}

struct IoJob {
    direction: Direction,
    chunks: Vec<(SlotView, IoVec)>,
    /// The commit the transfer must wait for (a page-in's).
    after: Option<Arc<Prelude>>,
    on_done: IoCallback,
}

// SAFETY: the iovecs point at memory that the submitter keeps valid and untouched until on_done has run (the
// contract of `Pacer::submit_io`); the worker only hands them to the store.
unsafe impl Send for IoJob {}

enum Next {
    Mm(MmOp),
    Io(IoJob),
}

#[derive(Default)]
struct Queue {
    mm: VecDeque<MmOp>,
    io: VecDeque<IoJob>,
    closed: bool,
}

/// What the worker and the handles into its memory-map lane share.
struct Shared {
    gate: Arc<Gate>,
    device: Arc<dyn DeviceMemory>,
    store: Arc<SwapStore>,
    /// (commit, decommit).
    costs: Mutex<(MmCost, MmCost)>,
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = lock(&self.queue);
        f.debug_struct("Shared")
            .field("costs", &*lock(&self.costs))
            .field("queued_mm", &q.mm.len())
            .field("queued_io", &q.io.len())
            .field("closed", &q.closed)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The next job: a memory-map operation first, then a transfer (unless `mm_only`); `None` once the queue is
    /// closed and holds nothing more of what is asked for.
    fn next(&self, mm_only: bool) -> Option<Next> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(op) = q.mm.pop_front() {
                return Some(Next::Mm(op));
            }
            if !mm_only {
                if let Some(job) = q.io.pop_front() {
                    return Some(Next::Io(job));
                }
            }
            if q.closed {
                return None;
            }
            q = self
                .ready
                .wait(q)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Queues a memory-map operation for the worker, or runs it here once the worker is gone (still admitted).
    fn push_mm(&self, op: MmOp) {
        let op = {
            let mut q = lock(&self.queue);
            if q.closed {
                Some(op)
            } else {
                q.mm.push_back(op);
                None
            }
        };
        match op {
            Some(op) => self.run_mm(op),
            None => self.ready.notify_all(),
        }
    }

    /// Admits a memory-map operation for its cost, runs it (logged on the gate) and hands on the outcome.
    fn run_mm(&self, op: MmOp) {
        let len = op.range.len as u64;
        let (commit, decommit) = *lock(&self.costs);
        let (what, cost) = match op.kind {
            MmKind::Commit => (WorkKind::Commit, commit.time(len)),
            MmKind::Decommit => (WorkKind::Decommit, decommit.time(len)),
        };
        let admission = self.gate.admit_for(cost);
        let outcome = self.gate.record_run(what, len, || match op.kind {
            MmKind::Commit => self.device.commit(&op.range),
            // SAFETY: whoever queued the decommit promised that nothing uses the range's memory any more
            // (`MmLane::decommit`).
            MmKind::Decommit => unsafe { self.device.decommit(&op.range) },
        });
        self.gate
            .finished(&admission, self.gate.arbiter().clock().now_ns());
        (op.then)(outcome);
    }

    fn run_io(&self, job: IoJob) {
        if let Some(prelude) = &job.after {
            // The page-in's commit is queued right after its transfer: run memory-map operations until it has run.
            while prelude.is_pending() {
                match self.next(true) {
                    Some(Next::Mm(op)) => self.run_caught(Next::Mm(op)),
                    _ => break,
                }
            }
            if !prelude.is_committed() {
                (job.on_done)(Err(Prelude::not_committed()));
                return;
            }
        }
        let mut bytes = 0;
        let mut result = Ok(());
        let mut next = 0;
        while next < job.chunks.len() {
            let want = (job.chunks.len() - next).min(MAX_BATCH_CHUNKS) as u64;
            let admission = self.gate.admit_up_to(want);
            let n = admission.chunks.min(want) as usize;
            let batch = &job.chunks[next..next + n];
            next += n;
            let batch_bytes = batch.iter().map(|(view, _)| view.len()).sum();
            let done = self.gate.record_run(WorkKind::Transfer, batch_bytes, || {
                // SAFETY: the submitter keeps the memory valid and the slot allocated until on_done.
                unsafe { self.store.transfer_views(job.direction, batch) }
            });
            self.gate
                .finished(&admission, self.gate.arbiter().clock().now_ns());
            match done {
                Ok(done) => bytes += done.bytes,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        (job.on_done)(result.map(|()| IoDone { bytes }));
    }

    /// Runs a job; a panic in it (a backend's, or a completion's) fails only that job's operation, through the
    /// completion guards its callbacks own, and the worker goes on.
    fn run_caught(&self, job: Next) {
        let ran = catch_unwind(AssertUnwindSafe(|| match job {
            Next::Mm(op) => self.run_mm(op),
            Next::Io(job) => self.run_io(job),
        }));
        if ran.is_err() {
            tracing::warn!("a job of the gated worker panicked; its operation fails");
        }
    }
}

impl Prelude {
    /// Whether the commit ran and succeeded, without waiting for one still pending (which then counts as not
    /// committed: the worker is gone).
    fn is_committed(&self) -> bool {
        matches!(*lock(&self.state), PreludeState::Committed)
    }
}

/// A handle to the gated worker's lane of memory-map operations, for completions that run on other threads.
#[derive(Debug, Clone)]
pub(crate) struct MmLane {
    shared: Arc<Shared>,
}

impl MmLane {
    /// Queues the commit of `range` (admitted for its cost) and resolves `prelude` with its outcome.
    pub(crate) fn commit(&self, range: Reservation, prelude: &Arc<Prelude>) {
        let resolver = Resolver(Arc::clone(prelude));
        self.shared.push_mm(MmOp {
            kind: MmKind::Commit,
            range,
            then: Box::new(move |outcome| resolver.0.resolve(outcome.map_err(Some))),
        });
    }

    /// Queues the decommit of `range` (admitted for its cost), then `then` with its outcome. Returns at once.
    ///
    /// # Safety
    /// As [`DeviceMemory::decommit`]: nothing uses the range's memory any more, from now on.
    pub(crate) unsafe fn decommit(
        &self,
        range: Reservation,
        then: impl FnOnce(Result<(), AccelError>) + Send + 'static,
    ) {
        self.shared.push_mm(MmOp {
            kind: MmKind::Decommit,
            range,
            then: Box::new(then),
        });
    }
}

/// The gate as the transfer paths see it: each step of a paced transfer is admitted here (and logged on the gate),
/// and direct store I/O is queued to the gated worker, which admits it in batches. Only [`Gated`] hands it out.
#[derive(Debug)]
pub(crate) struct Pacer {
    shared: Arc<Shared>,
    /// Size of one chunk of the gated worker's store I/O (the gate's chunk, rounded up to the store's alignment).
    io_chunk_bytes: u64,
}

impl Pacer {
    /// The gate's chunk size (not rounded).
    pub(crate) fn chunk_bytes(&self) -> u64 {
        self.shared.gate.chunk_bytes()
    }

    /// Runs one step of `bytes` once the gate admits one chunk, logged as `what`: the step must end inside the
    /// grant, so it is blocking (the chunk time T(Q) is calibrated on the same work).
    pub(crate) fn step<T>(&self, what: WorkKind, bytes: u64, work: impl FnOnce() -> T) -> T {
        self.shared.gate.admit();
        self.shared.gate.record_run(what, bytes, work)
    }

    /// Waits until the gate admits one chunk (for a step logged with [`record_since`](Self::record_since)).
    pub(crate) fn admit(&self) {
        self.shared.gate.admit();
    }

    /// The arbiter's clock now, when the gate logs events.
    pub(crate) fn now_if_recording(&self) -> Option<u64> {
        let gate = &self.shared.gate;
        gate.is_recording().then(|| gate.arbiter().clock().now_ns())
    }

    /// Logs a transfer of `bytes` that started at `start` (from [`now_if_recording`](Self::now_if_recording)).
    pub(crate) fn record_since(&self, start: Option<u64>, bytes: u64) {
        if let Some(start_ns) = start {
            let gate = &self.shared.gate;
            gate.record(oversub_arbiter::GateEvent {
                start_ns,
                end_ns: gate.arbiter().clock().now_ns(),
                kind: oversub_arbiter::GateEventKind::Ran {
                    what: WorkKind::Transfer,
                    bytes,
                },
            });
        }
    }

    /// Queues a transfer of `mem` (contiguous) to or from the part of `slot` that starts at `offset`, chunk by
    /// chunk; when `after` is given, it starts only once that commit has run, and fails without moving a byte
    /// if the commit failed.
    ///
    /// # Safety
    /// As [`SwapStore::submit`]: `mem` stays valid (and, for reads, otherwise untouched) and the slot allocated
    /// until `on_done` has run (and, with `after`, is committed device memory once that commit succeeded).
    pub(crate) unsafe fn submit_io(
        &self,
        direction: Direction,
        slot: &Slot,
        offset: u64,
        mem: IoVec,
        after: Option<Arc<Prelude>>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        let end = offset
            .checked_add(mem.len as u64)
            .filter(|&end| end <= slot.len())
            .ok_or_else(|| {
                IoError::InvalidArgument(format!(
                    "{} bytes at offset {offset} lie outside the slot of {} bytes",
                    mem.len,
                    slot.len()
                ))
            })?;
        let mut chunks = Vec::new();
        let mut off = offset;
        while off < end {
            let n = self.io_chunk_bytes.min(end - off);
            chunks.push((
                slot.view(off, n)?,
                IoVec {
                    ptr: mem.ptr.wrapping_add((off - offset) as usize),
                    len: n as usize,
                },
            ));
            off += n;
        }
        {
            let mut q = lock(&self.shared.queue);
            if q.closed {
                return Err(IoError::Shutdown);
            }
            q.io.push_back(IoJob {
                direction,
                chunks,
                after,
                on_done,
            });
        }
        self.shared.ready.notify_all();
        Ok(())
    }
}

/// Runs `copy(offset, len)` over `len` bytes: at once, or in admitted chunks under `gate` (each logged on the gate
/// as `what`). Copies through the caller's own memory (a direct read or write of a stored copy, a copy to or from a
/// resident buffer) obey the arbiter this way.
pub(crate) fn copy_chunked<E>(
    gate: Option<&Gate>,
    len: usize,
    what: WorkKind,
    mut copy: impl FnMut(usize, usize) -> Result<(), E>,
) -> Result<(), E> {
    match gate {
        None => copy(0, len),
        // Offsets and lengths stay below `len`, so they fit in usize.
        Some(gate) => gate.run_chunked(len as u64, |off, n| {
            gate.record_run(what, n, || copy(off as usize, n as usize))
        }),
    }
}

/// A transfer path that obeys the arbiter: every transfer goes to the inner path with the gate's [`Pacer`], which
/// admits each of its steps, so the inner path never asks the gate itself (the pattern of foyer's `monitor.rs`:
/// a wrapper around any implementation of the trait).
#[derive(Debug)]
pub(crate) struct Gated<P> {
    inner: P,
    pacer: Arc<Pacer>,
}

impl<P: PacedPath> Gated<P> {
    /// `inner`, paced by `pacer`.
    pub(crate) fn new(inner: P, pacer: Arc<Pacer>) -> Self {
        Gated { inner, pacer }
    }

    /// The pacer it runs under.
    pub(crate) fn pacer(&self) -> &Arc<Pacer> {
        &self.pacer
    }
}

impl<P: PacedPath> TransferPath for Gated<P> {
    type Copy = P::Copy;

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn chunk_bytes(&self) -> Option<u64> {
        self.inner.chunk_bytes()
    }

    unsafe fn submit(&self, transfer: Transfer<'_, P::Copy>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.inner.submit_paced(transfer, &self.pacer) }
    }
}

#[derive(Debug)]
pub(crate) struct GatedIo {
    shared: Arc<Shared>,
    gate: Arc<Gate>,
    chunk_bytes: u64,
    pacer: Arc<Pacer>,
    worker: Option<JoinHandle<()>>,
    /// The process whose worker this is (a forked child has none).
    creator: Creator,
}

impl GatedIo {
    pub(crate) fn start(
        gate: Arc<Gate>,
        store: Arc<SwapStore>,
        device: Arc<dyn DeviceMemory>,
    ) -> Result<GatedIo, PagerError> {
        let align = store.alignment() as u64;
        let chunk_bytes = gate.chunk_bytes().max(1).next_multiple_of(align);
        let one_chunk = MmCost::new(gate.chunk_time(), Duration::ZERO);
        let shared = Arc::new(Shared {
            gate: Arc::clone(&gate),
            device,
            store,
            costs: Mutex::new((one_chunk, one_chunk)),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let worker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("oversub-gated-io".into())
                .spawn(move || {
                    while let Some(job) = shared.next(false) {
                        shared.run_caught(job);
                    }
                })
                .map_err(|source| {
                    PagerError::Store(IoError::Io {
                        op: "spawning the gated I/O thread",
                        source,
                    })
                })?
        };
        let pacer = Arc::new(Pacer {
            shared: Arc::clone(&shared),
            io_chunk_bytes: chunk_bytes,
        });
        Ok(GatedIo {
            shared,
            gate,
            chunk_bytes,
            pacer,
            worker: Some(worker),
            creator: Creator::current(),
        })
    }

    pub(crate) fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The pacer that [`Gated`] paths run their steps through.
    pub(crate) fn pacer(&self) -> &Arc<Pacer> {
        &self.pacer
    }

    /// A handle to the worker's lane of memory-map operations.
    pub(crate) fn mm_lane(&self) -> MmLane {
        MmLane {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The costs admissions use now.
    pub(crate) fn costs(&self) -> GateCosts {
        let (commit, decommit) = *lock(&self.shared.costs);
        GateCosts {
            chunk_bytes: self.chunk_bytes,
            chunk_time: self.gate.chunk_time(),
            commit,
            decommit,
        }
    }

    /// Sets the costs of commit and decommit.
    pub(crate) fn set_mm_costs(&self, commit: MmCost, decommit: MmCost) {
        *lock(&self.shared.costs) = (commit, decommit);
    }

    /// Measures T(Q) as the slowest one-chunk write or read through this store into device memory.
    pub(crate) fn calibrate(
        &self,
        device: &dyn DeviceMemory,
        samples: usize,
    ) -> Result<(), PagerError> {
        let len = usize::try_from(self.chunk_bytes)
            .map_err(|_| PagerError::InvalidSize("chunk size overflows".into()))?;
        let range = device.reserve(len)?;
        let result = self.calibrate_on(device, &range, samples);
        // SAFETY: the blocking transfers above are over; nothing else knows this range.
        let released = unsafe { device.unreserve(range) };
        let t = result?;
        released?;
        tracing::info!(
            chunk_bytes = self.chunk_bytes,
            chunk_time_us = t.as_secs_f64() * 1e6,
            "arbiter chunk time T(Q) measured on the store"
        );
        Ok(())
    }

    fn calibrate_on(
        &self,
        device: &dyn DeviceMemory,
        range: &Reservation,
        samples: usize,
    ) -> Result<std::time::Duration, PagerError> {
        device.commit(range)?;
        let len = self.chunk_bytes as usize;
        // A device the host cannot address moves each chunk through a pinned staging buffer: time that copy too.
        let (staging, ptr) = match device.host_ptr(range) {
            Some(ptr) => (None, ptr),
            None => {
                let buf = device.alloc_host(len, true)?;
                // The buffer's memory does not move with it.
                let ptr = buf.as_ptr();
                (Some(buf), ptr)
            }
        };
        let store = &self.shared.store;
        let slot = store.allocate(self.chunk_bytes)?;
        let iov = IoVec { ptr, len };
        let mut write = true;
        let result = self.gate.calibrate(samples.saturating_mul(2), || {
            let dir = if write {
                Direction::Write
            } else {
                Direction::Read
            };
            write = !write;
            if staging.is_some() && dir == Direction::Write {
                // SAFETY: the range is committed and `ptr` is our staging buffer of `len` bytes.
                let fence = unsafe { device.copy_to_host_async(range.addr, ptr, len) }?;
                device.fence_wait(fence)?;
            }
            // SAFETY: the range (or staging buffer) is valid for the whole call and the slot allocated; blocking.
            unsafe { store.transfer(dir, &slot, &[iov]) }?;
            if staging.is_some() && dir == Direction::Read {
                // SAFETY: as above, the other way round.
                let fence = unsafe { device.copy_from_host_async(range.addr, ptr, len) }?;
                device.fence_wait(fence)?;
            }
            Ok::<(), PagerError>(())
        });
        store.release(slot);
        result
    }

    /// Measures the worst-case costs of commit and decommit on `device`, uses them from now on and returns them.
    ///
    /// Each is timed `samples` times (after one warm-up) on the arbiter's clock, the decommit on a range whose
    /// pages were all written first, so that it has pages to zap: on small ranges (one granule, and the largest
    /// range below 2 MiB, which backends with huge pages map with small pages, the slowest per byte) and on a
    /// large one (16 MiB or eight granules). The slowest small time is the fixed part, and the large range's
    /// slowest time per MiB the part per MiB, so a range of any length, huge pages with a tail of small ones
    /// included, is covered, and never costs less than the slowest small one.
    pub(crate) fn measure_mm_costs(
        &self,
        device: &dyn DeviceMemory,
        samples: usize,
    ) -> Result<(MmCost, MmCost), PagerError> {
        let granule = device.granularity().max(1);
        let below_huge = (HUGE_PAGE_BYTES - 1) / granule * granule;
        let mut small = vec![granule];
        if below_huge > granule {
            small.push(below_huge);
        }
        let large = LARGE_CALIBRATION_BYTES
            .max(granule.saturating_mul(8))
            .next_multiple_of(granule);
        let (mut commit_fixed, mut decommit_fixed) = (0u64, 0u64);
        for len in small {
            let (c, d, _) = self.time_mm(device, len, samples)?;
            commit_fixed = commit_fixed.max(c);
            decommit_fixed = decommit_fixed.max(d);
        }
        let (c, d, len) = self.time_mm(device, large, samples)?;
        let per_mib = |worst_ns: u64| {
            let ns = (u128::from(worst_ns) * u128::from(MIB)).div_ceil(u128::from(len.max(1)));
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        };
        let commit = MmCost::new(Duration::from_nanos(commit_fixed), per_mib(c));
        let decommit = MmCost::new(Duration::from_nanos(decommit_fixed), per_mib(d));
        self.set_mm_costs(commit, decommit);
        tracing::info!(
            commit_fixed_us = commit.fixed.as_secs_f64() * 1e6,
            commit_per_mib_us = commit.per_mib.as_secs_f64() * 1e6,
            decommit_fixed_us = decommit.fixed.as_secs_f64() * 1e6,
            decommit_per_mib_us = decommit.per_mib.as_secs_f64() * 1e6,
            "arbiter costs of commit and decommit measured (worst cases: fixed + per MiB)"
        );
        Ok((commit, decommit))
    }

    /// The slowest commit and decommit of a range of `len` bytes (ns), and the range's length.
    fn time_mm(
        &self,
        device: &dyn DeviceMemory,
        len: usize,
        samples: usize,
    ) -> Result<(u64, u64, u64), PagerError> {
        let range = device.reserve(len)?;
        let clock = self.gate.arbiter().clock();
        let cycle = || -> Result<(u64, u64), PagerError> {
            let t0 = clock.now_ns();
            device.commit(&range)?;
            let commit = clock.now_ns().saturating_sub(t0);
            if let Some(p) = device.host_ptr(&range) {
                for off in (0..range.len).step_by(4096) {
                    // SAFETY: the range is committed, `range.len` bytes at `p`, and nothing else knows it.
                    unsafe { p.add(off).write_volatile(1) };
                }
            }
            let t1 = clock.now_ns();
            // SAFETY: the writes above are done and nothing else knows the range.
            unsafe { device.decommit(&range) }?;
            Ok((commit, clock.now_ns().saturating_sub(t1)))
        };
        let timed = || -> Result<(u64, u64), PagerError> {
            cycle()?;
            let mut worst = (1, 1);
            for _ in 0..samples.max(1) {
                let (c, d) = cycle()?;
                worst = (worst.0.max(c), worst.1.max(d));
            }
            Ok(worst)
        };
        let result = timed();
        // SAFETY: the cycles above are over; nothing else knows this range.
        let released = unsafe { device.unreserve(range) };
        let (c, d) = result?;
        released?;
        Ok((c, d, range.len as u64))
    }
}

impl Drop for GatedIo {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the worker does not exist here (joining it panics) and the queue's lock may have
            // been held by it at the fork. Leak the handle.
            std::mem::forget(self.worker.take());
            return;
        }
        // Closing the queue lets the worker finish queued jobs and stop.
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_all();
        if let Some(worker) = self.worker.take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}
