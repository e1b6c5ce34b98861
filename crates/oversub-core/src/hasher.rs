//! The checksum workers: threads of the pool that hash the pieces of checksummed transfers as their I/O completes,
//! so that the I/O engine's thread goes straight back to keeping its queue full.

use std::sync::Mutex;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};

use crate::PagerError;

type HashJob = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Hasher {
    tx: Mutex<Option<Sender<HashJob>>>,
    workers: Vec<JoinHandle<()>>,
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
