//! `oversub-io`: the storage side of oversub. It moves whole buffers between memory and
//! a swap file (or NVMe block device) with direct I/O.
//!
//! [`SwapStore`] owns the file and hands out [`Slot`]s from an [`ExtentAllocator`];
//! transfers are split into requests and run as one batch by an [`IoEngine`]
//! (io_uring, or a psync thread pool where io_uring is unavailable). A store is exclusive (flock, O_EXCL for
//! devices), recognises what a file or device holds before it writes to it (its own header, file-system and
//! partition signatures), keeps files private (0600) and scrubs what was swapped out when it closes ([`Scrub`]);
//! see the [`store`] module.

pub mod alloc;
pub mod engine;
pub mod error;
pub mod external;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tuning;

pub use alloc::{Extent, ExtentAllocator};
pub use engine::{
    select_engine, submit_wait, Direction, EngineChoice, IoCallback, IoCounters,
    IoCountersSnapshot, IoDone, IoEngine, IoRequest, IoVec, PriorityEngine, PsyncEngine,
    UringEngine,
};
pub use error::IoError;
pub use external::ExternalFile;
// The one aligned heap buffer is base's (also the device backends' pageable host memory).
pub use oversub_base::mem::AlignedBuf;
pub use store::{Scrub, Slot, SlotView, StoreBuilder, SwapStore};
