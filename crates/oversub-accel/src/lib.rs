//! Accelerator memory behind one trait, [`DeviceMemory`].
//!
//! The trait follows the shape of CUDA's virtual-memory API: an address range is reserved once, backed by physical
//! chunks on demand (commit) and stripped of them again (decommit) while the address stays reserved, so a paged
//! buffer keeps its device address. The [`host::HostMemory`] backend models an integrated GPU whose memory is
//! system DRAM: reservations are `mmap`ed without access, commits make them read-write, decommits give the pages
//! back to the kernel and revoke access so that a stray access faults instead of reading stale data.

pub mod cuda;
mod error;
pub mod host;

pub use error::AccelError;
pub use host::{HostMemory, HostMemoryConfig, PageRelease};
pub use staging::{Fence, HostBuffer};

mod staging;

/// An address in the device's virtual address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }
}

impl std::fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A reserved device address range. Its length is a multiple of the device's granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// First address of the range.
    pub addr: DevicePtr,
    /// Length of the range in bytes.
    pub len: usize,
}

impl Reservation {
    /// Whether `[offset, offset + len)` lies inside the range.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.len as u64)
    }
}

/// Device memory that can be reserved, backed, stripped and copied: the operations a pager needs.
///
/// A CUDA backend maps these onto `cuMemAddressReserve`, `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`,
/// `cuMemUnmap` + `cuMemRelease`, `cuMemAddressFree` and `cuMemcpy*Async` on a stream.
///
/// # Safety
/// The pager does direct I/O into the memory this trait describes, so implementations promise: a committed range is
/// readable and writable for its whole length at its address until it is decommitted or unreserved; `host_ptr`
/// returns that address (or `None`), never anything else; ranges that are not live reservations of this backend
/// are refused with an error instead of being acted on; and no call touches memory outside the range it is given.
pub unsafe trait DeviceMemory: Send + Sync + std::fmt::Debug {
    /// Short backend name for logs and reports ("host", "cuda").
    fn name(&self) -> &'static str;

    /// Physical chunk granularity in bytes: reservations and commits are whole multiples of it.
    fn granularity(&self) -> usize;

    /// Whether the host can address device memory directly (an integrated GPU), so that storage I/O can go straight
    /// into it without staging buffers.
    fn host_accessible(&self) -> bool;

    /// Reserves an address range of at least `len` bytes (rounded up to the granularity) with no memory behind it.
    fn reserve(&self, len: usize) -> Result<Reservation, AccelError>;

    /// Backs the whole range with physical memory and maps it read-write at the same address.
    /// Committing a committed range is allowed and keeps its contents.
    fn commit(&self, range: &Reservation) -> Result<(), AccelError>;

    /// Unmaps and releases the range's physical memory; the address stays reserved and accesses fault.
    ///
    /// # Safety
    /// Nothing may use the range's memory any more (no pending I/O, copy, kernel or reference into it).
    unsafe fn decommit(&self, range: &Reservation) -> Result<(), AccelError>;

    /// Gives the address range back. Its memory is released first if it is still committed.
    ///
    /// # Safety
    /// As for [`decommit`](Self::decommit); the address may be handed out again afterwards.
    unsafe fn unreserve(&self, range: Reservation) -> Result<(), AccelError>;

    /// Waits for outstanding device work (kernels, copies) so the memory may be read or released.
    fn synchronize(&self) -> Result<(), AccelError>;

    /// A host pointer to the range when [`host_accessible`](Self::host_accessible), else `None`.
    fn host_ptr(&self, range: &Reservation) -> Option<*mut u8>;

    /// Copies `dst.len()` bytes from device address `src` to host memory.
    ///
    /// # Safety
    /// `[src, src + dst.len())` must lie inside a committed reservation of this device that nothing writes meanwhile.
    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), AccelError>;

    /// Copies `src` to device address `dst`.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` must lie inside a committed reservation of this device that nothing accesses meanwhile.
    unsafe fn copy_from_host(&self, dst: DevicePtr, src: &[u8]) -> Result<(), AccelError>;

    /// Bytes of the range that physically hold memory right now, where the backend can tell (`None` otherwise).
    fn resident_bytes(&self, range: &Reservation) -> Result<Option<u64>, AccelError>;

    /// Makes the memory of a newly reserved and committed range read as zeros. Backends whose fresh memory is
    /// already zero (the host backend's anonymous mappings) do nothing; the cuda backend clears it.
    fn zero_new(&self, range: &Reservation) -> Result<(), AccelError> {
        let _ = range;
        Ok(())
    }

    /// Page-aligned host memory for copies: page-locked (pinned) when `pinned` and the backend can pin, so that
    /// copies to and from it run at the bus's full speed. The default is plain (pageable) memory.
    fn alloc_host(&self, len: usize, pinned: bool) -> Result<HostBuffer, AccelError> {
        let _ = pinned;
        HostBuffer::pageable(len)
    }

    /// Starts a copy of `len` bytes from device address `src` to host memory `dst`; the bytes are there once the
    /// returned fence has completed ([`fence_wait`](Self::fence_wait)). The default copies at once.
    ///
    /// # Safety
    /// As [`copy_to_host`](Self::copy_to_host), and `dst` stays valid and untouched until the fence completes.
    unsafe fn copy_to_host_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        // SAFETY: the caller promises `dst` is valid for `len` bytes and unused meanwhile.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        // SAFETY: forwarded from our caller.
        unsafe { self.copy_to_host(src, dst) }?;
        Ok(Fence::COMPLETE)
    }

    /// Starts a copy of `len` bytes from host memory `src` to device address `dst`, complete with its fence.
    ///
    /// # Safety
    /// As [`copy_from_host`](Self::copy_from_host), and `src` stays valid and unchanged until the fence completes.
    unsafe fn copy_from_host_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<Fence, AccelError> {
        // SAFETY: the caller promises `src` is valid for `len` bytes and unchanged meanwhile.
        let src = unsafe { std::slice::from_raw_parts(src, len) };
        // SAFETY: forwarded from our caller.
        unsafe { self.copy_from_host(dst, src) }?;
        Ok(Fence::COMPLETE)
    }

    /// Whether a fence's copy has completed, without waiting.
    fn fence_done(&self, fence: &Fence) -> Result<bool, AccelError> {
        let _ = fence;
        Ok(true)
    }

    /// Waits for a fence's copy to complete. Every fence is waited for once (that returns its resources).
    fn fence_wait(&self, fence: Fence) -> Result<(), AccelError> {
        let _ = fence;
        Ok(())
    }

    /// A fence on a stream of the caller's (for CUDA a `CUstream`, as PyTorch's
    /// `torch.cuda.current_stream().cuda_stream` gives it; 0 is the default stream): it completes when the work
    /// queued on that stream so far has. Waiting for it instead of the whole device lets work queued later on the
    /// stream, or on others, run on. Backends whose work is done when its call returns give a completed fence.
    fn record_fence(&self, stream: u64) -> Result<Fence, AccelError> {
        let _ = stream;
        Ok(Fence::COMPLETE)
    }

    /// Gives a fence up without waiting for it (a newer one on the same stream covers it, or its work no longer
    /// matters); its resources return to the backend.
    fn fence_forget(&self, fence: Fence) {
        let _ = fence;
    }

    /// Free and total device memory in bytes, where the backend can tell (`cuMemGetInfo`).
    fn memory_info(&self) -> Result<Option<(u64, u64)>, AccelError> {
        Ok(None)
    }

    /// GPUDirect Storage, where the backend has it: storage I/O straight between a file and device memory.
    fn direct_storage(&self) -> Option<&dyn DirectStorage> {
        None
    }
}

/// Storage I/O straight between a file and device memory, without host staging (cuFile / GPUDirect Storage).
pub trait DirectStorage: Send + Sync + std::fmt::Debug {
    /// Registers a file descriptor (opened with `O_DIRECT`) for direct transfers; an error says why the file
    /// cannot be used (the caller then stages through host memory).
    fn register(&self, fd: std::os::fd::RawFd) -> Result<(), AccelError>;

    /// Reads `len` bytes at `file_offset` of the registered `fd` into device memory at `dst`.
    ///
    /// # Safety
    /// `[dst, dst + len)` lies in a committed reservation of this device that nothing else uses meanwhile.
    unsafe fn read(
        &self,
        fd: std::os::fd::RawFd,
        dst: DevicePtr,
        len: usize,
        file_offset: u64,
    ) -> Result<(), AccelError>;

    /// Writes `len` bytes of device memory at `src` to `file_offset` of the registered `fd`.
    ///
    /// # Safety
    /// `[src, src + len)` lies in a committed reservation of this device that nothing writes meanwhile.
    unsafe fn write(
        &self,
        fd: std::os::fd::RawFd,
        src: DevicePtr,
        len: usize,
        file_offset: u64,
    ) -> Result<(), AccelError>;
}

/// Rounds `value` up to a multiple of `align` (which must be non-zero); `None` on overflow.
pub fn round_up(value: u64, align: u64) -> Option<u64> {
    if align == 0 {
        return None;
    }
    value.checked_add(align - 1).map(|v| v / align * align)
}
