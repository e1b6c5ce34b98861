//! The pager: accelerator buffers paged whole between device memory and a swap store.
//!
//! A [`Pool`] (made from a [`PoolSpec`], the one entrance) of fixed capacity hands out buffers to [`AddressSpace`]s. Any buffer, or all buffers of a space, can be
//! paged out to the pool's [`SwapStore`](oversub_io::SwapStore) and back in, synchronously or asynchronously
//! (start, then [`Ticket::finish`]). A buffer keeps its device address across a page-out/page-in cycle, and its
//! memory is really given back while it is out. Read-only buffers are written to the store once. Each address space
//! has its own lock; the only global state (capacity accounting, store slots) is atomics or a short lock.
//!
//! Inside, three layers (docs/ARCHITECTURE.md): `space/` keeps the buffers, `tier/` says where a paged-out copy
//! lives (the store, a host-memory tier; checksummed by wrapping a tier in `Hashed`), `transfer/` moves the bytes
//! (direct, staged, gated). The pool composes the paths and the tiers once, when it is made.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use oversub_core::{BufferFlags, BufferState, PoolSpec};
//!
//! // The one entrance (see `PoolSpec`): a store in the temporary directory, of the default size (64 MiB here).
//! let pool = PoolSpec::new(16 << 20).open()?;
//! let space = pool.address_space();
//! let weights = space.alloc(8 << 20, BufferFlags::READ_ONLY)?; // written to the store once
//! space.write(weights, 0, b"layer 0")?;
//! let addr = space.info(weights)?.addr;
//! space.page_out(weights)?; // write, then give the memory back
//! assert_eq!(space.info(weights)?.state, BufferState::PagedOut);
//! let ticket = space.page_in_async(weights)?; // read submitted; other work can run now
//! ticket.finish()?;
//! assert_eq!(space.info(weights)?.addr, addr); // same address...
//! let mut back = [0u8; 7];
//! space.read(weights, 0, &mut back)?;
//! assert_eq!(&back, b"layer 0"); // ...same bytes
//! space.page_out_all()?;
//! # Ok(())
//! # }
//! ```

pub mod demand;
mod error;
mod pool;
mod preempt;
mod space;
mod spec;
mod tenant;
mod tier;
mod transfer;
mod workers;

pub use demand::{
    measure_demand_bandwidths, measure_demand_bandwidths_with, thread_faults, DemandAccess,
    DemandBufferId, DemandError, DemandSpace, DemandSpeeds, EvictStats, FaultCounts, Readahead,
    TouchStats,
};
pub use error::PagerError;
pub use oversub_tenants::swap::AlphaRule;
pub use pool::{Pool, PoolConfig, PoolStats};
pub use preempt::SpinPreemption;
pub use space::{AddressSpace, Buffer, BufferFlags, BufferInfo, BufferState, OpKind, Ticket};
pub use spec::{Demand, Device, DeviceParseError, IoPointChoice, IoPointReport, PoolSpec};
pub use tenant::{TenantConfig, TenantQuota};
pub use transfer::gated::{GateCosts, MmCost};
pub use transfer::host_tier::HostTierConfig;
pub use transfer::staged::{StagingConfig, DEFAULT_STAGING_CHUNKS, DEFAULT_STAGING_CHUNK_BYTES};
