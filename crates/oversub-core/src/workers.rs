//! The pool's worker threads: the checksum workers, which hash the pieces of checksummed transfers as their I/O
//! completes (so that the I/O engine's thread goes straight back to keeping its queue full), and the starter, which
//! commits the memory of a large page-in and queues its read (so that the caller does not wait for the commit).

use std::sync::Mutex;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};
use oversub_base::process::Creator;

use crate::PagerError;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Workers {
    tx: Mutex<Option<Sender<Job>>>,
    workers: Vec<JoinHandle<()>>,
    /// The process whose threads these are (a forked child has none).
    creator: Creator,
}

impl Workers {
    /// Starts `threads` workers (at least one), named `{name}-{i}`; `role` says what they do in a spawn error.
    /// `yielding` workers run under `SCHED_BATCH`: a job handed to one does not preempt the thread that handed it
    /// over (on a busy machine, waking a normal thread can take the caller's CPU for the whole job).
    pub(crate) fn start(
        name: &str,
        role: &'static str,
        threads: usize,
        yielding: bool,
    ) -> Result<Workers, PagerError> {
        let (tx, rx) = unbounded::<Job>();
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let worker = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    if yielding {
                        batch_policy();
                    }
                    for job in rx {
                        job();
                    }
                })
                .map_err(|source| {
                    PagerError::Store(oversub_io::IoError::Io { op: role, source })
                })?;
            workers.push(worker);
        }
        Ok(Workers {
            tx: Mutex::new(Some(tx)),
            workers,
            creator: Creator::current(),
        })
    }

    /// Runs `job` on a worker thread, or here when they are gone (so a job is never lost).
    pub(crate) fn run(&self, job: Job) {
        let sent = match &*oversub_base::sync::lock(&self.tx) {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            job();
        }
    }
}

/// Puts the calling thread under `SCHED_BATCH` (same priority, no wake-up preemption); left as it is where the
/// kernel refuses.
fn batch_policy() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system call on the calling thread (pid 0) with a valid parameter block; no memory is kept.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        tracing::debug!("SCHED_BATCH refused: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the threads do not exist here (joining them panics) and the channel's locks may have
            // been held by one of them at the fork. Leak both; the memory goes with the child.
            let tx = self.tx.get_mut().unwrap_or_else(|p| p.into_inner()).take();
            std::mem::forget(tx);
            std::mem::forget(std::mem::take(&mut self.workers));
            return;
        }
        // Closing the channel lets the threads finish queued jobs and stop.
        drop(oversub_base::sync::lock(&self.tx).take());
        let me = std::thread::current().id();
        for worker in self.workers.drain(..) {
            if worker.thread().id() != me {
                let _ = worker.join();
            }
        }
    }
}
