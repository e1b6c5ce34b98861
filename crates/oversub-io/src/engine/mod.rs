//! I/O engines: the [`IoEngine`] trait, its request types and the two implementations
//! (io_uring and a psync thread pool).

/// The [`IoEngine`] methods the two queueing engines answer alike, inside their `unsafe impl IoEngine` (each keeps
/// its own SAFETY argument): `name`, `queue_depth` and `counters` from their fields of those names, `submit` and
/// `submit_tagged` through their `enqueue(requests, on_done, tagged)`.
macro_rules! queued_engine_methods {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn queue_depth(&self) -> usize {
            self.queue_depth
        }

        unsafe fn submit(
            &self,
            requests: Vec<IoRequest>,
            on_done: IoCallback,
        ) -> Result<(), IoError> {
            self.enqueue(requests, on_done, false)
        }

        unsafe fn submit_tagged(
            &self,
            requests: Vec<IoRequest>,
            on_done: IoCallback,
        ) -> Result<(), IoError> {
            self.enqueue(requests, on_done, true)
        }

        fn counters(&self) -> IoCountersSnapshot {
            self.counters.snapshot()
        }
    };
}

/// The `Debug` of the two queueing engines: their type, queue depth and counters.
macro_rules! queued_engine_debug {
    ($engine:ident) => {
        impl std::fmt::Debug for $engine {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($engine))
                    .field("queue_depth", &self.queue_depth)
                    .field("counters", &self.counters.snapshot())
                    .finish()
            }
        }
    };
}

mod priority;
mod psync;
mod uring;

pub use priority::{PriorityEngine, DEFAULT_STARVATION_BOUND};
pub use psync::PsyncEngine;
pub use uring::{DeferredWakes, UringEngine};

use oversub_base::sync::lock;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::IoError;

/// Most iovecs the kernel takes in one vectored call (`IOV_MAX` on Linux); longer
/// requests are transferred in several calls.
pub(crate) const IOV_MAX: usize = 1024;

/// Largest queue depth accepted; bounds worker threads (psync) and ring size (io_uring).
pub(crate) const MAX_QUEUE_DEPTH: usize = 4096;

/// Transfer direction, seen from memory: `Read` fills memory from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// File -> memory.
    Read,
    /// Memory -> file.
    Write,
}

/// One contiguous memory region of a request (defined in base beside [`AlignedBuf`](crate::AlignedBuf), which
/// hands one out).
pub use oversub_base::mem::IoVec;

/// A request: memory scattered over `iovecs`, contiguous in the file starting at `offset`.
#[derive(Debug)]
pub struct IoRequest {
    /// File descriptor to read from / write to.
    pub fd: RawFd,
    /// Read or write.
    pub direction: Direction,
    /// File offset of the first byte.
    pub offset: u64,
    /// Memory regions, filled/drained in order.
    pub iovecs: Vec<IoVec>,
}

impl IoRequest {
    /// Total bytes of the request.
    pub fn total_len(&self) -> u64 {
        self.iovecs.iter().map(|v| v.len as u64).sum()
    }
}

/// Result of a completed batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct IoDone {
    /// Bytes transferred by the whole batch.
    pub bytes: u64,
}

/// Completion callback of a batch; runs exactly once on an engine thread.
pub type IoCallback = Box<dyn FnOnce(Result<IoDone, IoError>) + Send + 'static>;

/// An asynchronous executor of batches of file I/O requests.
///
/// # Safety
/// Callers hand engines raw memory and rely on these promises: `on_done` runs exactly once per accepted batch, and
/// only after the engine (and the kernel on its behalf) has stopped touching every iovec of the batch; when
/// `submit` returns `Err`, `on_done` has not run and never will, and no I/O of the batch was started; nothing
/// outside the given iovecs is read or written.
pub unsafe trait IoEngine: Send + Sync + std::fmt::Debug {
    /// `"io_uring"` or `"psync"` (test doubles report their inner engine's name).
    fn name(&self) -> &'static str;
    /// Max requests in flight across all batches.
    fn queue_depth(&self) -> usize;
    /// Submits a batch that completes as one unit; `on_done` runs exactly once, on an
    /// engine thread, after every request of the batch finished (Ok with total bytes, or
    /// the first error; when one request fails the others of the batch still finish or
    /// are cancelled before `on_done` runs, so the memory is no longer touched once
    /// `on_done` is called). Returns Err (and never calls `on_done`) only if the engine
    /// cannot accept work (shut down) or the batch is malformed. Returns quickly: the I/O
    /// happens on engine threads.
    ///
    /// # Safety
    /// Every IoVec must stay valid (and, for reads, not otherwise accessed) until
    /// `on_done` has run; fds stay open until then.
    unsafe fn submit(&self, requests: Vec<IoRequest>, on_done: IoCallback) -> Result<(), IoError>;
    /// As [`submit`](Self::submit), except that the error of a failed request comes back as
    /// [`IoError::Request`], naming the request's fd and offset, so that a caller putting several files into one
    /// batch (a striped [`SwapStore`](crate::SwapStore)) can tell which failed. Both built-in engines and the test
    /// doubles of [`crate::testing`] do this; the default forwards to `submit` (errors come back untagged).
    ///
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn submit_tagged(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.submit(requests, on_done) }
    }
    /// As [`submit`](Self::submit) (or [`submit_tagged`](Self::submit_tagged) when `tagged`), with a priority:
    /// an engine that orders its queue ([`PriorityEngine`]) starts the requests of larger priorities first; the
    /// default ignores it.
    ///
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn submit_with_priority(
        &self,
        requests: Vec<IoRequest>,
        priority: i64,
        tagged: bool,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        let _ = priority;
        // SAFETY: forwarded from our caller.
        unsafe { forward_to(self, requests, on_done, tagged) }
    }
    /// Snapshot of the engine's I/O counters.
    fn counters(&self) -> IoCountersSnapshot;
}

/// Submits to `inner`, tagged or not.
///
/// # Safety
/// As [`IoEngine::submit`].
pub(crate) unsafe fn forward_to<E: IoEngine + ?Sized>(
    inner: &E,
    requests: Vec<IoRequest>,
    on_done: IoCallback,
    tagged: bool,
) -> Result<(), IoError> {
    // SAFETY: forwarded from our caller.
    unsafe {
        if tagged {
            inner.submit_tagged(requests, on_done)
        } else {
            inner.submit(requests, on_done)
        }
    }
}

/// Submits a batch and blocks until it is done.
///
/// # Safety
/// As [`IoEngine::submit`].
pub unsafe fn submit_wait(
    engine: &dyn IoEngine,
    requests: Vec<IoRequest>,
) -> Result<IoDone, IoError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let cb: IoCallback = Box::new(move |res| {
        // The receiver only disappears if the waiter is gone, then nobody cares.
        let _ = tx.send(res);
    });
    // SAFETY: forwarded from our caller; we block until on_done ran, so borrowed memory
    // outlives the I/O.
    unsafe { engine.submit(requests, cb) }?;
    rx.recv().unwrap_or(Err(IoError::Shutdown))
}

/// Which engine [`select_engine`] should build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum EngineChoice {
    /// io_uring when it works here, psync otherwise.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "io_uring when the kernel allows it, else psync")
    )]
    Auto,
    /// io_uring or an error.
    #[cfg_attr(feature = "clap", value(help = "io_uring only"))]
    Uring,
    /// The psync thread pool.
    #[cfg_attr(feature = "clap", value(help = "preadv/pwritev on a thread pool"))]
    Psync,
}

/// Builds an engine. `Auto` probes io_uring (creating a ring and completing a NOP, since
/// seccomp may block `io_uring_enter` but not `io_uring_setup`) and falls back to psync
/// with a warning. An explicit `Uring` that is unavailable gives `Unsupported`.
pub fn select_engine(
    choice: EngineChoice,
    queue_depth: usize,
) -> Result<Arc<dyn IoEngine>, IoError> {
    check_queue_depth(queue_depth)?;
    match choice {
        EngineChoice::Psync => Ok(Arc::new(PsyncEngine::new(queue_depth)?)),
        EngineChoice::Uring => match UringEngine::new(queue_depth) {
            Ok(e) => Ok(Arc::new(e)),
            Err(e @ IoError::Unsupported(_)) => Err(e),
            Err(e) => Err(IoError::Unsupported(format!("io_uring unavailable: {e}"))),
        },
        EngineChoice::Auto => match UringEngine::new(queue_depth) {
            Ok(e) => Ok(Arc::new(e)),
            Err(err) => {
                tracing::warn!(error = %err, "io_uring unavailable, falling back to the psync engine");
                Ok(Arc::new(PsyncEngine::new(queue_depth)?))
            }
        },
    }
}

pub(crate) fn check_queue_depth(queue_depth: usize) -> Result<(), IoError> {
    if queue_depth == 0 || queue_depth > MAX_QUEUE_DEPTH {
        return Err(IoError::InvalidArgument(format!(
            "queue depth must be in 1..={MAX_QUEUE_DEPTH}, got {queue_depth}"
        )));
    }
    Ok(())
}

/// Rejects malformed requests before any work is accepted, so that `on_done` is never
/// called for a batch whose submit failed.
pub(crate) fn validate_requests(requests: &[IoRequest]) -> Result<(), IoError> {
    for r in requests {
        let mut total: u64 = 0;
        for v in &r.iovecs {
            if v.ptr.is_null() && v.len > 0 {
                return Err(IoError::InvalidArgument("null iovec pointer".into()));
            }
            total = total
                .checked_add(v.len as u64)
                .ok_or_else(|| IoError::InvalidArgument("request length overflows".into()))?;
        }
        if r.offset.checked_add(total).is_none() || r.offset.saturating_add(total) > i64::MAX as u64
        {
            return Err(IoError::InvalidArgument(format!(
                "request at offset {} of {total} bytes exceeds the largest file offset",
                r.offset
            )));
        }
        if r.fd < 0 {
            return Err(IoError::InvalidArgument(format!("bad fd {}", r.fd)));
        }
    }
    Ok(())
}

/// Atomic I/O counters kept by an engine.
#[derive(Debug, Default)]
pub struct IoCounters {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    errors: AtomicU64,
    latency_ns_total: AtomicU64,
}

/// A point-in-time copy of [`IoCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCountersSnapshot {
    /// Completed read requests.
    pub reads: u64,
    /// Completed write requests.
    pub writes: u64,
    /// Bytes read by completed requests.
    pub bytes_read: u64,
    /// Bytes written by completed requests.
    pub bytes_written: u64,
    /// Failed requests.
    pub errors: u64,
    /// Sum of request latencies (start of the first transfer to completion), ns.
    pub latency_ns_total: u64,
}

impl IoCounters {
    /// New zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a successful request.
    pub fn record(&self, direction: Direction, bytes: u64, latency_ns: u64) {
        match direction {
            Direction::Read => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
            }
            Direction::Write => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        self.latency_ns_total
            .fetch_add(latency_ns, Ordering::Relaxed);
    }

    /// Records a failed request.
    pub fn record_error(&self, latency_ns: u64) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.latency_ns_total
            .fetch_add(latency_ns, Ordering::Relaxed);
    }

    /// Current values.
    pub fn snapshot(&self) -> IoCountersSnapshot {
        IoCountersSnapshot {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency_ns_total: self.latency_ns_total.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn elapsed_ns(since: std::time::Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Shared completion state of one batch: the last request to finish runs the callback.
pub(crate) struct Batch {
    remaining: AtomicUsize,
    bytes: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<IoError>>,
    on_done: Mutex<Option<IoCallback>>,
    /// Errors are wrapped in [`IoError::Request`] (the batch came from `submit_tagged`).
    tagged: bool,
}

impl Batch {
    pub(crate) fn new(requests: usize, on_done: IoCallback, tagged: bool) -> Arc<Self> {
        Arc::new(Batch {
            remaining: AtomicUsize::new(requests),
            bytes: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            on_done: Mutex::new(Some(on_done)),
            tagged,
        })
    }

    /// True once a request failed; not-yet-started requests are then skipped.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Request `req` finished (or failed).
    pub(crate) fn complete(&self, req: &IoRequest, result: Result<u64, IoError>) {
        match result {
            Ok(bytes) => {
                self.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(e) => {
                let mut slot = lock(&self.error);
                if slot.is_none() {
                    *slot = Some(if self.tagged {
                        IoError::Request {
                            fd: req.fd,
                            offset: req.offset,
                            source: Box::new(e),
                        }
                    } else {
                        e
                    });
                }
                self.failed.store(true, Ordering::Release);
            }
        }
        self.finish_one();
    }

    /// Request `req` ended after `latency_ns`: counted in `counters` (bytes, or an error), then [`complete`]d. Both
    /// engines' completion bookkeeping, so that they count alike.
    ///
    /// [`complete`]: Batch::complete
    pub(crate) fn finish(
        &self,
        req: &IoRequest,
        result: Result<u64, IoError>,
        counters: &IoCounters,
        latency_ns: u64,
    ) {
        match &result {
            Ok(bytes) => counters.record(req.direction, *bytes, latency_ns),
            Err(_) => counters.record_error(latency_ns),
        }
        self.complete(req, result);
    }

    /// One request was skipped without touching its memory.
    pub(crate) fn cancel_one(&self) {
        self.finish_one();
    }

    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.run_callback();
        }
    }

    /// Runs the callback; called by the last finisher, or directly for empty batches.
    pub(crate) fn run_callback(&self) {
        let cb = lock(&self.on_done).take();
        let err = lock(&self.error).take();
        let result = match err {
            Some(e) => Err(e),
            None => Ok(IoDone {
                bytes: self.bytes.load(Ordering::Acquire),
            }),
        };
        if let Some(cb) = cb {
            // A panicking callback must not take an engine thread (and every later
            // batch) down with it.
            if catch_unwind(AssertUnwindSafe(move || cb(result))).is_err() {
                tracing::error!("I/O completion callback panicked");
            }
        }
    }
}

/// What a submission checks, in this order, before an engine queues anything (so that on `Err` no I/O started and
/// `on_done` never runs): the process is the engine's creator, the requests are well formed, the engine is open
/// (`sender`). Then the batch that counts the requests' completions, and the sender to queue it on.
pub(crate) fn open_batch<'s, T>(
    creator: oversub_base::process::Creator,
    sender: Option<&'s crossbeam_channel::Sender<T>>,
    requests: &[IoRequest],
    on_done: IoCallback,
    tagged: bool,
) -> Result<(&'s crossbeam_channel::Sender<T>, Arc<Batch>), IoError> {
    check_creator(creator)?;
    validate_requests(requests)?;
    let sender = sender.ok_or(IoError::Shutdown)?;
    Ok((sender, Batch::new(requests.len(), on_done, tagged)))
}

/// The error of a transfer that moved no bytes: the end of the file for a read, `WriteZero` for a write (`op` is
/// the system call's name).
pub(crate) fn no_progress(direction: Direction, offset: u64, op: &'static str) -> IoError {
    match direction {
        Direction::Read => IoError::UnexpectedEof { offset },
        Direction::Write => IoError::Io {
            op,
            source: std::io::ErrorKind::WriteZero.into(),
        },
    }
}

/// Fills `out` with the part of `iovecs` after the first `skip` bytes, at most
/// [`IOV_MAX`] entries; returns the byte count described.
pub(crate) fn remaining_iovecs(iovecs: &[IoVec], skip: u64, out: &mut Vec<libc::iovec>) -> u64 {
    out.clear();
    let mut skip = skip;
    let mut bytes = 0u64;
    for v in iovecs {
        let len = v.len as u64;
        if len == 0 {
            continue;
        }
        if skip >= len {
            skip -= len;
            continue;
        }
        // `skip < len <= usize::MAX`, so the cast is lossless.
        let start = skip as usize;
        skip = 0;
        out.push(libc::iovec {
            iov_base: v.ptr.wrapping_add(start).cast(),
            iov_len: v.len - start,
        });
        bytes += (v.len - start) as u64;
        if out.len() == IOV_MAX {
            break;
        }
    }
    bytes
}

/// Joins a worker unless it is the current thread (an engine dropped from its own
/// completion callback), which then finishes on its own.
/// Refuses work in a forked child of the engine's creator: the engine's threads did not survive the fork, so the
/// batch would never complete.
pub(crate) fn check_creator(creator: oversub_base::process::Creator) -> Result<(), IoError> {
    match creator.forked() {
        None => Ok(()),
        Some(pid) => Err(IoError::Forked {
            owner_pid: creator.pid(),
            pid,
        }),
    }
}

pub(crate) fn join_worker(handle: std::thread::JoinHandle<()>) {
    if handle.thread().id() == std::thread::current().id() {
        return;
    }
    if handle.join().is_err() {
        tracing::error!("I/O engine worker thread panicked");
    }
}
