//! The CUDA driver calls the backend needs, behind one trait: [`CudaDriver`]. The real implementation
//! ([`super::CudarcDriver`]) forwards to `libcuda` through `cudarc`'s dynamically loaded bindings; the recording fake
//! ([`super::testing::FakeDriver`]) emulates them in host memory so the backend's ordering can be tested without a
//! GPU. Handles are plain integers so that both sides can hand them out.

/// A device virtual address (`CUdeviceptr`).
pub type DeviceAddr = u64;

/// A physical allocation made by `cuMemCreate` (`CUmemGenericAllocationHandle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysHandle(pub u64);

/// A stream (`CUstream`), created by [`CudaDriver::stream_create`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamHandle(pub u64);

/// An event (`CUevent`), created by [`CudaDriver::event_create`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventHandle(pub u64);

/// A failed driver call: which call, and the driver's error code and name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct DriverError {
    /// The driver function (`cuMemCreate`, ...).
    pub call: &'static str,
    /// The `CUresult` code.
    pub code: i32,
    /// The `CUresult` name (`CUDA_ERROR_OUT_OF_MEMORY`, ...).
    pub name: String,
}

impl DriverError {
    /// `CUDA_ERROR_OUT_OF_MEMORY`'s code.
    pub const OUT_OF_MEMORY: i32 = 2;

    /// Whether the driver ran out of device memory.
    pub fn is_out_of_memory(&self) -> bool {
        self.code == Self::OUT_OF_MEMORY
    }
}

/// What the backend needs to know about the device once, at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Ordinal of the device the driver object is bound to.
    pub ordinal: i32,
    /// Driver version as CUDA encodes it (12080 for 12.8).
    pub driver_version: i32,
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// Whether the device supports the virtual-memory management API (`cuMemAddressReserve` and friends).
    pub vmm_supported: bool,
    /// Minimum granularity of `cuMemCreate` for device memory on this device, in bytes.
    pub granularity_bytes: usize,
    /// Greatest (highest) stream priority: numerically the smallest value of `cuCtxGetStreamPriorityRange`.
    pub greatest_stream_priority: i32,
}

/// The driver calls of the CUDA backend. Every call must be callable from any thread: implementations make their
/// context current on the calling thread themselves.
///
/// # Safety
/// The backend relies on the driver's contract: an address range returned by `address_reserve` is free for our
/// exclusive use until `address_free`; after `mem_map` + `mem_set_access` the range is device memory of the mapped
/// allocation; a copy enqueued on a stream has completed (its bytes are at the destination) once an event recorded
/// after it on the same stream reports complete, or once the stream or context is synchronised.
pub unsafe trait CudaDriver: Send + Sync + std::fmt::Debug {
    /// The device this driver object is bound to.
    fn info(&self) -> &DeviceInfo;

    /// Makes the driver's context current on the calling thread (`cuCtxSetCurrent`), for libraries that use the
    /// current context (cuFile). The other calls do this themselves.
    fn make_current(&self) -> Result<(), DriverError>;

    /// Free and total device memory in bytes (`cuMemGetInfo`).
    fn mem_get_info(&self) -> Result<(u64, u64), DriverError>;

    /// Reserves `len` bytes of device address space aligned to `align` (`cuMemAddressReserve`).
    fn address_reserve(&self, len: usize, align: usize) -> Result<DeviceAddr, DriverError>;

    /// Frees a reserved range (`cuMemAddressFree`).
    ///
    /// # Safety
    /// The range came from `address_reserve` with this length and nothing is mapped in it any more.
    unsafe fn address_free(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError>;

    /// Creates a physical allocation of `len` bytes (a multiple of the granularity) on the device (`cuMemCreate`).
    fn mem_create(&self, len: usize) -> Result<PhysHandle, DriverError>;

    /// Releases a physical allocation (`cuMemRelease`); its memory goes back once no mapping holds it.
    ///
    /// # Safety
    /// The handle came from `mem_create` and is released once.
    unsafe fn mem_release(&self, handle: PhysHandle) -> Result<(), DriverError>;

    /// Maps the whole of `handle` at `addr` (`cuMemMap`, offset 0).
    ///
    /// # Safety
    /// `[addr, addr + len)` lies in a reserved range, nothing is mapped there, and `len` is the allocation's size.
    unsafe fn mem_map(
        &self,
        addr: DeviceAddr,
        len: usize,
        handle: PhysHandle,
    ) -> Result<(), DriverError>;

    /// Makes a mapped range readable and writable by the device (`cuMemSetAccess`).
    ///
    /// # Safety
    /// The range is mapped.
    unsafe fn mem_set_access(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError>;

    /// Unmaps a range (`cuMemUnmap`).
    ///
    /// # Safety
    /// The range was mapped with `mem_map` and no device work or copy touches it any more.
    unsafe fn mem_unmap(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError>;

    /// Allocates `len` bytes of page-locked host memory the device can copy to and from at full speed
    /// (`cuMemHostAlloc`). Page-aligned.
    fn host_alloc_pinned(&self, len: usize) -> Result<*mut u8, DriverError>;

    /// Frees memory from `host_alloc_pinned` (`cuMemFreeHost`).
    ///
    /// # Safety
    /// `ptr` came from `host_alloc_pinned` and nothing uses it any more (no pending copy).
    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<(), DriverError>;

    /// Creates a stream that does not synchronise with the legacy default stream, at `priority` (clamped by the
    /// driver; see [`DeviceInfo::greatest_stream_priority`]).
    fn stream_create(&self, priority: i32) -> Result<StreamHandle, DriverError>;

    /// Destroys a stream (`cuStreamDestroy`); work still queued on it completes first.
    ///
    /// # Safety
    /// The stream came from `stream_create` and is destroyed once.
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<(), DriverError>;

    /// Waits for all work queued on `stream` (`cuStreamSynchronize`).
    fn stream_synchronize(&self, stream: StreamHandle) -> Result<(), DriverError>;

    /// Waits for all work of the context, every stream (`cuCtxSynchronize`).
    fn ctx_synchronize(&self) -> Result<(), DriverError>;

    /// Enqueues a copy of `len` bytes from device address `src` to host memory `dst` (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes and untouched until the copy completes; `[src, src + len)` is mapped device
    /// memory until then.
    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError>;

    /// Enqueues a copy of `len` bytes from host memory `src` to device address `dst` (`cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `src` is valid for `len` bytes and unchanged until the copy completes; `[dst, dst + len)` is mapped device
    /// memory with access set until then.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError>;

    /// Enqueues setting `len` bytes of device memory at `dst` to `value` (`cuMemsetD8Async`).
    ///
    /// # Safety
    /// `[dst, dst + len)` is mapped device memory with access set until the fill completes.
    unsafe fn memset_d8_async(
        &self,
        dst: DeviceAddr,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError>;

    /// Creates an event without timing (`cuEventCreate(CU_EVENT_DISABLE_TIMING)`).
    fn event_create(&self) -> Result<EventHandle, DriverError>;

    /// Destroys an event (`cuEventDestroy`).
    ///
    /// # Safety
    /// The event came from `event_create` and is destroyed once.
    unsafe fn event_destroy(&self, event: EventHandle) -> Result<(), DriverError>;

    /// Records `event` on `stream`: it completes when the work queued before it has (`cuEventRecord`).
    fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<(), DriverError>;

    /// Whether the work before the event's last record has completed (`cuEventQuery`; `CUDA_ERROR_NOT_READY` is
    /// `Ok(false)`).
    fn event_query(&self, event: EventHandle) -> Result<bool, DriverError>;

    /// Waits until the event has completed (`cuEventSynchronize`).
    fn event_synchronize(&self, event: EventHandle) -> Result<(), DriverError>;
}
