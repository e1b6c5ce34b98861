//! The checksum workers: threads of the pool that hash the pieces of checksummed transfers as their I/O completes,
//! so that the I/O engine's thread goes straight back to keeping its queue full.

use std::sync::Mutex;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};
use oversub_base::process::Creator;

use crate::PagerError;

type HashJob = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Hasher {
    tx: Mutex<Option<Sender<HashJob>>>,
    workers: Vec<JoinHandle<()>>,
    /// The process whose threads these are (a forked child has none).
    creator: Creator,
}

impl Hasher {
    /// Starts `threads` workers (at least one).
    pub(crate) fn start(threads: usize) -> Result<Hasher, PagerError> {
        let (tx, rx) = unbounded::<HashJob>();
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let worker = std::thread::Builder::new()
                .name(format!("oversub-hash-{i}"))
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .map_err(|source| {
                    PagerError::Store(oversub_io::IoError::Io {
                        op: "spawning a checksum thread",
                        source,
                    })
                })?;
            workers.push(worker);
        }
        Ok(Hasher {
            tx: Mutex::new(Some(tx)),
            workers,
            creator: Creator::current(),
        })
    }

    /// Runs `job` on a checksum thread, or here when they are gone (so a job is never lost).
    pub(crate) fn run(&self, job: HashJob) {
        let sent = match &*crate::space::lock(&self.tx) {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            job();
        }
    }
}

impl Drop for Hasher {
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
        drop(crate::space::lock(&self.tx).take());
        let me = std::thread::current().id();
        for worker in self.workers.drain(..) {
            if worker.thread().id() != me {
                let _ = worker.join();
            }
        }
    }
}
