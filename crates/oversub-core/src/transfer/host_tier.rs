//! The host-memory tier: paged-out buffers kept in host RAM (pinned by default) instead of on the store, for
//! machines whose host memory is plentiful. A page-out that finds room in the tier copies the buffer there and
//! releases its device memory; a page-in copies it back. The tier is one allocation carved into extents, so
//! pinning (slow: the kernel locks every page) happens once, at pool start-up. Copies run on the tier's own thread,
//! in chunks of the arbiter's size (each admitted by the gate's pacer) when the pool obeys an arbiter (the path is
//! then wrapped in [`Gated`](super::gated::Gated)), so the caller of an async page-out or page-in never blocks on
//! them.
//!
//! The tier makes no memory-map operation of its own (its memory is allocated, and pinned, once). Under an
//! arbiter, the commit before a page-in and the decommit after a page-out are the pager's, run as gated memory
//! operations on the gated worker (`gated.rs`); a page-in's copy here waits for its commit first.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use oversub_accel::{DeviceMemory, Fence, HostBuffer};
use oversub_arbiter::WorkKind;
use oversub_base::process::Creator;
use oversub_io::{Direction, Extent, ExtentAllocator, IoError};

use super::gated::{Pacer, Prelude};
use super::{PacedPath, Transfer, TransferError, TransferPath};
use crate::PagerError;

/// Granule of the tier's allocator.
const TIER_ALIGN: u64 = 4096;
/// Largest single copy when no arbiter sets the chunk: big enough for full bus speed.
const COPY_CHUNK_BYTES: u64 = 64 << 20;

/// Options of the host-memory tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTierConfig {
    /// Host memory set aside for paged-out buffers.
    pub capacity_bytes: u64,
    /// Page-locked memory, which the device copies at full speed (and the kernel can never swap out).
    pub pinned: bool,
}

/// Where a paged-out buffer's bytes are in the tier (the copy `tier::Host` keeps).
#[derive(Debug)]
pub(crate) struct HostSlot {
    extents: Vec<Extent>,
}

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct HostTier {
    device: Arc<dyn DeviceMemory>,
    memory: HostBuffer,
    alloc: Mutex<ExtentAllocator>,
    tx: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    /// The process whose thread this is (a forked child has none).
    creator: Creator,
}

/// The tier's memory address, to cross to its thread.
#[derive(Clone, Copy)]
struct TierPtr(*mut u8);
// SAFETY: an address into the tier's allocation, which outlives every job (the tier joins its thread on drop,
// and the pool keeps the tier alive while any buffer has an operation in flight).
unsafe impl Send for TierPtr {}

impl HostTier {
    pub(crate) fn new(
        config: HostTierConfig,
        device: Arc<dyn DeviceMemory>,
    ) -> Result<HostTier, PagerError> {
        let capacity = config.capacity_bytes / TIER_ALIGN * TIER_ALIGN;
        if capacity == 0 {
            return Err(PagerError::InvalidSize(format!(
                "a host tier of {} bytes holds nothing",
                config.capacity_bytes
            )));
        }
        let len = usize::try_from(capacity)
            .map_err(|_| PagerError::InvalidSize("host tier too large".into()))?;
        let memory = device.alloc_host(len, config.pinned)?;
        let (tx, rx) = channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("oversub-host-tier".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|source| {
                PagerError::Store(IoError::Io {
                    op: "spawning the host tier's thread",
                    source,
                })
            })?;
        tracing::info!(
            capacity_bytes = capacity,
            pinned = config.pinned,
            "host-memory tier ready"
        );
        Ok(HostTier {
            device,
            memory,
            alloc: Mutex::new(ExtentAllocator::new(capacity, TIER_ALIGN)),
            tx: Some(tx),
            worker: Some(worker),
            creator: Creator::current(),
        })
    }

    /// Room for `len` bytes, or `None` when the tier is too full (the buffer goes to the store instead).
    pub(crate) fn allocate(&self, len: u64) -> Option<HostSlot> {
        oversub_base::sync::lock(&self.alloc)
            .allocate(len.next_multiple_of(TIER_ALIGN))
            .ok()
            .map(|extents| HostSlot { extents })
    }

    pub(crate) fn release(&self, slot: HostSlot) {
        oversub_base::sync::lock(&self.alloc).free(&slot.extents);
    }

    /// Free bytes of the tier.
    pub(crate) fn free_bytes(&self) -> u64 {
        oversub_base::sync::lock(&self.alloc).free_bytes()
    }

    /// The tier's size.
    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.memory.len() as u64
    }

    /// The (tier address, buffer offset, length) pieces covering `[offset, offset + len)` of a slot.
    fn pieces(&self, slot: &HostSlot, offset: u64, len: u64) -> Vec<(*mut u8, u64, u64)> {
        let mut out = Vec::new();
        let (mut pos, end) = (0u64, offset + len);
        for e in &slot.extents {
            let (s, t) = (offset.max(pos), end.min(pos + e.len));
            if s < t {
                let at = self
                    .memory
                    .as_ptr()
                    .wrapping_add((e.offset + (s - pos)) as usize);
                out.push((at, s, t - s));
            }
            pos += e.len;
        }
        out
    }

    /// Copies bytes of a paged-out buffer's tier copy into `out`.
    pub(crate) fn read(&self, slot: &HostSlot, offset: u64, out: &mut [u8]) {
        for (at, off, n) in self.pieces(slot, offset, out.len() as u64) {
            let dst = &mut out[(off - offset) as usize..(off - offset + n) as usize];
            // SAFETY: the piece lies inside the tier's allocation, in this slot's extents, which no copy touches
            // while the buffer is paged out with no operation in flight (the caller holds the space's lock).
            unsafe { std::ptr::copy_nonoverlapping(at, dst.as_mut_ptr(), dst.len()) };
        }
    }

    /// Copies `data` into a paged-out buffer's tier copy.
    pub(crate) fn write(&self, slot: &HostSlot, offset: u64, data: &[u8]) {
        for (at, off, n) in self.pieces(slot, offset, data.len() as u64) {
            let src = &data[(off - offset) as usize..(off - offset + n) as usize];
            // SAFETY: as in `read`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at, src.len()) };
        }
    }

    /// Queues the copy of the transfer's bytes between the device and the slot on the tier's thread, then its
    /// completion with the outcome: in chunks of `chunk` bytes, each admitted by `pacer` when given. With `after`,
    /// the copy starts only once that commit has run, and fails without copying a byte if the commit failed.
    ///
    /// # Safety
    /// As [`TransferPath::submit`].
    unsafe fn queue(
        &self,
        transfer: Transfer<'_, HostSlot>,
        chunk: u64,
        pacer: Option<Arc<Pacer>>,
    ) -> Result<(), PagerError> {
        let Transfer {
            direction,
            range,
            copy: slot,
            io_bytes: len,
            after,
            on_done,
        } = transfer;
        let (device, addr) = (Arc::clone(&self.device), range.addr);
        let to_host = direction == Direction::Write;
        // Split at extent boundaries and at the chunk size.
        let mut parts = Vec::new();
        for (at, off, n) in self.pieces(slot, 0, len) {
            let mut done = 0;
            while done < n {
                let m = chunk.min(n - done);
                parts.push((
                    TierPtr(at.wrapping_add(done as usize)),
                    off + done,
                    m as usize,
                ));
                done += m;
            }
        }
        let job: Job = Box::new(move || {
            if let Some(p) = &after {
                if !p.wait() {
                    on_done(Err(TransferError::Io(Prelude::not_committed())));
                    return;
                }
            }
            let mut fences: Vec<Fence> = Vec::new();
            let mut result = Ok(());
            for (at, off, n) in parts {
                let dev = addr.offset(off);
                // SAFETY: the caller keeps the device range committed and the tier piece untouched until on_done;
                // every fence is waited for below before on_done runs.
                let issue = || unsafe {
                    if to_host {
                        device.copy_to_host_async(dev, at.0, n)
                    } else {
                        device.copy_from_host_async(dev, at.0, n)
                    }
                };
                let issued = match &pacer {
                    None => issue(),
                    // One admitted chunk at a time: it must end inside its grant.
                    Some(p) => p.step(WorkKind::Copy, n as u64, || {
                        issue().and_then(|f| device.fence_wait(f).map(|()| Fence::COMPLETE))
                    }),
                };
                match issued {
                    Ok(f) => fences.push(f),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            for f in fences {
                if let Err(e) = device.fence_wait(f) {
                    result = result.and(Err(e));
                }
            }
            on_done(result.map_err(TransferError::Copy));
        });
        let tx = self
            .tx
            .as_ref()
            .ok_or(PagerError::Store(IoError::Shutdown))?;
        tx.send(job)
            .map_err(|_| PagerError::Store(IoError::Shutdown))
    }
}

impl TransferPath for HostTier {
    type Copy = HostSlot;

    fn name(&self) -> &'static str {
        "host tier"
    }

    unsafe fn submit(&self, transfer: Transfer<'_, HostSlot>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller.
        unsafe { self.queue(transfer, COPY_CHUNK_BYTES, None) }
    }
}

impl PacedPath for HostTier {
    unsafe fn submit_paced(
        &self,
        transfer: Transfer<'_, HostSlot>,
        pacer: &Arc<Pacer>,
    ) -> Result<(), PagerError> {
        let chunk = pacer.chunk_bytes().max(TIER_ALIGN);
        // SAFETY: forwarded from our caller.
        unsafe { self.queue(transfer, chunk, Some(Arc::clone(pacer))) }
    }
}

impl Drop for HostTier {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the thread does not exist here (joining it panics) and the channel's lock may have
            // been held at the fork. Leak both; the memory is a copy that goes with the child (`HostBuffer` leaves
            // a driver's pinned memory alone in a child too).
            std::mem::forget(self.tx.take());
            std::mem::forget(self.worker.take());
            return;
        }
        drop(self.tx.take());
        if let Some(worker) = self.worker.take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}
