//! The arbitrated transfer path: one worker thread runs every storage transfer of the pool in chunks, asking the
//! arbiter's gate before each one, like a copy engine that is only allowed on the bus during compute phases.
//! A page-out or page-in waiting for a grant never blocks the caller: the ticket completes when the last chunk
//! has.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use oversub_accel::{DeviceMemory, Reservation};
use oversub_arbiter::Gate;
use oversub_io::{Direction, IoCallback, IoDone, IoError, IoVec, Slot, SlotView, SwapStore};

use crate::PagerError;

/// Most chunks submitted together when the grant has room for them all (their worst case counted one after
/// another): enough queue depth to keep a storage device busy, few enough to stop soon at a window's end.
const MAX_BATCH_CHUNKS: usize = 32;

struct Job {
    direction: Direction,
    chunks: Vec<(SlotView, IoVec)>,
    on_done: IoCallback,
}

// SAFETY: the iovecs point at memory that the submitter keeps valid and untouched until on_done has run (the
// contract of `GatedIo::submit`); the worker only hands them to the store.
unsafe impl Send for Job {}

#[derive(Debug)]
pub(crate) struct GatedIo {
    gate: Arc<Gate>,
    store: Arc<SwapStore>,
    chunk_bytes: u64,
    tx: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl GatedIo {
    pub(crate) fn start(gate: Arc<Gate>, store: Arc<SwapStore>) -> Result<GatedIo, PagerError> {
        let align = store.alignment() as u64;
        let chunk_bytes = gate.chunk_bytes().max(1).next_multiple_of(align);
        let (tx, rx) = channel::<Job>();
        let worker = {
            let gate = Arc::clone(&gate);
            let store = Arc::clone(&store);
            std::thread::Builder::new()
                .name("oversub-gated-io".into())
                .spawn(move || {
                    for job in rx {
                        let mut bytes = 0;
                        let mut result = Ok(());
                        let mut next = 0;
                        while next < job.chunks.len() {
                            let want = (job.chunks.len() - next).min(MAX_BATCH_CHUNKS) as u64;
                            let n = gate.admit_up_to(want).chunks.min(want) as usize;
                            let batch = &job.chunks[next..next + n];
                            next += n;
                            // SAFETY: the submitter keeps the memory valid and the slot allocated until on_done.
                            match unsafe { store.transfer_views(job.direction, batch) } {
                                Ok(done) => bytes += done.bytes,
                                Err(e) => {
                                    result = Err(e);
                                    break;
                                }
                            }
                        }
                        (job.on_done)(result.map(|()| IoDone { bytes }));
                    }
                })
                .map_err(|source| {
                    PagerError::Store(IoError::Io {
                        op: "spawning the gated I/O thread",
                        source,
                    })
                })?
        };
        Ok(GatedIo {
            gate,
            store,
            chunk_bytes,
            tx: Some(tx),
            worker: Some(worker),
        })
    }

    pub(crate) fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Queues a transfer of `mem` (contiguous) to or from the part of `slot` that starts at `offset`, chunk by
    /// chunk.
    ///
    /// # Safety
    /// As [`SwapStore::submit`]: `mem` stays valid (and, for reads, otherwise untouched) and the slot allocated
    /// until `on_done` has run.
    pub(crate) unsafe fn submit_part(
        &self,
        direction: Direction,
        slot: &Slot,
        offset: u64,
        mem: IoVec,
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
            let n = self.chunk_bytes.min(end - off);
            chunks.push((
                slot.view(off, n)?,
                IoVec {
                    ptr: mem.ptr.wrapping_add((off - offset) as usize),
                    len: n as usize,
                },
            ));
            off += n;
        }
        let tx = self.tx.as_ref().ok_or(IoError::Shutdown)?;
        tx.send(Job {
            direction,
            chunks,
            on_done,
        })
        .map_err(|_| IoError::Shutdown)
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
        let staging = match device.host_ptr(range) {
            Some(_) => None,
            None => Some(device.alloc_host(len, true)?),
        };
        let ptr = match (&staging, device.host_ptr(range)) {
            (Some(buf), _) => buf.as_ptr(),
            (None, Some(p)) => p,
            (None, None) => return Err(PagerError::Internal("no memory to calibrate with")),
        };
        let slot = self.store.allocate(self.chunk_bytes)?;
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
            unsafe { self.store.transfer(dir, &slot, &[iov]) }?;
            if staging.is_some() && dir == Direction::Read {
                // SAFETY: as above, the other way round.
                let fence = unsafe { device.copy_from_host_async(range.addr, ptr, len) }?;
                device.fence_wait(fence)?;
            }
            Ok::<(), PagerError>(())
        });
        self.store.release(slot);
        result
    }
}

impl Drop for GatedIo {
    fn drop(&mut self) {
        // Closing the channel lets the worker finish queued jobs and stop.
        drop(self.tx.take());
        if let Some(worker) = self.worker.take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}
