//! [`CudaMemory`]: the [`DeviceMemory`] trait on a CUDA device through the virtual-memory API.

use std::collections::{BTreeMap, HashSet};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, RwLock};

use super::driver::{CudaDriver, DeviceInfo, DriverError, EventHandle, StreamHandle};
use super::vmm::{AddressRange, Mapping, PhysicalMemory};
use crate::{round_up, AccelError, DeviceMemory, DevicePtr, Fence, HostBuffer, Reservation};

/// Options of the CUDA backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaMemoryConfig {
    /// Device ordinal.
    pub ordinal: i32,
    /// Load GPUDirect Storage (cuFile) when its library is present, so the pager can move buffers straight
    /// between an `O_DIRECT` store and the device.
    pub cufile: bool,
}

impl Default for CudaMemoryConfig {
    fn default() -> Self {
        CudaMemoryConfig {
            ordinal: 0,
            cufile: true,
        }
    }
}

/// GPUDirect Storage for the pager: files registered once, then transfers straight to and from device memory.
#[derive(Debug)]
struct CuFileStorage {
    cufile: super::cufile::CuFile,
    handles: Mutex<std::collections::HashMap<std::os::fd::RawFd, Arc<super::cufile::CuFileHandle>>>,
}

/// A reserved range and, while committed, the memory mapped in it. One lock per range: copies hold it while they
/// enqueue, decommit while it waits for the copy streams and unmaps, so no copy is ever queued on memory that is
/// being unmapped.
#[derive(Debug)]
struct RangeState {
    // Dropped in this order: the mapping (unmap, release), then the addresses.
    mapping: Option<Mapping>,
    range: Option<AddressRange>,
}

#[derive(Debug)]
struct RangeEntry {
    len: usize,
    state: Mutex<RangeState>,
}

#[derive(Debug, Default)]
struct Events {
    idle: Vec<EventHandle>,
    outstanding: HashSet<u64>,
    all: Vec<EventHandle>,
}

/// Device memory of one CUDA GPU. Buffers keep their device address across decommit/commit; copies run on two
/// streams of the backend's own (device-to-host and host-to-device, so both copy engines work at once).
#[derive(Debug)]
pub struct CudaMemory {
    driver: Arc<dyn CudaDriver>,
    granularity: usize,
    /// Live reservations by address: calls on anything else are refused.
    ranges: RwLock<BTreeMap<u64, Arc<RangeEntry>>>,
    d2h: StreamHandle,
    h2d: StreamHandle,
    events: Mutex<Events>,
    /// The real driver, when the backend was made by [`CudaMemory::new`] (for the spin kernel).
    real: Option<Arc<super::CudarcDriver>>,
    direct: Option<CuFileStorage>,
}

use oversub_base::sync::lock;

fn driver_err(e: DriverError, what: impl FnOnce() -> String) -> AccelError {
    if e.is_out_of_memory() {
        AccelError::OutOfMemory(format!("{}: {e}", what()))
    } else {
        AccelError::Driver(e)
    }
}

impl CudaMemory {
    /// The backend on the real driver: loads `libcuda` (an [`AccelError::NoDriver`] error says "no CUDA driver
    /// found" when it is missing), binds device `config.ordinal` and checks it supports virtual-memory management.
    pub fn new(config: CudaMemoryConfig) -> Result<CudaMemory, AccelError> {
        let driver = Arc::new(super::CudarcDriver::new(config.ordinal)?);
        let mut memory = CudaMemory::with_driver(driver.clone())?;
        memory.real = Some(driver);
        if config.cufile {
            match super::cufile::CuFile::load() {
                Ok(cufile) => {
                    tracing::info!(
                        library = cufile.library(),
                        "GPUDirect Storage (cuFile) loaded"
                    );
                    memory.direct = Some(CuFileStorage {
                        cufile,
                        handles: Mutex::new(std::collections::HashMap::new()),
                    });
                }
                Err(e) => tracing::info!("{e}"),
            }
        }
        Ok(memory)
    }

    /// The spin kernel of the SiΓ arbiter (Sec. 4.3) on this device, compiled with NVRTC. Only for a backend
    /// made by [`CudaMemory::new`] (the kernel needs the real driver).
    pub fn spin_kernel(&self) -> Result<super::spin::SpinKernel, AccelError> {
        match &self.real {
            Some(driver) => super::spin::SpinKernel::new(driver),
            None => Err(AccelError::Unsupported(
                "the spin kernel needs the real CUDA driver, not a test driver".into(),
            )),
        }
    }

    /// The backend over any implementation of the driver calls (the real one, or a test fake).
    pub fn with_driver(driver: Arc<dyn CudaDriver>) -> Result<CudaMemory, AccelError> {
        let info = driver.info();
        if !info.vmm_supported {
            return Err(AccelError::Unsupported(format!(
                "{} (device {}) does not support CUDA virtual-memory management, which the cuda backend needs to \
                 keep device addresses across paging",
                info.name, info.ordinal
            )));
        }
        let granularity = info.granularity_bytes;
        if granularity == 0 || !granularity.is_power_of_two() {
            return Err(AccelError::Unsupported(format!(
                "the driver reports an allocation granularity of {granularity} bytes"
            )));
        }
        let d2h = driver.stream_create(0)?;
        let h2d = match driver.stream_create(0) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: created just above, destroyed once, nothing queued on it.
                let _ = unsafe { driver.stream_destroy(d2h) };
                return Err(e.into());
            }
        };
        tracing::info!(
            device = %info.name,
            granularity,
            total_bytes = info.total_bytes,
            "cuda backend ready"
        );
        Ok(CudaMemory {
            driver,
            granularity,
            ranges: RwLock::new(BTreeMap::new()),
            d2h,
            h2d,
            events: Mutex::new(Events::default()),
            real: None,
            direct: None,
        })
    }

    /// The driver calls under this backend.
    pub fn driver(&self) -> &Arc<dyn CudaDriver> {
        &self.driver
    }

    /// The device.
    pub fn info(&self) -> &DeviceInfo {
        self.driver.info()
    }

    fn entry(&self, range: &Reservation) -> Result<Arc<RangeEntry>, AccelError> {
        let map = self.ranges.read().unwrap_or_else(|p| p.into_inner());
        match map.get(&range.addr.0) {
            Some(e) if e.len == range.len => Ok(Arc::clone(e)),
            _ => Err(AccelError::InvalidArgument(format!(
                "{} (+{} bytes) is not a reservation of this cuda backend",
                range.addr, range.len
            ))),
        }
    }

    /// The reservation holding `[addr, addr + len)`, if any.
    fn entry_of_span(&self, addr: DevicePtr, len: usize) -> Result<Arc<RangeEntry>, AccelError> {
        let map = self.ranges.read().unwrap_or_else(|p| p.into_inner());
        map.range(..=addr.0)
            .next_back()
            .filter(|(&start, e)| {
                addr.0
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= start + e.len as u64)
            })
            .map(|(_, e)| Arc::clone(e))
            .ok_or_else(|| {
                AccelError::InvalidArgument(format!(
                    "{addr} (+{len} bytes) is outside every reservation"
                ))
            })
    }

    fn take_event(&self) -> Result<EventHandle, AccelError> {
        if let Some(e) = lock(&self.events).idle.pop() {
            return Ok(e);
        }
        let e = self.driver.event_create()?;
        lock(&self.events).all.push(e);
        Ok(e)
    }

    /// Enqueues a copy with `enqueue` on `stream` while the range's lock is held, and records a fence after it.
    fn copy_async(
        &self,
        addr: DevicePtr,
        len: usize,
        stream: StreamHandle,
        enqueue: impl FnOnce() -> Result<(), DriverError>,
    ) -> Result<Fence, AccelError> {
        if len == 0 {
            return Ok(Fence::COMPLETE);
        }
        let entry = self.entry_of_span(addr, len)?;
        let state = lock(&entry.state);
        if state.mapping.is_none() {
            return Err(AccelError::InvalidArgument(format!(
                "{addr} (+{len} bytes) is not committed"
            )));
        }
        let event = self.take_event()?;
        let recorded = enqueue().and_then(|()| self.driver.event_record(event, stream));
        drop(state);
        let mut events = lock(&self.events);
        match recorded {
            Ok(()) => {
                events.outstanding.insert(event.0);
                Ok(Fence::new(event.0))
            }
            Err(e) => {
                events.idle.push(event);
                drop(events);
                // A copy may have been queued before the record failed: let it finish before its memory goes.
                let _ = self.driver.stream_synchronize(stream);
                Err(e.into())
            }
        }
    }

    fn outstanding(&self, fence: &Fence) -> Result<EventHandle, AccelError> {
        if lock(&self.events).outstanding.contains(&fence.id()) {
            Ok(EventHandle(fence.id()))
        } else {
            Err(AccelError::InvalidArgument(format!(
                "fence {} is not an outstanding copy of this cuda backend",
                fence.id()
            )))
        }
    }

    /// Waits for both copy streams, so that no copy of ours touches memory about to be unmapped.
    fn drain_copies(&self) -> Result<(), AccelError> {
        self.driver.stream_synchronize(self.d2h)?;
        self.driver.stream_synchronize(self.h2d)?;
        Ok(())
    }

    /// Unmaps a committed range under its lock; the mapping stays if the unmap fails.
    fn unmap_locked(&self, state: &mut RangeState) -> Result<(), AccelError> {
        let Some(mapping) = state.mapping.take() else {
            return Ok(());
        };
        if let Err(e) = self.drain_copies() {
            state.mapping = Some(mapping);
            return Err(e);
        }
        // SAFETY: both copy streams are drained and the range's lock keeps new copies out; the pager's contract
        // (decommit/unreserve safety) keeps kernels and I/O off it.
        match unsafe { mapping.unmap() } {
            Ok(()) => Ok(()),
            Err((kept, e)) => {
                state.mapping = kept;
                Err(e.into())
            }
        }
    }
}

// SAFETY: committed ranges are mapped read-write device memory at their reserved address until decommit or
// unreserve; host_ptr is always None; every call checks its range against the live reservations; copies are
// bounded by the span check.
unsafe impl DeviceMemory for CudaMemory {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn granularity(&self) -> usize {
        self.granularity
    }

    fn host_accessible(&self) -> bool {
        false
    }

    fn reserve(&self, len: usize) -> Result<Reservation, AccelError> {
        if len == 0 {
            return Err(AccelError::InvalidArgument("cannot reserve 0 bytes".into()));
        }
        let len = round_up(len as u64, self.granularity as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| AccelError::InvalidArgument(format!("{len} bytes overflow")))?;
        let range = AddressRange::reserve(&self.driver, len, self.granularity)
            .map_err(|e| driver_err(e, || format!("reserving {len} bytes of device addresses")))?;
        let addr = DevicePtr(range.addr());
        let entry = Arc::new(RangeEntry {
            len,
            state: Mutex::new(RangeState {
                mapping: None,
                range: Some(range),
            }),
        });
        self.ranges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr.0, entry);
        Ok(Reservation { addr, len })
    }

    fn commit(&self, range: &Reservation) -> Result<(), AccelError> {
        let entry = self.entry(range)?;
        let mut state = lock(&entry.state);
        if state.mapping.is_some() {
            return Ok(());
        }
        let memory = PhysicalMemory::create(&self.driver, range.len).map_err(|e| {
            driver_err(e, || {
                format!("creating {} bytes of device memory", range.len)
            })
        })?;
        // SAFETY: the range is one of our live reservations (checked above, its lock held) with nothing mapped.
        let mapping = unsafe { Mapping::map(&self.driver, range.addr.0, memory) }?;
        state.mapping = Some(mapping);
        Ok(())
    }

    unsafe fn decommit(&self, range: &Reservation) -> Result<(), AccelError> {
        let entry = self.entry(range)?;
        let mut state = lock(&entry.state);
        self.unmap_locked(&mut state)
    }

    unsafe fn unreserve(&self, range: Reservation) -> Result<(), AccelError> {
        let entry = self.entry(&range)?;
        let mut state = lock(&entry.state);
        self.unmap_locked(&mut state)?;
        if let Some(addresses) = state.range.take() {
            // SAFETY: the mapping is gone (unmapped above) and the lock keeps new ones out.
            unsafe { addresses.free() }?;
        }
        drop(state);
        self.ranges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&range.addr.0);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), AccelError> {
        Ok(self.driver.ctx_synchronize()?)
    }

    fn host_ptr(&self, _range: &Reservation) -> Option<*mut u8> {
        None
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller; `dst` outlives the wait below.
        let fence = unsafe { self.copy_to_host_async(src, dst.as_mut_ptr(), dst.len()) }?;
        self.fence_wait(fence)
    }

    unsafe fn copy_from_host(&self, dst: DevicePtr, src: &[u8]) -> Result<(), AccelError> {
        // SAFETY: forwarded from our caller; `src` outlives the wait below.
        let fence = unsafe { self.copy_from_host_async(dst, src.as_ptr(), src.len()) }?;
        self.fence_wait(fence)
    }

    fn resident_bytes(&self, range: &Reservation) -> Result<Option<u64>, AccelError> {
        let entry = self.entry(range)?;
        let state = lock(&entry.state);
        Ok(Some(state.mapping.as_ref().map_or(0, |m| m.len() as u64)))
    }

    fn zero_new(&self, range: &Reservation) -> Result<(), AccelError> {
        // cuMemCreate's memory holds whatever was there before; the pager promises zeros.
        let fence = self.copy_async(range.addr, range.len, self.h2d, || {
            // SAFETY: the range is committed (checked by copy_async, its lock held while this is queued) and
            // decommit drains this stream before unmapping.
            unsafe {
                self.driver
                    .memset_d8_async(range.addr.0, 0, range.len, self.h2d)
            }
        })?;
        self.fence_wait(fence)
    }

    fn alloc_host(&self, len: usize, pinned: bool) -> Result<HostBuffer, AccelError> {
        if !pinned {
            return HostBuffer::pageable(len);
        }
        if len == 0 {
            return Err(AccelError::InvalidArgument(
                "a host buffer of 0 bytes".into(),
            ));
        }
        let ptr = self
            .driver
            .host_alloc_pinned(len)
            .map_err(|e| driver_err(e, || format!("pinning {len} bytes of host memory")))?;
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            AccelError::OutOfMemory(format!("cuMemHostAlloc returned null for {len} bytes"))
        })?;
        let driver = Arc::clone(&self.driver);
        let release = move |p: *mut u8| {
            // SAFETY: `p` came from host_alloc_pinned; HostBuffer's owner waited for its copies.
            if let Err(e) = unsafe { driver.host_free_pinned(p) } {
                tracing::warn!("freeing pinned host memory: {e}");
            }
        };
        // SAFETY: the driver allocated `len` page-aligned bytes for us alone; the closure frees them once.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, true, release) })
    }

    unsafe fn copy_to_host_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        self.copy_async(src, len, self.d2h, || {
            // SAFETY: the caller keeps `dst` valid and untouched until the fence; the span is committed and its
            // lock is held while the copy is queued, and decommit drains this stream before unmapping.
            unsafe { self.driver.memcpy_dtoh_async(dst, src.0, len, self.d2h) }
        })
    }

    unsafe fn copy_from_host_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        self.copy_async(dst, len, self.h2d, || {
            // SAFETY: as in copy_to_host_async, the other way round.
            unsafe { self.driver.memcpy_htod_async(dst.0, src, len, self.h2d) }
        })
    }

    fn fence_done(&self, fence: &Fence) -> Result<bool, AccelError> {
        if *fence == Fence::COMPLETE {
            return Ok(true);
        }
        let event = self.outstanding(fence)?;
        Ok(self.driver.event_query(event)?)
    }

    fn fence_wait(&self, fence: Fence) -> Result<(), AccelError> {
        if fence == Fence::COMPLETE {
            return Ok(());
        }
        let event = self.outstanding(&fence)?;
        let result = self.driver.event_synchronize(event);
        let mut events = lock(&self.events);
        events.outstanding.remove(&event.0);
        if result.is_ok() {
            events.idle.push(event);
        }
        Ok(result?)
    }

    fn record_fence(&self, stream: u64) -> Result<Fence, AccelError> {
        let event = self.take_event()?;
        match self.driver.event_record(event, StreamHandle(stream)) {
            Ok(()) => {
                lock(&self.events).outstanding.insert(event.0);
                Ok(Fence::new(event.0))
            }
            Err(e) => {
                lock(&self.events).idle.push(event);
                Err(e.into())
            }
        }
    }

    fn fence_forget(&self, fence: Fence) {
        if fence == Fence::COMPLETE {
            return;
        }
        // Back to the idle list even if its record is pending: the next cuEventRecord on it overwrites that.
        let mut events = lock(&self.events);
        if events.outstanding.remove(&fence.id()) {
            events.idle.push(EventHandle(fence.id()));
        }
    }

    fn memory_info(&self) -> Result<Option<(u64, u64)>, AccelError> {
        Ok(Some(self.driver.mem_get_info()?))
    }

    fn direct_storage(&self) -> Option<&dyn crate::DirectStorage> {
        self.direct
            .as_ref()
            .map(|_| self as &dyn crate::DirectStorage)
    }
}

impl CudaMemory {
    fn cufile_transfer(
        &self,
        fd: std::os::fd::RawFd,
        at: DevicePtr,
        len: usize,
        file_offset: u64,
        write: bool,
    ) -> Result<(), AccelError> {
        let direct = self
            .direct
            .as_ref()
            .ok_or_else(|| AccelError::Unsupported("cuFile is not loaded".into()))?;
        let handle = lock(&direct.handles).get(&fd).cloned().ok_or_else(|| {
            AccelError::InvalidArgument(format!("fd {fd} is not registered with cuFile"))
        })?;
        let entry = self.entry_of_span(at, len)?;
        // Held for the transfer: the range cannot be unmapped under it.
        let state = lock(&entry.state);
        if state.mapping.is_none() {
            return Err(AccelError::InvalidArgument(format!(
                "{at} (+{len} bytes) is not committed"
            )));
        }
        self.driver.make_current()?;
        // SAFETY: the span is committed device memory of ours (checked, its lock held); the pager's contract keeps
        // other users off it; the context is current on this thread.
        let moved = unsafe {
            if write {
                direct.cufile.write(&handle, at.0, len, file_offset)
            } else {
                direct.cufile.read(&handle, at.0, len, file_offset)
            }
        }?;
        if moved != len {
            return Err(AccelError::Unsupported(format!(
                "cuFile moved {moved} of {len} bytes at offset {file_offset}"
            )));
        }
        Ok(())
    }
}

impl crate::DirectStorage for CudaMemory {
    fn register(&self, fd: std::os::fd::RawFd) -> Result<(), AccelError> {
        let direct = self
            .direct
            .as_ref()
            .ok_or_else(|| AccelError::Unsupported("cuFile is not loaded".into()))?;
        let handle = direct.cufile.register(fd)?;
        lock(&direct.handles).insert(fd, Arc::new(handle));
        Ok(())
    }

    unsafe fn read(
        &self,
        fd: std::os::fd::RawFd,
        dst: DevicePtr,
        len: usize,
        file_offset: u64,
    ) -> Result<(), AccelError> {
        self.cufile_transfer(fd, dst, len, file_offset, false)
    }

    unsafe fn write(
        &self,
        fd: std::os::fd::RawFd,
        src: DevicePtr,
        len: usize,
        file_offset: u64,
    ) -> Result<(), AccelError> {
        self.cufile_transfer(fd, src, len, file_offset, true)
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // Everything queued finishes before streams, events and memory go.
        if let Err(e) = self.driver.ctx_synchronize() {
            tracing::warn!("synchronising the device at shutdown: {e}");
        }
        // File registrations go before the memory and the driver.
        self.direct = None;
        let ranges = std::mem::take(&mut *self.ranges.write().unwrap_or_else(|p| p.into_inner()));
        drop(ranges); // mappings unmap, then addresses are freed
        for stream in [self.d2h, self.h2d] {
            // SAFETY: our own streams, destroyed once, drained above.
            if let Err(e) = unsafe { self.driver.stream_destroy(stream) } {
                tracing::warn!("destroying a copy stream: {e}");
            }
        }
        let events = std::mem::take(&mut *lock(&self.events));
        for e in events.all {
            // SAFETY: our own events, destroyed once; the context is synchronised so none is pending.
            if let Err(err) = unsafe { self.driver.event_destroy(e) } {
                tracing::warn!("destroying an event: {err}");
            }
        }
    }
}
