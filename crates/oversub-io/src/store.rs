//! The swap store: a preallocated file (or block device) whose space is handed out as
//! [`Slot`]s and read/written through an [`IoEngine`].
//!
//! A store may also be striped over several files or devices, its *members* ([`StoreBuilder::build`] with several
//! locations; the layout is in [`stripe`]): one logical data space, one allocator, one engine, and every transfer
//! one batch with requests on all members. Everything below holds for each member.
//!
//! # No store is shared by accident, no byte comes back silently wrong
//!
//! - **Exclusive.** Every store holds `flock(LOCK_EX | LOCK_NB)` on its file or device node (the lock belongs to
//!   the open file description, so two stores on one file conflict even within one process), and block devices
//!   are opened `O_EXCL`, which the kernel refuses while the device is mounted or claimed. A second opener gets
//!   [`IoError::StoreBusy`], naming the holder where the OS tells: "pid N (comm)" from /proc/locks, the mount
//!   point from /proc/self/mountinfo, ... Files made by [`StoreBuilder::create`] and
//!   [`StoreBuilder::create_temp`] are locked too.
//! - **Recognised before it is overwritten.** The first `header_bytes = max(alignment, 4096)` bytes of every store
//!   hold a header (magic, format version, owner uid, capacity, creation time; the layout is documented in
//!   `store/header.rs`). The data area, and so every slot, starts after it ([`SwapStore::data_offset`]);
//!   [`SwapStore::capacity_bytes`] counts the data area only. [`StoreBuilder::open`] accepts a blank file or
//!   device (the bounded rule is documented in `store/inspect.rs`: empty, no data extents, or zeros in the first
//!   MiB and in the first MiB of the first data extent) and this user's own store; it refuses a file system,
//!   partition table, volume or RAID signature (named), another user's store, and any other data, with
//!   [`IoError::StoreRefused`], unless [`StoreBuilder::force`] is set.
//! - **Private.** Files the store creates are mode 0600; a regular file given to `open` is narrowed to 0600 when
//!   group or others have any access (refused when that is not allowed). Block-device nodes keep their
//!   permissions: udev owns them and would put its own back on the next event; access to a device is an
//!   administrator's decision (group `disk`).
//! - **Scrubbed.** What was swapped out is discarded when the store closes; see [`Scrub`].

use oversub_base::sync::lock;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod builder;
mod exclusive;
mod header;
mod inspect;
mod scrub;
pub mod stripe;
mod sys;

pub use builder::StoreBuilder;
pub use scrub::Scrub;
pub use stripe::StripeMap;

use crate::alloc::{Extent, ExtentAllocator};
use crate::engine::{
    select_engine, Direction, EngineChoice, IoCallback, IoDone, IoEngine, IoRequest, IoVec,
    PriorityEngine,
};
use crate::error::IoError;
use crate::external::ExternalFile;
use builder::Parts;
use oversub_base::mem::AlignedBuf;
use scrub::Backing;
use sys::set_direct;

/// Alignment used when the file system does not report one, and for buffered I/O.
const DEFAULT_ALIGNMENT: usize = 4096;

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_TEMP_ID: AtomicU64 = AtomicU64::new(0);

/// A swap file or block device, or several of them striped ([`StoreBuilder::build`]), with an extent allocator
/// and an I/O engine.
#[derive(Debug)]
pub struct SwapStore {
    /// The members' fds and what their scrubs need: one for a store of one file or device, several for a striped
    /// store, in the order of the locations. Shared with in-flight batches, so the fds stay open (and the scrub
    /// at close waits) until their I/O is over even if the store is dropped first (waiting in Drop could deadlock
    /// when the store is dropped from an engine callback).
    members: Arc<[Backing]>,
    /// Where logical offsets live (the identity for one member).
    map: StripeMap,
    /// What slot extents add to logical offsets: the data offset of a store of one member (its extents are file
    /// offsets), 0 for a striped store (its extents are logical offsets).
    base: u64,
    /// Bytes of the logical data space.
    capacity: u64,
    /// The largest of the members' alignments.
    alignment: usize,
    kept: bool,
    direct: bool,
    max_io_bytes: usize,
    max_write_io_bytes: usize,
    engine: Arc<dyn IoEngine>,
    /// The kind of engine the store selected (and may replace when it calibrates); None for a given engine.
    engine_kind: Option<EngineChoice>,
    /// The engine is behind a [`PriorityEngine`] (kept when calibration replaces it), with this window.
    priority_io: bool,
    priority_window: Option<usize>,
    /// Manages the logical data area as `[0, capacity)`; slots carry it plus `base`.
    alloc: Mutex<ExtentAllocator>,
    id: u64,
    scrub: Scrub,
    /// Cleared when a discard at release turns out unsupported, so it is not retried on every release.
    discard_at_release: AtomicBool,
    /// Set by [`SwapStore::close_if_idle`], under the allocator's lock: no slot is handed out afterwards.
    closed: AtomicBool,
}

/// Space allocated in a [`SwapStore`]. Not `Clone`: giving it back to
/// [`SwapStore::release`] consumes it, so it cannot be released twice. Dropping a slot
/// without releasing it leaks its space until the store is dropped.
#[derive(Debug)]
pub struct Slot {
    extents: Vec<Extent>,
    len: u64,
    store_id: u64,
    /// Set for a slot over a file the store does not own ([`SwapStore::external_slot`]): its extents are offsets
    /// in that file, it is read-only and releasing it frees nothing.
    external: Option<Arc<ExternalFile>>,
    /// Its transfers' priority, read at each submission (a tenant's rank may change); none is 0.
    priority: Option<Arc<AtomicI64>>,
}

impl Slot {
    /// Length in bytes (the requested length rounded up to the store alignment).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length slot (never produced by `allocate`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges, in data order: file offsets for a store of one file or device, logical offsets of the data
    /// space for a striped store (see [`SwapStore::data_offset`] and [`SwapStore::member_location`]).
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// A view of `len` bytes of the slot from `offset` (both multiples of the store's alignment when it is
    /// direct; the store checks): a transfer of part of a buffer, such as one chunk under the arbiter. A view
    /// owns no space and cannot be released; it is valid while its slot is.
    pub fn view(&self, offset: u64, len: u64) -> Result<SlotView, IoError> {
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= self.len && len > 0)
            .ok_or_else(|| {
                IoError::InvalidArgument(format!(
                    "view {offset}+{len} lies outside the slot of {} bytes",
                    self.len
                ))
            })?;
        let mut extents = Vec::new();
        let mut pos = 0u64;
        for e in &self.extents {
            let (e_start, e_end) = (pos, pos + e.len);
            pos = e_end;
            let (s, t) = (offset.max(e_start), end.min(e_end));
            if s < t {
                extents.push(Extent {
                    offset: e.offset + (s - e_start),
                    len: t - s,
                });
            }
        }
        Ok(SlotView {
            extents,
            len,
            store_id: self.store_id,
            external: self.external.clone(),
            priority: self.priority.clone(),
        })
    }

    /// Makes the slot's transfers (and its views') take their priority from `priority` at each submission:
    /// larger goes first on a store built with [`StoreBuilder::priority_io`]; ignored otherwise.
    pub fn set_priority(&mut self, priority: Arc<AtomicI64>) {
        self.priority = Some(priority);
    }

    /// The priority its transfers are submitted with now (0 when none was set).
    pub fn priority(&self) -> i64 {
        current(&self.priority)
    }

    /// The file this slot reads, when it is not the store's own space ([`SwapStore::external_slot`]).
    pub fn external(&self) -> Option<&Arc<ExternalFile>> {
        self.external.as_ref()
    }
}

/// Part of a [`Slot`], from [`Slot::view`]. Cloneable and never released.
#[derive(Debug, Clone)]
pub struct SlotView {
    extents: Vec<Extent>,
    len: u64,
    store_id: u64,
    external: Option<Arc<ExternalFile>>,
    priority: Option<Arc<AtomicI64>>,
}

impl PartialEq for SlotView {
    fn eq(&self, other: &Self) -> bool {
        // Views of one external file are the same file: compare the handle, not its contents.
        let same_file = match (&self.external, &other.external) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.extents == other.extents
            && self.len == other.len
            && self.store_id == other.store_id
            && same_file
    }
}

impl Eq for SlotView {}

impl SlotView {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false (views are never empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file this view reads, when its slot is external ([`SwapStore::external_slot`]).
    pub fn external(&self) -> Option<&Arc<ExternalFile>> {
        self.external.as_ref()
    }

    /// The ranges, in data order: file offsets for a store of one file or device, logical offsets of the data
    /// space for a striped store (see [`SwapStore::data_offset`] and [`SwapStore::member_location`]).
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }
}

impl SwapStore {
    /// A builder with default settings.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    fn new(p: Parts) -> Result<Self, IoError> {
        if p.max_io_bytes == 0 || p.max_write_io_bytes == 0 {
            return Err(IoError::InvalidArgument(
                "max_io_bytes must be non-zero".into(),
            ));
        }
        let mut members = p.members;
        let Some(first) = members.first() else {
            return Err(IoError::InvalidArgument(
                "a swap store needs at least one file or device".into(),
            ));
        };
        let first_path = first.path.clone();
        // Direct or buffered for all: a buffered member would take the page cache's time anyway, and one
        // alignment rule serves every request.
        if let Some(buffered) = members.iter().find(|m| !m.direct).map(|m| m.path.clone()) {
            for m in members.iter_mut().filter(|m| m.direct) {
                set_direct(m.fd.as_raw_fd(), false)?;
                m.direct = false;
                tracing::warn!(
                    path = %m.path.display(),
                    buffered = %buffered.display(),
                    "another member of the striped store is buffered; swap I/O on this one will be buffered too"
                );
            }
        }
        let direct = members.iter().all(|m| m.direct);
        let alignment = members
            .iter()
            .map(|m| m.alignment)
            .max()
            .unwrap_or(DEFAULT_ALIGNMENT);
        let max_io_bytes = (p.max_io_bytes - p.max_io_bytes % alignment).max(alignment);
        let max_write_io_bytes =
            (p.max_write_io_bytes - p.max_write_io_bytes % alignment).max(alignment);
        let unit = p.stripe_bytes.unwrap_or(max_io_bytes as u64);
        let n = members.len();
        if n > 1 && (unit == 0 || unit % alignment as u64 != 0) {
            return Err(IoError::InvalidArgument(format!(
                "stripe unit {unit} is not a non-zero multiple of the store's alignment {alignment}"
            )));
        }
        let map = StripeMap::new(n, unit.max(1))?;
        let smallest = members.iter().map(|m| m.capacity).min().unwrap_or(0);
        let capacity = map.capacity(smallest);
        if capacity == 0 {
            return Err(IoError::InvalidArgument(format!(
                "the striped store's smallest member holds {smallest} bytes, less than one stripe unit of {unit}"
            )));
        }
        if n > 1 {
            for m in members.iter().filter(|m| m.capacity >= smallest + unit) {
                tracing::info!(
                    path = %m.path.display(),
                    "striping uses {} of this member's {} data bytes (the smallest member's size)",
                    capacity / n as u64,
                    m.capacity
                );
            }
            tracing::debug!(
                first = %first_path.display(),
                members = n,
                stripe_bytes = unit,
                capacity,
                "striped swap store"
            );
        }
        let base = if n == 1 { members[0].data_offset } else { 0 };
        let kept = members.iter().any(|m| m.kept);
        Ok(SwapStore {
            alloc: Mutex::new(ExtentAllocator::new(capacity, alignment as u64)),
            members: members.into(),
            map,
            base,
            capacity,
            alignment,
            kept,
            direct,
            max_io_bytes,
            max_write_io_bytes,
            engine: p.engine,
            engine_kind: p.engine_kind,
            priority_io: p.priority_io,
            priority_window: p.priority_window,
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            scrub: p.scrub,
            discard_at_release: AtomicBool::new(true),
            closed: AtomicBool::new(false),
        })
    }

    fn first(&self) -> &Backing {
        // `new` refuses a store without members.
        &self.members[0]
    }

    /// I/O alignment: offsets, lengths and (when direct) memory addresses are multiples
    /// of it. Logical block size for block devices, STATX_DIOALIGN for files, else 4096; the largest of the
    /// members' for a striped store.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Bytes of the data area: the file or device less the header. All of it can be allocated. For a striped
    /// store, the logical data space: the number of members times the smallest member's data area rounded down
    /// to whole stripe units.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// What slot extents are offset by. For a store of one file or device, the file offset where the data area
    /// starts (the header's length, `max(alignment, 4096)`): slot extents are file offsets in `[data_offset,
    /// data_offset + capacity_bytes)`. For a striped store, 0: slot extents are logical offsets in `[0,
    /// capacity_bytes)`, which [`member_location`](Self::member_location) maps to a member and file offset.
    pub fn data_offset(&self) -> u64 {
        self.base
    }

    /// Number of files or devices the store is striped over (1 unless made by [`StoreBuilder::build`] with
    /// several locations).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The members' paths, in stripe order (the order of the locations given to [`StoreBuilder::build`]).
    pub fn member_paths(&self) -> Vec<&Path> {
        self.members.iter().map(|m| m.path.as_path()).collect()
    }

    /// The members' file descriptors (owned by the store), in stripe order.
    pub fn member_fds(&self) -> Vec<RawFd> {
        self.members.iter().map(|m| m.fd.as_raw_fd()).collect()
    }

    /// Stripe unit in bytes: logical bytes `[k * S, (k + 1) * S)` live on member `k % member_count()` (see
    /// [`stripe`]). Set with [`StoreBuilder::stripe_bytes`]; by default the read `max_io_bytes`. Without effect
    /// for a store of one member.
    pub fn stripe_bytes(&self) -> u64 {
        self.map.unit()
    }

    /// Where a byte of a slot lives: for `offset` as in [`Slot::extents`], the member's index and the file offset
    /// in that member. `None` outside the data area.
    pub fn member_location(&self, offset: u64) -> Option<(usize, u64)> {
        let logical = offset
            .checked_sub(self.base)
            .filter(|l| *l < self.capacity)?;
        let (m, at) = self.map.locate(logical);
        Some((m, self.members[m].data_offset + at))
    }

    /// What happens to swapped-out data when it is no longer needed (set with [`StoreBuilder::scrub`]).
    pub fn scrub_mode(&self) -> Scrub {
        self.scrub
    }

    /// Closes the store now if no slot is allocated: scrubs it as its drop would, gives up its lock (so another store,
    /// in this process or another, can open the file or device at once) and refuses every later allocation
    /// ([`IoError::StoreClosed`]). True when it closed (or was closed already); false when slots are still
    /// allocated, and the store then closes when it is dropped, as always. The descriptors stay open until the drop,
    /// unlocked. Every transfer of the store's own space needs a slot, so none is in flight when this closes; an
    /// external slot's reads go to its own file. In a forked child of the store's creator it does nothing (the lock
    /// and the file are the parent's) and returns false.
    pub fn close_if_idle(&self) -> bool {
        if !self.first().held.is_creator() {
            return false;
        }
        {
            let alloc = self.lock_alloc();
            if self.closed.load(Ordering::Acquire) {
                return true;
            }
            if alloc.free_bytes() != self.capacity {
                return false;
            }
            self.closed.store(true, Ordering::Release);
        }
        for m in self.members.iter() {
            m.close_early();
        }
        true
    }

    /// Whether [`close_if_idle`](Self::close_if_idle) closed the store.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Unallocated bytes (possibly fragmented).
    pub fn free_bytes(&self) -> u64 {
        self.lock_alloc().free_bytes()
    }

    /// Length of the largest contiguous free run.
    pub fn largest_free(&self) -> u64 {
        self.lock_alloc().largest_free()
    }

    /// Whether I/O uses O_DIRECT (false after the buffered fallback). A striped store is direct when every member
    /// is; when one falls back to buffered I/O, all members are switched to it.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Path the store was created at / opened from (may no longer exist); the first member's for a striped store
    /// (see [`member_paths`](Self::member_paths)).
    pub fn path(&self) -> &Path {
        &self.first().path
    }

    /// Whether the file stays on disk (kept created files and opened files); for a striped store, whether any
    /// member does.
    pub fn is_kept(&self) -> bool {
        self.kept
    }

    /// Whether the store is a block device; for a striped store, whether every member is.
    pub fn is_block_device(&self) -> bool {
        self.members.iter().all(|m| m.block_device)
    }

    /// The engine doing the I/O.
    pub fn engine(&self) -> &Arc<dyn IoEngine> {
        &self.engine
    }

    /// Largest request size.
    pub fn max_io_bytes(&self) -> usize {
        self.max_io_bytes
    }

    /// Largest single write request (the same as reads unless a tuned I/O point says otherwise).
    pub fn max_write_io_bytes(&self) -> usize {
        self.max_write_io_bytes
    }

    /// The file descriptor (owned by the store). For a striped store, the first member's: slot extents are not
    /// offsets in it, so code doing its own I/O on the fd (GPUDirect Storage, say) must check
    /// [`member_count`](Self::member_count) first; [`member_fds`](Self::member_fds) lists them all.
    pub fn fd(&self) -> RawFd {
        self.first().fd.as_raw_fd()
    }

    fn lock_alloc(&self) -> std::sync::MutexGuard<'_, ExtentAllocator> {
        lock(&self.alloc)
    }

    /// Allocates `len` bytes (rounded up to the alignment). `StoreFull` when it does not
    /// fit, `InvalidArgument` for `len == 0`.
    pub fn allocate(&self, len: u64) -> Result<Slot, IoError> {
        let mut extents = {
            let mut alloc = self.lock_alloc();
            if self.closed.load(Ordering::Acquire) {
                return Err(IoError::StoreClosed {
                    path: self.first().path.clone(),
                });
            }
            let extents = alloc.allocate(len)?;
            // Each member's high-water mark: the end of its part of the highest extent, recorded (in the
            // header, past its last scrub end) before the slot can be written.
            if let Some(end) = extents.iter().map(|e| e.offset + e.len).max() {
                for (i, m) in self.members.iter().enumerate() {
                    let below = self.map.member_bytes_below(end, i);
                    if below > 0 {
                        if let Err(e) = m.allocated_up_to(m.data_offset + below) {
                            alloc.free(&extents);
                            return Err(e);
                        }
                    }
                }
            }
            extents
        };
        for e in &mut extents {
            e.offset += self.base;
        }
        let len = extents.iter().map(|e| e.len).sum();
        Ok(Slot {
            extents,
            len,
            store_id: self.id,
            external: None,
            priority: None,
        })
    }

    /// A read-only slot over `len` bytes of `file` from `offset`, which the store does not own: a buffer made with
    /// it is stored from birth and reads its bytes from that file (a model checkpoint) instead of the store's
    /// space, so nothing is copied. Both numbers must be multiples of the store's alignment when the store is
    /// direct, and the range must lie inside the file (`InvalidArgument` otherwise; round a range out to the
    /// alignment before asking, and copy what ends in the file's last partial block). Writes to it are refused;
    /// [`release`](Self::release) frees nothing. Before each transfer the file is checked unchanged
    /// ([`IoError::ExternalChanged`]).
    pub fn external_slot(
        &self,
        file: &Arc<ExternalFile>,
        offset: u64,
        len: u64,
    ) -> Result<Slot, IoError> {
        let align = self.alignment as u64;
        if len == 0 {
            return Err(IoError::InvalidArgument(
                "an external slot needs at least one byte".into(),
            ));
        }
        if self.direct && (offset % align != 0 || len % align != 0) {
            return Err(IoError::Misaligned {
                what: if offset % align != 0 {
                    "external file offset"
                } else {
                    "external range length"
                },
                value: if offset % align != 0 { offset } else { len },
                alignment: align,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= file.len() => {}
            _ => {
                return Err(IoError::InvalidArgument(format!(
                    "{offset}+{len} lies past the end of {} ({} bytes)",
                    file.path().display(),
                    file.len()
                )))
            }
        }
        Ok(Slot {
            extents: vec![Extent { offset, len }],
            len,
            store_id: self.id,
            external: Some(Arc::clone(file)),
            priority: None,
        })
    }

    /// Returns a slot's space. A slot of another store is ignored (logged). With [`Scrub::OnRelease`] the
    /// ranges are discarded first, before they can be handed out again. In a forked child nothing happens: the
    /// space is the parent's, which may still hold its bytes.
    pub fn release(&self, slot: Slot) {
        if slot.external.is_some() {
            // Not the store's space: nothing to give back (the file closes with its last slot).
            return;
        }
        if !self.first().held.is_creator() {
            // A discard through the shared descriptor would destroy the parent's copy, and the allocator's lock
            // may have been held by a thread that did not survive the fork.
            return;
        }
        if slot.store_id != self.id {
            tracing::error!("ignoring release of a slot that belongs to another store");
            return;
        }
        // Slots of this store lie past `base`; u64::MAX for anything else makes the allocator log it.
        let relative: Vec<Extent> = slot
            .extents
            .iter()
            .map(|e| Extent {
                offset: e.offset.checked_sub(self.base).unwrap_or(u64::MAX),
                len: e.len,
            })
            .collect();
        if self.scrub == Scrub::OnRelease {
            self.discard_released(&relative);
        }
        self.lock_alloc().free(&relative);
    }

    /// Discards logical ranges: on each member, the one member range the logical range puts there.
    fn discard_released(&self, extents: &[Extent]) {
        if !self.discard_at_release.load(Ordering::Relaxed) {
            return;
        }
        for e in extents.iter().filter(|e| e.offset != u64::MAX) {
            for (i, m) in self.members.iter().enumerate() {
                let start = self.map.member_bytes_below(e.offset, i);
                let end = self.map.member_bytes_below(e.offset + e.len, i);
                if end <= start {
                    continue;
                }
                let offset = m.data_offset + start;
                let Err(err) =
                    scrub::discard(m.fd.as_raw_fd(), m.block_device, offset, end - start)
                else {
                    continue;
                };
                let path = m.path.display();
                if scrub::is_unsupported(&err) {
                    self.discard_at_release.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        path = %path,
                        "cannot discard released swap ranges ({err}); they keep their data until the store closes"
                    );
                    return;
                }
                tracing::warn!(
                    path = %path,
                    offset,
                    "could not discard a released swap range: {err}"
                );
            }
        }
    }

    /// Submits `requests` as one batch; the callback keeps the members' fds open until the batch finished and,
    /// for a striped store, names the member whose request failed ([`IoError::Member`]).
    ///
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn submit_requests(
        &self,
        requests: Vec<IoRequest>,
        external: Option<Arc<ExternalFile>>,
        priority: i64,
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        let members = self.members.clone();
        if members.len() == 1 || external.is_some() {
            let cb: IoCallback = Box::new(move |res| {
                // The I/O is over; the fd may be scrubbed and closed now (an external file's, when its last slot
                // goes).
                drop(members);
                drop(external);
                on_done(res);
            });
            // SAFETY: forwarded from our caller; the callback keeps the fd open until the batch finished.
            return unsafe {
                self.engine
                    .submit_with_priority(requests, priority, false, cb)
            };
        }
        let cb: IoCallback = Box::new(move |res| {
            let res = res.map_err(|e| name_member(&members, e));
            drop(members);
            on_done(res);
        });
        // SAFETY: as above.
        unsafe {
            self.engine
                .submit_with_priority(requests, priority, true, cb)
        }
    }

    /// Blocking [`submit_requests`](Self::submit_requests).
    ///
    /// # Safety
    /// As [`IoEngine::submit`].
    unsafe fn wait_requests(
        &self,
        requests: Vec<IoRequest>,
        external: Option<Arc<ExternalFile>>,
        priority: i64,
    ) -> Result<IoDone, IoError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let cb: IoCallback = Box::new(move |res| {
            // The receiver only disappears if the waiter is gone, then nobody cares.
            let _ = tx.send(res);
        });
        // SAFETY: forwarded from our caller; we block until the callback ran.
        unsafe { self.submit_requests(requests, external, priority, cb) }?;
        rx.recv().unwrap_or(Err(IoError::Shutdown))
    }

    /// Reads or writes the slot's bytes from/to `mem` (total length `slot.len()`),
    /// split at extent boundaries, stripe-unit boundaries and `max_io_bytes`, submitted as ONE batch (for a
    /// striped store, with requests on every member, so they all work at once). When direct, every iovec's
    /// address and length must be multiples of `alignment()` (`Misaligned` otherwise).
    ///
    /// # Safety
    /// As [`IoEngine::submit`]: the memory stays valid (and, for reads, otherwise
    /// untouched) until `on_done` has run.
    pub unsafe fn submit(
        &self,
        direction: Direction,
        slot: &Slot,
        mem: &[IoVec],
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        let requests = self.build_requests(direction, slot, mem)?;
        // SAFETY: forwarded from our caller.
        unsafe { self.submit_requests(requests, slot.external.clone(), slot.priority(), on_done) }
    }

    /// Reads or writes part of a slot (see [`Slot::view`]) from/to `mem` as one batch, asynchronously; otherwise
    /// as [`SwapStore::submit`].
    ///
    /// # Safety
    /// As [`SwapStore::submit`]; the view's slot stays allocated until `on_done` has run.
    pub unsafe fn submit_view(
        &self,
        direction: Direction,
        view: &SlotView,
        mem: &[IoVec],
        on_done: IoCallback,
    ) -> Result<(), IoError> {
        let requests = self.build_requests_for(direction, view_parts(view), mem)?;
        // SAFETY: forwarded from our caller.
        unsafe {
            self.submit_requests(
                requests,
                view.external.clone(),
                current(&view.priority),
                on_done,
            )
        }
    }

    /// Blocking [`SwapStore::submit`].
    ///
    /// # Safety
    /// As [`SwapStore::submit`] (the borrow of `mem`'s memory ends when this returns).
    pub unsafe fn transfer(
        &self,
        direction: Direction,
        slot: &Slot,
        mem: &[IoVec],
    ) -> Result<IoDone, IoError> {
        let requests = self.build_requests(direction, slot, mem)?;
        // SAFETY: forwarded from our caller; blocking means the memory outlives the batch.
        unsafe { self.wait_requests(requests, slot.external.clone(), slot.priority()) }
    }

    /// Blocking transfer of part of a slot (see [`Slot::view`]); otherwise as [`SwapStore::transfer`].
    ///
    /// # Safety
    /// As [`SwapStore::transfer`]; the view's slot must still be allocated.
    pub unsafe fn transfer_view(
        &self,
        direction: Direction,
        view: &SlotView,
        mem: &[IoVec],
    ) -> Result<IoDone, IoError> {
        let requests = self.build_requests_for(direction, view_parts(view), mem)?;
        // SAFETY: forwarded from our caller; blocking means the memory outlives the batch.
        unsafe { self.wait_requests(requests, view.external.clone(), current(&view.priority)) }
    }

    /// Blocking transfer of several slot views (each with its memory) as one batch, so they run at the engine's
    /// queue depth.
    ///
    /// # Safety
    /// As [`SwapStore::transfer_view`] for every pair.
    pub unsafe fn transfer_views(
        &self,
        direction: Direction,
        parts: &[(SlotView, IoVec)],
    ) -> Result<IoDone, IoError> {
        let mut requests = Vec::new();
        // One batch, one priority: the highest of its views'.
        let priority = parts
            .iter()
            .map(|(v, _)| current(&v.priority))
            .max()
            .unwrap_or(0);
        for (view, mem) in parts {
            requests.extend(self.build_requests_for(
                direction,
                view_parts(view),
                std::slice::from_ref(mem),
            )?);
        }
        let external = parts.iter().find_map(|(v, _)| v.external.clone());
        // SAFETY: forwarded from our caller; blocking means the memory outlives the batch.
        unsafe { self.wait_requests(requests, external, priority) }
    }

    /// Measures this store's request-size × queue-depth grid ([`Calibration`](crate::tuning::Calibration)) with
    /// engines of the store's own kind, over space allocated for the purpose and released afterwards, and adopts
    /// the best point for reads and for writes ([`best_points`](crate::tuning::best_points)): a new engine at the
    /// larger of the two depths, requests split at each direction's size. The stripe unit of a striped store is
    /// kept. Call it before the store is shared (the pool's `io="auto"`, `bench paging --io-auto`). A store whose
    /// engine is not a built-in one (a test double, a shared engine) is refused, as is a store with no free space;
    /// on an I/O error the store keeps its settings.
    pub fn calibrate(
        &mut self,
        calibration: &crate::tuning::Calibration,
    ) -> Result<crate::tuning::Calibrated, IoError> {
        calibration.validate()?;
        let Some(choice) = self.engine_kind else {
            return Err(IoError::InvalidArgument(format!(
                "calibration builds engines of the store's kind, and this store was given its engine (`{}`), \
                 not a built-in engine it selected",
                self.engine.name()
            )));
        };
        let start = std::time::Instant::now();
        let align = self.alignment as u64;
        let bytes = calibration.bytes.min(self.largest_free()) / align * align;
        if bytes == 0 {
            return Err(IoError::StoreFull {
                needed: calibration.bytes,
                free: self.free_bytes(),
            });
        }
        let slot = self.allocate(bytes)?;
        let saved = (
            self.engine.clone(),
            self.max_io_bytes,
            self.max_write_io_bytes,
        );
        let measured = self.measure_grid(&slot, choice, calibration);
        (self.engine, self.max_io_bytes, self.max_write_io_bytes) = saved;
        self.release(slot);
        let grid = measured?;
        let (read, write) = crate::tuning::best_points(&grid)?;
        self.engine = prioritized(
            select_engine(choice, read.queue_depth.max(write.queue_depth))?,
            self.priority_io,
            self.priority_window,
        );
        self.max_io_bytes =
            (read.block_bytes - read.block_bytes % self.alignment).max(self.alignment);
        self.max_write_io_bytes =
            (write.block_bytes - write.block_bytes % self.alignment).max(self.alignment);
        Ok(crate::tuning::Calibrated {
            grid,
            read,
            write,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    fn measure_grid(
        &mut self,
        slot: &Slot,
        choice: EngineChoice,
        c: &crate::tuning::Calibration,
    ) -> Result<Vec<crate::tuning::GridPoint>, IoError> {
        let len = usize::try_from(slot.len())
            .map_err(|_| IoError::InvalidArgument("calibration region too large".into()))?;
        let mut buf = AlignedBuf::new(len, self.alignment)?;
        // Written once so the timed writes move real bytes and the reads fill faulted-in memory.
        buf.as_mut_slice().fill(0xa5);
        let mut grid = Vec::new();
        for &depth in &c.depths {
            self.engine = select_engine(choice, depth)?;
            for &block in &c.blocks {
                let aligned = (block - block % self.alignment).max(self.alignment);
                (self.max_io_bytes, self.max_write_io_bytes) = (aligned, aligned);
                let mut best = [f64::INFINITY; 2];
                for _ in 0..c.passes {
                    for (i, direction) in
                        [Direction::Write, Direction::Read].into_iter().enumerate()
                    {
                        let t = std::time::Instant::now();
                        // SAFETY: `buf` is borrowed mutably for the call and `transfer` blocks until the batch is
                        // over; the slot was allocated above and is released only after this returns.
                        unsafe { self.transfer(direction, slot, &[buf.iovec()]) }?;
                        best[i] = best[i].min(t.elapsed().as_secs_f64());
                    }
                }
                let rate = |s: f64| slot.len() as f64 / s.max(1e-9);
                grid.push(crate::tuning::GridPoint {
                    block_bytes: block as u64,
                    queue_depth: u32::try_from(depth).unwrap_or(u32::MAX),
                    write_bytes_per_s: rate(best[0]),
                    read_bytes_per_s: rate(best[1]),
                });
            }
        }
        Ok(grid)
    }

    fn build_requests(
        &self,
        direction: Direction,
        slot: &Slot,
        mem: &[IoVec],
    ) -> Result<Vec<IoRequest>, IoError> {
        let parts = SlotParts {
            extents: &slot.extents,
            len: slot.len,
            store_id: slot.store_id,
            external: slot.external.as_deref(),
        };
        self.build_requests_for(direction, parts, mem)
    }

    fn build_requests_for(
        &self,
        direction: Direction,
        parts: SlotParts<'_>,
        mem: &[IoVec],
    ) -> Result<Vec<IoRequest>, IoError> {
        let SlotParts {
            extents,
            len: slot_len,
            store_id,
            external,
        } = parts;
        if store_id != self.id {
            return Err(IoError::InvalidArgument(
                "slot belongs to another store".into(),
            ));
        }
        if let Some(file) = external {
            if direction == Direction::Write {
                return Err(IoError::InvalidArgument(format!(
                    "{} is read-only to oversub (an external slot)",
                    file.path().display()
                )));
            }
            file.check_unchanged()?;
        }
        let align = self.alignment as u64;
        let mut total: u64 = 0;
        for v in mem {
            if self.direct {
                if (v.ptr as usize as u64) % align != 0 {
                    return Err(IoError::Misaligned {
                        what: "iovec pointer",
                        value: v.ptr as usize as u64,
                        alignment: align,
                    });
                }
                if (v.len as u64) % align != 0 {
                    return Err(IoError::Misaligned {
                        what: "iovec length",
                        value: v.len as u64,
                        alignment: align,
                    });
                }
            }
            if v.ptr.is_null() && v.len > 0 {
                return Err(IoError::InvalidArgument("null iovec pointer".into()));
            }
            total = total
                .checked_add(v.len as u64)
                .ok_or_else(|| IoError::InvalidArgument("memory length overflows".into()))?;
        }
        if total != slot_len {
            return Err(IoError::InvalidArgument(format!(
                "memory is {total} bytes but the slot is {slot_len} bytes"
            )));
        }
        if self.direct
            && extents
                .iter()
                .any(|e| e.offset % align != 0 || e.len % align != 0)
        {
            return Err(IoError::Misaligned {
                what: "slot range",
                value: extents
                    .iter()
                    .find(|e| e.offset % align != 0 || e.len % align != 0)
                    .map_or(0, |e| e.offset),
                alignment: align,
            });
        }
        let max = match direction {
            Direction::Write => self.max_write_io_bytes,
            _ => self.max_io_bytes,
        } as u64;
        let mut requests = Vec::new();
        let mut mem_iter = mem.iter().filter(|v| v.len > 0);
        let mut cur: Option<IoVec> = None;
        for ext in extents {
            // (fd, file offset, length) of each piece: one per stripe unit on a striped store, the whole extent on
            // a store of one member or an external file.
            let pieces: Vec<(RawFd, u64, u64)> = match external {
                Some(file) => vec![(file.fd(), ext.offset, ext.len)],
                None => {
                    let logical = ext.offset.checked_sub(self.base).ok_or_else(|| {
                        IoError::InvalidArgument(format!(
                            "slot range at {} lies before the data area",
                            ext.offset
                        ))
                    })?;
                    self.map
                        .pieces(logical, ext.len)
                        .map(|piece| {
                            let member = &self.members[piece.member];
                            (
                                member.fd.as_raw_fd(),
                                member.data_offset + piece.offset,
                                piece.len,
                            )
                        })
                        .collect()
                }
            };
            for (fd, at, piece_len) in pieces {
                let mut pos = 0;
                while pos < piece_len {
                    let chunk = max.min(piece_len - pos);
                    let mut iovecs = Vec::new();
                    let mut need = chunk;
                    while need > 0 {
                        let v = match cur.take() {
                            Some(v) => v,
                            None => *mem_iter.next().ok_or_else(|| {
                                IoError::InvalidArgument("memory shorter than the slot".into())
                            })?,
                        };
                        // `take <= v.len`, so it fits in usize.
                        let take = (v.len as u64).min(need) as usize;
                        iovecs.push(IoVec {
                            ptr: v.ptr,
                            len: take,
                        });
                        if take < v.len {
                            cur = Some(IoVec {
                                ptr: v.ptr.wrapping_add(take),
                                len: v.len - take,
                            });
                        }
                        need -= take as u64;
                    }
                    requests.push(IoRequest {
                        fd,
                        direction,
                        offset: at + pos,
                        iovecs,
                    });
                    pos += chunk;
                }
            }
        }
        Ok(requests)
    }

    /// Drops the files' page cache (`posix_fadvise(DONTNEED)`, every member), e.g. before timing
    /// reads of a buffered store.
    pub fn drop_cache(&self) -> std::io::Result<()> {
        for m in self.members.iter() {
            let fd = m.fd.as_raw_fd();
            // DONTNEED skips dirty pages, so write them back first.
            // SAFETY: plain syscalls on our fd.
            let rc = unsafe {
                libc::fdatasync(fd);
                libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED)
            };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
        }
        Ok(())
    }
}

/// A failed request of a striped store's batch, as the member's error ([`IoError::Member`]).
/// The value of a slot's priority cell now (0 without one).
fn current(priority: &Option<Arc<AtomicI64>>) -> i64 {
    priority.as_ref().map_or(0, |p| p.load(Ordering::Relaxed))
}

/// `engine`, behind a priority queue when asked.
fn prioritized(engine: Arc<dyn IoEngine>, on: bool, window: Option<usize>) -> Arc<dyn IoEngine> {
    match (on, window) {
        (false, _) => engine,
        (true, None) => Arc::new(PriorityEngine::new(engine)),
        (true, Some(w)) => Arc::new(PriorityEngine::with_window(
            engine,
            w,
            crate::engine::DEFAULT_STARVATION_BOUND,
        )),
    }
}

/// What request building needs of a slot or a view.
#[derive(Clone, Copy)]
struct SlotParts<'a> {
    extents: &'a [Extent],
    len: u64,
    store_id: u64,
    external: Option<&'a ExternalFile>,
}

fn view_parts(view: &SlotView) -> SlotParts<'_> {
    SlotParts {
        extents: &view.extents,
        len: view.len,
        store_id: view.store_id,
        external: view.external.as_deref(),
    }
}

fn name_member(members: &[Backing], e: IoError) -> IoError {
    match e {
        IoError::Request { fd, source, .. } => {
            let source = source.untagged();
            match members.iter().find(|m| m.fd.as_raw_fd() == fd) {
                Some(m) => IoError::Member {
                    path: m.path.clone(),
                    source: Box::new(source),
                },
                None => source,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::sys::REFUSE_DIRECT;
    use super::*;
    use crate::engine::PsyncEngine;

    #[test]
    fn buffered_fallback_when_direct_is_refused() {
        REFUSE_DIRECT.with(|r| r.set(true));
        let dir = std::env::temp_dir();
        let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(2).unwrap());
        let s = SwapStore::builder()
            .capacity_bytes(1 << 20)
            .engine(engine.clone())
            .keep(true)
            .create_temp(&dir)
            .unwrap();
        assert!(!s.is_direct());
        assert_eq!(s.alignment(), 4096);
        // SAFETY: plain fcntl on an open fd.
        let flags = unsafe { libc::fcntl(s.fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_DIRECT, 0);
        let slot = s.allocate(8192).unwrap();
        let mut m = AlignedBuf::new(8192, 4096).unwrap();
        m.as_mut_slice().fill(0xab);
        let iov = IoVec {
            ptr: m.as_ptr(),
            len: 8192,
        };
        // SAFETY: m outlives the blocking transfers.
        unsafe { s.transfer(Direction::Write, &slot, &[iov]) }.unwrap();
        m.as_mut_slice().fill(0);
        // SAFETY: as above.
        unsafe { s.transfer(Direction::Read, &slot, &[iov]) }.unwrap();
        assert!(m.as_slice().iter().all(|&b| b == 0xab));
        s.drop_cache().unwrap();
        let path = s.path().to_path_buf();
        drop(s);
        let opened = SwapStore::builder().engine(engine).open(&path).unwrap();
        assert!(!opened.is_direct());
        assert_eq!(opened.capacity_bytes(), 1 << 20);
        drop(opened);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn scrub_falls_back_to_zeros_up_to_the_high_water_mark() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn IoEngine> = Arc::new(PsyncEngine::new(2).unwrap());
        let s = SwapStore::builder()
            .capacity_bytes(8 << 20)
            .engine(engine)
            .keep(true)
            .create_temp(dir.path())
            .unwrap();
        let slot = s.allocate(3 << 20).unwrap();
        let mut m = AlignedBuf::new(3 << 20, 4096).unwrap();
        m.as_mut_slice().fill(0x5a);
        let iov = IoVec {
            ptr: m.as_ptr(),
            len: 3 << 20,
        };
        // SAFETY: m outlives the blocking transfer.
        unsafe { s.transfer(Direction::Write, &slot, &[iov]) }.unwrap();
        let high_water = s.data_offset() + (3 << 20);
        assert_eq!(slot.extents()[0].offset, s.data_offset());
        let path = s.path().to_path_buf();
        s.release(slot);
        scrub::REFUSE_DISCARD.with(|r| r.set(true));
        drop(s);
        scrub::REFUSE_DISCARD.with(|r| r.set(false));
        // Nothing past the high-water mark was written: it is still unwritten preallocation, a hole to SEEK_DATA.
        // (Before reading the file: page-cache pages over unwritten extents count as data.)
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: plain syscall on an open file.
        let r = unsafe { libc::lseek(f.as_raw_fd(), high_water as libc::off_t, libc::SEEK_DATA) };
        assert_eq!(r, -1, "data found at {r}");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], &header::MAGIC);
        assert!(bytes[4096..].iter().all(|&b| b == 0));
    }
}
