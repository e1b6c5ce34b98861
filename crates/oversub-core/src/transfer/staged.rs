//! The staging path, for devices whose memory the host cannot address (a discrete GPU): storage I/O goes through
//! a ring of host staging buffers (pinned by default) and the device copies them in and out, pipelined so that the
//! bus and the store work at once. One worker thread runs the transfers of the pool one buffer after another:
//!
//! - page-out: device → staging buffer (an asynchronous copy), then, once the copy's fence completes, staging
//!   buffer → store (an asynchronous write); the buffer is refilled when its write has completed.
//! - page-in: store → staging buffer (an asynchronous read), then, once the read completes, staging buffer →
//!   device (an asynchronous copy); the buffer is reused when the copy's fence completes.
//!
//! Every copy is waited for before the transfer reports completion, so the caller may unmap the device memory
//! (page-out) or hand the buffer to kernels (page-in) as soon as it hears back. With GPUDirect Storage (cuFile) on
//! a store that supports it, the worker moves each extent straight between file and device instead.
//!
//! Under an arbiter ([`Gated`](super::gated::Gated)) a transfer runs one chunk at a time, each admitted by the
//! gate's pacer. The staging path makes no memory-map operation of its own (its ring is allocated once, at
//! start-up): the commit before a page-in and the decommit after a page-out are the pager's, run as gated memory
//! operations on the gated worker (`gated.rs`); a page-in's transfer here waits for its commit first.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use oversub_accel::{AccelError, DeviceMemory, DevicePtr, Fence, HostBuffer};
use oversub_arbiter::WorkKind;
use oversub_base::process::Creator;
use oversub_io::{Direction, IoError, IoVec, Slot, SlotView, SwapStore};

use super::gated::{Pacer, Prelude};
use super::{PacedPath, Transfer, TransferCallback, TransferError, TransferPath};

/// Default size of one staging buffer.
pub const DEFAULT_STAGING_CHUNK_BYTES: u64 = 16 << 20;
/// Default number of staging buffers.
pub const DEFAULT_STAGING_CHUNKS: usize = 8;

/// Options of the staging ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingConfig {
    /// Size of one staging buffer (rounded up to the store's alignment); transfers are split at this size.
    pub chunk_bytes: u64,
    /// Number of staging buffers: how many chunks can be between bus and store at once.
    pub chunks: usize,
    /// Page-locked (pinned) staging buffers, which the device copies at full speed; pageable memory otherwise.
    pub pinned: bool,
    /// Use GPUDirect Storage (cuFile) when the backend has it and the store's file supports it.
    pub direct_storage: bool,
}

impl Default for StagingConfig {
    fn default() -> Self {
        StagingConfig {
            chunk_bytes: DEFAULT_STAGING_CHUNK_BYTES,
            chunks: DEFAULT_STAGING_CHUNKS,
            pinned: true,
            direct_storage: true,
        }
    }
}

struct Job {
    direction: Direction,
    device: DevicePtr,
    /// The slot's parts, one per chunk, in order (chunk i covers bytes [i × chunk, ...) of the buffer).
    views: Vec<SlotView>,
    /// Length of every view but the last.
    chunk_bytes: u64,
    /// The commit the transfer must wait for (a page-in's, under an arbiter).
    after: Option<Arc<Prelude>>,
    /// Under an arbiter: what admits each chunk.
    pacer: Option<Arc<Pacer>>,
    on_done: TransferCallback,
}

struct Worker {
    device: Arc<dyn DeviceMemory>,
    store: Arc<SwapStore>,
    buffers: Vec<HostBuffer>,
    direct: bool,
}

/// A staging buffer index, a chunk index, and how its store I/O ended.
type IoEvent = (usize, usize, Result<(), IoError>);

#[derive(Debug)]
pub(crate) struct Staging {
    chunk_bytes: u64,
    tx: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    /// Whether transfers go through cuFile.
    direct: bool,
    /// The process whose thread this is (a forked child has none).
    creator: Creator,
}

impl Staging {
    pub(crate) fn start(
        config: StagingConfig,
        device: Arc<dyn DeviceMemory>,
        store: Arc<SwapStore>,
        paced_chunk_bytes: Option<u64>,
    ) -> Result<Staging, crate::PagerError> {
        let align = store.alignment() as u64;
        let mut chunk_bytes = config.chunk_bytes.max(1).next_multiple_of(align);
        if let Some(gate_chunk) = paced_chunk_bytes {
            // Under an arbiter a chunk is the arbiter's chunk: one admission covers one copy and one I/O.
            chunk_bytes = gate_chunk.max(1).next_multiple_of(align);
        }
        if config.chunks == 0 {
            return Err(crate::PagerError::InvalidSize(
                "the staging ring needs at least one buffer".into(),
            ));
        }
        let len = usize::try_from(chunk_bytes)
            .map_err(|_| crate::PagerError::InvalidSize("staging chunk too large".into()))?;
        let mut direct = false;
        if config.direct_storage {
            match device.direct_storage() {
                // cuFile reads and writes one fd at the slot's extents as file offsets; a striped store's extents
                // are logical offsets over several files.
                Some(_) if store.member_count() > 1 => tracing::info!(
                    members = store.member_count(),
                    "GPUDirect Storage not used: the store is striped over several files or devices; staging \
                     through host memory"
                ),
                Some(ds) if store.is_direct() => match ds.register(store.fd()) {
                    Ok(()) => direct = true,
                    Err(e) => tracing::info!("GPUDirect Storage not used for this store ({e}); staging through host memory"),
                },
                Some(_) => tracing::info!("GPUDirect Storage needs an O_DIRECT store; staging through host memory"),
                None => {}
            }
        }
        let mut buffers = Vec::with_capacity(config.chunks);
        for _ in 0..config.chunks {
            buffers.push(device.alloc_host(len, config.pinned)?);
        }
        tracing::info!(
            path = if direct {
                "cuFile (GPUDirect Storage)"
            } else {
                "staging"
            },
            chunk_bytes,
            chunks = config.chunks,
            pinned = config.pinned,
            "{} backend pages through {}",
            device.name(),
            if direct {
                "cuFile"
            } else {
                "host staging buffers"
            }
        );
        let (tx, rx) = channel::<Job>();
        let worker = Worker {
            device,
            store,
            buffers,
            direct,
        };
        let handle = std::thread::Builder::new()
            .name("oversub-staging".into())
            .spawn(move || {
                for job in rx {
                    let result = match &job.after {
                        Some(p) if !p.wait() => Err(TransferError::Io(Prelude::not_committed())),
                        _ => worker.run(&job),
                    };
                    (job.on_done)(result);
                }
            })
            .map_err(|source| {
                crate::PagerError::Store(IoError::Io {
                    op: "spawning the staging thread",
                    source,
                })
            })?;
        Ok(Staging {
            chunk_bytes,
            tx: Some(tx),
            worker: Some(handle),
            direct,
            creator: Creator::current(),
        })
    }

    /// Queues `transfer`, each chunk admitted by `pacer` when given; with `after`, it starts only once that
    /// commit has run, and fails without moving a byte if the commit failed.
    ///
    /// # Safety
    /// As [`TransferPath::submit`].
    unsafe fn queue(
        &self,
        transfer: Transfer<'_, Slot>,
        pacer: Option<Arc<Pacer>>,
    ) -> Result<(), IoError> {
        let slot = transfer.copy;
        let mut views = Vec::new();
        let mut off = 0u64;
        while off < slot.len() {
            let n = self.chunk_bytes.min(slot.len() - off);
            views.push(slot.view(off, n)?);
            off += n;
        }
        let tx = self.tx.as_ref().ok_or(IoError::Shutdown)?;
        tx.send(Job {
            direction: transfer.direction,
            device: transfer.range.addr,
            views,
            chunk_bytes: self.chunk_bytes,
            after: transfer.after,
            pacer,
            on_done: transfer.on_done,
        })
        .map_err(|_| IoError::Shutdown)
    }
}

impl TransferPath for Staging {
    type Copy = Slot;

    fn name(&self) -> &'static str {
        if self.direct {
            "cufile"
        } else {
            "staging"
        }
    }

    fn chunk_bytes(&self) -> Option<u64> {
        Some(self.chunk_bytes)
    }

    unsafe fn submit(&self, transfer: Transfer<'_, Slot>) -> Result<(), crate::PagerError> {
        // SAFETY: forwarded from our caller.
        Ok(unsafe { self.queue(transfer, None) }?)
    }
}

impl PacedPath for Staging {
    unsafe fn submit_paced(
        &self,
        transfer: Transfer<'_, Slot>,
        pacer: &Arc<Pacer>,
    ) -> Result<(), crate::PagerError> {
        // SAFETY: forwarded from our caller.
        Ok(unsafe { self.queue(transfer, Some(Arc::clone(pacer))) }?)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            // A forked child: the thread does not exist here (joining it panics) and the channel's lock may have
            // been held at the fork. Leak both.
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

impl Worker {
    fn run(&self, job: &Job) -> Result<(), TransferError> {
        // GPUDirect is set up for the store's own file; an external file (a checkpoint) is staged.
        if self.direct && job.views.iter().all(|v| v.external().is_none()) {
            return self.run_direct(job);
        }
        if let Some(pacer) = &job.pacer {
            return self.run_gated(job, pacer);
        }
        match job.direction {
            Direction::Write => self.page_out(job),
            Direction::Read => self.page_in(job),
        }
    }

    /// Under an arbiter: one chunk at a time, each admitted and finished (copy and I/O) before the next, since
    /// an admission promises that the chunk ends inside the grant: the chunk time T(Q) is calibrated on the same
    /// copy plus I/O.
    fn run_gated(&self, job: &Job, pacer: &Pacer) -> Result<(), TransferError> {
        for (i, view) in job.views.iter().enumerate() {
            pacer.step(WorkKind::Transfer, view.len(), || {
                self.gated_chunk(job, view, i as u64 * job.chunk_bytes)
            })?;
        }
        Ok(())
    }

    /// One admitted chunk of [`run_gated`](Self::run_gated): its copy and its I/O, both finished.
    fn gated_chunk(&self, job: &Job, view: &SlotView, offset: u64) -> Result<(), TransferError> {
        let buf = &self.buffers[0];
        let len = view.len() as usize;
        let at = job.device.offset(offset);
        let mem = IoVec {
            ptr: buf.as_ptr(),
            len,
        };
        match job.direction {
            Direction::Write => {
                // SAFETY: the device range is committed and ours for the job; the staging buffer is the worker's
                // and waits for the fence before its next use.
                let fence = unsafe { self.device.copy_to_host_async(at, buf.as_ptr(), len) }
                    .map_err(TransferError::Copy)?;
                self.device.fence_wait(fence).map_err(TransferError::Copy)?;
                // SAFETY: the staging buffer holds the chunk; the transfer blocks; the slot is held by the buffer's
                // entry until the job's callback.
                unsafe { self.store.transfer_view(Direction::Write, view, &[mem]) }
                    .map_err(TransferError::Io)?;
            }
            Direction::Read => {
                // SAFETY: as above, the other way round.
                unsafe { self.store.transfer_view(Direction::Read, view, &[mem]) }
                    .map_err(TransferError::Io)?;
                // SAFETY: as above.
                let fence = unsafe { self.device.copy_from_host_async(at, buf.as_ptr(), len) }
                    .map_err(TransferError::Copy)?;
                self.device.fence_wait(fence).map_err(TransferError::Copy)?;
            }
        }
        Ok(())
    }

    /// Submits the store I/O of `chunk` on staging buffer `s`; completion arrives on `tx`.
    fn submit_io(
        &self,
        direction: Direction,
        view: &SlotView,
        s: usize,
        chunk: usize,
        tx: &Sender<IoEvent>,
    ) -> Result<(), IoError> {
        let buf = &self.buffers[s];
        let mem = IoVec {
            ptr: buf.as_ptr(),
            len: view.len() as usize,
        };
        let tx = tx.clone();
        let on_done = Box::new(move |r: Result<oversub_io::IoDone, IoError>| {
            let _ = tx.send((s, chunk, r.map(|_| ())));
        });
        // SAFETY: the staging buffer is ours, at least `view.len()` bytes (views are at most a chunk), and is not
        // touched until its completion arrives on the channel; the slot is held by the buffer's entry until the
        // job's callback has run, after every I/O of the job has completed.
        unsafe { self.store.submit_view(direction, view, &[mem], on_done) }
    }

    /// Device → staging → store.
    fn page_out(&self, job: &Job) -> Result<(), TransferError> {
        let (tx, rx): (Sender<IoEvent>, Receiver<IoEvent>) = channel();
        let mut free: Vec<usize> = (0..self.buffers.len()).rev().collect();
        let mut copies: VecDeque<(Fence, usize, usize)> = VecDeque::new();
        let mut writes = 0usize;
        let mut error: Option<TransferError> = None;
        let mut next = 0usize;
        loop {
            while let Ok((s, _, r)) = rx.try_recv() {
                writes -= 1;
                free.push(s);
                if let Err(e) = r {
                    error.get_or_insert(TransferError::Io(e));
                }
            }
            // Fill every free staging buffer with the next chunk's copy.
            while error.is_none() && next < job.views.len() {
                let Some(s) = free.pop() else { break };
                let len = job.views[next].len() as usize;
                // SAFETY: the device range is committed and ours for the job; the staging buffer is free and stays
                // untouched until the fence is waited for below.
                match unsafe {
                    self.device.copy_to_host_async(
                        job.device.offset(next as u64 * job.chunk_bytes),
                        self.buffers[s].as_ptr(),
                        len,
                    )
                } {
                    Ok(f) => copies.push_back((f, s, next)),
                    Err(e) => {
                        free.push(s);
                        error = Some(TransferError::Copy(e));
                        break;
                    }
                }
                next += 1;
            }
            // The oldest copy's bytes are in its buffer once its fence completes: write them.
            if let Some((fence, s, chunk)) = copies.pop_front() {
                if let Err(e) = self.device.fence_wait(fence) {
                    error.get_or_insert(TransferError::Copy(e));
                }
                if error.is_some() {
                    free.push(s);
                    continue;
                }
                match self.submit_io(Direction::Write, &job.views[chunk], s, chunk, &tx) {
                    Ok(()) => writes += 1,
                    Err(e) => {
                        free.push(s);
                        error = Some(TransferError::Io(e));
                    }
                }
                continue;
            }
            if writes > 0 {
                match rx.recv() {
                    Ok((s, _, r)) => {
                        writes -= 1;
                        free.push(s);
                        if let Err(e) = r {
                            error.get_or_insert(TransferError::Io(e));
                        }
                    }
                    // Unreachable while we hold `tx`; never spin on it.
                    Err(_) => break,
                }
                continue;
            }
            if error.is_some() || next == job.views.len() {
                break;
            }
        }
        error.map_or(Ok(()), Err)
    }

    /// Store → staging → device.
    fn page_in(&self, job: &Job) -> Result<(), TransferError> {
        let (tx, rx): (Sender<IoEvent>, Receiver<IoEvent>) = channel();
        let mut free: Vec<usize> = (0..self.buffers.len()).rev().collect();
        let mut copies: VecDeque<(Fence, usize)> = VecDeque::new();
        let mut reads = 0usize;
        let mut error: Option<TransferError> = None;
        let mut next = 0usize;
        let read_done = |ev: IoEvent,
                         free: &mut Vec<usize>,
                         copies: &mut VecDeque<(Fence, usize)>,
                         error: &mut Option<TransferError>| {
            let (s, chunk, r) = ev;
            if let Err(e) = r {
                error.get_or_insert(TransferError::Io(e));
            }
            if error.is_some() {
                free.push(s);
                return;
            }
            let len = job.views[chunk].len() as usize;
            let at = job.device.offset(chunk as u64 * job.chunk_bytes);
            // SAFETY: the device range is committed and ours for the job; the staging buffer holds the chunk's
            // bytes and is not reused until the fence is waited for.
            match unsafe {
                self.device
                    .copy_from_host_async(at, self.buffers[s].as_ptr(), len)
            } {
                Ok(f) => copies.push_back((f, s)),
                Err(e) => {
                    free.push(s);
                    *error = Some(TransferError::Copy(e));
                }
            }
        };
        loop {
            while let Ok(ev) = rx.try_recv() {
                reads -= 1;
                read_done(ev, &mut free, &mut copies, &mut error);
            }
            // Copies that have finished give their buffers back without waiting.
            while let Some((f, _)) = copies.front() {
                match self.device.fence_done(f) {
                    Ok(true) => {
                        if let Some((f, s)) = copies.pop_front() {
                            if let Err(e) = self.device.fence_wait(f) {
                                error.get_or_insert(TransferError::Copy(e));
                            }
                            free.push(s);
                        }
                    }
                    Ok(false) => break,
                    Err(e) => {
                        error.get_or_insert(TransferError::Copy(e));
                        break;
                    }
                }
            }
            while error.is_none() && next < job.views.len() {
                let Some(s) = free.pop() else { break };
                match self.submit_io(Direction::Read, &job.views[next], s, next, &tx) {
                    Ok(()) => reads += 1,
                    Err(e) => {
                        free.push(s);
                        error = Some(TransferError::Io(e));
                        break;
                    }
                }
                next += 1;
            }
            if reads > 0 {
                match rx.recv() {
                    Ok(ev) => {
                        reads -= 1;
                        read_done(ev, &mut free, &mut copies, &mut error);
                    }
                    Err(_) => break,
                }
                continue;
            }
            if let Some((f, s)) = copies.pop_front() {
                if let Err(e) = self.device.fence_wait(f) {
                    error.get_or_insert(TransferError::Copy(e));
                }
                free.push(s);
                continue;
            }
            break;
        }
        error.map_or(Ok(()), Err)
    }

    /// Extent by extent straight between file and device (cuFile).
    fn run_direct(&self, job: &Job) -> Result<(), TransferError> {
        let Some(ds) = self.device.direct_storage() else {
            return Err(TransferError::Copy(AccelError::Unsupported(
                "direct storage went away".into(),
            )));
        };
        let fd = self.store.fd();
        let mut at = job.device;
        let pacer = job.pacer.as_deref();
        for view in &job.views {
            let start = pacer.and_then(|p| {
                p.admit();
                p.now_if_recording()
            });
            for extent in view.extents() {
                let len = extent.len as usize;
                // SAFETY: the device range is committed and ours for the job; the extent is the slot's.
                let r = unsafe {
                    match job.direction {
                        Direction::Read => ds.read(fd, at, len, extent.offset),
                        Direction::Write => ds.write(fd, at, len, extent.offset),
                    }
                };
                r.map_err(TransferError::Copy)?;
                at = at.offset(extent.len);
            }
            if let Some(p) = pacer {
                p.record_since(start, view.len());
            }
        }
        Ok(())
    }
}
