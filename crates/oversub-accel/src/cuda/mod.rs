//! The CUDA backend: real GPU memory paged with its device address kept, through CUDA's virtual-memory API.
//!
//! A buffer's address range is reserved once (`cuMemAddressReserve`); commit creates one physical allocation,
//! maps it there and grants access; decommit unmaps and releases it while the address stays reserved. Copies run
//! on two streams of their own (one per direction, so both copy engines work) and complete through events, which
//! the pager uses to pipeline PCIe copies with storage I/O over pinned staging buffers.
//!
//! The driver calls sit behind [`CudaDriver`]: [`CudarcDriver`] loads `libcuda` at run time (the project builds and
//! runs without CUDA, and says "no CUDA driver found" when it is missing), [`testing::FakeDriver`] emulates the calls
//! in host memory and records them, so the ordering the backend promises is tested without a GPU.

mod cudarc_driver;
pub mod cufile;
mod driver;
pub mod loading;
pub mod managed;
mod memory;
pub mod spin;
#[cfg(feature = "testing")]
pub mod testing;
mod vmm;

/// The bindings themselves, for code that launches its own kernels (the probe's GPU measurements): through this
/// crate, so there is one version of them and one loader.
pub use cudarc;
pub use cudarc_driver::CudarcDriver;
pub use driver::{
    CudaDriver, DeviceAddr, DeviceInfo, DriverError, EventHandle, PhysHandle, StreamHandle,
};
pub use memory::{CudaMemory, CudaMemoryConfig};
pub use vmm::{AddressRange, Mapping, PhysicalMemory};
