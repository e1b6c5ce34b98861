//! The simulator: page table, GPU memory of fixed capacity, eviction, and the event counters.
//!
//! A trace is first [`PreparedTrace`]d: addresses become dense line numbers (blocks of 2 MiB that the trace touches
//! are numbered in order of first touch), so that every per-page structure is a flat array and one access costs a
//! few array reads, an L2 lookup and, rarely, a policy decision. A trace too large to hold (PageRank at the paper's
//! proportions: about 15 × 10⁹ accesses, 4 bytes each) is streamed instead: [`scan`] runs its generator once for
//! the pages it touches and its length, and [`simulate_streamed`] runs it again, feeding the runs chunk by chunk;
//! the results are the same. Faults are serviced as they occur, in trace order;
//! the driver's batching shows in when DynaMap re-measures the fault rate (when a fault is serviced after a window
//! of the clock has passed, see [`SimConfig::rate_window_s`]), in de-duplication (a page migrated for one warp no longer faults for the next) and in the clock.
//!
//! The clock ([`TimeModel::Overlap`]) advances once per epoch of accesses by the slowest resource the epoch used
//! ([`epoch_parts`]); decisions never read it, except the driver's thrashing detection, which is a timer, and
//! DynaMap's fault rate, which Sec. 5.3 defines per unit of time (docs/sim-uvm.md argues the reading).

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::cache::L2Cache;
use super::cost::{CostModel, PAPER_GPU_MEMORY_BYTES};
use super::policy::{Policy, LAZY_PG_DYN_PENALTY};
use super::{Access, SimError, Trace, BLOCK_BYTES, GROUP_BYTES};

const WRITE_BIT: u32 = 1 << 31;
const LINE_MASK: u32 = WRITE_BIT - 1;
const NONE: u32 = u32::MAX;
/// How far ahead, and in batches of how many accesses, [`Engine::run`] loads the per-page records: the first size
/// tried, which halved the CPU time of the quick study (docs/sim-uvm.md, Speed); outcomes do not depend on it.
const LOOKAHEAD: usize = 16;
/// `hist` value of a page never evicted.
const NO_HISTORY: u8 = u8::MAX;

/// Where a page is.
const UNMAPPED: u8 = 0;
const REMOTE: u8 = 1;
const RESIDENT: u8 = 2;

/// What the simulator must know of a trace before its first access: the pages it touches (they set the GPU
/// memory and which pages a group or prefetch may bring in) and how many accesses it has (they set the series'
/// points). A [`PreparedTrace`] holds one with the accesses; [`scan`] makes one from a stream without them.
#[derive(Debug, Clone)]
pub struct TraceShape {
    /// What produced the trace.
    pub name: String,
    /// Pages the trace touches at least once (only those are prefetched or migrated as part of a group).
    touched: Vec<bool>,
    touched_pages: u64,
    accesses: u64,
    line_shift: u32,
    lines_per_page_shift: u32,
    page_bytes: u64,
    line_bytes: u64,
}

impl TraceShape {
    /// Accesses in the trace.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// Distinct pages touched: the problem size.
    pub fn footprint_pages(&self) -> u64 {
        self.touched_pages
    }

    /// The problem size in bytes.
    pub fn footprint_bytes(&self) -> u64 {
        self.touched_pages * self.page_bytes
    }

    /// GPU memory, in pages, for an oversubscription ratio (problem size − capacity) / capacity; `ratio` 2.0 is
    /// the paper's 200%.
    pub fn capacity_pages(&self, ratio: f64) -> Result<u64, SimError> {
        if !(ratio.is_finite() && ratio >= 0.0) {
            return Err(SimError::InvalidParameter(format!(
                "the oversubscription ratio must be 0 or more, not {ratio}"
            )));
        }
        let pages = (self.touched_pages as f64 / (1.0 + ratio)).floor() as u64;
        if pages == 0 {
            return Err(SimError::InvalidParameter(format!(
                "a ratio of {:.0}% leaves no GPU memory for a {}-page problem",
                ratio * 100.0,
                self.touched_pages
            )));
        }
        Ok(pages)
    }
}

/// A trace turned into dense line numbers for one cost model's line and page sizes, held whole in memory (4 bytes
/// an access). [`simulate_streamed`] runs without it, on a stream the generator replays.
#[derive(Debug, Clone)]
pub struct PreparedTrace {
    shape: TraceShape,
    /// Dense line number per access, with [`WRITE_BIT`] set for stores.
    lines: Vec<u32>,
}

impl std::ops::Deref for PreparedTrace {
    type Target = TraceShape;

    fn deref(&self) -> &TraceShape {
        &self.shape
    }
}

impl PreparedTrace {
    /// Numbers the trace's lines for `cost`'s line and page size.
    pub fn new(trace: &Trace, cost: &CostModel) -> Result<Self, SimError> {
        let mut builder = PreparedTraceBuilder::new(&trace.name, cost)?;
        for &a in &trace.accesses {
            builder.push(a)?;
        }
        builder.finish()
    }

    /// What the simulator knows of the trace before its first access.
    pub fn shape(&self) -> &TraceShape {
        &self.shape
    }
}

/// A multiplicative hash for block numbers: the map is consulted whenever the trace moves to another 2 MiB block,
/// and SipHash, built to resist chosen keys, was a tenth of preparing a trace. The numbering of blocks is by first
/// touch, so the hash changes no outcome.
#[derive(Debug, Default, Clone, Copy)]
struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits into the low ones, which pick the bucket.
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing: the high bits mix every bit of `v`.
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Numbers a stream's accesses as [`PreparedTrace`] stores them, and notes the pages touched.
///
/// Blocks are numbered in order of first touch: every structure that groups pages (64 KiB groups, the prefetch
/// tree, eviction units) lies within one 2 MiB block, so the numbering of blocks changes no outcome. The same
/// stream numbered twice gives the same numbers, which is what lets [`simulate_streamed`] replay a generator.
#[derive(Debug)]
struct Numberer {
    shape: TraceShape,
    blocks: HashMap<u64, u64, BuildHasherDefault<BlockHasher>>,
    last_block: u64,
    last_index: u64,
    pages_per_block: u64,
    lines_per_page: u64,
}

impl Numberer {
    fn new(name: &str, cost: &CostModel) -> Result<Self, SimError> {
        cost.validate()?;
        let lines_per_page = u64::from(cost.lines_per_page());
        Ok(Self::like(&TraceShape {
            name: name.to_string(),
            touched: Vec::new(),
            touched_pages: 0,
            accesses: 0,
            line_shift: cost.line_bytes.trailing_zeros(),
            lines_per_page_shift: lines_per_page.trailing_zeros(),
            page_bytes: cost.page_bytes,
            line_bytes: cost.line_bytes,
        }))
    }

    /// Numbering for the line and page size of `shape`, from scratch.
    fn like(shape: &TraceShape) -> Self {
        Self {
            shape: TraceShape {
                name: shape.name.clone(),
                touched: Vec::new(),
                touched_pages: 0,
                accesses: 0,
                ..*shape
            },
            blocks: HashMap::default(),
            last_block: u64::MAX,
            last_index: 0,
            pages_per_block: BLOCK_BYTES / shape.page_bytes,
            lines_per_page: 1 << shape.lines_per_page_shift,
        }
    }

    /// The dense line number of `a`, with [`WRITE_BIT`] set for a store.
    #[inline]
    fn number(&mut self, a: Access) -> Result<u32, SimError> {
        let block = a.addr / BLOCK_BYTES;
        if block != self.last_block {
            let next = self.blocks.len() as u64;
            let index = *self.blocks.entry(block).or_insert(next);
            if index == next {
                let pages = (next + 1) * self.pages_per_block;
                if pages * self.lines_per_page >= u64::from(LINE_MASK) {
                    return Err(SimError::InvalidParameter(format!(
                        "trace `{}` spans more 2 MiB blocks than the simulator numbers ({next})",
                        self.shape.name
                    )));
                }
                self.shape.touched.resize(pages as usize, false);
            }
            self.last_block = block;
            self.last_index = index;
        }
        let t = &mut self.shape;
        let page = self.last_index * self.pages_per_block
            + ((a.addr / t.page_bytes) & (self.pages_per_block - 1));
        let line = (page << t.lines_per_page_shift)
            + ((a.addr >> t.line_shift) & (self.lines_per_page - 1));
        if let Some(touched) = t.touched.get_mut(page as usize) {
            if !*touched {
                *touched = true;
                t.touched_pages += 1;
            }
        }
        t.accesses += 1;
        Ok(line as u32 | if a.write { WRITE_BIT } else { 0 })
    }

    /// The shape of what was numbered; an empty trace is an error.
    fn finish(self) -> Result<TraceShape, SimError> {
        if self.shape.accesses == 0 {
            return Err(SimError::InvalidParameter(format!(
                "trace `{}` is empty",
                self.shape.name
            )));
        }
        Ok(self.shape)
    }
}

/// Builds a [`PreparedTrace`] one access at a time, so a generator's stream need not be held as a whole.
///
/// Blocks are numbered in order of first touch: every structure that groups pages (64 KiB groups, the prefetch
/// tree, eviction units) lies within one 2 MiB block, so the numbering of blocks changes no outcome.
#[derive(Debug)]
pub struct PreparedTraceBuilder {
    numberer: Numberer,
    lines: Vec<u32>,
}

impl PreparedTraceBuilder {
    /// An empty trace called `name`, numbered for `cost`'s line and page size.
    pub fn new(name: &str, cost: &CostModel) -> Result<Self, SimError> {
        Ok(Self {
            numberer: Numberer::new(name, cost)?,
            lines: Vec::new(),
        })
    }

    /// Appends one access.
    pub fn push(&mut self, a: Access) -> Result<(), SimError> {
        let line = self.numberer.number(a)?;
        self.lines.push(line);
        Ok(())
    }

    /// Accesses pushed so far.
    pub fn len(&self) -> u64 {
        self.lines.len() as u64
    }

    /// Whether nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The prepared trace; an empty one is an error.
    pub fn finish(self) -> Result<PreparedTrace, SimError> {
        Ok(PreparedTrace {
            shape: self.numberer.finish()?,
            lines: self.lines,
        })
    }
}

/// Which resident unit the driver evicts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EvictionOrder {
    /// Least recently migrated first, as NVIDIA's driver does (its list is ordered at allocation, not access).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "Least recently migrated first (NVIDIA's driver)")
    )]
    Allocation,
    /// Least recently accessed first.
    #[cfg_attr(feature = "clap", value(help = "Least recently used first"))]
    Lru,
}

/// The unit evicted at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EvictionUnit {
    /// One page.
    #[cfg_attr(feature = "clap", value(help = "One 4 KiB page"))]
    Page,
    /// A 64 KiB group.
    #[cfg_attr(feature = "clap", value(help = "A 64 KiB group"))]
    Group,
    /// The driver's 2 MiB root chunk — scaled with GPU memory under [`MachineScale::Capacity`] (the default).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "The driver's 2 MiB root chunk (scaled with GPU memory unless --machine-scale none)"
        )
    )]
    Block,
}

/// How the simulator turns counted events into time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TimeModel {
    /// Per epoch of accesses, the slowest of the resources the epoch used (bus each way, the fault handler,
    /// GPU memory, the warps' latency hidden by the misses in flight): see docs/sim-uvm.md.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Per epoch, the slowest resource: bus each way, fault handler, GPU memory, warp latency (docs/sim-uvm.md)"
        )
    )]
    Overlap,
    /// The earlier estimate: every event priced with Eqs. 1 and 3's constants and added up serially.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Every event priced with Eqs. 1 and 3's constants and summed (the earlier estimate)"
        )
    )]
    Serial,
}

/// Whether the L2 and the driver's 2 MiB granularity shrink with the simulated GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum MachineScale {
    /// Keep L2 / GPU memory and block / GPU memory as on the paper's 5935 MiB GPU (an L2 of at least one set, a
    /// block of at least one page).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "L2 and 2 MiB granularities shrink with GPU memory, as on the paper's 5935 MiB GPU"
        )
    )]
    Capacity,
    /// The paper's absolute sizes: a 3 MiB L2 and 2 MiB blocks, whatever the GPU memory.
    #[cfg_attr(
        feature = "clap",
        value(help = "The paper's absolute 3 MiB L2 and 2 MiB blocks")
    )]
    None,
}

/// The driver's thrashing detection (nvidia-uvm `uvm_perf_thrashing.c`, module defaults), for the demand policies.
///
/// Two migrations or evictions of a page within `lapse_s` of each other are a thrashing event; after
/// `threshold` consecutive events the page is thrashing. A fault on a thrashing page first throttles the GPU
/// for `nap_lapses` lapses (the page still migrates after the nap); after `pin_threshold` throttles the page is
/// pinned to host memory and mapped remotely for `pin_lapses` lapses, after which it may migrate again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thrashing {
    /// Off: no detection (`uvm_perf_thrashing_enable=0`).
    pub enabled: bool,
    /// Consecutive events before a page is thrashing (`uvm_perf_thrashing_threshold`, 3).
    pub threshold: u8,
    /// Throttles before the page is pinned (`uvm_perf_thrashing_pin_threshold`, 10).
    pub pin_threshold: u8,
    /// Events closer than this are consecutive (`uvm_perf_thrashing_lapse_usec`, 500 µs).
    pub lapse_s: f64,
    /// Throttle length in lapses (`uvm_perf_thrashing_nap`, 1).
    pub nap_lapses: f64,
    /// Pin length in lapses (`uvm_perf_thrashing_pin`, 300: 150 ms).
    pub pin_lapses: f64,
}

impl Default for Thrashing {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 3,
            pin_threshold: 10,
            lapse_s: 500e-6,
            nap_lapses: 1.0,
            pin_lapses: 300.0,
        }
    }
}

/// One simulation's settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimConfig {
    /// The policy.
    pub policy: Policy,
    /// Oversubscription ratio, (problem − capacity) / capacity; 2.0 is 200%.
    pub ratio: f64,
    /// Decision constants, machine and geometry.
    pub cost: CostModel,
    /// Eviction order.
    pub eviction: EvictionOrder,
    /// Eviction unit.
    pub eviction_unit: EvictionUnit,
    /// Faults per batch, the unit over which DynaMap measures the fault rate (the driver's batch: 256).
    /// Kept for compatibility: the rate is now measured over [`SimConfig::rate_window_s`] of the clock; a batch
    /// size of at least 1 is still checked.
    pub fault_batch: u32,
    /// The window of simulated time over which DynaMap's driver measures f_current (faults per second). The
    /// paper gives no length; the default, 500 µs, is the nvidia-uvm driver's own unit of "recent"
    /// (`uvm_perf_thrashing_lapse_usec`). A window closes at the first fault serviced after it has passed,
    /// because the driver only runs (and reads the fault buffer) when a fault arrives.
    pub rate_window_s: f64,
    /// How time is estimated.
    pub time_model: TimeModel,
    /// Overlap on (max of the resources per epoch) or off (their sum); only for [`TimeModel::Overlap`].
    pub overlap: bool,
    /// Accesses per epoch of the overlap model.
    pub epoch_accesses: u32,
    /// Scaling of the L2 and the driver's granularities with GPU memory.
    pub machine_scale: MachineScale,
    /// The L2 is `cost.machine.l2_bytes` exactly, not scaled (set by `--l2`).
    pub l2_fixed: bool,
    /// Thrashing detection of the demand policies.
    pub thrashing: Thrashing,
    /// The instrumentation's early stop (Sec. 5.1): a page is tracked until its first eviction, and its
    /// utilisation then stands for its future ones (Sec. 4.3). Off: tracked always, x = max(history, current).
    pub pst_early_stop: bool,
    /// Points kept of the per-epoch series (epochs are merged to fit).
    pub series_points: u32,
}

impl SimConfig {
    /// The paper's settings for `policy` at `ratio`.
    pub fn new(policy: Policy, ratio: f64) -> Self {
        Self {
            policy,
            ratio,
            cost: CostModel::default(),
            eviction: EvictionOrder::default(),
            eviction_unit: EvictionUnit::default(),
            fault_batch: 256,
            rate_window_s: 500e-6,
            time_model: TimeModel::default(),
            overlap: true,
            epoch_accesses: 4096,
            machine_scale: MachineScale::default(),
            l2_fixed: false,
            thrashing: Thrashing::default(),
            pst_early_stop: true,
            series_points: 200,
        }
    }
}

/// Events counted in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Accesses simulated.
    pub accesses: u64,
    /// Accesses served by the L2, wherever the page lives.
    pub cache_hits: u64,
    /// L2 misses served by GPU memory.
    pub gpu_mem_accesses: u64,
    /// L2 misses served from host memory over the bus.
    pub remote_accesses: u64,
    /// Of those, stores.
    pub remote_writes: u64,
    /// Driver service events: faults on unmapped pages and access-counter notifications.
    pub faults: u64,
    /// Batches the faults were serviced in (overlap model).
    pub fault_batches: u64,
    /// Pages moved to the GPU, prefetched ones included.
    pub migrations: u64,
    /// Of those, pages the prefetcher brought (big-page growth and the tree).
    pub prefetches: u64,
    /// Pages moved back to the host to make room.
    pub evictions: u64,
    /// Copies to the GPU (a run of contiguous pages moved at once is one copy).
    pub transfers_h2d: u64,
    /// Copies to the host.
    pub transfers_d2h: u64,
    /// Bytes over the bus to the GPU (migrations and remote reads).
    pub bytes_h2d: u64,
    /// Bytes over the bus to the host (evictions and remote writes).
    pub bytes_d2h: u64,
    /// Accesses the page statistics table's instrumentation tracked (online DynaMap and StaticMap).
    pub pst_updates: u64,
    /// Faults the thrashing detection throttled.
    pub throttles: u64,
    /// Pages the thrashing detection pinned to the host.
    pub pins: u64,
    /// Accesses to pages that used at most [`LOW_UTIL_LINES`] lines in the period the access fell in (a
    /// residency, or the time on the host between two): the requests of Fig. 3b. Counted when the period ends.
    pub low_util_requests: u64,
    /// Of those, the ones the L2 served (the paper: 91%, Sec. 4.2).
    pub low_util_l2_hits: u64,
}

/// Lines used at most by a page the figures call low-utilised: an eighth of the page (the lowest bin of Figs. 3
/// and 4). The paper does not give its own cut.
pub const LOW_UTIL_LINES: u32 = 4;

impl Counters {
    fn minus(&self, base: &Counters) -> Counters {
        Counters {
            accesses: self.accesses - base.accesses,
            cache_hits: self.cache_hits - base.cache_hits,
            gpu_mem_accesses: self.gpu_mem_accesses - base.gpu_mem_accesses,
            remote_accesses: self.remote_accesses - base.remote_accesses,
            remote_writes: self.remote_writes - base.remote_writes,
            faults: self.faults - base.faults,
            fault_batches: self.fault_batches - base.fault_batches,
            migrations: self.migrations - base.migrations,
            prefetches: self.prefetches - base.prefetches,
            evictions: self.evictions - base.evictions,
            transfers_h2d: self.transfers_h2d - base.transfers_h2d,
            transfers_d2h: self.transfers_d2h - base.transfers_d2h,
            bytes_h2d: self.bytes_h2d - base.bytes_h2d,
            bytes_d2h: self.bytes_d2h - base.bytes_d2h,
            pst_updates: self.pst_updates - base.pst_updates,
            throttles: self.throttles - base.throttles,
            pins: self.pins - base.pins,
            low_util_requests: self.low_util_requests - base.low_util_requests,
            low_util_l2_hits: self.low_util_l2_hits - base.low_util_l2_hits,
        }
    }
}

/// The time of one epoch (or a whole run) by resource, seconds. The overlap model charges their maximum per epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeParts {
    /// Bus to the GPU: copy setups plus migrated and remotely read bytes at min(B_C, B_PCI).
    pub bus_h2d_s: f64,
    /// Bus to the host: evictions and remote stores.
    pub bus_d2h_s: f64,
    /// The fault handler: per batch, per fault, and the copies it waits for.
    pub driver_s: f64,
    /// GPU memory: L2 misses served there.
    pub gpu_mem_s: f64,
    /// Warp latency not hidden: remote lines, throttling naps and instrumentation, over the misses in flight.
    pub warps_s: f64,
}

impl TimeParts {
    fn max(&self) -> f64 {
        self.bus_h2d_s
            .max(self.bus_d2h_s)
            .max(self.driver_s)
            .max(self.gpu_mem_s)
            .max(self.warps_s)
    }

    fn add(&mut self, o: &TimeParts) {
        self.bus_h2d_s += o.bus_h2d_s;
        self.bus_d2h_s += o.bus_d2h_s;
        self.driver_s += o.driver_s;
        self.gpu_mem_s += o.gpu_mem_s;
        self.warps_s += o.warps_s;
    }

    /// Index of the largest part, in field order.
    fn bound(&self) -> usize {
        let parts = [
            self.bus_h2d_s,
            self.bus_d2h_s,
            self.driver_s,
            self.gpu_mem_s,
            self.warps_s,
        ];
        let mut best = 0;
        for (i, v) in parts.iter().enumerate() {
            if *v > parts[best] {
                best = i;
            }
        }
        best
    }
}

/// Where a run's time went, under the overlap model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// Each resource's busy time summed over the epochs (their sum is the time without overlap).
    pub parts: TimeParts,
    /// Epochs bound by each resource, in [`TimeParts`]' field order: h2d, d2h, driver, GPU memory, warps.
    pub bound_epochs: [u64; 5],
    /// Of the warps' part, the page statistics table's instrumentation.
    pub instrumentation_s: f64,
    /// Of the warps' part, the throttling naps.
    pub throttle_s: f64,
}

/// Fewest L2 sets a scaled L2 keeps (issue 37): below this the cache holds fewer lines than the trace's resident
/// warps touch at once and its hit rate says nothing about the paper's 3 MiB L2. A run whose proportional L2
/// would be smaller gets this floor and is marked not [`Geometry::proportional`]; grow the problem instead.
pub const MIN_L2_SETS: u64 = 256;
/// Fewest pages a scaled 2 MiB block keeps (issue 37): with fewer, block eviction and the prefetch tree above the
/// 64 KiB big page do nothing.
pub const MIN_BLOCK_PAGES: u64 = 16;

/// Sizes the run's machine ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Geometry {
    /// GPU memory over the paper's 5935 MiB (1 under [`MachineScale::None`]).
    pub scale: f64,
    /// L2 capacity.
    pub l2_bytes: u64,
    /// The driver's block: prefetch region and eviction unit (when it is [`EvictionUnit::Block`]).
    pub block_bytes: u64,
    /// Big page, the region a fault grows to under Eager.
    pub big_page_bytes: u64,
    /// The L2 and block are in the paper's proportion to GPU memory: neither floor
    /// ([`MIN_L2_SETS`], [`MIN_BLOCK_PAGES`]) raised them. Always true for fixed or unscaled sizes.
    #[serde(default = "proportional_default")]
    pub proportional: bool,
}

fn proportional_default() -> bool {
    true
}

/// Some epochs of a run, merged: one point of Figs. 5, 9 and 10.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpochPoint {
    /// Accesses simulated by the end of these epochs.
    pub end_access: u64,
    /// Estimated time at their end, seconds.
    pub time_s: f64,
    /// Their length, seconds.
    pub span_s: f64,
    /// DynaMap's f_over at their end (0 for other policies until the first eviction).
    pub f_over: f64,
    /// Faults in them.
    pub faults: u64,
    /// Migrations in them.
    pub migrations: u64,
    /// Evictions in them.
    pub evictions: u64,
}

/// Utilisation of pages at eviction: what Figs. 3 and 4 show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Utilisation {
    /// Evictions by lines used during the residency just ended: index = lines (0..=lines per page).
    pub at_eviction: Vec<u64>,
    /// Pairs of consecutive residencies of one page, by eighths of the page used: `pairs[current][next]`.
    pub current_vs_next: [[u64; 8]; 8],
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// The trace's name.
    pub workload: String,
    /// The policy.
    pub policy: Policy,
    /// Oversubscription ratio (2.0 = 200%).
    pub ratio: f64,
    /// Pages the trace touches.
    pub footprint_pages: u64,
    /// GPU memory in pages.
    pub capacity_pages: u64,
    /// The counters.
    pub counters: Counters,
    /// Estimated run time under the configured time model.
    pub est_time_s: f64,
    /// The serial estimate (Eqs. 1 and 3's constants, events added up), whatever the time model.
    pub serial_time_s: f64,
    /// Where the overlap model's time went.
    pub breakdown: TimeBreakdown,
    /// The machine's sizes after scaling.
    pub geometry: Geometry,
    /// Evictions per page touched.
    pub evictions_per_page: f64,
    /// Most pages resident at once (never above the capacity).
    pub peak_resident_pages: u64,
    /// The run over time.
    pub series: Vec<EpochPoint>,
    /// Utilisation at eviction.
    pub utilisation: Utilisation,
    /// DynaMap's f_under: faults per second of simulated time before the first eviction (None when nothing was
    /// evicted). Every policy's run measures it; only DynaMap decides with it.
    pub f_under_per_s: Option<f64>,
    /// Wall time of the simulation itself.
    pub sim_seconds: f64,
}

impl SimResult {
    /// Simulated accesses per second of wall time.
    pub fn accesses_per_s(&self) -> f64 {
        if self.sim_seconds > 0.0 {
            self.counters.accesses as f64 / self.sim_seconds
        } else {
            0.0
        }
    }
}

/// The serial estimate of counted events: H per fault, P (1/B_C + 1/B_PCI) per page moved either way, Eq. 1's
/// per-line cost per remote access, L / B_G per GPU-memory access; L2 hits are free. All constants are the
/// decision constants: this is the model DynaMap decides with, summed.
pub fn estimated_time_s(c: &Counters, cost: &CostModel) -> f64 {
    c.faults as f64 * cost.decision.fault_s
        + (c.migrations + c.evictions) as f64 * cost.page_transfer_s()
        + c.remote_accesses as f64 * cost.remote_line_cost_s()
        + c.gpu_mem_accesses as f64 * cost.gpu_line_s()
}

/// The overlap model's parts for the events `d` of one epoch on `machine` (see [`TimeParts`]).
pub fn epoch_parts(d: &Counters, cost: &CostModel, overlap: bool) -> TimeParts {
    let m = &cost.machine;
    let (line, page) = (cost.line_bytes as f64, cost.page_bytes as f64);
    let batches = d.faults.div_ceil(u64::from(m.fault_batch_max)) as f64;
    let moved_in = d.migrations as f64 * page;
    let moved_out = d.evictions as f64 * page;
    let remote_reads = (d.remote_accesses - d.remote_writes) as f64 * line;
    let remote_writes = d.remote_writes as f64 * line;
    let handler = batches * m.fault_batch_s + d.faults as f64 * m.fault_service_s;
    let latency = d.remote_accesses as f64 * m.remote_line_latency_s;
    let pst = (d.pst_updates as f64 / f64::from(m.pst_batch_warps)) * m.pst_update_s;
    let gpu = d.gpu_mem_accesses as f64 * line / m.gpu_mem_bytes_per_s;
    if overlap {
        let link = m.link_bytes_per_s();
        let copy = m.migration_bytes_per_s();
        let copies_in = d.transfers_h2d as f64 * m.transfer_setup_s + moved_in / copy;
        let copies_out = d.transfers_d2h as f64 * m.transfer_setup_s + moved_out / copy;
        // Remote reads at the link's line rate unless the machine's saturated rate was measured.
        let remote_read_s = remote_reads / line / m.remote_lines_per_s(cost.line_bytes);
        TimeParts {
            bus_h2d_s: copies_in + remote_read_s,
            bus_d2h_s: copies_out + remote_writes / link,
            driver_s: handler + copies_in + copies_out,
            gpu_mem_s: gpu,
            warps_s: (latency + pst) / f64::from(m.outstanding_misses),
        }
    } else {
        // Nothing overlaps: host memory and bus are passed one after the other, each latency is paid in full.
        let per_byte = m.serial_s_per_byte();
        let transfers = (d.transfers_h2d + d.transfers_d2h) as f64 * m.transfer_setup_s;
        TimeParts {
            bus_h2d_s: transfers + (moved_in + moved_out) * per_byte,
            bus_d2h_s: (remote_reads + remote_writes) * per_byte,
            driver_s: handler,
            gpu_mem_s: gpu,
            warps_s: latency + pst,
        }
    }
}

/// The L2, block and big page of a run with `capacity_pages` of GPU memory.
pub fn geometry(config: &SimConfig, capacity_pages: u64) -> Geometry {
    let cost = &config.cost;
    let m = &cost.machine;
    let scale = match config.machine_scale {
        MachineScale::Capacity => {
            (capacity_pages * cost.page_bytes) as f64 / PAPER_GPU_MEMORY_BYTES as f64
        }
        MachineScale::None => 1.0,
    };
    let set_bytes = cost.line_bytes * u64::from(m.l2_ways);
    let mut proportional = true;
    let l2_bytes = if config.l2_fixed || config.machine_scale == MachineScale::None {
        m.l2_bytes
    } else {
        let sets = (m.l2_bytes as f64 * scale / set_bytes as f64) as u64;
        // Never past the unscaled L2 (a problem larger than the paper's GPU keeps its 3 MiB).
        let floor = MIN_L2_SETS.min((m.l2_bytes / set_bytes).max(1));
        proportional &= sets >= floor;
        sets.max(floor) * set_bytes
    };
    let block_bytes = match config.machine_scale {
        MachineScale::None => BLOCK_BYTES,
        MachineScale::Capacity => {
            let raw = (BLOCK_BYTES as f64 * scale) as u64;
            let pow2 = if raw == 0 {
                0
            } else {
                1u64 << (63 - raw.leading_zeros())
            };
            let floor = (MIN_BLOCK_PAGES * cost.page_bytes).min(BLOCK_BYTES);
            proportional &= pow2 >= floor;
            pow2.clamp(floor, BLOCK_BYTES)
        }
    };
    Geometry {
        scale,
        l2_bytes,
        block_bytes,
        big_page_bytes: GROUP_BYTES.max(cost.page_bytes),
        proportional,
    }
}

/// Checks `config` against the trace it will run on; the GPU memory, in pages, it gives.
fn check(shape: &TraceShape, config: &SimConfig) -> Result<u64, SimError> {
    config.cost.validate()?;
    if shape.line_bytes != config.cost.line_bytes || shape.page_bytes != config.cost.page_bytes {
        return Err(SimError::InvalidParameter(
            "the trace was prepared for another line or page size".into(),
        ));
    }
    if config.fault_batch == 0 || config.epoch_accesses == 0 {
        return Err(SimError::InvalidParameter(
            "fault_batch and epoch_accesses must be at least 1".into(),
        ));
    }
    if !(config.rate_window_s.is_finite() && config.rate_window_s > 0.0) {
        return Err(SimError::InvalidParameter(format!(
            "the fault-rate window must be a positive number of seconds, not {}",
            config.rate_window_s
        )));
    }
    let t = &config.thrashing;
    let finite = |v: f64| v.is_finite() && v >= 0.0;
    if t.enabled && !(finite(t.lapse_s) && finite(t.nap_lapses) && finite(t.pin_lapses)) {
        return Err(SimError::InvalidParameter(
            "the thrashing lapse, nap and pin must be non-negative numbers".into(),
        ));
    }
    shape.capacity_pages(config.ratio)
}

/// Runs one policy over a prepared trace.
pub fn simulate(trace: &PreparedTrace, config: &SimConfig) -> Result<SimResult, SimError> {
    let capacity = check(trace, config)?;
    let started = Instant::now();
    let lines = Some(trace.lines.as_slice());
    // The offline variant is seeded with the utilisation a profiling run of DynaMap recorded.
    let seed = if config.policy == Policy::DynaMapOffline {
        let mut profiling = Engine::new(trace, lines, config, capacity, Policy::DynaMap, None)?;
        profiling.feed(&trace.lines);
        profiling.finish();
        Some(profiling.hist)
    } else {
        None
    };
    let mut engine = Engine::new(trace, lines, config, capacity, config.policy, seed)?;
    engine.feed(&trace.lines);
    engine.finish();
    Ok(engine.into_result(config, started.elapsed().as_secs_f64()))
}

/// A trace's source as [`scan`] and [`simulate_streamed`] take it: called with a sink, it passes the trace's
/// accesses to it in order, from the first, every time it is called (a generator, say).
pub type Replay<'a> = dyn FnMut(&mut dyn FnMut(Access)) -> Result<(), SimError> + 'a;

/// Accesses a stream hands the simulator at once: 4 MiB of line numbers, so that memory holds a few chunks rather
/// than the trace, and each chunk is long enough that passing it between threads costs nothing measurable.
pub const CHUNK_ACCESSES: usize = 1 << 20;

/// Runs `replay`, which must pass a trace's accesses to its argument in order (a generator, say), to learn the
/// trace's [`TraceShape`] for `cost`'s line and page size without holding the accesses.
pub fn scan(name: &str, cost: &CostModel, replay: &mut Replay<'_>) -> Result<TraceShape, SimError> {
    let mut numberer = Numberer::new(name, cost)?;
    let mut failed = None;
    replay(&mut |a| {
        if failed.is_none() {
            if let Err(e) = numberer.number(a) {
                failed = Some(e);
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    numberer.finish()
}

/// Runs every config over the trace `replay` gives, without holding the trace: `replay` is called again for each
/// pass (once, twice when a config is [`Policy::DynaMapOffline`], whose profiling run needs a pass of its own) and
/// must give the accesses [`scan`] saw to make `shape`, in the same order; a pass that gives other counts is an
/// error. Memory is the runs' per-page state and a few chunks of [`CHUNK_ACCESSES`], not the trace.
///
/// The chunks go to `threads` workers (at least one, at most one per config), each running its share of the
/// configs, while the calling thread generates; every run sees every access in order, so the results are those
/// [`simulate`] gives on the prepared trace, in the order of `configs`. [`Policy::Oracle`], which looks ahead over
/// the whole trace, is refused.
pub fn simulate_streamed(
    shape: &TraceShape,
    configs: &[SimConfig],
    replay: &mut Replay<'_>,
    threads: usize,
) -> Result<Vec<SimResult>, SimError> {
    streamed_in_chunks(shape, configs, replay, threads, CHUNK_ACCESSES)
}

/// [`simulate_streamed`] with chunks of `chunk` accesses (tests cut the stream at awkward places with it).
fn streamed_in_chunks(
    shape: &TraceShape,
    configs: &[SimConfig],
    replay: &mut Replay<'_>,
    threads: usize,
    chunk: usize,
) -> Result<Vec<SimResult>, SimError> {
    let mut capacities = Vec::with_capacity(configs.len());
    for config in configs {
        if config.policy == Policy::Oracle {
            return Err(SimError::InvalidParameter(
                "the oracle looks ahead over the whole trace: run it on a prepared trace, not a stream"
                    .into(),
            ));
        }
        capacities.push(check(shape, config)?);
    }
    let mut seeds: Vec<Option<Vec<u8>>> = vec![None; configs.len()];
    let mut profiling_s = vec![0.0; configs.len()];
    let offline: Vec<usize> = (0..configs.len())
        .filter(|&i| {
            configs
                .get(i)
                .is_some_and(|c| c.policy == Policy::DynaMapOffline)
        })
        .collect();
    if !offline.is_empty() {
        let mut engines = Vec::with_capacity(offline.len());
        for &i in &offline {
            let (Some(config), Some(&capacity)) = (configs.get(i), capacities.get(i)) else {
                continue;
            };
            engines.push(Engine::new(
                shape,
                None,
                config,
                capacity,
                Policy::DynaMap,
                None,
            )?);
        }
        let engines = stream_through(shape, engines, replay, threads, chunk)?;
        for (engine, &i) in engines.into_iter().zip(&offline) {
            if let (Some(seed), Some(s)) = (seeds.get_mut(i), profiling_s.get_mut(i)) {
                *s = engine.busy_s;
                *seed = Some(engine.hist);
            }
        }
    }
    let mut engines = Vec::with_capacity(configs.len());
    for ((config, &capacity), seed) in configs.iter().zip(&capacities).zip(seeds) {
        engines.push(Engine::new(
            shape,
            None,
            config,
            capacity,
            config.policy,
            seed,
        )?);
    }
    let engines = stream_through(shape, engines, replay, threads, chunk)?;
    Ok(engines
        .into_iter()
        .zip(configs)
        .zip(profiling_s)
        .map(|((engine, config), extra_s)| {
            let busy_s = engine.busy_s;
            engine.into_result(config, busy_s + extra_s)
        })
        .collect())
}

/// One pass of `replay` through `engines`: the calling thread numbers the accesses into chunks, workers feed
/// them to their engines. The engines come back finished, in their order.
fn stream_through<'t>(
    shape: &'t TraceShape,
    engines: Vec<Engine<'t>>,
    replay: &mut Replay<'_>,
    threads: usize,
    chunk: usize,
) -> Result<Vec<Engine<'t>>, SimError> {
    let n = engines.len();
    let workers = threads.clamp(1, n.max(1));
    let mut groups: Vec<Vec<(usize, Engine<'t>)>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, engine) in engines.into_iter().enumerate() {
        if let Some(g) = groups.get_mut(i % workers) {
            g.push((i, engine));
        }
    }
    let (produced, finished) = std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for mut group in groups {
            // Two chunks queued per worker: the generator runs ahead of the slowest worker by at most that.
            let (tx, rx) = std::sync::mpsc::sync_channel::<std::sync::Arc<Vec<u32>>>(2);
            senders.push(tx);
            handles.push(scope.spawn(move || {
                for chunk in rx {
                    for (_, engine) in group.iter_mut() {
                        let started = Instant::now();
                        engine.feed(&chunk);
                        engine.busy_s += started.elapsed().as_secs_f64();
                    }
                }
                for (_, engine) in group.iter_mut() {
                    let started = Instant::now();
                    engine.finish();
                    engine.busy_s += started.elapsed().as_secs_f64();
                }
                group
            }));
        }
        let produced = produce(shape, replay, &senders, chunk.max(1));
        drop(senders);
        let finished: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (produced, finished)
    });
    produced?;
    let mut slots: Vec<Option<Engine<'t>>> = (0..n).map(|_| None).collect();
    for group in finished {
        let group =
            group.map_err(|_| SimError::InvalidParameter("a simulation worker panicked".into()))?;
        for (i, engine) in group {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(engine);
            }
        }
    }
    slots
        .into_iter()
        .map(|e| e.ok_or_else(|| SimError::InvalidParameter("a simulation was lost".into())))
        .collect()
}

/// Numbers `replay`'s accesses and sends them in chunks to every worker; checks that the pass matched `shape`.
fn produce(
    shape: &TraceShape,
    replay: &mut Replay<'_>,
    senders: &[std::sync::mpsc::SyncSender<std::sync::Arc<Vec<u32>>>],
    chunk_len: usize,
) -> Result<(), SimError> {
    let mut numberer = Numberer::like(shape);
    let mut chunk = Vec::with_capacity(chunk_len);
    let mut failed: Option<SimError> = None;
    let send = |chunk: Vec<u32>, failed: &mut Option<SimError>| {
        let chunk = std::sync::Arc::new(chunk);
        for tx in senders {
            if tx.send(std::sync::Arc::clone(&chunk)).is_err() && failed.is_none() {
                *failed = Some(SimError::InvalidParameter(
                    "a simulation worker stopped early".into(),
                ));
            }
        }
    };
    replay(&mut |a| {
        if failed.is_some() {
            return;
        }
        match numberer.number(a) {
            Ok(line) => {
                chunk.push(line);
                if chunk.len() >= chunk_len {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(chunk_len));
                    send(full, &mut failed);
                }
            }
            Err(e) => failed = Some(e),
        }
    })?;
    if failed.is_none() && !chunk.is_empty() {
        send(chunk, &mut failed);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let seen = &numberer.shape;
    if seen.accesses != shape.accesses
        || seen.touched_pages != shape.touched_pages
        || seen.touched.len() != shape.touched.len()
    {
        return Err(SimError::InvalidParameter(format!(
            "trace `{}` changed between passes ({} accesses on {} pages, then {} on {}): its source must give \
             the same accesses each time",
            shape.name, shape.accesses, shape.touched_pages, seen.accesses, seen.touched_pages
        )));
    }
    Ok(())
}

/// Per page, what every access updates.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
struct PageHot {
    /// Lines used since the page last arrived on the GPU or left it (the truth, for the figures).
    used: u64,
    /// Accesses to the page in the same period, and how many of them the L2 served (Fig. 3b).
    requests: u32,
    hits: u32,
}

/// Per-page state of the thrashing detection.
#[derive(Debug, Clone, Copy, Default)]
struct PageThrash {
    last_event_s: f64,
    events: u8,
    throttles: u8,
    pinned_until_s: f64,
}

struct Engine<'t> {
    trace: &'t TraceShape,
    /// Accesses fed so far: the index in the trace of the next chunk's first access.
    fed: u64,
    /// Wall time spent in this run (streamed runs share threads, so each keeps its own).
    busy_s: f64,
    policy: Policy,
    cost: CostModel,
    lru: bool,
    l2: L2Cache,
    capacity: u64,
    resident: u64,
    peak_resident: u64,
    counters: Counters,
    /// Index of the access being simulated.
    now: u64,
    geometry: Geometry,

    lpp_shift: u32,
    lpp_mask: u32,
    pages_per_group_shift: u32,
    big_page_pages: usize,
    block_pages: usize,

    loc: Vec<u8>,
    /// What every access updates, per page, side by side: three arrays cost three cache misses per access on a
    /// large footprint, one array of 16-byte records one.
    hot: Vec<PageHot>,
    /// Lines the page statistics table knows of the page's last tracked period, or [`NO_HISTORY`].
    hist: Vec<u8>,
    /// Lines used in the page's previous residency, or [`NO_HISTORY`] (Fig. 4).
    last_util: Vec<u8>,
    /// Whether the instrumentation runs (online DynaMap and StaticMap).
    instrumented: bool,
    early_stop: bool,
    /// Accesses that reached memory while the page was on the host (per-page access counters).
    count: Vec<u32>,
    round_trips: Vec<u32>,
    group_count: Vec<u32>,
    group_resident: Vec<u16>,

    /// Resident pages per eviction unit, and the units in eviction order (intrusive list).
    unit_shift: u32,
    unit_resident: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,

    /// Fault-rate measurement (DynaMap, Sec. 5.3): faults per second of the clock. f_under is the rate from the
    /// start to the first eviction; f_current the rate over the last window of at least `rate_window_s`.
    rate_window_s: f64,
    window_faults: u64,
    window_start_s: f64,
    f_under: Option<f64>,
    f_over: f64,

    /// Belady (oracle): next use of the page at each access, the page's current next use, and a max-heap.
    next_use: Vec<u32>,
    page_next: Vec<u32>,
    heap: BinaryHeap<(u32, u32)>,

    /// Thrashing detection (Eager, Eager-woPref); empty when off.
    thrash: Vec<PageThrash>,
    thrash_cfg: Thrashing,

    /// The copy in progress: the last page moved in each direction, so contiguous pages make one copy.
    last_in: u32,
    last_out: u32,

    /// The clock.
    overlap: bool,
    epoch_accesses: u64,
    epoch_base: Counters,
    clock_s: f64,
    breakdown: TimeBreakdown,

    /// The series: epochs per point, and the point being filled.
    epochs_per_point: u64,
    point_epochs: u64,
    point_base: Counters,
    point_start_s: f64,
    series: Vec<EpochPoint>,

    util_at_eviction: Vec<u64>,
    util_pairs: [[u64; 8]; 8],
}

impl<'t> Engine<'t> {
    /// A run of `policy` over `trace`; `lines` is the whole trace where the policy needs it ahead (the oracle).
    fn new(
        trace: &'t TraceShape,
        lines: Option<&[u32]>,
        config: &SimConfig,
        capacity: u64,
        policy: Policy,
        seed: Option<Vec<u8>>,
    ) -> Result<Self, SimError> {
        let cost = config.cost.clone();
        let geometry = geometry(config, capacity);
        let pages = trace.touched.len();
        let pages_per_group = (GROUP_BYTES / cost.page_bytes).max(1) as u32;
        let block_pages = (geometry.block_bytes / cost.page_bytes).max(1) as u32;
        let unit_pages = match config.eviction_unit {
            EvictionUnit::Page => 1,
            EvictionUnit::Group => pages_per_group,
            EvictionUnit::Block => block_pages,
        };
        let units = pages.div_ceil(unit_pages as usize);
        let initial = if policy.host_pages_mapped() {
            REMOTE
        } else {
            UNMAPPED
        };
        let oracle = policy == Policy::Oracle;
        let lpp_shift = trace.lines_per_page_shift;
        let (next_use, page_next) = if oracle {
            let Some(lines) = lines else {
                return Err(SimError::InvalidParameter(
                    "the oracle looks ahead over the whole trace: run it on a prepared trace"
                        .into(),
                ));
            };
            if lines.len() >= NONE as usize {
                return Err(SimError::InvalidParameter(
                    "the oracle handles traces of fewer than 2^32 accesses".into(),
                ));
            }
            let mut next_use = vec![NONE; lines.len()];
            let mut last = vec![NONE; pages];
            for (i, &l) in lines.iter().enumerate().rev() {
                let page = ((l & LINE_MASK) >> lpp_shift) as usize;
                if let (Some(n), Some(p)) = (next_use.get_mut(i), last.get_mut(page)) {
                    *n = *p;
                    *p = i as u32;
                }
            }
            (next_use, vec![NONE; pages])
        } else {
            (Vec::new(), Vec::new())
        };
        let thrash_on =
            config.thrashing.enabled && matches!(policy, Policy::Eager | Policy::EagerNoPrefetch);
        let epochs = trace.accesses.div_ceil(u64::from(config.epoch_accesses));
        let hist = match seed {
            Some(h) if h.len() == pages => h,
            _ => vec![NO_HISTORY; pages],
        };
        Ok(Self {
            trace,
            fed: 0,
            busy_s: 0.0,
            policy,
            l2: L2Cache::new(geometry.l2_bytes, cost.line_bytes, cost.machine.l2_ways)?,
            lru: config.eviction == EvictionOrder::Lru,
            capacity,
            resident: 0,
            peak_resident: 0,
            counters: Counters::default(),
            now: 0,
            geometry,
            lpp_shift,
            lpp_mask: (1u32 << lpp_shift) - 1,
            pages_per_group_shift: pages_per_group.trailing_zeros(),
            big_page_pages: (geometry.big_page_bytes / cost.page_bytes).max(1) as usize,
            block_pages: block_pages as usize,
            loc: vec![initial; pages],
            hot: vec![PageHot::default(); pages],
            hist,
            last_util: vec![NO_HISTORY; pages],
            instrumented: matches!(policy, Policy::DynaMap | Policy::StaticMap { .. }),
            early_stop: config.pst_early_stop,
            count: vec![0; pages],
            round_trips: vec![0; pages],
            group_count: vec![0; pages.div_ceil(pages_per_group as usize)],
            group_resident: vec![0; pages.div_ceil(pages_per_group as usize)],
            unit_shift: unit_pages.trailing_zeros(),
            unit_resident: vec![0; units],
            prev: vec![NONE; units],
            next: vec![NONE; units],
            head: NONE,
            tail: NONE,
            rate_window_s: config.rate_window_s,
            window_faults: 0,
            window_start_s: 0.0,
            f_under: None,
            f_over: 0.0,
            next_use,
            page_next,
            heap: BinaryHeap::new(),
            thrash: if thrash_on {
                vec![
                    PageThrash {
                        last_event_s: f64::NEG_INFINITY,
                        ..PageThrash::default()
                    };
                    pages
                ]
            } else {
                Vec::new()
            },
            thrash_cfg: config.thrashing.clone(),
            last_in: NONE,
            last_out: NONE,
            overlap: config.overlap,
            epoch_accesses: u64::from(config.epoch_accesses),
            epoch_base: Counters::default(),
            clock_s: 0.0,
            breakdown: TimeBreakdown::default(),
            epochs_per_point: epochs
                .div_ceil(u64::from(config.series_points.max(1)))
                .max(1),
            point_epochs: 0,
            point_base: Counters::default(),
            point_start_s: 0.0,
            series: Vec::new(),
            util_at_eviction: vec![0; cost.lines_per_page() as usize + 1],
            util_pairs: [[0; 8]; 8],
            cost,
        })
    }

    /// Simulates the next `lines` of the trace (all of it, or the next chunk of a stream).
    fn feed(&mut self, lines: &[u32]) {
        let epoch = self.epoch_accesses;
        let base = self.fed;
        // A countdown rather than `i % epoch`: a division per access is a tenth of the simulator's time.
        let mut until_epoch = epoch - base % epoch;
        let mut until_ahead = 0;
        for (k, &entry) in lines.iter().enumerate() {
            let i = base as usize + k;
            // Every LOOKAHEAD accesses, load the per-page records of the next LOOKAHEAD accesses but one batch: a
            // footprint of a million pages misses the CPU's caches on nearly every access, and independent loads
            // issued together wait for memory once instead of once each. The values only feed `black_box`, which
            // keeps the loads.
            if until_ahead == 0 {
                until_ahead = LOOKAHEAD;
                let ahead = lines.get(k + LOOKAHEAD..).unwrap_or(&[]);
                let mut sink = 0u64;
                for &a in ahead.iter().take(LOOKAHEAD) {
                    let p = ((a & LINE_MASK) >> self.lpp_shift) as usize;
                    sink ^= self.hot.get(p).map_or(0, |h| h.used);
                    sink ^= u64::from(self.loc.get(p).copied().unwrap_or(0));
                }
                std::hint::black_box(sink);
            }
            until_ahead -= 1;
            self.now = i as u64;
            let line = entry & LINE_MASK;
            let write = entry & WRITE_BIT != 0;
            let page = (line >> self.lpp_shift) as usize;
            let bit = 1u64 << (line & self.lpp_mask);
            if let Some(h) = self.hot.get_mut(page) {
                h.used |= bit;
            }
            if self.instrumented {
                let tracked = !self.early_stop
                    || self.hist.get(page).copied().unwrap_or(NO_HISTORY) == NO_HISTORY;
                if tracked {
                    self.counters.pst_updates += 1;
                }
            }
            let mut loc = self.loc.get(page).copied().unwrap_or(UNMAPPED);
            if loc == REMOTE && !self.thrash.is_empty() {
                // A pin that has lapsed: the page is unmapped again and its next touch faults.
                let now_s = self.now_s();
                if let Some(t) = self.thrash.get(page) {
                    if now_s >= t.pinned_until_s {
                        self.set_loc(page, UNMAPPED);
                        loc = UNMAPPED;
                    }
                }
            }
            if loc == UNMAPPED {
                self.fault(page);
                loc = self.loc.get(page).copied().unwrap_or(UNMAPPED);
            }
            let hit = if loc == RESIDENT {
                if self.lru {
                    self.touch_unit(page);
                }
                if !self.next_use.is_empty() {
                    self.oracle_touch(page, i, false);
                }
                self.l2.access(line)
            } else {
                self.l2.access(line)
            };
            if let Some(h) = self.hot.get_mut(page) {
                h.requests = h.requests.saturating_add(1);
                h.hits = h.hits.saturating_add(u32::from(hit));
            }
            if hit {
                self.counters.cache_hits += 1;
            } else if loc == RESIDENT {
                self.counters.gpu_mem_accesses += 1;
            } else {
                self.counters.remote_accesses += 1;
                if write {
                    self.counters.remote_writes += 1;
                    self.counters.bytes_d2h += self.trace.line_bytes;
                } else {
                    self.counters.bytes_h2d += self.trace.line_bytes;
                }
                self.remote_miss(page, write);
            }
            until_epoch -= 1;
            if until_epoch == 0 {
                self.counters.accesses = i as u64 + 1;
                self.close_epoch();
                until_epoch = epoch;
            }
        }
        self.fed = base + lines.len() as u64;
    }

    /// The result of a finished run of `config` that took `sim_seconds` of wall time.
    fn into_result(mut self, config: &SimConfig, sim_seconds: f64) -> SimResult {
        let counters = self.counters;
        let serial = estimated_time_s(&counters, &config.cost);
        let pages = self.trace.touched_pages;
        SimResult {
            workload: self.trace.name.clone(),
            policy: config.policy,
            ratio: config.ratio,
            footprint_pages: pages,
            capacity_pages: self.capacity,
            est_time_s: match config.time_model {
                TimeModel::Overlap => self.clock_s,
                TimeModel::Serial => serial,
            },
            serial_time_s: serial,
            breakdown: self.breakdown,
            geometry: self.geometry,
            evictions_per_page: counters.evictions as f64 / pages.max(1) as f64,
            peak_resident_pages: self.peak_resident,
            series: std::mem::take(&mut self.series),
            utilisation: Utilisation {
                at_eviction: std::mem::take(&mut self.util_at_eviction),
                current_vs_next: self.util_pairs,
            },
            counters,
            f_under_per_s: self.f_under,
            sim_seconds,
        }
    }

    /// Closes the run after its last access.
    fn finish(&mut self) {
        let epoch = self.epoch_accesses;
        self.counters.accesses = self.fed;
        for page in 0..self.hot.len() {
            self.end_period(page);
        }
        if self.counters.accesses % epoch != 0 {
            self.close_epoch();
        }
        if self.point_epochs > 0 {
            self.close_point();
        }
    }

    /// The time the current epoch has taken so far, from its events.
    fn epoch_so_far(&self) -> TimeParts {
        epoch_parts(
            &self.counters.minus(&self.epoch_base),
            &self.cost,
            self.overlap,
        )
    }

    /// The clock at the current access.
    fn now_s(&self) -> f64 {
        let parts = self.epoch_so_far();
        let nap = self.epoch_naps_s();
        self.clock_s + self.combine(&parts, nap)
    }

    /// Throttling naps of the current epoch, over the misses in flight when they overlap.
    fn epoch_naps_s(&self) -> f64 {
        let throttles = (self.counters.throttles - self.epoch_base.throttles) as f64;
        let nap = throttles * self.thrash_cfg.nap_lapses * self.thrash_cfg.lapse_s;
        if self.overlap {
            nap / f64::from(self.cost.machine.outstanding_misses)
        } else {
            nap
        }
    }

    fn combine(&self, parts: &TimeParts, nap_s: f64) -> f64 {
        let mut p = *parts;
        p.warps_s += nap_s;
        if self.overlap {
            p.max()
        } else {
            p.bus_h2d_s + p.bus_d2h_s + p.driver_s + p.gpu_mem_s + p.warps_s
        }
    }

    fn close_epoch(&mut self) {
        let d = self.counters.minus(&self.epoch_base);
        self.counters.fault_batches += d
            .faults
            .div_ceil(u64::from(self.cost.machine.fault_batch_max));
        let mut parts = epoch_parts(&d, &self.cost, self.overlap);
        let nap = self.epoch_naps_s();
        let pst = (d.pst_updates as f64 / f64::from(self.cost.machine.pst_batch_warps))
            * self.cost.machine.pst_update_s;
        let div = if self.overlap {
            f64::from(self.cost.machine.outstanding_misses)
        } else {
            1.0
        };
        self.breakdown.instrumentation_s += pst / div;
        self.breakdown.throttle_s += nap;
        parts.warps_s += nap;
        let span = self.combine(&parts, 0.0);
        self.clock_s += span;
        self.breakdown.parts.add(&parts);
        if let Some(b) = self.breakdown.bound_epochs.get_mut(parts.bound()) {
            *b += 1;
        }
        self.epoch_base = self.counters;
        self.point_epochs += 1;
        if self.point_epochs >= self.epochs_per_point {
            self.close_point();
        }
    }

    fn close_point(&mut self) {
        let d = self.counters.minus(&self.point_base);
        self.series.push(EpochPoint {
            end_access: self.counters.accesses,
            time_s: self.clock_s,
            span_s: self.clock_s - self.point_start_s,
            f_over: self.f_over,
            faults: d.faults,
            migrations: d.migrations,
            evictions: d.evictions,
        });
        self.point_base = self.counters;
        self.point_start_s = self.clock_s;
        self.point_epochs = 0;
    }

    /// An access to an unmapped page: the driver decides to migrate it or to serve it from the host.
    fn fault(&mut self, page: usize) {
        self.counters.faults += 1;
        self.last_in = NONE;
        self.last_out = NONE;
        self.measure_fault_rate();
        if !self.thrash.is_empty() && self.thrashing_fault(page) {
            return;
        }
        let migrate = match self.policy {
            Policy::Eager | Policy::EagerNoPrefetch | Policy::Oracle => true,
            Policy::StaticMap { .. } | Policy::DynaMap | Policy::DynaMapOffline => {
                self.spatial_decision(page, true)
            }
            _ => false,
        };
        if !migrate {
            self.set_loc(page, REMOTE);
            return;
        }
        if self.migrate(page, NONE).is_ok() && self.policy == Policy::Eager {
            self.prefetch(page);
        }
    }

    /// One more fault seen by the driver: closes the rate window when it has run its length (Eq. 2's f_current
    /// and f_over). Only DynaMap reads the clock here, so other policies pay nothing for it.
    fn measure_fault_rate(&mut self) {
        self.window_faults += 1;
        if !matches!(self.policy, Policy::DynaMap | Policy::DynaMapOffline) {
            return;
        }
        let now_s = self.now_s();
        let span_s = now_s - self.window_start_s;
        if span_s < self.rate_window_s {
            return;
        }
        let f_current = self.window_faults as f64 / span_s;
        if let Some(f_under) = self.f_under.filter(|f| *f > 0.0) {
            self.f_over = ((f_current - f_under) / f_under).max(0.0);
        }
        self.window_faults = 0;
        self.window_start_s = now_s;
    }

    /// The thrashing detection's say on a fault: throttle (the page still migrates, after a nap) or pin it to the
    /// host. True when the page was pinned and must not migrate.
    fn thrashing_fault(&mut self, page: usize) -> bool {
        let cfg = &self.thrash_cfg;
        let (threshold, pin_threshold) = (cfg.threshold, cfg.pin_threshold);
        let pin_s = cfg.pin_lapses * cfg.lapse_s;
        let thrashing = self.thrash.get(page).is_some_and(|t| t.events >= threshold);
        if !thrashing {
            return false;
        }
        let now_s = self.now_s();
        let Some(t) = self.thrash.get_mut(page) else {
            return false;
        };
        if t.throttles < pin_threshold {
            t.throttles += 1;
            self.counters.throttles += 1;
            return false;
        }
        t.throttles = 0;
        t.events = 0;
        t.pinned_until_s = now_s + pin_s;
        self.counters.pins += 1;
        self.set_loc(page, REMOTE);
        true
    }

    /// A migration or eviction of `page`: one more event if close enough to the previous.
    fn thrashing_event(&mut self, page: usize) {
        if self.thrash.is_empty() {
            return;
        }
        let now_s = self.now_s();
        let lapse = self.thrash_cfg.lapse_s;
        if let Some(t) = self.thrash.get_mut(page) {
            if now_s - t.last_event_s <= lapse {
                t.events = t.events.saturating_add(1);
            } else {
                t.events = 0;
            }
            t.last_event_s = now_s;
        }
    }

    fn is_thrashing(&self, page: usize) -> bool {
        self.thrash
            .get(page)
            .is_some_and(|t| t.events >= self.thrash_cfg.threshold)
    }

    /// StaticMap and DynaMap: migrate a page whose expected spatial use pays for the move. A page never evicted
    /// has no history and migrates on its first fault, as the paper's DynaMap does.
    fn spatial_decision(&self, page: usize, at_fault: bool) -> bool {
        let hist = self.hist.get(page).copied().unwrap_or(NO_HISTORY);
        if hist == NO_HISTORY {
            return at_fault;
        }
        let lines = if self.early_stop || !self.instrumented {
            // Tracking stopped at the first eviction: the table holds that period's utilisation.
            u32::from(hist)
        } else {
            let current = self.hot.get(page).map_or(0, |h| h.used.count_ones());
            u32::from(hist).max(current)
        };
        match self.policy {
            Policy::StaticMap { threshold } => {
                f64::from(lines) >= threshold * f64::from(self.cost.lines_per_page())
            }
            Policy::DynaMap | Policy::DynaMapOffline => {
                self.cost.c_gpu(lines, self.f_over) < self.cost.c_cpu(lines)
            }
            _ => false,
        }
    }

    /// A host-resident line missed the L2 and went over the bus; counters may now ask for a migration.
    fn remote_miss(&mut self, page: usize, write: bool) {
        self.last_in = NONE;
        self.last_out = NONE;
        match self.policy {
            Policy::LazyGrpHw { threshold } => {
                let group = page >> self.pages_per_group_shift;
                let Some(c) = self.group_count.get_mut(group) else {
                    return;
                };
                *c += 1;
                if *c >= threshold {
                    *c = 0;
                    self.counters.faults += 1;
                    let first = group << self.pages_per_group_shift;
                    let unit = self.unit_of(page);
                    if self.migrate(page, NONE).is_ok() {
                        for p in first..first + (1usize << self.pages_per_group_shift) {
                            if p != page
                                && self.trace.touched.get(p).copied().unwrap_or(false)
                                && self.loc.get(p) != Some(&RESIDENT)
                                && self.migrate(p, unit).is_err()
                            {
                                break;
                            }
                        }
                    }
                }
            }
            Policy::LazyPgStatSw { threshold } => {
                let n = self.bump_count(page);
                if n >= threshold {
                    self.counter_migration(page);
                }
            }
            Policy::LazyPgDynSw { base_threshold } => {
                let n = self.bump_count(page);
                let ts = f64::from(base_threshold);
                let threshold = match self.f_under {
                    // Not oversubscribed yet: t = 1 + t_s · occupancy.
                    None => 1.0 + ts * self.resident as f64 / self.capacity as f64,
                    Some(_) => {
                        let r = self.round_trips.get(page).copied().unwrap_or(0);
                        ts * f64::from(LAZY_PG_DYN_PENALTY) * f64::from(r + 1)
                    }
                };
                if write || f64::from(n) >= threshold {
                    self.counter_migration(page);
                }
            }
            Policy::LazyPgDynSwNoPenalty { base_threshold } => {
                let n = self.bump_count(page);
                let ts = f64::from(base_threshold);
                let threshold = if self.f_under.is_none() {
                    ts * self.resident as f64 / self.capacity as f64 + 1.0
                } else {
                    let r = self.round_trips.get(page).copied().unwrap_or(0);
                    ts * f64::from(r + 1) + 1.0
                };
                if f64::from(n) >= threshold {
                    self.counter_migration(page);
                }
            }
            Policy::StaticMap { .. } | Policy::DynaMap | Policy::DynaMapOffline => {
                // Eq. 1 charges every host-served line as a fault: the driver sees it and may change its mind.
                let migrate = self.spatial_decision(page, false);
                if migrate {
                    let _ = self.migrate(page, NONE);
                }
            }
            _ => {}
        }
    }

    fn bump_count(&mut self, page: usize) -> u32 {
        match self.count.get_mut(page) {
            Some(c) => {
                *c += 1;
                *c
            }
            None => 0,
        }
    }

    fn counter_migration(&mut self, page: usize) {
        self.counters.faults += 1;
        let _ = self.migrate(page, NONE);
    }

    /// Pages resident in `start..start + size`.
    fn resident_in(&self, start: usize, size: usize) -> usize {
        let ppg = 1usize << self.pages_per_group_shift;
        if size >= ppg && start % ppg == 0 {
            (start / ppg..(start + size) / ppg)
                .map(|g| usize::from(self.group_resident.get(g).copied().unwrap_or(0)))
                .sum()
        } else {
            (start..start + size)
                .filter(|&p| self.loc.get(p) == Some(&RESIDENT))
                .count()
        }
    }

    /// Brings the touched, non-resident, non-thrashing pages of `start..start + size` in as prefetches. False when
    /// memory ran out.
    fn fill(&mut self, start: usize, size: usize, unit: u32) -> bool {
        for p in start..start + size {
            if self.loc.get(p) != Some(&RESIDENT)
                && self.trace.touched.get(p).copied().unwrap_or(false)
                && !self.is_thrashing(p)
            {
                if self.migrate(p, unit).is_err() {
                    return false;
                }
                self.counters.prefetches += 1;
            }
        }
        true
    }

    /// The driver's prefetcher on a fault at `page`: the fault grows to its big page unless a page in it is
    /// thrashing; then, in the bitmap tree over the block with pages as leaves, the largest node above the big
    /// page more than 51% resident is filled.
    fn prefetch(&mut self, page: usize) {
        let unit = self.unit_of(page);
        let big = self.big_page_pages;
        let start = page & !(big - 1);
        let thrashing = (start..start + big).any(|p| self.is_thrashing(p));
        if !thrashing && !self.fill(start, big, unit) {
            return;
        }
        let block = self.block_pages;
        let mut size = (big * 2).max(2);
        let mut chosen = None;
        while size <= block {
            let start = page & !(size - 1);
            if self.resident_in(start, size) * 100 > size * 51 {
                chosen = Some((start, size));
            }
            size *= 2;
        }
        if let Some((start, size)) = chosen {
            self.fill(start, size, unit);
        }
    }

    /// Moves `page` to GPU memory, evicting first if it is full (never the unit `keep`, so that a group or a
    /// prefetch does not evict itself). Err when nothing else can be evicted.
    fn migrate(&mut self, page: usize, keep: u32) -> Result<(), ()> {
        while self.resident >= self.capacity {
            if !self.evict_one(keep) {
                return Err(());
            }
        }
        self.set_loc(page, RESIDENT);
        self.resident += 1;
        self.peak_resident = self.peak_resident.max(self.resident);
        self.counters.migrations += 1;
        self.counters.bytes_h2d += self.trace.page_bytes;
        if self.last_in == NONE || page as u32 != self.last_in.wrapping_add(1) {
            self.counters.transfers_h2d += 1;
        }
        self.last_in = page as u32;
        if let Some(c) = self.count.get_mut(page) {
            *c = 0;
        }
        if let Some(g) = self
            .group_resident
            .get_mut(page >> self.pages_per_group_shift)
        {
            *g += 1;
        }
        let unit = self.unit_of(page);
        if let Some(n) = self.unit_resident.get_mut(unit as usize) {
            *n += 1;
            if *n == 1 {
                self.push_back(unit);
            }
        }
        if !self.next_use.is_empty() {
            self.oracle_touch(page, self.now as usize, true);
        }
        self.thrashing_event(page);
        Ok(())
    }

    /// Evicts the first unit in eviction order other than `keep` (the oracle: the page used furthest ahead).
    fn evict_one(&mut self, keep: u32) -> bool {
        if self.f_under.is_none() {
            // "Page fault rate before evictions start" (Sec. 5.3): every fault so far over the time so far. Time
            // that passed without faults counts, so a long under-subscribed phase gives a low f_under.
            let now_s = self.now_s();
            self.f_under = Some(if now_s > 0.0 {
                self.counters.faults as f64 / now_s
            } else {
                // No time has passed (a machine with free faults): no rate to compare against.
                0.0
            });
        }
        if !self.next_use.is_empty() {
            return self.oracle_evict();
        }
        let mut unit = self.head;
        if unit == keep && unit != NONE {
            unit = self.next.get(unit as usize).copied().unwrap_or(NONE);
        }
        if unit == NONE {
            return false;
        }
        let first = (unit as usize) << self.unit_shift;
        for p in first..first + (1usize << self.unit_shift) {
            if self.loc.get(p) == Some(&RESIDENT) {
                self.evict_page(p);
            }
        }
        true
    }

    fn evict_page(&mut self, page: usize) {
        let back = if self.policy.host_pages_mapped() {
            REMOTE
        } else {
            UNMAPPED
        };
        self.set_loc(page, back);
        self.resident -= 1;
        self.counters.evictions += 1;
        self.counters.bytes_d2h += self.trace.page_bytes;
        if self.last_out == NONE || page as u32 != self.last_out.wrapping_add(1) {
            self.counters.transfers_d2h += 1;
        }
        self.last_out = page as u32;
        self.end_period(page);
        let lines = self.hot.get(page).map_or(0, |h| h.used.count_ones()) as u8;
        if let Some(h) = self.hot.get_mut(page) {
            h.used = 0;
        }
        if let Some(h) = self.hist.get_mut(page) {
            // The table records the period that just ended, unless tracking stopped (early stop) or never ran.
            if (*h == NO_HISTORY || !self.early_stop) && self.policy != Policy::DynaMapOffline {
                *h = lines.min(NO_HISTORY - 1);
            }
        }
        if let Some(n) = self.util_at_eviction.get_mut(usize::from(lines)) {
            *n += 1;
        }
        let lpp = self.cost.lines_per_page() as usize;
        if let Some(prev) = self.last_util.get_mut(page) {
            if *prev != NO_HISTORY {
                let bin = |l: u8| (usize::from(l) * 8 / (lpp + 1)).min(7);
                if let Some(cell) = self
                    .util_pairs
                    .get_mut(bin(*prev))
                    .and_then(|row| row.get_mut(bin(lines)))
                {
                    *cell += 1;
                }
            }
            *prev = lines;
        }
        if let Some(r) = self.round_trips.get_mut(page) {
            *r += 1;
        }
        if let Some(g) = self
            .group_resident
            .get_mut(page >> self.pages_per_group_shift)
        {
            *g = g.saturating_sub(1);
        }
        let unit = self.unit_of(page);
        if let Some(n) = self.unit_resident.get_mut(unit as usize) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.unlink(unit);
            }
        }
        self.thrashing_event(page);
    }

    /// Closes `page`'s period (an eviction, or the end of the run): its requests count as low-utilisation ones
    /// when it used few lines.
    fn end_period(&mut self, page: usize) {
        let (lines, requests, hits) = self.hot.get_mut(page).map_or((0, 0, 0), |h| {
            (
                h.used.count_ones(),
                std::mem::take(&mut h.requests),
                std::mem::take(&mut h.hits),
            )
        });
        if lines <= LOW_UTIL_LINES {
            self.counters.low_util_requests += u64::from(requests);
            self.counters.low_util_l2_hits += u64::from(hits);
        }
    }

    fn set_loc(&mut self, page: usize, loc: u8) {
        if let Some(l) = self.loc.get_mut(page) {
            *l = loc;
        }
    }

    fn unit_of(&self, page: usize) -> u32 {
        (page >> self.unit_shift) as u32
    }

    fn push_back(&mut self, unit: u32) {
        let u = unit as usize;
        if let (Some(p), Some(n)) = (self.prev.get_mut(u), self.next.get_mut(u)) {
            *p = self.tail;
            *n = NONE;
        }
        match self.next.get_mut(self.tail as usize) {
            Some(n) => *n = unit,
            None => self.head = unit,
        }
        self.tail = unit;
    }

    fn unlink(&mut self, unit: u32) {
        let u = unit as usize;
        let (p, n) = match (self.prev.get(u), self.next.get(u)) {
            (Some(&p), Some(&n)) => (p, n),
            _ => return,
        };
        match self.next.get_mut(p as usize) {
            Some(x) => *x = n,
            None => self.head = n,
        }
        match self.prev.get_mut(n as usize) {
            Some(x) => *x = p,
            None => self.tail = p,
        }
        if let (Some(pp), Some(nn)) = (self.prev.get_mut(u), self.next.get_mut(u)) {
            *pp = NONE;
            *nn = NONE;
        }
    }

    fn touch_unit(&mut self, page: usize) {
        let unit = self.unit_of(page);
        if self.tail != unit {
            self.unlink(unit);
            self.push_back(unit);
        }
    }

    /// Records the next use of a resident `page` seen at access `i`; `arrived` when it was just migrated (its
    /// heap entry must be pushed even if the stale value matches).
    fn oracle_touch(&mut self, page: usize, i: usize, arrived: bool) {
        let next = self.next_use.get(i).copied().unwrap_or(NONE);
        if let Some(n) = self.page_next.get_mut(page) {
            if *n == next && !arrived {
                return;
            }
            *n = next;
        }
        self.heap.push((next, page as u32));
        if self.heap.len() as u64 > 4 * self.capacity + 4096 {
            // Drop stale entries: keep one per resident page.
            let fresh: Vec<(u32, u32)> = self
                .loc
                .iter()
                .enumerate()
                .filter(|(_, l)| **l == RESIDENT)
                .map(|(p, _)| (self.page_next.get(p).copied().unwrap_or(NONE), p as u32))
                .collect();
            self.heap = BinaryHeap::from(fresh);
        }
    }

    fn oracle_evict(&mut self) -> bool {
        while let Some((next, page)) = self.heap.pop() {
            let p = page as usize;
            if self.loc.get(p) == Some(&RESIDENT) && self.page_next.get(p) == Some(&next) {
                self.evict_page(p);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(pages: &[u64]) -> Trace {
        Trace {
            name: "t".into(),
            accesses: pages
                .iter()
                .map(|&p| Access::read(0, p * 4096, 4))
                .collect(),
        }
    }

    #[test]
    fn capacity_follows_the_papers_ratio() {
        let t = PreparedTrace::new(&trace(&[0, 1, 2, 3, 4, 5]), &CostModel::default()).unwrap();
        assert_eq!(t.footprint_pages(), 6);
        assert_eq!(t.capacity_pages(2.0).unwrap(), 2);
        assert_eq!(t.capacity_pages(1.0).unwrap(), 3);
        assert!(t.capacity_pages(-1.0).is_err());
        assert!(t.capacity_pages(10.0).is_err());
    }

    /// A trace whose fault rate per second rises once GPU memory is full: `warm` pages, each faulted in and then
    /// read 5000 times from GPU memory (a slow trickle of faults), then `fresh` pages touched once each (a fault,
    /// a migration and an eviction per access).
    fn rising_fault_rate(warm: u64, fresh: u64) -> Trace {
        let mut accesses = Vec::new();
        for p in 0..warm {
            for j in 0..5000u64 {
                accesses.push(Access::read(0, p * 4096 + (j % 32) * 128, 4));
            }
        }
        for p in warm..warm + fresh {
            accesses.push(Access::read(0, p * 4096, 4));
        }
        Trace {
            name: "rising".into(),
            accesses,
        }
    }

    #[test]
    fn dynamap_measures_f_under_before_eviction_and_f_over_after_it_per_second() {
        let (warm, fresh) = (100u64, 2000u64);
        let trace = rising_fault_rate(warm, fresh);
        // GPU memory holds exactly the warm pages, so the first eviction is the first fresh page's.
        let ratio = fresh as f64 / warm as f64;
        let mut c = SimConfig::new(Policy::DynaMap, ratio);
        c.eviction_unit = EvictionUnit::Page;
        // One L2 set of 16 lines: the warm reads (32 lines a page) miss it and take GPU-memory time.
        c.l2_fixed = true;
        c.cost.machine.l2_bytes = 128 * 16;
        let t = PreparedTrace::new(&trace, &c.cost).unwrap();
        assert_eq!(t.capacity_pages(ratio).unwrap(), warm);
        let r = simulate(&t, &c).unwrap();
        assert_eq!(r.counters.faults, warm + fresh);
        let f_under = r
            .f_under_per_s
            .expect("memory filled, so f_under was measured");
        // Before the first eviction: one fault per warm page, each alone in its epoch (a whole batch's handler
        // cost), then 5000 reads: well under one fault per 20 µs.
        assert!(f_under > 0.0 && f_under < 1.0 / 20e-6, "f_under {f_under}");
        // After it: a fault at every access, batched; f_current several times f_under, so f_over > 1 at the
        // end, and 0 throughout the warm phase.
        let last = r.series.last().unwrap();
        assert!(last.f_over > 1.0, "f_over at the end {}", last.f_over);
        let warm_end = warm * 5000;
        assert!(r
            .series
            .iter()
            .filter(|p| p.end_access <= warm_end)
            .all(|p| p.f_over == 0.0));
    }

    #[test]
    fn requests_to_low_utilised_pages_and_their_l2_hits_are_counted() {
        // Page 0: one line read ten times (1 line used: low); page 1: all 32 lines once (not low).
        let mut accesses: Vec<Access> = (0..10).map(|_| Access::read(0, 0, 4)).collect();
        accesses.extend((0..32).map(|l| Access::read(0, 4096 + l * 128, 4)));
        let t = PreparedTrace::new(
            &Trace {
                name: "low".into(),
                accesses,
            },
            &CostModel::default(),
        )
        .unwrap();
        for policy in [Policy::PinHost, Policy::EagerNoPrefetch] {
            let r = simulate(&t, &SimConfig::new(policy, 0.0)).unwrap();
            assert_eq!(r.counters.low_util_requests, 10, "{policy}");
            assert_eq!(r.counters.low_util_l2_hits, 9, "{policy}");
        }
    }

    #[test]
    fn a_rate_window_that_is_not_a_positive_time_is_refused() {
        let t = PreparedTrace::new(&trace(&[0, 1, 2]), &CostModel::default()).unwrap();
        for w in [0.0, -1.0, f64::NAN] {
            let mut c = SimConfig::new(Policy::DynaMap, 1.0);
            c.rate_window_s = w;
            assert!(simulate(&t, &c).is_err());
        }
    }

    /// Work for every policy: six 2 MiB blocks (first touched out of address order), a stream through them,
    /// random lines in a hot part, and stores; the thrashing detection's timers and DynaMap's rate windows run.
    fn mixed(n: u64) -> Trace {
        let mut rng = crate::rng::Rng::new(11);
        let base = 0x7f00_0000_0000u64;
        let accesses = (0..n)
            .map(|i| {
                let addr = if i % 3 == 0 {
                    base + (5 << 21) - (i * 128) % (6 << 21)
                } else {
                    base + (rng.below(3 << 19) & !3)
                };
                Access {
                    addr,
                    warp: (i % 240) as u32,
                    bytes: 4,
                    write: i % 7 == 0,
                }
            })
            .collect();
        Trace {
            name: "mixed".into(),
            accesses,
        }
    }

    fn without_timing(mut r: SimResult) -> String {
        r.sim_seconds = 0.0;
        serde_json::to_string(&r).unwrap()
    }

    #[test]
    fn a_streamed_run_gives_what_a_prepared_one_gives() {
        let t = mixed(90_000);
        let cost = CostModel::default();
        let prepared = PreparedTrace::new(&t, &cost).unwrap();
        let configs: Vec<SimConfig> = [0.5, 2.0]
            .into_iter()
            .flat_map(|ratio| {
                Policy::suite()
                    .into_iter()
                    .filter(|&p| p != Policy::Oracle)
                    .map(move |p| {
                        let mut c = SimConfig::new(p, ratio);
                        c.series_points = 7;
                        c
                    })
            })
            .collect();
        let want: Vec<String> = configs
            .iter()
            .map(|c| without_timing(simulate(&prepared, c).unwrap()))
            .collect();
        let mut replay = |sink: &mut dyn FnMut(Access)| {
            for &a in &t.accesses {
                sink(a);
            }
            Ok(())
        };
        let shape = scan("mixed", &cost, &mut replay).unwrap();
        assert_eq!(shape.accesses(), prepared.accesses());
        assert_eq!(shape.footprint_pages(), prepared.footprint_pages());
        // Chunks shorter than an epoch, across epochs, and the whole trace in one; one worker or several.
        for (threads, chunk) in [(1, 1000), (3, 3 * 4096 + 5), (2, CHUNK_ACCESSES)] {
            let got = streamed_in_chunks(&shape, &configs, &mut replay, threads, chunk).unwrap();
            assert_eq!(got.len(), configs.len());
            for ((r, w), c) in got.into_iter().zip(&want).zip(&configs) {
                assert_eq!(
                    &without_timing(r),
                    w,
                    "{} at {}, chunk {chunk}",
                    c.policy,
                    c.ratio
                );
            }
        }
    }

    #[test]
    fn a_stream_that_changes_between_passes_and_the_oracle_are_refused() {
        let t = mixed(5000);
        let cost = CostModel::default();
        let mut passes = 0;
        let mut shrinking = |sink: &mut dyn FnMut(Access)| {
            passes += 1;
            for a in t.accesses.iter().skip(usize::from(passes > 1)) {
                sink(*a);
            }
            Ok(())
        };
        let shape = scan("mixed", &cost, &mut shrinking).unwrap();
        let config = SimConfig::new(Policy::DynaMap, 2.0);
        let e = simulate_streamed(&shape, &[config], &mut shrinking, 1).unwrap_err();
        assert!(e.to_string().contains("changed between passes"), "{e}");
        let oracle = SimConfig::new(Policy::Oracle, 2.0);
        let e = simulate_streamed(&shape, &[oracle], &mut shrinking, 1).unwrap_err();
        assert!(e.to_string().contains("oracle"), "{e}");
        let mut empty = |_: &mut dyn FnMut(Access)| Ok(());
        assert!(scan("empty", &cost, &mut empty).is_err());
    }
}
