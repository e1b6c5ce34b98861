//! The checksum workers: threads of the pool that hash the pieces of checksummed transfers as their I/O completes,
//! so that the I/O engine's thread goes straight back to keeping its queue full.
//!
//! Hashing reads every byte of a buffer through the CPU caches: under an arbiter it is a memory operation like a
//! transfer chunk, so each job is admitted by the gate at the measured worst time of one piece
//! ([`measure_piece_cost`]) and reports its end, and no hash runs during a CPU task's memory phase.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{unbounded, Sender};
use oversub_arbiter::{Gate, WorkKind};

use crate::PagerError;

type HashJob = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Hasher {
    tx: Mutex<Option<Sender<HashJob>>>,
    workers: Vec<JoinHandle<()>>,
}

impl Hasher {
    /// Starts `threads` workers (at least one); with a gate, each job (one piece of at most `piece_bytes`) is
    /// admitted at `piece_cost` first.
    pub(crate) fn start(
        threads: usize,
        gated: Option<(Arc<Gate>, Duration, u64)>,
    ) -> Result<Hasher, PagerError> {
        let (tx, rx) = unbounded::<HashJob>();
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let gated = gated.clone();
            let worker = std::thread::Builder::new()
                .name(format!("oversub-hash-{i}"))
                .spawn(move || {
                    for job in rx {
                        match &gated {
                            Some((gate, piece_cost, piece_bytes)) => {
                                let admission = gate.admit_for(*piece_cost);
                                gate.record_run(WorkKind::Checksum, *piece_bytes, job);
                                gate.finished(&admission, gate.arbiter().clock().now_ns());
                            }
                            None => job(),
                        }
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

/// The worst time of hashing one piece of `piece_bytes`: the slowest of `samples` (at least 4) hashes of distinct
/// pieces of a buffer four times the size of a 32 MiB last-level cache, so each one reads from DRAM.
pub(crate) fn measure_piece_cost(piece_bytes: u64, samples: usize) -> Duration {
    let piece = usize::try_from(piece_bytes).unwrap_or(8 << 20).max(4096);
    let span = piece.max(128 << 20);
    let data = vec![0x5au8; span];
    let mut worst = Duration::ZERO;
    let mut off = 0;
    for _ in 0..samples.max(4) {
        if off + piece > span {
            off = 0;
        }
        let t = std::time::Instant::now();
        std::hint::black_box(xxhash_rust::xxh3::xxh3_64(std::hint::black_box(
            &data[off..off + piece],
        )));
        worst = worst.max(t.elapsed());
        off += piece;
    }
    worst
}
