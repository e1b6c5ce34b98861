//! Test doubles wrapping a real engine: [`FailingEngine`] injects failures by request number,
//! [`FailingFdEngine`] fails every request on one file (a failing member of a striped store),
//! [`CountingEngine`] counts requests and batches. Public so other crates' tests can
//! use them.

use oversub_base::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::{forward_to, Direction, IoCallback, IoCountersSnapshot, IoEngine, IoRequest};
use crate::error::IoError;

pub use oversub_base::mem::AlignedBuf;

/// The `IoEngine` impl of each test double below: every batch goes through the double's own `forward` (`tagged`
/// when the caller used `submit_tagged`), everything else straight to its inner engine.
macro_rules! forwarding_engine {
    ($($engine:ty),+ $(,)?) => {$(
        // SAFETY: each double's `forward` hands the batch to its real inner engine under the caller's promise, or
        // completes injected failures only after the inner batch finished (or without submitting anything).
        unsafe impl IoEngine for $engine {
            fn name(&self) -> &'static str {
                self.inner.name()
            }

            fn queue_depth(&self) -> usize {
                self.inner.queue_depth()
            }

            unsafe fn submit(&self, requests: Vec<IoRequest>, on_done: IoCallback) -> Result<(), IoError> {
                // SAFETY: forwarded from our caller.
                unsafe { self.forward(requests, on_done, false) }
            }

            unsafe fn submit_tagged(
                &self,
                requests: Vec<IoRequest>,
                on_done: IoCallback,
            ) -> Result<(), IoError> {
                // SAFETY: forwarded from our caller.
                unsafe { self.forward(requests, on_done, true) }
            }

            fn counters(&self) -> IoCountersSnapshot {
                self.inner.counters()
            }
        }
    )+};
}

forwarding_engine!(
    FailingEngine,
    FailingFdEngine,
    CountingEngine,
    RecordingEngine
);

/// Runs the requests `fails` passes (by index in the batch) on `inner`, then completes the batch with the error
/// `fails` gave the first one it failed (wrapped in [`IoError::Request`] when `tagged`), or as `inner` completes it
/// when none failed. Counts each failed request in `injected`.
///
/// # Safety
/// As [`IoEngine::submit`].
unsafe fn fail_some(
    inner: &dyn IoEngine,
    requests: Vec<IoRequest>,
    on_done: IoCallback,
    tagged: bool,
    injected: &AtomicU64,
    mut fails: impl FnMut(usize, &IoRequest) -> Option<IoError>,
) -> Result<(), IoError> {
    let mut failed = None;
    let mut kept = Vec::with_capacity(requests.len());
    for (i, req) in requests.into_iter().enumerate() {
        match fails(i, &req) {
            Some(e) => {
                failed.get_or_insert((e, req.fd, req.offset));
                injected.fetch_add(1, Ordering::Relaxed);
            }
            None => kept.push(req),
        }
    }
    let cb: IoCallback = match failed {
        None => on_done,
        // Runs after the inner engine finished the surviving requests, so the memory contract of `submit` holds.
        Some((e, fd, offset)) => Box::new(move |_| {
            on_done(Err(if tagged {
                IoError::Request {
                    fd,
                    offset,
                    source: Box::new(e),
                }
            } else {
                e
            }))
        }),
    };
    // SAFETY: forwarded from our caller.
    unsafe { forward_to(inner, kept, cb, tagged) }
}

/// Makes chosen requests fail with [`IoError::Injected`] without performing them.
///
/// Requests are numbered from 1 across all submits. The batch containing a failing
/// request still runs its other requests on the inner engine, then completes with
/// `Injected { nth }` (the first failing request's number in the batch).
#[derive(Debug)]
pub struct FailingEngine {
    inner: Arc<dyn IoEngine>,
    fail_from: u64,
    every_after: bool,
    next: AtomicU64,
    injected: AtomicU64,
}

impl FailingEngine {
    /// Fails only request number `fail_on_nth_request` (1-based).
    pub fn new(inner: Arc<dyn IoEngine>, fail_on_nth_request: u64) -> Self {
        FailingEngine {
            inner,
            fail_from: fail_on_nth_request,
            every_after: false,
            next: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Lets the first `n` requests through and fails every later one (`n + 1`, ...).
    pub fn fail_every_after(inner: Arc<dyn IoEngine>, n: u64) -> Self {
        FailingEngine {
            inner,
            fail_from: n.saturating_add(1),
            every_after: true,
            next: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Requests seen so far.
    pub fn requests_seen(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Requests failed so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    fn fails(&self, nth: u64) -> bool {
        if self.every_after {
            nth >= self.fail_from
        } else {
            nth == self.fail_from
        }
    }
}

impl FailingEngine {
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn forward(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        crate::engine::validate_requests(&requests)?;
        let first = self
            .next
            .fetch_add(requests.len() as u64, Ordering::Relaxed)
            + 1;
        let fails = |i: usize, _: &IoRequest| {
            let nth = first + i as u64;
            self.fails(nth).then_some(IoError::Injected { nth })
        };
        // SAFETY: forwarded from our caller.
        unsafe {
            fail_some(
                self.inner.as_ref(),
                requests,
                on_done,
                tagged,
                &self.injected,
                fails,
            )
        }
    }
}

/// Fails every request on one file descriptor (a failing disk), as the OS would: with an [`IoError::Io`] whose
/// source is `EIO`, the op named `preadv`/`pwritev`. The batch's other requests run on the inner engine; the batch
/// then completes with the error (wrapped in [`IoError::Request`] when it came through
/// [`IoEngine::submit_tagged`]). Nothing fails until [`fail_fd`](Self::fail_fd) names a descriptor, so a test can
/// write first and break the file afterwards.
#[derive(Debug)]
pub struct FailingFdEngine {
    inner: Arc<dyn IoEngine>,
    fd: std::sync::atomic::AtomicI32,
    injected: AtomicU64,
}

impl FailingFdEngine {
    /// Wraps `inner`; fails nothing yet.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        FailingFdEngine {
            inner,
            fd: std::sync::atomic::AtomicI32::new(-1),
            injected: AtomicU64::new(0),
        }
    }

    /// From now on, fails every request on `fd`; `None` heals it.
    pub fn fail_fd(&self, fd: Option<std::os::fd::RawFd>) {
        self.fd.store(fd.unwrap_or(-1), Ordering::Relaxed);
    }

    /// Requests failed so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn forward(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        crate::engine::validate_requests(&requests)?;
        let bad = self.fd.load(Ordering::Relaxed);
        let fails = |_: usize, req: &IoRequest| {
            (bad >= 0 && req.fd == bad).then(|| IoError::Io {
                op: match req.direction {
                    Direction::Read => "preadv",
                    Direction::Write => "pwritev",
                },
                source: std::io::Error::from_raw_os_error(libc::EIO),
            })
        };
        // SAFETY: forwarded from our caller.
        unsafe {
            fail_some(
                self.inner.as_ref(),
                requests,
                on_done,
                tagged,
                &self.injected,
                fails,
            )
        }
    }
}

/// Counts requests, batches and bytes submitted to the inner engine.
#[derive(Debug)]
pub struct CountingEngine {
    inner: Arc<dyn IoEngine>,
    read_requests: AtomicU64,
    write_requests: AtomicU64,
    read_batches: AtomicU64,
    write_batches: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl CountingEngine {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        CountingEngine {
            inner,
            read_requests: AtomicU64::new(0),
            write_requests: AtomicU64::new(0),
            read_batches: AtomicU64::new(0),
            write_batches: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }
    }

    /// Read requests submitted.
    pub fn read_requests(&self) -> u64 {
        self.read_requests.load(Ordering::Relaxed)
    }

    /// Write requests submitted.
    pub fn write_requests(&self) -> u64 {
        self.write_requests.load(Ordering::Relaxed)
    }

    /// Batches whose first request is a read.
    pub fn read_batches(&self) -> u64 {
        self.read_batches.load(Ordering::Relaxed)
    }

    /// Batches whose first request is a write.
    pub fn write_batches(&self) -> u64 {
        self.write_batches.load(Ordering::Relaxed)
    }

    /// Bytes of submitted read requests.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Bytes of submitted write requests.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }
}

impl CountingEngine {
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn forward(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        // Lengths are summed below; refuse overflowing batches first, as the inner engine would.
        crate::engine::validate_requests(&requests)?;
        let first_dir = requests.first().map(|r| r.direction);
        let mut reads = 0;
        let mut writes = 0;
        let mut rbytes = 0;
        let mut wbytes = 0;
        for r in &requests {
            match r.direction {
                Direction::Read => {
                    reads += 1;
                    rbytes += r.total_len();
                }
                Direction::Write => {
                    writes += 1;
                    wbytes += r.total_len();
                }
            }
        }
        // SAFETY: forwarded from our caller.
        unsafe { forward_to(self.inner.as_ref(), requests, on_done, tagged) }?;
        // Counted only once accepted, so rejected batches do not skew the numbers.
        self.read_requests.fetch_add(reads, Ordering::Relaxed);
        self.write_requests.fetch_add(writes, Ordering::Relaxed);
        self.bytes_read.fetch_add(rbytes, Ordering::Relaxed);
        self.bytes_written.fetch_add(wbytes, Ordering::Relaxed);
        match first_dir {
            Some(Direction::Read) => self.read_batches.fetch_add(1, Ordering::Relaxed),
            Some(Direction::Write) => self.write_batches.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
        Ok(())
    }
}

/// One request as a [`RecordingEngine`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Read or write.
    pub direction: Direction,
    /// File descriptor (which member, for a striped store).
    pub fd: std::os::fd::RawFd,
    /// File offset.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Batch number (from 0), so requests submitted together can be grouped.
    pub batch: u64,
}

/// Called with each request before it is forwarded (for example to read a clock).
pub type RequestObserver = Box<dyn Fn(&RecordedRequest) + Send + Sync>;

/// Records every request (and calls an optional observer) before forwarding it to the inner engine.
pub struct RecordingEngine {
    inner: Arc<dyn IoEngine>,
    log: std::sync::Mutex<Vec<RecordedRequest>>,
    batches: AtomicU64,
    observer: Option<RequestObserver>,
}

impl std::fmt::Debug for RecordingEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingEngine")
            .field("inner", &self.inner)
            .field("batches", &self.batches)
            .finish_non_exhaustive()
    }
}

impl RecordingEngine {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        RecordingEngine {
            inner,
            log: std::sync::Mutex::new(Vec::new()),
            batches: AtomicU64::new(0),
            observer: None,
        }
    }

    /// Wraps `inner`, calling `observer` with every request just before it is submitted.
    pub fn with_observer(inner: Arc<dyn IoEngine>, observer: RequestObserver) -> Self {
        RecordingEngine {
            observer: Some(observer),
            ..Self::new(inner)
        }
    }

    /// Every request so far, in submission order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.log).clone()
    }
}

impl RecordingEngine {
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn forward(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        crate::engine::validate_requests(&requests)?;
        let batch = self.batches.fetch_add(1, Ordering::Relaxed);
        for r in &requests {
            let rec = RecordedRequest {
                direction: r.direction,
                fd: r.fd,
                offset: r.offset,
                len: r.total_len(),
                batch,
            };
            if let Some(obs) = &self.observer {
                obs(&rec);
            }
            lock(&self.log).push(rec);
        }
        // SAFETY: forwarded from our caller.
        unsafe { forward_to(self.inner.as_ref(), requests, on_done, tagged) }
    }
}
