//! Unified-memory page migration under oversubscription, simulated from traces.
//!
//! The pieces, in the order an access meets them: [`trace`] (the access stream: oversub's binary format, the NVBit
//! `mem_trace` importer), [`workload`] (generators of the paper's seven irregular applications), [`cache`] (the GPU
//! L2), [`policy`] (what to do on a fault: the DynaMap family and an oracle), [`sim`] (page table, eviction, the
//! event counters and the cost model of [`cost`]) and [`suite`] (every workload × ratio × policy in parallel).

pub mod analysis;
pub mod cache;
pub mod cost;
mod error;
pub mod policy;
pub mod report;
pub mod sim;
pub mod suite;
pub mod summary;
pub mod trace;
pub mod workload;

pub use error::SimError;

/// Bytes in a GPU cache line, the granularity of the trace (the paper's L).
pub const LINE_BYTES: u64 = 128;
/// Bytes in a page, the unit of migration (the paper's P).
pub const PAGE_BYTES: u64 = 4096;
/// Bytes in a page group, the unit of NVIDIA's hardware access counters.
pub const GROUP_BYTES: u64 = 64 * 1024;
/// Bytes in a block, the unit of the driver's prefetch tree and of eviction.
pub const BLOCK_BYTES: u64 = 2 * 1024 * 1024;
/// Cache lines in a page.
pub const LINES_PER_PAGE: u32 = (PAGE_BYTES / LINE_BYTES) as u32;
/// Pages in a group.
pub const PAGES_PER_GROUP: u32 = (GROUP_BYTES / PAGE_BYTES) as u32;
/// Pages in a block.
pub const PAGES_PER_BLOCK: u32 = (BLOCK_BYTES / PAGE_BYTES) as u32;

/// One coalesced memory access of a warp: the bytes it touches lie within one cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access {
    /// Byte address of the first byte touched.
    pub addr: u64,
    /// Warp that issued it (global warp number).
    pub warp: u32,
    /// Bytes touched in the line, 1..=128.
    pub bytes: u16,
    /// A store rather than a load.
    pub write: bool,
}

impl Access {
    /// A load of `bytes` at `addr` by `warp`.
    pub fn read(warp: u32, addr: u64, bytes: u16) -> Self {
        Self {
            addr,
            warp,
            bytes,
            write: false,
        }
    }

    /// A store of `bytes` at `addr` by `warp`.
    pub fn write(warp: u32, addr: u64, bytes: u16) -> Self {
        Self {
            addr,
            warp,
            bytes,
            write: true,
        }
    }
}

/// A whole access stream held in memory, from a file or straight from a generator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// What produced it (a workload name or a file name).
    pub name: String,
    /// The accesses in issue order.
    pub accesses: Vec<Access>,
}

impl Trace {
    /// An empty trace called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            accesses: Vec::new(),
        }
    }

    /// Distinct 4 KiB pages touched: the problem size the oversubscription ratio is taken against.
    pub fn footprint_pages(&self) -> u64 {
        let mut pages: Vec<u64> = self.accesses.iter().map(|a| a.addr / PAGE_BYTES).collect();
        pages.sort_unstable();
        pages.dedup();
        pages.len() as u64
    }
}
