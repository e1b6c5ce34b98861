//! The checksum worker: one thread per pool that hashes the pieces of checksummed transfers as their I/O completes,
//! so that the I/O engine's thread goes straight back to keeping its queue full.

use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::PagerError;

type HashJob = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Hasher {
    tx: Mutex<Option<Sender<HashJob>>>,
    worker: Option<JoinHandle<()>>,
}

impl Hasher {
    pub(crate) fn start() -> Result<Hasher, PagerError> {
        let (tx, rx) = channel::<HashJob>();
        let worker = std::thread::Builder::new()
            .name("oversub-hash".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|source| {
                PagerError::Store(oversub_io::IoError::Io {
                    op: "spawning the checksum thread",
                    source,
                })
            })?;
        Ok(Hasher {
            tx: Mutex::new(Some(tx)),
            worker: Some(worker),
        })
    }

    /// Runs `job` on the checksum thread, or here when that thread is gone (so a job is never lost).
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
        // Closing the channel lets the thread finish queued jobs and stop.
        drop(crate::space::lock(&self.tx).take());
        if let Some(worker) = self.worker.take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}
