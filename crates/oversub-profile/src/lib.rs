//! The platform profile: what `oversub probe` measured on a machine, as a versioned TOML file that `oversub plan`,
//! `oversub sim uvm` and `oversub sim swap` read with `--profile`.
//!
//! The file has one required table, `[profile]` (its `version`), and optional tables per consumer: `[storage]`
//! (the planner's page-in and page-out bandwidths), `[uvm]` (the UVM simulator's cost constants), `[swap]` (the swap
//! simulator's bandwidths), plus `[cpu]` and `[gpu]` with the probe's headline measurements for people. Every
//! quantity carries its unit in its name (`_s`, `_bytes`, `_bytes_per_s`). Reading checks the version, rejects
//! unknown keys and refuses nonsense values (a negative bandwidth, a zero block size) with the key's path in the
//! message. The schema is documented in docs/profile.md. Nothing here prints.
//!
//! ```
//! # fn main() -> Result<(), oversub_profile::ProfileError> {
//! use oversub_profile::{Meta, Profile, SwapMachine};
//!
//! let mut p = Profile::new(Meta::default());
//! p.swap = Some(SwapMachine {
//!     ssd_read_bytes_per_s: Some(1.9e9),
//!     ..SwapMachine::default()
//! });
//! let text = p.to_toml_string()?;
//! assert_eq!(Profile::from_toml_str(&text, "profile.toml")?, p);
//!
//! let e = Profile::from_toml_str("[profile]\nversion = 2\n", "old.toml").unwrap_err();
//! assert!(e.to_string().contains("schema version 2 is not supported"));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

mod error;
mod file;
mod validate;

#[cfg(test)]
mod tests;

pub use error::ProfileError;

/// The schema version this build reads and writes.
pub const VERSION: u32 = 1;

/// A whole profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Version and provenance.
    pub profile: Meta,
    /// CPU-side measurements (informative; no consumer needs them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// The store's direct-I/O bandwidths; the planner's page-in/page-out speeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    /// GPU measurements, when the probe found one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// Overrides of `oversub sim uvm`'s cost model; a key left out keeps the paper's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uvm: Option<Uvm>,
    /// Overrides of `oversub sim swap`'s machine; a key left out keeps the paper's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapMachine>,
}

/// `[profile]`: the schema version and where the numbers came from. [`Meta::default`] is the current version with
/// no provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// Schema version; must equal [`VERSION`].
    pub version: u32,
    /// The program that wrote the file (`oversub 0.1.0 probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Seconds since the Unix epoch when it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_unix_s: Option<u64>,
    /// Host name of the measured machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Kernel release (`uname -r`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// CPU model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Online CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Whether the probe ran with `--quick` (smaller sizes, fewer points).
    #[serde(default)]
    pub quick: bool,
}

/// How a TLB-miss count was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissCount {
    /// Counted by the CPU's performance counters (`perf_event_open`).
    Perf,
    /// Derived from the access pattern (distinct pages touched), because counters were unavailable.
    Derived,
}

/// `[cpu]`: headline CPU measurements (Table 3, Fig. 6, Table 4 of Vesely et al.).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// Latency of one TLB miss with 4 KiB pages (64 B vs 4 KiB stride method).
    pub tlb_miss_latency_s: f64,
    /// How the misses behind `tlb_miss_latency_s` were counted.
    pub tlb_miss_count: MissCount,
    /// Time per access of the 4 KiB-stride chain with 4 KiB pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride_4k_access_s: Option<f64>,
    /// The same with transparent huge pages, when they could be had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride_4k_access_thp_s: Option<f64>,
    /// Soft page fault (first touch) latency, one thread.
    pub page_fault_s: f64,
    /// Fault serviced in user space through userfaultfd, one faulting thread; absent when unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uffd_fault_s: Option<f64>,
    /// Shootdown latency: `mprotect` of one page while other threads run in the address space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shootdown_s: Option<f64>,
    /// Single-thread memcpy bandwidth between two buffers much larger than the caches.
    pub memcpy_bytes_per_s: f64,
}

/// `[storage]`: direct-I/O bandwidths of the store. `read_bytes_per_s` and `write_bytes_per_s` are at the pager's
/// operating point (`block_bytes`, `queue_depth`); `points` holds the whole grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    /// Page-in (read) bandwidth.
    pub read_bytes_per_s: f64,
    /// Page-out (write) bandwidth.
    pub write_bytes_per_s: f64,
    /// Where it was measured (a file's directory or a device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Request size of the operating point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_bytes: Option<u64>,
    /// Requests in flight of the operating point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u32>,
    /// Every measured point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<StoragePoint>,
}

/// One point of the storage grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoragePoint {
    /// Request size.
    pub block_bytes: u64,
    /// Requests in flight.
    pub queue_depth: u32,
    /// Sequential direct-read bandwidth.
    pub read_bytes_per_s: f64,
    /// Sequential direct-write bandwidth.
    pub write_bytes_per_s: f64,
}

/// `[gpu]`: GPU measurements; every key but `name` may be absent when its probe could not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Device name as the driver reports it.
    pub name: String,
    /// Host → device copy from pinned memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_pinned_bytes_per_s: Option<f64>,
    /// Device → host copy to pinned memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d2h_pinned_bytes_per_s: Option<f64>,
    /// Host → device copy from pageable memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_pageable_bytes_per_s: Option<f64>,
    /// Device → host copy to pageable memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d2h_pageable_bytes_per_s: Option<f64>,
    /// Managed-memory fault latency seen by one faulting thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_fault_s: Option<f64>,
    /// Managed-memory prefetch (cuMemPrefetchAsync) throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_bytes_per_s: Option<f64>,
    /// Creating and mapping one physical chunk with the virtual-memory API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_map_s: Option<f64>,
    /// Unmapping and releasing one physical chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_unmap_s: Option<f64>,
    /// The chunk (allocation granularity) the two above were measured with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_granularity_bytes: Option<u64>,
    /// Time from launching a kernel on the highest-priority stream to its completion while the device is busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_s: Option<f64>,
}

/// `[uvm]`: the machine of the UVM simulator (`oversub_sim::uvm::cost::MachineModel`); the decision constants of
/// DynaMap's Eqs. 1 and 3 stay the paper's unless the simulator is told to decide with the machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Uvm {
    /// L: GPU cache line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_bytes: Option<u64>,
    /// P: migration page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_bytes: Option<u64>,
    /// B_C: host memory bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_mem_bytes_per_s: Option<f64>,
    /// B_G: GPU memory bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_bytes_per_s: Option<f64>,
    /// B_PCI: host-GPU bus bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bytes_per_s: Option<f64>,
    /// Fixed cost of one fault batch: invoking and returning from the handler (the paper's H).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_s: Option<f64>,
    /// Service time of each fault within a batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_service_s: Option<f64>,
    /// Latency of one cache line read from host memory over the bus (zero-copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_line_s: Option<f64>,
    /// Setup of one DMA copy between host and GPU memory, on top of its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_setup_s: Option<f64>,
    /// Cache misses in flight at once (hide the remote-line latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outstanding_misses: Option<u32>,
    /// GPU L2 capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_bytes: Option<u64>,
    /// GPU L2 associativity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_ways: Option<u32>,
    /// Zero-copy line reads per second with the GPU saturated (many warps in flight): the host link's ceiling on
    /// lines served from host memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_lines_per_s: Option<f64>,
    /// Demand migration of managed memory resident on the host, first touched by the GPU once per 4 KiB page
    /// (one thread a page, a large buffer): time per page touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate_4k_stride_page_s: Option<f64>,
    /// The same touched once per 64 KiB: time per touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate_64k_stride_touch_s: Option<f64>,
}

/// `[swap]`: overrides of the swap simulator's machine (the paper's Jetson TX2 figures by default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwapMachine {
    /// Memory-controller bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes_per_s: Option<f64>,
    /// SSD read bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssd_read_bytes_per_s: Option<f64>,
    /// SSD write bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssd_write_bytes_per_s: Option<f64>,
}

impl Default for Meta {
    fn default() -> Self {
        Self {
            version: VERSION,
            created_by: None,
            created_unix_s: None,
            host: None,
            kernel: None,
            cpu_model: None,
            cpus: None,
            quick: false,
        }
    }
}

impl Profile {
    /// A profile with only its `[profile]` table; the measurements are filled in field by field.
    pub fn new(meta: Meta) -> Self {
        Self {
            profile: meta,
            cpu: None,
            storage: None,
            gpu: None,
            uvm: None,
            swap: None,
        }
    }
}
