//! Thread-pool engine: `queue_depth` workers doing blocking `preadv`/`pwritev`.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use oversub_base::process::Creator;

use super::{
    check_queue_depth, elapsed_ns, join_worker, no_progress, open_batch, remaining_iovecs, Batch,
    Direction, IoCallback, IoCounters, IoCountersSnapshot, IoEngine, IoRequest,
};
use crate::error::IoError;

/// One unit of work; `req == None` is an empty batch whose callback still has to run
/// on an engine thread.
struct Task {
    req: Option<IoRequest>,
    batch: Arc<Batch>,
}

/// Engine that runs each request on one of `queue_depth` threads with `preadv`/`pwritev`.
/// Works wherever plain syscalls do (no io_uring needed).
pub struct PsyncEngine {
    sender: Option<Sender<Task>>,
    workers: Vec<JoinHandle<()>>,
    counters: Arc<IoCounters>,
    queue_depth: usize,
    /// The process whose workers these are (a forked child has none).
    creator: Creator,
}

queued_engine_debug!(PsyncEngine);

impl PsyncEngine {
    /// Starts `queue_depth` worker threads.
    pub fn new(queue_depth: usize) -> Result<Self, IoError> {
        check_queue_depth(queue_depth)?;
        let (tx, rx) = crossbeam_channel::unbounded::<Task>();
        let counters = Arc::new(IoCounters::new());
        let mut engine = PsyncEngine {
            sender: Some(tx),
            workers: Vec::with_capacity(queue_depth),
            counters: counters.clone(),
            queue_depth,
            creator: Creator::current(),
        };
        for i in 0..queue_depth {
            let rx = rx.clone();
            let counters = counters.clone();
            let handle = std::thread::Builder::new()
                .name(format!("oversub-psync-{i}"))
                .spawn(move || worker(rx, counters))
                .map_err(|source| IoError::Io {
                    op: "spawn psync worker",
                    source,
                })?;
            // On an early return, Drop joins the workers started so far.
            engine.workers.push(handle);
        }
        Ok(engine)
    }
}

// SAFETY: each request runs to its end on one worker before the batch counter reaches zero and the callback runs; submit only fails before anything is queued.
unsafe impl IoEngine for PsyncEngine {
    queued_engine_methods!("psync");
}

impl PsyncEngine {
    /// `submit` and `submit_tagged`: queues the batch's requests for the workers.
    fn enqueue(
        &self,
        requests: Vec<IoRequest>,
        on_done: IoCallback,
        tagged: bool,
    ) -> Result<(), IoError> {
        let (sender, batch) = open_batch(
            self.creator,
            self.sender.as_ref(),
            &requests,
            on_done,
            tagged,
        )?;
        if requests.is_empty() {
            return sender
                .send(Task { req: None, batch })
                .map_err(|_| IoError::Shutdown);
        }
        for req in requests {
            // Workers only exit once the sender is dropped, which needs `&mut self`, so
            // sends cannot fail part-way through a batch.
            sender
                .send(Task {
                    req: Some(req),
                    batch: batch.clone(),
                })
                .map_err(|_| IoError::Shutdown)?;
        }
        Ok(())
    }
}

impl Drop for PsyncEngine {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the workers do not exist here (joining them panics), and the channel's lock may
            // have been held by one of them at the fork. Leak both; the memory goes with the child.
            std::mem::forget(self.sender.take());
            std::mem::forget(std::mem::take(&mut self.workers));
            return;
        }
        // Closing the channel lets workers drain queued tasks and then exit.
        self.sender = None;
        for h in self.workers.drain(..) {
            join_worker(h);
        }
    }
}

fn worker(rx: Receiver<Task>, counters: Arc<IoCounters>) {
    let mut scratch = Vec::new();
    for task in rx.iter() {
        let Some(req) = task.req else {
            task.batch.run_callback();
            continue;
        };
        if task.batch.is_failed() {
            task.batch.cancel_one();
            continue;
        }
        let start = Instant::now();
        let result = run_request(&req, &mut scratch);
        task.batch
            .finish(&req, result, &counters, elapsed_ns(start));
    }
}

/// Transfers the whole request, looping over short transfers, EINTR and IOV_MAX.
fn run_request(req: &IoRequest, scratch: &mut Vec<libc::iovec>) -> Result<u64, IoError> {
    let total = req.total_len();
    let mut done = 0u64;
    while done < total {
        remaining_iovecs(&req.iovecs, done, scratch);
        let offset = req.offset + done;
        let off = libc::off_t::try_from(offset)
            .map_err(|_| IoError::InvalidArgument(format!("offset {offset} too large")))?;
        // scratch.len() <= IOV_MAX, so it fits in c_int.
        let cnt = scratch.len() as libc::c_int;
        let n = match req.direction {
            // SAFETY: the iovecs describe memory the submitter guaranteed valid (and
            // exclusively ours for reads) until the batch callback runs.
            Direction::Read => unsafe { libc::preadv(req.fd, scratch.as_ptr(), cnt, off) },
            // SAFETY: as above; writes only read the memory.
            Direction::Write => unsafe { libc::pwritev(req.fd, scratch.as_ptr(), cnt, off) },
        };
        let op = match req.direction {
            Direction::Read => "preadv",
            Direction::Write => "pwritev",
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(IoError::Io { op, source: err });
        }
        if n == 0 {
            return Err(no_progress(req.direction, offset, op));
        }
        done += n as u64;
    }
    Ok(total)
}
