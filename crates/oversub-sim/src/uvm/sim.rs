//! The simulator: page table, GPU memory of fixed capacity, eviction, and the event counters.
//!
//! A trace is first [`PreparedTrace`]d: addresses become dense line numbers (blocks of 2 MiB that the trace touches
//! are numbered in address order), so that every per-page structure is a flat array and one access costs a few
//! array reads, an L2 lookup and, rarely, a policy decision. Faults are serviced as they occur, in trace order;
//! the driver's batching shows in when DynaMap re-measures the fault rate (once per batch of faults) and in
//! de-duplication (a page migrated for one warp no longer faults for the next).

use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use serde::Serialize;

use super::cache::L2Cache;
use super::cost::CostModel;
use super::policy::Policy;
use super::{Access, SimError, Trace, BLOCK_BYTES, GROUP_BYTES};

const WRITE_BIT: u32 = 1 << 31;
const LINE_MASK: u32 = WRITE_BIT - 1;
const NONE: u32 = u32::MAX;
/// `hist` value of a page never evicted.
const NO_HISTORY: u8 = u8::MAX;

/// Where a page is.
const UNMAPPED: u8 = 0;
const REMOTE: u8 = 1;
const RESIDENT: u8 = 2;

/// A trace turned into dense line numbers for one cost model's line and page sizes.
#[derive(Debug, Clone)]
pub struct PreparedTrace {
    /// What produced the trace.
    pub name: String,
    /// Dense line number per access, with [`WRITE_BIT`] set for stores.
    lines: Vec<u32>,
    /// Pages the trace touches at least once (only those are prefetched or migrated as part of a group).
    touched: Vec<bool>,
    touched_pages: u64,
    line_shift: u32,
    lines_per_page_shift: u32,
    page_bytes: u64,
    line_bytes: u64,
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

    /// Accesses in the trace.
    pub fn accesses(&self) -> u64 {
        self.lines.len() as u64
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

/// Builds a [`PreparedTrace`] one access at a time, so a generator's stream need not be held as a whole.
///
/// Blocks are numbered in order of first touch: every structure that groups pages (64 KiB groups, the prefetch
/// tree, eviction units) lies within one 2 MiB block, so the numbering of blocks changes no outcome.
#[derive(Debug)]
pub struct PreparedTraceBuilder {
    trace: PreparedTrace,
    blocks: HashMap<u64, u64>,
    last_block: u64,
    last_index: u64,
    pages_per_block: u64,
    lines_per_page: u64,
}

impl PreparedTraceBuilder {
    /// An empty trace called `name`, numbered for `cost`'s line and page size.
    pub fn new(name: &str, cost: &CostModel) -> Result<Self, SimError> {
        cost.validate()?;
        let lines_per_page = u64::from(cost.lines_per_page());
        Ok(Self {
            trace: PreparedTrace {
                name: name.to_string(),
                lines: Vec::new(),
                touched: Vec::new(),
                touched_pages: 0,
                line_shift: cost.line_bytes.trailing_zeros(),
                lines_per_page_shift: lines_per_page.trailing_zeros(),
                page_bytes: cost.page_bytes,
                line_bytes: cost.line_bytes,
            },
            blocks: HashMap::new(),
            last_block: u64::MAX,
            last_index: 0,
            pages_per_block: BLOCK_BYTES / cost.page_bytes,
            lines_per_page,
        })
    }

    /// Appends one access.
    pub fn push(&mut self, a: Access) -> Result<(), SimError> {
        let block = a.addr / BLOCK_BYTES;
        if block != self.last_block {
            let next = self.blocks.len() as u64;
            let index = *self.blocks.entry(block).or_insert(next);
            if index == next {
                let pages = (next + 1) * self.pages_per_block;
                if pages * self.lines_per_page >= u64::from(LINE_MASK) {
                    return Err(SimError::InvalidParameter(format!(
                        "trace `{}` spans more 2 MiB blocks than the simulator numbers ({next})",
                        self.trace.name
                    )));
                }
                self.trace.touched.resize(pages as usize, false);
            }
            self.last_block = block;
            self.last_index = index;
        }
        let t = &mut self.trace;
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
        t.lines
            .push(line as u32 | if a.write { WRITE_BIT } else { 0 });
        Ok(())
    }

    /// Accesses pushed so far.
    pub fn len(&self) -> u64 {
        self.trace.lines.len() as u64
    }

    /// Whether nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.trace.lines.is_empty()
    }

    /// The prepared trace; an empty one is an error.
    pub fn finish(self) -> Result<PreparedTrace, SimError> {
        if self.trace.lines.is_empty() {
            return Err(SimError::InvalidParameter(format!(
                "trace `{}` is empty",
                self.trace.name
            )));
        }
        Ok(self.trace)
    }
}

/// Which resident unit the driver evicts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum EvictionOrder {
    /// Least recently migrated first, as NVIDIA's driver does (its list is ordered at allocation, not access).
    #[default]
    Allocation,
    /// Least recently accessed first.
    Lru,
}

/// The unit evicted at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum EvictionUnit {
    /// One page. The default: the driver evicts 2 MiB chunks of a multi-GiB memory (1/3000 of it); a scaled-down
    /// problem keeps that proportion best with small units.
    #[default]
    Page,
    /// A 64 KiB group.
    Group,
    /// A 2 MiB block, the driver's unit.
    Block,
}

/// One simulation's settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimConfig {
    /// The policy.
    pub policy: Policy,
    /// Oversubscription ratio, (problem − capacity) / capacity; 2.0 is 200%.
    pub ratio: f64,
    /// Costs and cache geometry.
    pub cost: CostModel,
    /// Eviction order.
    pub eviction: EvictionOrder,
    /// Eviction unit.
    pub eviction_unit: EvictionUnit,
    /// Faults per batch, the unit over which the fault rate is measured (the driver's batch: 256).
    pub fault_batch: u32,
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
    /// Driver service events: faults on unmapped pages and access-counter notifications.
    pub faults: u64,
    /// Pages moved to the GPU, prefetched ones included.
    pub migrations: u64,
    /// Of those, pages the prefetcher brought.
    pub prefetches: u64,
    /// Pages moved back to the host to make room.
    pub evictions: u64,
    /// Bytes over the bus to the GPU (migrations and remote reads).
    pub bytes_h2d: u64,
    /// Bytes over the bus to the host (evictions and remote writes).
    pub bytes_d2h: u64,
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
    /// Estimated run time from the counters and the cost model.
    pub est_time_s: f64,
    /// Evictions per page touched.
    pub evictions_per_page: f64,
    /// Most pages resident at once (never above the capacity).
    pub peak_resident_pages: u64,
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

/// Estimated run time of counted events: H per fault, P (1/B_C + 1/B_PCI) per page moved either way, Eq. 1's
/// per-line cost per remote access, L / B_G per GPU-memory access; L2 hits are free.
pub fn estimated_time_s(c: &Counters, cost: &CostModel) -> f64 {
    c.faults as f64 * cost.fault_s
        + (c.migrations + c.evictions) as f64 * cost.page_transfer_s()
        + c.remote_accesses as f64 * cost.remote_line_cost_s()
        + c.gpu_mem_accesses as f64 * cost.gpu_line_s()
}

/// Runs one policy over a prepared trace.
pub fn simulate(trace: &PreparedTrace, config: &SimConfig) -> Result<SimResult, SimError> {
    config.cost.validate()?;
    if trace.line_bytes != config.cost.line_bytes || trace.page_bytes != config.cost.page_bytes {
        return Err(SimError::InvalidParameter(
            "the trace was prepared for another line or page size".into(),
        ));
    }
    if config.fault_batch == 0 {
        return Err(SimError::InvalidParameter(
            "fault_batch must be at least 1".into(),
        ));
    }
    let capacity = trace.capacity_pages(config.ratio)?;
    let started = Instant::now();
    let mut engine = Engine::new(trace, config, capacity)?;
    engine.run();
    let counters = engine.counters;
    Ok(SimResult {
        workload: trace.name.clone(),
        policy: config.policy,
        ratio: config.ratio,
        footprint_pages: trace.touched_pages,
        capacity_pages: capacity,
        est_time_s: estimated_time_s(&counters, &config.cost),
        evictions_per_page: counters.evictions as f64 / trace.touched_pages.max(1) as f64,
        peak_resident_pages: engine.peak_resident,
        counters,
        sim_seconds: started.elapsed().as_secs_f64(),
    })
}

struct Engine<'t> {
    trace: &'t PreparedTrace,
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

    lpp_shift: u32,
    lpp_mask: u32,
    pages_per_group_shift: u32,
    pages_per_block: u32,

    loc: Vec<u8>,
    /// Lines used since the page last left the GPU (the page statistics table).
    used: Vec<u64>,
    /// Lines used in the page's last period, or [`NO_HISTORY`].
    hist: Vec<u8>,
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

    /// Fault-rate measurement (DynaMap).
    fault_batch: u32,
    batch_faults: u32,
    batch_start: u64,
    f_under: Option<f64>,
    f_over: f64,

    /// Belady (oracle): next use of the page at each access, the page's current next use, and a max-heap.
    next_use: Vec<u32>,
    page_next: Vec<u32>,
    heap: BinaryHeap<(u32, u32)>,
}

impl<'t> Engine<'t> {
    fn new(trace: &'t PreparedTrace, config: &SimConfig, capacity: u64) -> Result<Self, SimError> {
        let cost = config.cost.clone();
        let pages = trace.touched.len();
        let pages_per_group = (GROUP_BYTES / cost.page_bytes).max(1) as u32;
        let pages_per_block = (BLOCK_BYTES / cost.page_bytes) as u32;
        let unit_pages = match config.eviction_unit {
            EvictionUnit::Page => 1,
            EvictionUnit::Group => pages_per_group,
            EvictionUnit::Block => pages_per_block,
        };
        let units = pages.div_ceil(unit_pages as usize);
        let initial = if config.policy.host_pages_mapped() {
            REMOTE
        } else {
            UNMAPPED
        };
        let oracle = config.policy == Policy::Oracle;
        if oracle && trace.lines.len() >= NONE as usize {
            return Err(SimError::InvalidParameter(
                "the oracle handles traces of fewer than 2^32 accesses".into(),
            ));
        }
        let lpp_shift = trace.lines_per_page_shift;
        let (next_use, page_next) = if oracle {
            let mut next_use = vec![NONE; trace.lines.len()];
            let mut last = vec![NONE; pages];
            for (i, &l) in trace.lines.iter().enumerate().rev() {
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
        Ok(Self {
            trace,
            policy: config.policy,
            l2: L2Cache::new(cost.l2_bytes, cost.line_bytes, cost.l2_ways)?,
            lru: config.eviction == EvictionOrder::Lru,
            capacity,
            resident: 0,
            peak_resident: 0,
            counters: Counters::default(),
            now: 0,
            lpp_shift,
            lpp_mask: (1u32 << lpp_shift) - 1,
            pages_per_group_shift: pages_per_group.trailing_zeros(),
            pages_per_block,
            loc: vec![initial; pages],
            used: vec![0; pages],
            hist: vec![NO_HISTORY; pages],
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
            fault_batch: config.fault_batch,
            batch_faults: 0,
            batch_start: 0,
            f_under: None,
            f_over: 0.0,
            next_use,
            page_next,
            heap: BinaryHeap::new(),
            cost,
        })
    }

    fn run(&mut self) {
        let trace = self.trace;
        for (i, &entry) in trace.lines.iter().enumerate() {
            self.now = i as u64;
            let line = entry & LINE_MASK;
            let write = entry & WRITE_BIT != 0;
            let page = (line >> self.lpp_shift) as usize;
            if let Some(u) = self.used.get_mut(page) {
                *u |= 1u64 << (line & self.lpp_mask);
            }
            let mut loc = self.loc.get(page).copied().unwrap_or(UNMAPPED);
            if loc == UNMAPPED {
                self.fault(page);
                loc = self.loc.get(page).copied().unwrap_or(UNMAPPED);
            }
            if loc == RESIDENT {
                if self.lru {
                    self.touch_unit(page);
                }
                if !self.next_use.is_empty() {
                    self.oracle_touch(page, i, false);
                }
                if self.l2.access(line) {
                    self.counters.cache_hits += 1;
                } else {
                    self.counters.gpu_mem_accesses += 1;
                }
            } else if self.l2.access(line) {
                self.counters.cache_hits += 1;
            } else {
                self.counters.remote_accesses += 1;
                if write {
                    self.counters.bytes_d2h += self.trace.line_bytes;
                } else {
                    self.counters.bytes_h2d += self.trace.line_bytes;
                }
                self.remote_miss(page);
            }
        }
        self.counters.accesses = trace.lines.len() as u64;
    }

    /// An access to an unmapped page: the driver decides to migrate it or to serve it from the host.
    fn fault(&mut self, page: usize) {
        self.counters.faults += 1;
        self.batch_faults += 1;
        if self.batch_faults >= self.fault_batch {
            let span = (self.now + 1 - self.batch_start).max(1);
            let f_current = f64::from(self.batch_faults) / span as f64;
            if let Some(f_under) = self.f_under {
                self.f_over = ((f_current - f_under) / f_under).max(0.0);
            }
            self.batch_faults = 0;
            self.batch_start = self.now + 1;
        }
        let migrate = match self.policy {
            Policy::Eager | Policy::EagerNoPrefetch | Policy::Oracle => true,
            Policy::StaticMap { .. } | Policy::DynaMap => self.spatial_decision(page, true),
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

    /// StaticMap and DynaMap: migrate a page whose expected spatial use pays for the move. A page never evicted
    /// has no history and migrates on its first fault, as the paper's DynaMap does.
    fn spatial_decision(&self, page: usize, at_fault: bool) -> bool {
        let hist = self.hist.get(page).copied().unwrap_or(NO_HISTORY);
        if hist == NO_HISTORY {
            return at_fault;
        }
        let current = self.used.get(page).map_or(0, |u| u.count_ones());
        let lines = u32::from(hist).max(current);
        match self.policy {
            Policy::StaticMap { threshold } => {
                f64::from(lines) >= threshold * f64::from(self.cost.lines_per_page())
            }
            Policy::DynaMap => self.cost.c_gpu(lines, self.f_over) < self.cost.c_cpu(lines),
            _ => false,
        }
    }

    /// A host-resident line missed the L2 and went over the bus; counters may now ask for a migration.
    fn remote_miss(&mut self, page: usize) {
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
                let threshold = if self.f_under.is_none() {
                    // No eviction yet: memory still has room, be eager in proportion to what is left.
                    ts * self.resident as f64 / self.capacity as f64 + 1.0
                } else {
                    let r = self.round_trips.get(page).copied().unwrap_or(0);
                    ts * f64::from(r + 1) + 1.0
                };
                if f64::from(n) >= threshold {
                    self.counter_migration(page);
                }
            }
            Policy::StaticMap { .. } | Policy::DynaMap => {
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

    /// The driver's tree prefetcher over the faulting page's 2 MiB block: from the 64 KiB leaf up to the root,
    /// a node more than 51% resident is filled.
    fn prefetch(&mut self, page: usize) {
        let ppg = 1usize << self.pages_per_group_shift;
        let block_pages = self.pages_per_block as usize;
        let unit = self.unit_of(page);
        let mut size = ppg;
        while size <= block_pages {
            let start = page & !(size - 1);
            let resident: usize = (start / ppg..(start + size) / ppg)
                .map(|g| usize::from(self.group_resident.get(g).copied().unwrap_or(0)))
                .sum();
            if resident * 100 > size * 51 {
                for p in start..start + size {
                    if self.loc.get(p) != Some(&RESIDENT)
                        && self.trace.touched.get(p).copied().unwrap_or(false)
                    {
                        if self.migrate(p, unit).is_err() {
                            return;
                        }
                        self.counters.prefetches += 1;
                    }
                }
            }
            size *= 2;
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
        Ok(())
    }

    /// Evicts the first unit in eviction order other than `keep` (the oracle: the page used furthest ahead).
    fn evict_one(&mut self, keep: u32) -> bool {
        if self.f_under.is_none() {
            self.f_under = Some(self.counters.faults.max(1) as f64 / (self.now + 1) as f64);
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
        if let (Some(u), Some(h)) = (self.used.get_mut(page), self.hist.get_mut(page)) {
            *h = (u.count_ones() as u8).min(NO_HISTORY - 1);
            *u = 0;
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
}
