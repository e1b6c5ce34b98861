//! Owning wrappers of the virtual-memory calls: each value frees what it holds when dropped, in the order CUDA
//! needs (unmap, then release the physical memory; free an address range only once nothing is mapped in it).
//! The explicit `free`/`unmap` methods report errors that drops can only log.

use std::sync::Arc;

use super::driver::{CudaDriver, DeviceAddr, DriverError, PhysHandle};

/// A reserved range of device addresses with nothing behind it (`cuMemAddressReserve` / `cuMemAddressFree`).
#[derive(Debug)]
pub struct AddressRange {
    driver: Arc<dyn CudaDriver>,
    addr: DeviceAddr,
    len: usize,
    freed: bool,
}

impl AddressRange {
    /// Reserves `len` bytes (a multiple of the granularity), aligned to `align`.
    pub fn reserve(
        driver: &Arc<dyn CudaDriver>,
        len: usize,
        align: usize,
    ) -> Result<AddressRange, DriverError> {
        let addr = driver.address_reserve(len, align)?;
        Ok(AddressRange {
            driver: Arc::clone(driver),
            addr,
            len,
            freed: false,
        })
    }

    /// First address.
    pub fn addr(&self) -> DeviceAddr {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty (never: ranges are at least one granule).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives the range back, reporting a failure.
    ///
    /// # Safety
    /// No mapping lives in the range any more.
    pub unsafe fn free(mut self) -> Result<(), DriverError> {
        self.freed = true;
        // SAFETY: the range came from address_reserve with this length; the caller guarantees it is empty.
        unsafe { self.driver.address_free(self.addr, self.len) }
    }
}

impl Drop for AddressRange {
    fn drop(&mut self) {
        if !self.freed {
            // SAFETY: owners drop the range only after every mapping in it (mappings are dropped first by
            // `CudaMemory`, which holds them beside the range).
            if let Err(e) = unsafe { self.driver.address_free(self.addr, self.len) } {
                tracing::warn!("freeing device addresses {:#x}: {e}", self.addr);
            }
        }
    }
}

/// A physical allocation of device memory (`cuMemCreate` / `cuMemRelease`).
#[derive(Debug)]
pub struct PhysicalMemory {
    driver: Arc<dyn CudaDriver>,
    handle: PhysHandle,
    len: usize,
    released: bool,
}

impl PhysicalMemory {
    /// Creates `len` bytes (a multiple of the granularity) of device memory.
    pub fn create(driver: &Arc<dyn CudaDriver>, len: usize) -> Result<PhysicalMemory, DriverError> {
        let handle = driver.mem_create(len)?;
        Ok(PhysicalMemory {
            driver: Arc::clone(driver),
            handle,
            len,
            released: false,
        })
    }

    /// The driver's handle.
    pub fn handle(&self) -> PhysHandle {
        self.handle
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the allocation is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Releases the memory, reporting a failure.
    pub fn release(mut self) -> Result<(), DriverError> {
        self.released = true;
        // SAFETY: the handle came from mem_create and this is its only release (drop skips it now).
        unsafe { self.driver.mem_release(self.handle) }
    }
}

impl Drop for PhysicalMemory {
    fn drop(&mut self) {
        if !self.released {
            // SAFETY: as in `release`; a mapping that still holds the memory keeps it alive until unmapped.
            if let Err(e) = unsafe { self.driver.mem_release(self.handle) } {
                tracing::warn!("releasing device memory: {e}");
            }
        }
    }
}

/// Physical memory mapped read-write at an address of a reserved range (`cuMemMap` + `cuMemSetAccess`; undone by
/// `cuMemUnmap`, then `cuMemRelease`).
#[derive(Debug)]
pub struct Mapping {
    driver: Arc<dyn CudaDriver>,
    addr: DeviceAddr,
    memory: Option<PhysicalMemory>,
}

impl Mapping {
    /// Maps all of `memory` at `addr` and grants the device read-write access. On failure the memory is
    /// unmapped (if the map step succeeded) and released.
    ///
    /// # Safety
    /// `[addr, addr + memory.len())` lies in a reserved range and nothing is mapped there.
    pub unsafe fn map(
        driver: &Arc<dyn CudaDriver>,
        addr: DeviceAddr,
        memory: PhysicalMemory,
    ) -> Result<Mapping, DriverError> {
        let len = memory.len();
        // SAFETY: forwarded from our caller; `len` is the allocation's size.
        unsafe { driver.mem_map(addr, len, memory.handle()) }?;
        let mapping = Mapping {
            driver: Arc::clone(driver),
            addr,
            memory: Some(memory),
        };
        // SAFETY: the range was mapped just above.
        unsafe { driver.mem_set_access(addr, len) }?;
        // (On error `mapping` drops here: unmap, then release.)
        Ok(mapping)
    }

    /// The mapped address.
    pub fn addr(&self) -> DeviceAddr {
        self.addr
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.memory.as_ref().map_or(0, PhysicalMemory::len)
    }

    /// Whether nothing is mapped (never, until unmapped).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Unmaps, then releases the physical memory; reports the first failure. If the unmap fails, the mapping is
    /// kept (the memory may still be in use) and handed back with the error; if only the release fails, the range
    /// is unmapped and `None` comes back.
    ///
    /// # Safety
    /// No device work or copy uses the range any more.
    pub unsafe fn unmap(mut self) -> Result<(), (Option<Mapping>, DriverError)> {
        let len = self.len();
        // SAFETY: forwarded from our caller; the range is mapped (we own the mapping).
        if let Err(e) = unsafe { self.driver.mem_unmap(self.addr, len) } {
            return Err((Some(self), e));
        }
        match self.memory.take() {
            Some(memory) => memory.release().map_err(|e| (None, e)),
            None => Ok(()),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            // SAFETY: owners drop a mapping only once nothing uses it (`CudaMemory` synchronises its copy streams
            // first).
            match unsafe { self.driver.mem_unmap(self.addr, memory.len()) } {
                Ok(()) => drop(memory),
                Err(e) => {
                    // Releasing memory that may still be reached would be worse than leaking it.
                    tracing::warn!(
                        "unmapping device memory at {:#x}: {e}; leaking it",
                        self.addr
                    );
                    std::mem::forget(memory);
                }
            }
        }
    }
}
