//! io_uring engine: one worker thread owns the ring and keeps up to `queue_depth`
//! vectored read/write SQEs in flight.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use io_uring::{opcode, squeue, types, IoUring};
use oversub_base::process::Creator;

use super::{
    check_queue_depth, elapsed_ns, join_worker, no_progress, open_batch, remaining_iovecs, Batch,
    Direction, IoCallback, IoCounters, IoCountersSnapshot, IoEngine, IoRequest,
};
use crate::error::IoError;

/// user_data of the always-armed eventfd read that wakes the worker for new jobs.
const WAKE_TOKEN: u64 = u64::MAX;

struct Job {
    requests: Vec<IoRequest>,
    batch: Arc<Batch>,
}

/// Engine built on io_uring (Linux 5.6+). Needs `io_uring_setup` and `io_uring_enter`
/// to be permitted (containers' seccomp profiles sometimes forbid them).
pub struct UringEngine {
    sender: Option<Sender<Job>>,
    wake: Arc<OwnedFd>,
    /// Set by the submitter that writes the eventfd, cleared by the worker when it reaps that write, before it
    /// next drains the queue: submitters in between skip their write (the worker will drain their jobs anyway).
    /// A 1 GiB checksummed page-in submits 128 pieces; one eventfd write each cost about half a millisecond on the
    /// caller's thread (issue 33).
    wake_pending: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    counters: Arc<IoCounters>,
    queue_depth: usize,
    /// The process whose worker this is (a forked child has none).
    creator: Creator,
}

queued_engine_debug!(UringEngine);

impl UringEngine {
    /// Creates the ring, checks that a NOP round-trips through it (`Unsupported`
    /// otherwise) and starts the worker thread.
    pub fn new(queue_depth: usize) -> Result<Self, IoError> {
        check_queue_depth(queue_depth)?;
        // +1 for the eventfd read that is always in flight.
        let entries = u32::try_from(queue_depth + 1)
            .map_err(|_| IoError::InvalidArgument("queue depth too large".into()))?;
        let mut ring = IoUring::new(entries)
            .map_err(|e| IoError::Unsupported(format!("io_uring_setup failed: {e}")))?;
        probe_nop(&mut ring)?;

        // SAFETY: plain syscall without pointer arguments.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(IoError::last_os("eventfd"));
        }
        // SAFETY: eventfd just returned this descriptor and nothing else owns it.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });

        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let counters = Arc::new(IoCounters::new());
        let wake_pending = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            ring,
            rx,
            wake: wake.clone(),
            wake_pending: Arc::clone(&wake_pending),
            wake_buf: Box::new(0u64),
            wake_armed: false,
            disconnected: false,
            pending: VecDeque::new(),
            slots: Vec::with_capacity(queue_depth),
            free_slots: Vec::new(),
            in_flight: 0,
            queue_depth,
            counters: counters.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("oversub-uring".into())
            .spawn(move || worker.run())
            .map_err(|source| IoError::Io {
                op: "spawn io_uring worker",
                source,
            })?;
        Ok(UringEngine {
            sender: Some(tx),
            wake,
            wake_pending,
            worker: Some(handle),
            counters,
            queue_depth,
            creator: Creator::current(),
        })
    }
}

/// Submits one NOP and waits for it: `io_uring_setup` can succeed where seccomp still
/// blocks `io_uring_enter`.
fn probe_nop(ring: &mut IoUring) -> Result<(), IoError> {
    let nop = opcode::Nop::new().build().user_data(0x6e6f70);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| IoError::Unsupported("io_uring submission queue full".into()))?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(IoError::Unsupported(format!("io_uring_enter failed: {e}"))),
        }
    }
    match ring.completion().next() {
        Some(cqe) if cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(IoError::Unsupported(format!(
            "io_uring NOP failed: {}",
            std::io::Error::from_raw_os_error(-cqe.result())
        ))),
        None => Err(IoError::Unsupported("io_uring NOP did not complete".into())),
    }
}

fn wake(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local to an eventfd we own.
    let n = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
    if n != 8 {
        tracing::error!(error = %std::io::Error::last_os_error(), "failed to wake io_uring worker");
    }
}

thread_local! {
    /// While a [`DeferredWakes`] lives on this thread: the workers it owes one wake-up each.
    static DEFERRED: std::cell::RefCell<Option<Vec<Arc<OwnedFd>>>> = const { std::cell::RefCell::new(None) };
}

/// Holds back the io_uring workers' wake-ups that this thread's submissions make while it lives, and wakes each
/// worker once when dropped. A transfer submitted in many batches (a checksummed page-in of 1 GiB is 128 pieces)
/// then costs one eventfd write instead of one per batch: each write wakes a worker that sleeps in
/// `io_uring_enter`, and together they took about 0.4 ms of the caller's 0.43 ms for 1 GiB (issue 33). Nested
/// guards are one. Other engines ignore it.
#[derive(Debug)]
#[must_use = "the wake-ups are held back only while the guard lives"]
pub struct DeferredWakes {
    outermost: bool,
}

impl DeferredWakes {
    /// Starts holding back wake-ups on this thread.
    pub fn begin() -> DeferredWakes {
        let outermost = DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_some() {
                return false;
            }
            *d = Some(Vec::new());
            true
        });
        DeferredWakes { outermost }
    }
}

impl Drop for DeferredWakes {
    fn drop(&mut self) {
        if !self.outermost {
            return;
        }
        let owed = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
        for fd in owed {
            wake(fd.as_raw_fd());
        }
    }
}

/// Records a wake-up owed to the worker behind `fd` when a [`DeferredWakes`] lives on this thread; false (wake it
/// now) otherwise.
fn defer_wake(fd: &Arc<OwnedFd>) -> bool {
    DEFERRED.with(|d| match d.borrow_mut().as_mut() {
        Some(owed) => {
            if !owed.iter().any(|o| Arc::ptr_eq(o, fd)) {
                owed.push(Arc::clone(fd));
            }
            true
        }
        None => false,
    })
}

// SAFETY: the callback runs only when every request of the batch has completed or was never submitted to the ring; submit fails only before the batch is queued.
unsafe impl IoEngine for UringEngine {
    queued_engine_methods!("io_uring");
}

impl UringEngine {
    /// `submit` and `submit_tagged`: hands the batch to the worker.
    fn enqueue(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        // Before the wake: the eventfd is shared with the parent, whose worker it would wake.
        let (sender, batch) = open_batch(
            self.creator,
            self.sender.as_ref(),
            &requests,
            on_done,
            tagged,
        )?;
        sender
            .send(Job { requests, batch })
            .map_err(|_| IoError::Shutdown)?;
        // After the send: a worker that clears the flag drains afterwards, so either it sees this job or this
        // swap sees the flag cleared and writes.
        if !self.wake_pending.swap(true, Ordering::SeqCst) && !defer_wake(&self.wake) {
            wake(self.wake.as_raw_fd());
        }
        Ok(())
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the worker does not exist here (joining it panics), the channel's lock may have been
            // held at the fork, and the eventfd is shared with the parent, whose worker a wake would disturb.
            // Leak the sender and the handle; closing the child's copies of the descriptors is harmless.
            std::mem::forget(self.sender.take());
            std::mem::forget(self.worker.take());
            return;
        }
        // Disconnect first, then wake: the worker finishes queued and in-flight work and
        // exits once it has seen the disconnect and its eventfd read completed.
        self.sender = None;
        wake(self.wake.as_raw_fd());
        if let Some(h) = self.worker.take() {
            join_worker(h);
        }
    }
}

/// One request, from queueing until completion.
struct Op {
    req: IoRequest,
    total: u64,
    done: u64,
    /// iovecs of the current SQE; its heap buffer must stay put while the SQE is in
    /// flight, so it is only rebuilt between submissions.
    iovs: Vec<libc::iovec>,
    batch: Arc<Batch>,
    started: Option<Instant>,
}

// SAFETY: `iovs` only holds addresses into memory of the request (already Send via
// IoVec) plus its own heap buffer; an Op is moved to the worker thread before use and
// only ever touched there.
unsafe impl Send for Op {}

struct Worker {
    ring: IoUring,
    rx: Receiver<Job>,
    wake: Arc<OwnedFd>,
    /// See [`UringEngine::wake_pending`].
    wake_pending: Arc<AtomicBool>,
    /// Target of the eventfd read; boxed so its address is stable.
    wake_buf: Box<u64>,
    wake_armed: bool,
    disconnected: bool,
    pending: VecDeque<Op>,
    /// In-flight ops, indexed by user_data.
    slots: Vec<Option<Op>>,
    free_slots: Vec<usize>,
    in_flight: usize,
    queue_depth: usize,
    counters: Arc<IoCounters>,
}

impl Worker {
    fn run(mut self) {
        let mut idle_errors = 0u32;
        loop {
            self.drain_jobs();
            self.fill();
            if !self.disconnected && !self.wake_armed {
                self.arm_wake();
            }
            if self.disconnected && self.pending.is_empty() && self.in_flight == 0 {
                if !self.wake_armed {
                    break;
                }
                // Drop's wake-up normally completes the armed read; wake ourselves too
                // so a lost write cannot leave us waiting forever.
                wake(self.wake.as_raw_fd());
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => idle_errors = 0,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // Nothing sensible to do but retry: completing in-flight batches
                    // early would let the kernel touch memory their owners reclaimed.
                    idle_errors = idle_errors.saturating_add(1);
                    if idle_errors == 1 || idle_errors.is_power_of_two() {
                        tracing::error!(error = %e, "io_uring_enter failed; retrying");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            self.reap();
        }
    }

    fn drain_jobs(&mut self) {
        if self.disconnected {
            return;
        }
        loop {
            match self.rx.try_recv() {
                Ok(job) => {
                    if job.requests.is_empty() {
                        job.batch.run_callback();
                        continue;
                    }
                    for req in job.requests {
                        self.pending.push_back(Op {
                            total: req.total_len(),
                            req,
                            done: 0,
                            iovs: Vec::new(),
                            batch: job.batch.clone(),
                            started: None,
                        });
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.disconnected = true;
                    break;
                }
            }
        }
    }

    fn arm_wake(&mut self) {
        let buf: *mut u64 = &mut *self.wake_buf;
        let sqe = opcode::Read::new(types::Fd(self.wake.as_raw_fd()), buf.cast(), 8)
            .build()
            .user_data(WAKE_TOKEN);
        // SAFETY: wake_buf is heap memory owned by the worker, which does not exit while
        // this read is armed (see `run`).
        if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
            self.wake_armed = true;
        }
    }

    /// Moves pending ops into the ring, up to queue_depth in flight.
    fn fill(&mut self) {
        while self.in_flight < self.queue_depth {
            let Some(mut op) = self.pending.pop_front() else {
                break;
            };
            if op.batch.is_failed() {
                // The batch already failed and no SQE of this op is in flight: skip the
                // rest of it.
                op.batch.cancel_one();
                continue;
            }
            let bytes = remaining_iovecs(&op.req.iovecs, op.done, &mut op.iovs);
            if bytes == 0 {
                self.counters.record(op.req.direction, 0, 0);
                op.batch.complete(&op.req, Ok(op.total));
                continue;
            }
            let idx = match self.free_slots.pop() {
                Some(i) => i,
                None => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
            };
            let fd = types::Fd(op.req.fd);
            let offset = op.req.offset + op.done;
            // op.iovs.len() <= IOV_MAX.
            let cnt = op.iovs.len() as u32;
            let sqe = match op.req.direction {
                Direction::Read => opcode::Readv::new(fd, op.iovs.as_ptr(), cnt)
                    .offset(offset)
                    .build(),
                Direction::Write => opcode::Writev::new(fd, op.iovs.as_ptr(), cnt)
                    .offset(offset)
                    .build(),
            }
            .user_data(idx as u64)
            .flags(squeue::Flags::empty());
            // SAFETY: the iovec array lives in op.iovs, which stays in self.slots (heap
            // buffer not touched) until the CQE arrives; the memory it points to is
            // guaranteed valid by the submitter until the batch callback runs.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                self.free_slots.push(idx);
                self.pending.push_front(op);
                break;
            }
            if op.started.is_none() {
                op.started = Some(Instant::now());
            }
            self.slots[idx] = Some(op);
            self.in_flight += 1;
        }
    }

    fn reap(&mut self) {
        let mut cqes = Vec::new();
        cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for (token, res) in cqes {
            if token == WAKE_TOKEN {
                self.wake_armed = false;
                // Before the next drain (module docs of the flag): later submitters write again.
                self.wake_pending.store(false, Ordering::SeqCst);
                if res < 0 && res != -libc::EINTR && res != -libc::EAGAIN {
                    tracing::error!(
                        error = %std::io::Error::from_raw_os_error(-res),
                        "io_uring eventfd read failed"
                    );
                }
                continue;
            }
            let Ok(idx) = usize::try_from(token) else {
                continue;
            };
            let Some(mut op) = self.slots.get_mut(idx).and_then(Option::take) else {
                tracing::error!(token, "io_uring completion for unknown request");
                continue;
            };
            self.free_slots.push(idx);
            self.in_flight -= 1;
            if !self.complete_step(&mut op, res) {
                // Short transfer, retryable error or IOV_MAX split: resubmit the rest
                // ahead of other pending work.
                self.pending.push_front(op);
            }
        }
    }

    /// Applies one CQE result to `op`; returns true when the request is finished
    /// (its batch has been told), false when the rest must be resubmitted.
    fn complete_step(&mut self, op: &mut Op, res: i32) -> bool {
        let latency = op.started.map(elapsed_ns).unwrap_or(0);
        let op_name = match op.req.direction {
            Direction::Read => "readv",
            Direction::Write => "writev",
        };
        let outcome: Option<Result<u64, IoError>> = if res < 0 {
            if res == -libc::EINTR || res == -libc::EAGAIN {
                None
            } else {
                Some(Err(IoError::from_errno(op_name, -res)))
            }
        } else if res == 0 {
            Some(Err(no_progress(
                op.req.direction,
                op.req.offset + op.done,
                op_name,
            )))
        } else {
            op.done += res as u64;
            if op.done >= op.total {
                Some(Ok(op.total))
            } else {
                None
            }
        };
        match outcome {
            Some(result) => {
                op.batch.finish(&op.req, result, &self.counters, latency);
                true
            }
            None => false,
        }
    }
}
