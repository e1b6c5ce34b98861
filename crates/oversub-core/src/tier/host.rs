//! The host tier: a copy is room in the host-memory tier (`transfer/host_tier.rs`: the pinned memory and its copy
//! thread), moved through the tier's path (gated or not); direct reads and writes are memory copies.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use super::{Tier, TierIo};
use crate::transfer::host_tier::{HostSlot, HostTier};
use crate::transfer::TransferPath;
use crate::PagerError;

/// Copies kept in the host-memory tier.
#[derive(Debug)]
pub(crate) struct Host {
    memory: Arc<HostTier>,
    /// The tier itself, or the tier wrapped in a gate.
    path: Box<dyn TransferPath<Copy = HostSlot>>,
}

impl Host {
    /// Room in `memory`, copied through `path`.
    pub(crate) fn new(memory: Arc<HostTier>, path: Box<dyn TransferPath<Copy = HostSlot>>) -> Self {
        Host { memory, path }
    }
}

impl Tier for Host {
    type Copy = HostSlot;

    fn in_host_memory(&self) -> bool {
        true
    }

    fn reserve(
        &self,
        io_bytes: u64,
        _priority: &Arc<AtomicI64>,
    ) -> Result<Option<HostSlot>, PagerError> {
        Ok(self.memory.allocate(io_bytes))
    }

    fn release(&self, slot: HostSlot) {
        self.memory.release(slot);
    }

    unsafe fn submit(&self, slot: &HostSlot, io: TierIo<'_>) -> Result<(), PagerError> {
        // SAFETY: forwarded from our caller; the room is the copy's alone.
        unsafe { self.path.submit(io.onto(slot)) }
    }

    fn quick_access(&self) -> bool {
        true
    }

    fn read_at(&self, slot: &HostSlot, offset: u64, out: &mut [u8]) -> Result<(), PagerError> {
        self.memory.read(slot, offset, out);
        Ok(())
    }

    fn write_at(&self, slot: &HostSlot, offset: u64, data: &[u8]) -> Result<(), PagerError> {
        self.memory.write(slot, offset, data);
        Ok(())
    }
}
