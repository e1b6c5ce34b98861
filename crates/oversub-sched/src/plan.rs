//! The foreknowledge planner: which buffers to page out and in before each slot, when, and whether it fits.
//!
//! The table is unrolled over `hyperperiods` repetitions. Slot instances are decided in the order their paging is
//! issued. Before an instance starts, its buffers must be resident; when they do not fit, victims are chosen among
//! resident buffers nobody uses meanwhile:
//! - `Async` knows the table, so it evicts the buffer whose next use lies furthest ahead (Belady's rule, optimal in
//!   the number of page-outs for equal sizes), preferring read-only buffers with a stored copy on ties since their
//!   page-out writes nothing. It issues the paging at the start of the previous slot on the same CPU, so it
//!   overlaps that slot's work (Fig. 8).
//! - `Sync` runs the paging as a paging slot right before the instance (Fig. 7), with a periodic victim choice:
//!   the same victims for a slot every hyperperiod, found by an exhaustive search ([`sync_search`] for the shortest
//!   repacked table, [`sync_victims`] for a table as it is); Belady's rule when no periodic choice runs the table.
//! - `Demand` knows nothing ahead: at the instance's start it evicts the least recently used buffers and pages
//!   synchronously inside the slot (Fig. 6), at the demand-paging speeds when they were measured
//!   ([`Bandwidths::priced`]).
//!
//! The store is one queue: operations run one after another at the given bandwidths, page-outs before the page-ins
//! that need their memory, so the capacity is never exceeded at any instant. Demand paging at measured speeds is
//! bound by the fault handling on each CPU instead: slots on different CPUs page concurrently, each at the demand
//! speed, while the store serves them at its direct speed, and a page-in waits until the memory it takes is free.

use std::collections::{BTreeSet, HashMap};

use crate::model::{BufferId, ComponentId, System};

/// How paging is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Foreknowledge, asynchronous paging during the preceding slot (Fig. 8).
    Async,
    /// Foreknowledge, a synchronous paging slot before the component (Fig. 7).
    Sync,
    /// No foreknowledge: LRU eviction and synchronous paging when the slot starts (Fig. 6).
    Demand,
}

impl Mode {
    /// All modes, in report order.
    pub const ALL: [Mode; 3] = [Mode::Async, Mode::Sync, Mode::Demand];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Async => "async",
            Mode::Sync => "sync",
            Mode::Demand => "demand",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Storage speeds the plan assumes, bytes per second.
///
/// `read_bytes_per_s` and `write_bytes_per_s` are the store's speeds with direct I/O (whole buffers in large
/// requests: what `async` and `sync` paging and the pager do). Demand paging is slower (the paper's Fig. 4: 1.33 GiB/s
/// against 4 GiB/s, its cost being the fault handling on the faulting CPU); when it was measured,
/// `demand_read_bytes_per_s` / `demand_write_bytes_per_s` give its speeds and [`Mode::Demand`] is priced at them.
/// `None`: not measured, and demand paging is priced at the direct speeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidths {
    /// Page-in speed with direct I/O.
    pub read_bytes_per_s: f64,
    /// Page-out speed with direct I/O.
    pub write_bytes_per_s: f64,
    /// Page-in (fault-in) speed with demand paging; `None`: not measured.
    pub demand_read_bytes_per_s: Option<f64>,
    /// Page-out (write-back) speed with demand paging; `None`: not measured.
    pub demand_write_bytes_per_s: Option<f64>,
}

/// How a mode's paging was priced (see [`Bandwidths::pricing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pricing {
    /// At the direct-I/O speeds (`async`, `sync`).
    Direct,
    /// `demand` at the measured demand-paging speeds.
    MeasuredDemand,
    /// `demand` at the direct-I/O speeds, because demand paging was not measured.
    DirectDemandNotMeasured,
}

impl Pricing {
    /// The words reports use.
    pub fn describe(self) -> &'static str {
        match self {
            Pricing::Direct => "direct I/O",
            Pricing::MeasuredDemand => "measured demand paging",
            Pricing::DirectDemandNotMeasured => "direct I/O (demand not measured)",
        }
    }
}

impl Bandwidths {
    /// Direct-I/O speeds only; demand paging not measured.
    pub const fn direct(read_bytes_per_s: f64, write_bytes_per_s: f64) -> Bandwidths {
        Bandwidths {
            read_bytes_per_s,
            write_bytes_per_s,
            demand_read_bytes_per_s: None,
            demand_write_bytes_per_s: None,
        }
    }

    /// The same, with measured demand-paging speeds.
    pub const fn with_demand(self, read_bytes_per_s: f64, write_bytes_per_s: f64) -> Bandwidths {
        Bandwidths {
            demand_read_bytes_per_s: Some(read_bytes_per_s),
            demand_write_bytes_per_s: Some(write_bytes_per_s),
            ..self
        }
    }

    /// Whether demand-paging speeds were given.
    pub fn demand_measured(&self) -> bool {
        self.demand_read_bytes_per_s.is_some() || self.demand_write_bytes_per_s.is_some()
    }

    /// Which speeds `mode`'s paging is priced at.
    pub fn pricing(&self, mode: Mode) -> Pricing {
        match mode {
            Mode::Async | Mode::Sync => Pricing::Direct,
            Mode::Demand if self.demand_measured() => Pricing::MeasuredDemand,
            Mode::Demand => Pricing::DirectDemandNotMeasured,
        }
    }

    /// The speeds (page-in, page-out) a slot of `mode` waits for its paging at: the direct ones, except for
    /// `demand` with measured demand speeds (a speed not given falls back to the direct one).
    pub fn priced(&self, mode: Mode) -> (f64, f64) {
        match mode {
            Mode::Demand => (
                self.demand_read_bytes_per_s
                    .unwrap_or(self.read_bytes_per_s),
                self.demand_write_bytes_per_s
                    .unwrap_or(self.write_bytes_per_s),
            ),
            Mode::Async | Mode::Sync => (self.read_bytes_per_s, self.write_bytes_per_s),
        }
    }

    fn read_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.read_bytes_per_s.max(1.0)
    }

    fn write_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.write_bytes_per_s.max(1.0)
    }

    /// Only `mode`'s priced speeds, as direct ones.
    fn for_mode(&self, mode: Mode) -> Bandwidths {
        let (r, w) = self.priced(mode);
        Bandwidths::direct(r, w)
    }
}

/// Page-in or page-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Store to memory.
    In,
    /// Memory to store.
    Out,
}

/// One planned paging operation.
#[derive(Debug, Clone, PartialEq)]
pub struct PageOp {
    /// Direction.
    pub kind: PageKind,
    /// The buffer.
    pub buffer: BufferId,
    /// The buffer's size.
    pub bytes: u64,
    /// Bytes that actually cross to or from the store (0 for a read-only buffer's page-out after its first).
    pub io_bytes: u64,
    /// Estimated duration at the plan's bandwidths, seconds.
    pub est_s: f64,
}

/// One execution of a table slot in the unrolled schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Index of the slot in the table.
    pub slot: usize,
    /// Which repetition of the table.
    pub hyperperiod: usize,
    /// The component.
    pub component: ComponentId,
    /// CPU lane.
    pub cpu: usize,
    /// GPU used, if any.
    pub gpu: Option<usize>,
    /// Planned start, seconds from the run's start.
    pub start_s: f64,
    /// Planned end of the slot (start + length).
    pub end_s: f64,
    /// The start of the next slot on the same CPU: the work must be complete by then.
    pub deadline_s: f64,
    /// Start of the previous slot on the same CPU (negative before the first repetition).
    pub prev_start_s: f64,
    /// End of the previous slot on the same CPU.
    pub prev_end_s: f64,
    /// Buffers it needs resident.
    pub buffers: Vec<BufferId>,
}

/// The plan for one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotPlan {
    /// The instance.
    pub instance: Instance,
    /// Victims to page out first.
    pub page_outs: Vec<PageOp>,
    /// The instance's buffers to page in after them.
    pub page_ins: Vec<PageOp>,
    /// When the paging may start (async: the previous slot's start; sync: the paging slot's start; demand: the
    /// slot's start). Negative times happen during set-up, before the table starts.
    pub issue_s: f64,
    /// When the store starts on these operations (after earlier ones).
    pub paging_start_s: f64,
    /// When the last of them completes.
    pub paging_end_s: f64,
    /// When the work starts.
    pub work_start_s: f64,
    /// When the work completes.
    pub completion_s: f64,
    /// Why this instance cannot run as planned, if it cannot.
    pub problem: Option<String>,
}

impl SlotPlan {
    /// All operations, page-outs first.
    pub fn ops(&self) -> impl Iterator<Item = &PageOp> {
        self.page_outs.iter().chain(&self.page_ins)
    }

    /// Seconds of store time the operations take.
    pub fn paging_s(&self) -> f64 {
        self.ops().map(|o| o.est_s).sum()
    }
}

/// A full plan for one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The mode.
    pub mode: Mode,
    /// Length of one repetition, seconds.
    pub hyperperiod_s: f64,
    /// Repetitions planned.
    pub hyperperiods: usize,
    /// Instances in the order they are decided (by issue time).
    pub slots: Vec<SlotPlan>,
}

impl Plan {
    /// Whether every instance can run as planned.
    pub fn feasible(&self) -> bool {
        self.slots.iter().all(|s| s.problem.is_none())
    }

    /// Instances that cannot run as planned.
    pub fn problems(&self) -> impl Iterator<Item = &SlotPlan> {
        self.slots.iter().filter(|s| s.problem.is_some())
    }

    /// Page-outs of the instances of one repetition.
    pub fn page_outs_in(&self, hyperperiod: usize) -> usize {
        self.slots
            .iter()
            .filter(|s| s.instance.hyperperiod == hyperperiod)
            .map(|s| s.page_outs.len())
            .sum()
    }

    /// Page-outs per repetition once the start-up has passed (the last repetition planned).
    pub fn steady_page_outs_per_hyperperiod(&self) -> usize {
        self.page_outs_in(self.hyperperiods.saturating_sub(1))
    }

    /// Bytes moved to or from the store by the whole plan.
    pub fn io_bytes(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| s.ops())
            .map(|o| o.io_bytes)
            .sum()
    }

    /// Bytes moved per repetition in the steady state.
    pub fn steady_io_bytes_per_hyperperiod(&self) -> u64 {
        let last = self.hyperperiods.saturating_sub(1);
        self.slots
            .iter()
            .filter(|s| s.instance.hyperperiod == last)
            .flat_map(|s| s.ops())
            .map(|o| o.io_bytes)
            .sum()
    }

    /// Buffers the plan pages in before the table starts (issued at negative times).
    pub fn setup_slots(&self) -> impl Iterator<Item = &SlotPlan> {
        self.slots.iter().filter(|s| s.issue_s < 0.0)
    }
}

/// Unrolls the table over `hyperperiods` repetitions, in start order.
pub fn instances(system: &System, hyperperiods: usize) -> Vec<Instance> {
    let h = system.table.hyperperiod_s;
    let slots = &system.table.slots;
    let mut out = Vec::with_capacity(slots.len() * hyperperiods);
    for rep in 0..hyperperiods {
        for (i, slot) in slots.iter().enumerate() {
            // The lane's slots in start order, to find the previous and next ones cyclically.
            let lane: Vec<usize> = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.cpu == slot.cpu)
                .map(|(j, _)| j)
                .collect();
            let pos = lane.iter().position(|&j| j == i).unwrap_or(0);
            let base = rep as f64 * h;
            let (next_start, prev_start, prev_end) = {
                let next = lane
                    .get(pos + 1)
                    .map_or_else(|| slots[lane[0]].start_s + h, |&j| slots[j].start_s);
                let (ps, pe) = if pos == 0 {
                    let last = &slots[lane[lane.len() - 1]];
                    (last.start_s - h, last.end_s() - h)
                } else {
                    let p = &slots[lane[pos - 1]];
                    (p.start_s, p.end_s())
                };
                (next, ps, pe)
            };
            out.push(Instance {
                slot: i,
                hyperperiod: rep,
                component: slot.component,
                cpu: slot.cpu,
                gpu: slot.gpu,
                start_s: base + slot.start_s,
                end_s: base + slot.end_s(),
                deadline_s: base + next_start,
                prev_start_s: base + prev_start,
                prev_end_s: base + prev_end,
                buffers: system.component_buffers(slot.component),
            });
        }
    }
    out.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.cpu.cmp(&b.cpu)));
    out
}

/// Residency as decisions are made; `Clone` so a search can branch on it.
#[derive(Debug, Clone)]
pub struct PlannerState {
    resident: BTreeSet<BufferId>,
    /// Read-only buffers whose copy is on the store.
    stored: BTreeSet<BufferId>,
    /// End of the last instance that used each buffer (for LRU).
    last_use_s: HashMap<BufferId, f64>,
    /// Decided instances still to finish: (end, buffers).
    pending: Vec<(f64, Vec<BufferId>)>,
    store_free_s: f64,
    /// Demand paging at measured speeds only: bytes held by the buffers once every operation up to
    /// `mem_events` has happened, and the operations after it (time, bytes taken (+) or freed (-)).
    mem_base: i64,
    mem_events: Vec<(f64, i64)>,
    /// Demand paging at measured speeds only: when the store is busy (sorted, disjoint intervals).
    store_busy: Vec<(f64, f64)>,
}

impl PlannerState {
    /// Those of `buffers` that are not resident.
    fn missing(&self, buffers: &[BufferId]) -> Vec<BufferId> {
        buffers
            .iter()
            .copied()
            .filter(|b| !self.resident.contains(b))
            .collect()
    }
}

/// What a decision must resolve.
#[derive(Debug, Clone)]
pub struct Need {
    /// Buffers of the instance not resident.
    pub missing: Vec<BufferId>,
    /// Bytes that must be freed first.
    pub shortfall_bytes: u64,
    /// Resident buffers that may be evicted, unordered.
    pub candidates: Vec<BufferId>,
}

/// The inputs every decision needs.
#[derive(Debug)]
pub struct PlanContext<'a> {
    system: &'a System,
    sizes: Vec<u64>,
    read_only: Vec<bool>,
    work_s: Vec<f64>,
    instances: Vec<Instance>,
    /// Decision keys (issue time, start time, CPU) of each buffer's uses in the first repetition; the keys of later
    /// repetitions are these shifted by whole hyperperiods. Belady's rule ranks victims by their next use in this
    /// order, the order requests are served in, not by start time alone (two uses starting together are served in
    /// issue order).
    uses: Vec<Vec<(f64, f64, usize)>>,
    /// The store's speeds (direct I/O): the time an operation keeps the store busy.
    bandwidths: Bandwidths,
    /// The speeds the slot waits for its paging at ([`Bandwidths::priced`]).
    priced: Bandwidths,
    mode: Mode,
    /// Uses after this time count as never (a finite sequence); `None`: the table repeats forever.
    horizon_s: Option<f64>,
    /// Victims decided ahead, per table slot (a periodic choice; see [`sync_search`]); `None`: the mode's rule.
    fixed: Option<Vec<Vec<BufferId>>>,
}

impl<'a> PlanContext<'a> {
    /// Plans as if the run ended after the planned repetitions: uses beyond them do not count. Belady's rule is
    /// optimal for exactly this finite sequence, which is what the optimality test compares against.
    pub fn with_finite_horizon(mut self) -> Self {
        self.horizon_s = self.instances.iter().map(|i| i.start_s).reduce(f64::max);
        self
    }

    /// Prepares planning `system` over `hyperperiods` repetitions.
    pub fn new(
        system: &'a System,
        mode: Mode,
        hyperperiods: usize,
        bandwidths: Bandwidths,
    ) -> Self {
        let bufs = system.buffers();
        let unrolled = instances(system, hyperperiods);
        let mut uses = vec![Vec::new(); bufs.len()];
        for inst in instances(system, 1) {
            let key = (issue_for(mode, &inst), inst.start_s, inst.cpu);
            for b in &inst.buffers {
                uses[b.0].push(key);
            }
        }
        for u in &mut uses {
            u.sort_by(cmp_key);
        }
        PlanContext {
            system,
            sizes: bufs.iter().map(|(_, b)| b.size_bytes).collect(),
            read_only: bufs.iter().map(|(_, b)| b.read_only).collect(),
            work_s: system
                .components
                .iter()
                .map(|c| c.work.compute_s())
                .collect(),
            instances: unrolled,
            uses,
            bandwidths,
            priced: bandwidths.for_mode(mode),
            mode,
            horizon_s: None,
            fixed: None,
        }
    }

    /// Plans with the victims decided ahead for each table slot (indexed like `system.table.slots`) instead of the
    /// mode's rule: each instance pages out its slot's victims (those resident; during the first repetition, which
    /// fills memory, some may not be yet). An instance whose planned victims are in use, not resident after the first
    /// repetition, or do not make room gets a problem (and Belady's rule for the missing room), so a plan that
    /// strays from the choice is never feasible.
    pub fn with_victims(mut self, victims: Vec<Vec<BufferId>>) -> Self {
        self.fixed = Some(victims);
        self
    }

    /// Whether demand paging runs at measured demand speeds: then its cost is the fault handling on the faulting
    /// CPU, so slots on different CPUs page concurrently, each at the demand speed, and share the store only at its
    /// direct speed.
    fn concurrent_demand(&self) -> bool {
        self.mode == Mode::Demand && self.bandwidths.demand_measured()
    }

    /// The instances in decision order (by the time their paging is issued).
    pub fn decision_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.instances.len()).collect();
        order.sort_by(|&a, &b| {
            let (ia, ib) = (&self.instances[a], &self.instances[b]);
            cmp_key(
                &(self.issue_s(ia), ia.start_s, ia.cpu),
                &(self.issue_s(ib), ib.start_s, ib.cpu),
            )
        });
        order
    }

    /// The unrolled instances.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    fn issue_s(&self, inst: &Instance) -> f64 {
        issue_for(self.mode, inst)
    }

    /// The decision key of the next use of buffer `b` after the decision with key `after` (cyclically); `None`
    /// when it is never used again (within the horizon, if finite).
    fn next_use(&self, b: BufferId, after: (f64, f64, usize)) -> Option<(f64, f64, usize)> {
        let h = self.system.table.hyperperiod_s;
        let uses = &self.uses[b.0];
        if uses.is_empty() || h <= 0.0 {
            return None;
        }
        let rep = (after.1 / h).floor() - 1.0;
        for k in 0..4 {
            let base = (rep + k as f64) * h;
            let next = uses
                .iter()
                .map(|&(i, s, c)| (i + base, s + base, c))
                .find(|key| cmp_key(key, &after) == std::cmp::Ordering::Greater);
            if let Some(key) = next {
                return match self.horizon_s {
                    Some(end) if key.1 > end + 1e-9 => None,
                    _ => Some(key),
                };
            }
        }
        None
    }

    /// A fresh state: nothing resident. Every read-only buffer has its copy on the store already: the executor
    /// fills every buffer and pages it out before the table starts, and the pager keeps a read-only buffer's slot.
    pub fn initial_state(&self) -> PlannerState {
        PlannerState {
            resident: BTreeSet::new(),
            stored: (0..self.sizes.len())
                .filter(|&b| self.read_only[b])
                .map(BufferId)
                .collect(),
            last_use_s: HashMap::new(),
            pending: Vec::new(),
            store_free_s: f64::NEG_INFINITY,
            mem_base: 0,
            mem_events: Vec::new(),
            store_busy: Vec::new(),
        }
    }

    fn used_bytes(&self, state: &PlannerState) -> u64 {
        state.resident.iter().map(|b| self.sizes[b.0]).sum()
    }

    /// What instance `idx` needs given `state`.
    pub fn need(&self, state: &PlannerState, idx: usize) -> Need {
        let inst = &self.instances[idx];
        let issue = self.issue_s(inst);
        let missing = state.missing(&inst.buffers);
        let need_bytes: u64 = missing.iter().map(|b| self.sizes[b.0]).sum();
        let free = self
            .system
            .platform
            .capacity_bytes
            .saturating_sub(self.used_bytes(state));
        // In use while this instance pages: its own buffers, those of decided instances not yet finished, and those
        // of any instance starting before this one does (they need theirs at their start).
        let mut pinned: BTreeSet<BufferId> = inst.buffers.iter().copied().collect();
        // Times come from sums of floats: compare with a nanosecond of tolerance so that a slot ending exactly when
        // another's paging is issued does not count as overlapping it.
        const EPS: f64 = 1e-9;
        for (end, bufs) in &state.pending {
            if *end > issue + EPS {
                pinned.extend(bufs.iter().copied());
            }
        }
        for other in &self.instances {
            if other.start_s < inst.start_s - EPS && other.end_s > issue + EPS {
                pinned.extend(other.buffers.iter().copied());
            }
        }
        let candidates = state
            .resident
            .iter()
            .copied()
            .filter(|b| !pinned.contains(b))
            .collect();
        Need {
            missing,
            shortfall_bytes: need_bytes.saturating_sub(free),
            candidates,
        }
    }

    /// The mode's victim choice: enough candidates to cover the shortfall, or `None` if even all do not.
    pub fn choose_victims(
        &self,
        state: &PlannerState,
        idx: usize,
        need: &Need,
    ) -> Option<Vec<BufferId>> {
        let inst = &self.instances[idx];
        let mut ranked = need.candidates.clone();
        match self.mode {
            Mode::Async | Mode::Sync => {
                let after = (self.issue_s(inst), inst.start_s, inst.cpu);
                let far = |b: BufferId| self.next_use(b, after);
                ranked.sort_by(|&a, &b| {
                    // Furthest next use first (never again beats everything); then a page-out that writes nothing;
                    // then the larger one.
                    cmp_next(far(b), far(a))
                        .then(
                            self.writes_nothing(state, b)
                                .cmp(&self.writes_nothing(state, a)),
                        )
                        .then(self.sizes[b.0].cmp(&self.sizes[a.0]))
                        .then(a.cmp(&b))
                });
            }
            Mode::Demand => {
                ranked.sort_by(|&a, &b| {
                    let la = state
                        .last_use_s
                        .get(&a)
                        .copied()
                        .unwrap_or(f64::NEG_INFINITY);
                    let lb = state
                        .last_use_s
                        .get(&b)
                        .copied()
                        .unwrap_or(f64::NEG_INFINITY);
                    la.total_cmp(&lb).then(a.cmp(&b))
                });
            }
        }
        let mut freed = 0u64;
        let mut victims = Vec::new();
        for b in ranked {
            if freed >= need.shortfall_bytes {
                break;
            }
            freed += self.sizes[b.0];
            victims.push(b);
        }
        (freed >= need.shortfall_bytes).then_some(victims)
    }

    fn writes_nothing(&self, state: &PlannerState, b: BufferId) -> bool {
        self.read_only[b.0] && state.stored.contains(&b)
    }

    /// Applies a decision for instance `idx` (victims out, missing buffers in) and times it on the store.
    pub fn apply(
        &self,
        state: &mut PlannerState,
        idx: usize,
        victims: &[BufferId],
        problem: Option<String>,
    ) -> SlotPlan {
        let inst = self.instances[idx].clone();
        let bw = self.priced;
        let page_outs: Vec<PageOp> = victims
            .iter()
            .map(|&b| {
                let io = if self.writes_nothing(state, b) {
                    0
                } else {
                    self.sizes[b.0]
                };
                PageOp {
                    kind: PageKind::Out,
                    buffer: b,
                    bytes: self.sizes[b.0],
                    io_bytes: io,
                    est_s: bw.write_s(io),
                }
            })
            .collect();
        for &b in victims {
            state.resident.remove(&b);
            if self.read_only[b.0] {
                state.stored.insert(b);
            }
        }
        let missing = state.missing(&inst.buffers);
        // Without enough room (an infeasible capacity), nothing is paged in: the problem says why.
        let page_ins: Vec<PageOp> = if problem.is_some() {
            Vec::new()
        } else {
            missing
                .iter()
                .map(|&b| PageOp {
                    kind: PageKind::In,
                    buffer: b,
                    bytes: self.sizes[b.0],
                    io_bytes: self.sizes[b.0],
                    est_s: bw.read_s(self.sizes[b.0]),
                })
                .collect()
        };
        for op in &page_ins {
            state.resident.insert(op.buffer);
        }
        for &b in &inst.buffers {
            state.last_use_s.insert(b, inst.end_s);
        }
        let issue = self.issue_s(&inst);
        state.pending.retain(|(end, _)| *end > issue + 1e-9);
        state.pending.push((inst.end_s, inst.buffers.clone()));

        let paging_s: f64 = page_outs.iter().chain(&page_ins).map(|o| o.est_s).sum();
        let work_s = self.work_s[inst.component];
        let eps = 1e-9;
        let mut problem = problem;
        let no_ops = page_outs.is_empty() && page_ins.is_empty();
        let (paging_start, paging_end, work_start) = if issue < 0.0 || no_ops {
            // Nothing to page, or issued before the table starts (done during set-up, however long that takes).
            let start = issue.min(inst.start_s);
            (start, start + paging_s, inst.start_s)
        } else if self.concurrent_demand() {
            let (start, end) = self.time_concurrent_demand(state, &inst, &page_outs, &page_ins);
            (start, end, end)
        } else {
            let (start, work_start) = match self.mode {
                Mode::Async => {
                    let start = issue.max(state.store_free_s);
                    if start + paging_s > inst.start_s + eps && problem.is_none() {
                        problem = Some(format!(
                        "paging of {:.1} ms ends {:.1} ms after the slot starts (window {:.1} ms from the previous slot's start)",
                        paging_s * 1e3,
                        (start + paging_s - inst.start_s) * 1e3,
                        (inst.start_s - issue) * 1e3
                    ));
                    }
                    (start, inst.start_s.max(start + paging_s))
                }
                Mode::Sync => {
                    // The paging slot sits right before the instance, after the previous slot on the lane.
                    let wanted = inst.start_s - paging_s;
                    let start = wanted.max(inst.prev_end_s).max(state.store_free_s);
                    if start > wanted + eps && problem.is_none() {
                        problem = Some(format!(
                            "paging slot of {:.1} ms does not fit the {:.1} ms gap before the slot",
                            paging_s * 1e3,
                            (inst.start_s - inst.prev_end_s).max(0.0) * 1e3
                        ));
                    }
                    (start, inst.start_s.max(start + paging_s))
                }
                Mode::Demand => {
                    let start = inst.start_s.max(state.store_free_s);
                    (start, start + paging_s)
                }
            };
            state.store_free_s = start + paging_s;
            (start, start + paging_s, work_start)
        };
        let completion = work_start + work_s;
        if completion > inst.deadline_s + eps && problem.is_none() {
            problem = Some(format!(
                "work completes {:.1} ms after its deadline ({:.1} ms of paging in the way)",
                (completion - inst.deadline_s) * 1e3,
                (paging_end - paging_start) * 1e3
            ));
        }
        SlotPlan {
            instance: inst,
            page_outs,
            page_ins,
            issue_s: issue,
            paging_start_s: paging_start,
            paging_end_s: paging_end,
            work_start_s: work_start,
            completion_s: completion,
            problem,
        }
    }

    /// Times a demand slot's paging when demand paging was measured: the slot faults its page-outs, then its
    /// page-ins, at the demand speeds; each also keeps the store busy at its direct speed (one queue shared by all
    /// CPUs), and ends when both are done. The page-ins start once the memory they take is free for good: after the
    /// slot's own page-outs and when no operation decided earlier would push the memory past the capacity. Returns
    /// the paging's start and end.
    fn time_concurrent_demand(
        &self,
        state: &mut PlannerState,
        inst: &Instance,
        page_outs: &[PageOp],
        page_ins: &[PageOp],
    ) -> (f64, f64) {
        let t0 = inst.start_s;
        // Operations before the slot starts are over for every later query: fold them into the base.
        let folded: i64 = state
            .mem_events
            .iter()
            .filter(|e| e.0 <= t0)
            .map(|e| e.1)
            .sum();
        state.mem_base += folded;
        state.mem_events.retain(|e| e.0 > t0);
        state.store_busy.retain(|iv| iv.1 > t0);
        let store = self.bandwidths;
        let mut out_end = t0;
        if !page_outs.is_empty() {
            let lane_s: f64 = page_outs.iter().map(|o| o.est_s).sum();
            let store_s: f64 = page_outs.iter().map(|o| store.write_s(o.io_bytes)).sum();
            let dev = occupy(&mut state.store_busy, t0, store_s);
            out_end = (t0 + lane_s).max(dev + store_s);
            let freed: u64 = page_outs.iter().map(|o| o.bytes).sum();
            state.mem_events.push((out_end, -(freed as i64)));
        }
        if page_ins.is_empty() {
            return (t0, out_end);
        }
        let taken: u64 = page_ins.iter().map(|o| o.bytes).sum();
        let cap = self.system.platform.capacity_bytes as i64;
        state
            .mem_events
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        // Memory after each event, and the most it reaches from each event on.
        let mut level = Vec::with_capacity(state.mem_events.len());
        let mut m = state.mem_base;
        for e in &state.mem_events {
            m += e.1;
            level.push(m);
        }
        let mut peak_from = level.clone();
        for i in (0..peak_from.len().saturating_sub(1)).rev() {
            peak_from[i] = peak_from[i].max(peak_from[i + 1]);
        }
        let fits = |t: f64| {
            let j = state.mem_events.partition_point(|e| e.0 <= t);
            let now = if j == 0 { state.mem_base } else { level[j - 1] };
            let ahead = peak_from.get(j).copied().unwrap_or(i64::MIN);
            now.max(ahead) + taken as i64 <= cap
        };
        let t_in = std::iter::once(out_end)
            .chain(
                state
                    .mem_events
                    .iter()
                    .map(|e| e.0)
                    .filter(|&t| t > out_end),
            )
            .find(|&t| fits(t))
            .unwrap_or_else(|| {
                state
                    .mem_events
                    .last()
                    .map_or(out_end, |e| e.0.max(out_end))
            });
        let lane_s: f64 = page_ins.iter().map(|o| o.est_s).sum();
        let store_s: f64 = page_ins.iter().map(|o| store.read_s(o.io_bytes)).sum();
        let dev = occupy(&mut state.store_busy, t_in, store_s);
        state.mem_events.push((t_in, taken as i64));
        (t0, (t_in + lane_s).max(dev + store_s))
    }

    /// Victims for instance `idx` from the choice decided ahead ([`PlanContext::with_victims`]), Belady's rule for
    /// any room they leave missing. Returns the victims, a capacity problem (nothing can make room) and a deviation
    /// from the choice.
    fn fixed_victims(
        &self,
        fixed: &[Vec<BufferId>],
        state: &PlannerState,
        idx: usize,
        need: &Need,
    ) -> (Vec<BufferId>, Option<String>, Option<String>) {
        let inst = &self.instances[idx];
        let name = &self.system.components[inst.component].name;
        let buffer_name = |b: BufferId| {
            self.system.buffers().get(b.0).map_or_else(
                || format!("buffer {}", b.0),
                |(c, spec)| format!("{}.{}", self.system.components[*c].name, spec.name),
            )
        };
        let mut victims = Vec::new();
        let mut deviation = None;
        for &b in fixed.get(inst.slot).map_or(&[][..], Vec::as_slice) {
            if !state.resident.contains(&b) {
                // During the first repetition memory is still filling: a victim not loaded yet is no deviation.
                if inst.hyperperiod > 0 && deviation.is_none() {
                    deviation = Some(format!("planned victim {} is not resident", buffer_name(b)));
                }
            } else if !need.candidates.contains(&b) {
                deviation
                    .get_or_insert_with(|| format!("planned victim {} is in use", buffer_name(b)));
            } else {
                victims.push(b);
            }
        }
        let freed: u64 = victims.iter().map(|b| self.sizes[b.0]).sum();
        if freed >= need.shortfall_bytes {
            return (victims, None, deviation);
        }
        let rest = Need {
            missing: need.missing.clone(),
            shortfall_bytes: need.shortfall_bytes - freed,
            candidates: need
                .candidates
                .iter()
                .copied()
                .filter(|b| !victims.contains(b))
                .collect(),
        };
        match self.choose_victims(state, idx, &rest) {
            Some(extra) => {
                victims.extend(extra);
                (
                    victims,
                    None,
                    deviation.or_else(|| Some(format!("the planned victims do not make room for {name}"))),
                )
            }
            None => (
                need.candidates.clone(),
                Some(format!(
                    "{name} needs {} more bytes than the capacity leaves, and everything else resident is in use",
                    need.shortfall_bytes
                )),
                deviation,
            ),
        }
    }

    /// Plans every instance with the mode's own victim choice (or the one given by [`PlanContext::with_victims`]).
    pub fn plan(&self) -> Plan {
        let mut state = self.initial_state();
        let mut slots = Vec::with_capacity(self.instances.len());
        for idx in self.decision_order() {
            let need = self.need(&state, idx);
            let (victims, problem, deviation) = match &self.fixed {
                Some(fixed) => self.fixed_victims(fixed, &state, idx, &need),
                None => match self.choose_victims(&state, idx, &need) {
                    Some(v) => (v, None, None),
                    None => {
                        let inst = &self.instances[idx];
                        let name = &self.system.components[inst.component].name;
                        (
                            need.candidates.clone(),
                            Some(format!(
                                "{name} needs {} more bytes than the capacity leaves, and everything else resident is in use",
                                need.shortfall_bytes
                            )),
                            None,
                        )
                    }
                },
            };
            let mut sp = self.apply(&mut state, idx, &victims, problem);
            if let Some(d) = deviation {
                sp.problem.get_or_insert(d);
            }
            slots.push(sp);
        }
        Plan {
            mode: self.mode,
            hyperperiod_s: self.system.table.hyperperiod_s,
            hyperperiods: self
                .instances
                .iter()
                .map(|i| i.hyperperiod + 1)
                .max()
                .unwrap_or(0),
            slots,
        }
    }
}

/// Books `d` seconds of the store in the first free interval from `ready` on; returns its start.
fn occupy(busy: &mut Vec<(f64, f64)>, ready: f64, d: f64) -> f64 {
    if d <= 0.0 {
        return ready;
    }
    let mut t = ready;
    let mut at = busy.len();
    for (i, &(s, e)) in busy.iter().enumerate() {
        if e <= t {
            continue;
        }
        if s >= t + d {
            at = i;
            break;
        }
        t = t.max(e);
    }
    busy.insert(at, (t, t + d));
    t
}

fn issue_for(mode: Mode, inst: &Instance) -> f64 {
    let issue = match mode {
        Mode::Async => inst.prev_start_s,
        // Sync and demand page on the instance's own lane, in the gap before it or inside it.
        Mode::Sync => inst.prev_end_s,
        Mode::Demand => inst.start_s,
    };
    // Float noise around the table's start (a previous slot ending exactly at the hyperperiod's end) must not make
    // a paging a set-up one (issued before the table starts): decisions within a nanosecond are the same instant,
    // and the executor runs set-up paging, strictly negative issue times, before any other.
    if issue.abs() < 1e-9 {
        0.0
    } else {
        issue
    }
}

fn cmp_key(a: &(f64, f64, usize), b: &(f64, f64, usize)) -> std::cmp::Ordering {
    // Keys closer than a nanosecond are the same instant: float noise must not reorder them.
    let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
    let first = if close(a.0, b.0) {
        std::cmp::Ordering::Equal
    } else {
        a.0.total_cmp(&b.0)
    };
    let second = if close(a.1, b.1) {
        std::cmp::Ordering::Equal
    } else {
        a.1.total_cmp(&b.1)
    };
    first.then(second).then(a.2.cmp(&b.2))
}

/// Orders next uses with "never" as the furthest.
fn cmp_next(a: Option<(f64, f64, usize)>, b: Option<(f64, f64, usize)>) -> std::cmp::Ordering {
    match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (Some(x), Some(y)) => cmp_key(&x, &y),
    }
}

/// Plans `system` in `mode` over `hyperperiods` repetitions.
///
/// `Sync` follows the periodic victim choice of [`sync_victims`] for this table (so the table [`feasible_table`]
/// returns runs with the choice its analysis made), or Belady's rule when no periodic choice runs the table.
pub fn plan(system: &System, mode: Mode, hyperperiods: usize, bandwidths: Bandwidths) -> Plan {
    let ctx = PlanContext::new(system, mode, hyperperiods.max(1), bandwidths);
    match mode {
        Mode::Sync => match sync_victims(system, bandwidths) {
            Some(v) => ctx.with_victims(v).plan(),
            None => ctx.plan(),
        },
        Mode::Async | Mode::Demand => ctx.plan(),
    }
}

/// Repetitions planned to judge feasibility: the first fills memory, the later ones are the steady state.
pub const ANALYSIS_HYPERPERIODS: usize = 4;

/// Whether the steady state (every repetition after the first) runs as planned.
pub fn steady_feasible(system: &System, mode: Mode, bandwidths: Bandwidths) -> bool {
    if !table_fits(system) {
        return false;
    }
    steady_ok(&plan(system, mode, ANALYSIS_HYPERPERIODS, bandwidths))
}

/// Whether no two slots of one CPU overlap (stretching a table shorter than its slots makes them overlap).
fn table_fits(system: &System) -> bool {
    let t = &system.table;
    t.slots.iter().enumerate().all(|(i, a)| {
        a.end_s() <= t.hyperperiod_s + 1e-9
            && t.slots.iter().skip(i + 1).all(|b| {
                a.cpu != b.cpu || a.end_s() <= b.start_s + 1e-9 || b.end_s() <= a.start_s + 1e-9
            })
    })
}

/// The shortest hyperperiod (table stretched or shrunk uniformly, budgets kept) at which `mode` runs without a
/// problem, to 0.1 ms; `None` if not even 64 times the table's own period works.
pub fn min_feasible_hyperperiod(
    system: &System,
    mode: Mode,
    bandwidths: Bandwidths,
) -> Option<f64> {
    let h0 = system.table.hyperperiod_s;
    let ok = |h: f64| steady_feasible(&system.with_hyperperiod(h), mode, bandwidths);
    let mut hi = h0;
    let mut tries = 0;
    while !ok(hi) {
        hi *= 2.0;
        tries += 1;
        if tries > 6 {
            return None;
        }
    }
    let mut lo = hi / 2.0;
    if tries == 0 {
        // Feasible at its own period: look for a shorter one down to the busiest lane's total budget.
        lo = lane_busy_s(system).max(h0 * 1e-3);
        if ok(lo) {
            return Some(lo);
        }
    }
    while hi - lo > 1e-4 {
        let mid = (lo + hi) / 2.0;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

fn lane_busy_s(system: &System) -> f64 {
    let mut per_cpu: HashMap<usize, f64> = HashMap::new();
    for s in &system.table.slots {
        *per_cpu.entry(s.cpu).or_default() += s.length_s;
    }
    per_cpu.values().copied().fold(0.0, f64::max)
}

/// The smallest pool capacity (to 1 MiB) at which `mode` runs the table at its own period, and the
/// oversubscription that means: total demand / capacity − 1. `None` when even the full demand does not work.
pub fn max_oversubscription(
    system: &System,
    mode: Mode,
    bandwidths: Bandwidths,
) -> Option<(u64, f64)> {
    let demand = system.demand_bytes();
    let ok = |c: u64| steady_feasible(&system.with_capacity(c), mode, bandwidths);
    if demand == 0 {
        return Some((0, 0.0));
    }
    if !ok(demand) {
        return None;
    }
    let unit = 1u64 << 20;
    let (mut lo, mut hi) = (0u64, demand);
    while hi - lo > unit {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some((hi, demand as f64 / hi as f64 - 1.0))
}

/// The table `mode` needs to meet every deadline, with the shortest hyperperiod this planner finds:
/// - `Async` keeps the table's shape and stretches or shrinks it uniformly ([`min_feasible_hyperperiod`]);
/// - `Sync` repacks each CPU's slots back to back with a paging slot before every slot that pages (Fig. 7), for the
///   best periodic victim choice ([`sync_search`]); when the search is not exhaustive (a large system), Belady's
///   repacking below is tried too and the shorter kept;
/// - `Demand` repacks them with each slot's window widened by the paging it does at its start (Fig. 6): each slot's
///   most paging in the steady state of an LRU plan on a relaxed table.
///
/// Repacking keeps every slot's whole length (its budget) besides its paging, as the paper's Figs. 6 and 7 count
/// it: a component suspended for paging still gets its whole time slice (a slot whose planned work is longer gets
/// room for the work). If the repacked table still has a problem (the store is shared by all CPUs), it is stretched
/// in 1% steps, up to twice, until it has none. Only when no repacked table works is the uniform stretch used for
/// `Sync` and `Demand`. `None` when nothing works.
pub fn feasible_table(system: &System, mode: Mode, bandwidths: Bandwidths) -> Option<System> {
    let uniform =
        || min_feasible_hyperperiod(system, mode, bandwidths).map(|h| system.with_hyperperiod(h));
    let shorter = |a: Option<System>, b: Option<System>| match (a, b) {
        (Some(x), Some(y)) if y.table.hyperperiod_s < x.table.hyperperiod_s - EPS => Some(y),
        (Some(x), _) => Some(x),
        (None, y) => y,
    };
    match mode {
        Mode::Async => uniform(),
        Mode::Sync => {
            let search = sync_search(system, bandwidths);
            let mut best = search.best.map(|c| c.table);
            if !search.exhaustive || best.is_none() {
                best = shorter(best, belady_repack(system, mode, bandwidths));
            }
            best.or_else(uniform)
        }
        Mode::Demand => belady_repack(system, mode, bandwidths).or_else(uniform),
    }
}

/// The repacked table with each slot's paging taken as its most in the steady state of the mode's own plan
/// (Belady's rule or LRU) on a relaxed table: the table stretched uniformly until feasible, else eight times.
fn belady_repack(system: &System, mode: Mode, bandwidths: Bandwidths) -> Option<System> {
    let relaxed = min_feasible_hyperperiod(system, mode, bandwidths)
        .map(|h| system.with_hyperperiod(h))
        .unwrap_or_else(|| system.with_hyperperiod(system.table.hyperperiod_s * 8.0));
    let p = PlanContext::new(&relaxed, mode, ANALYSIS_HYPERPERIODS, bandwidths).plan();
    // The choices can repeat over several hyperperiods, so a fixed table gives each slot the most paging it does in
    // any steady-state repetition.
    let mut paging_s = vec![0.0f64; system.table.slots.len()];
    for s in p.slots.iter().filter(|s| s.instance.hyperperiod > 0) {
        paging_s[s.instance.slot] = paging_s[s.instance.slot].max(s.paging_s());
    }
    let (packed, _) = repack(system, mode, &paging_s);
    stretch_until(&packed, |s| steady_feasible(s, mode, bandwidths))
}

// ---------------------------------------------------------------------------------------------------------------
// Sync: the periodic victim choice.

/// DFS nodes (decisions and cover choices tried, over all starting sets) an exhaustive sync search may visit before
/// it settles for the best choice found so far (see [`sync_search`]).
pub const SYNC_SEARCH_NODES: usize = 200_000;

/// Complete choices an exhaustive sync search may judge (each plans the repacked table a few times) before it
/// settles for the best found so far.
pub const SYNC_SEARCH_EVALUATIONS: usize = 2_000;

/// Nodes and choices [`sync_victims`] may visit and plan (it runs for every table judged, so less than the
/// search).
pub const SYNC_PLAN_NODES: usize = 50_000;
/// See [`SYNC_PLAN_NODES`].
pub const SYNC_PLAN_EVALUATIONS: usize = 64;

/// Buffers the exhaustive sync search handles (one bit each); larger systems use Belady's rule.
const SYNC_MAX_BUFFERS: usize = 64;

const EPS: f64 = 1e-9;

/// One steady-state hyperperiod of sync decisions on a table, in decision order, with what each may evict.
#[derive(Debug, Clone)]
struct SyncWindow {
    /// Table slot of each decision.
    slot: Vec<usize>,
    /// CPU lane of each decision.
    cpu: Vec<usize>,
    /// The decision's own buffers.
    own: Vec<u64>,
    /// Buffers that may not be evicted at the decision (its own, those of slots running during its paging or
    /// starting before it, those of decided slots not finished).
    pinned: Vec<u64>,
    /// Buffers used by a later decision of the window.
    later_use: Vec<u64>,
    /// Decisions from each decision to each buffer's next use (cyclically; `usize::MAX`: never used).
    next_use: Vec<Vec<usize>>,
    /// Room for the paging slot: the slot's start minus the end of the previous slot on its lane.
    gap_s: Vec<f64>,
    sizes: Vec<u64>,
    /// Page-out and page-in time of each buffer (a read-only buffer's page-out writes nothing).
    out_s: Vec<f64>,
    in_s: Vec<f64>,
    /// Buffers some slot uses.
    used: u64,
    capacity: u64,
}

fn mask_of(bufs: &[BufferId]) -> u64 {
    bufs.iter().fold(0u64, |m, b| m | (1u64 << b.0))
}

fn bits(mask: u64) -> impl Iterator<Item = usize> {
    let mut rest = mask;
    std::iter::from_fn(move || {
        (rest != 0).then(|| {
            let b = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            b
        })
    })
}

impl SyncWindow {
    /// The window of `system`'s table; `None` when the system is too large for the exhaustive search or has no
    /// table.
    fn new(system: &System, bw: Bandwidths) -> Option<SyncWindow> {
        let bufs = system.buffers();
        let m = system.table.slots.len();
        if bufs.len() > SYNC_MAX_BUFFERS || m == 0 || system.table.hyperperiod_s <= 0.0 {
            return None;
        }
        // Five repetitions: the decisions from the third one's first on are a full period with its whole context.
        let ctx = PlanContext::new(system, Mode::Sync, 5, bw);
        let order = ctx.decision_order();
        let p0 = order
            .iter()
            .position(|&i| ctx.instances[i].hyperperiod == 2)?;
        let block = order.get(p0..p0 + m)?;
        let mut seen = vec![false; m];
        for &i in block {
            let s = ctx.instances[i].slot;
            if std::mem::replace(seen.get_mut(s)?, true) {
                return None;
            }
        }
        let mut w = SyncWindow {
            slot: Vec::with_capacity(m),
            cpu: Vec::with_capacity(m),
            own: Vec::with_capacity(m),
            pinned: Vec::with_capacity(m),
            later_use: vec![0; m],
            next_use: Vec::with_capacity(m),
            gap_s: Vec::with_capacity(m),
            sizes: bufs.iter().map(|(_, b)| b.size_bytes).collect(),
            out_s: bufs
                .iter()
                .map(|(_, b)| {
                    if b.read_only {
                        0.0
                    } else {
                        bw.write_s(b.size_bytes)
                    }
                })
                .collect(),
            in_s: bufs.iter().map(|(_, b)| bw.read_s(b.size_bytes)).collect(),
            used: 0,
            capacity: system.platform.capacity_bytes,
        };
        for (k, &idx) in block.iter().enumerate() {
            let inst = &ctx.instances[idx];
            let issue = inst.prev_end_s;
            let own = mask_of(&inst.buffers);
            let mut pinned = own;
            for &j in &order[..p0 + k] {
                let o = &ctx.instances[j];
                if o.end_s > issue + EPS {
                    pinned |= mask_of(&o.buffers);
                }
            }
            for o in &ctx.instances {
                if o.start_s < inst.start_s - EPS && o.end_s > issue + EPS {
                    pinned |= mask_of(&o.buffers);
                }
            }
            w.slot.push(inst.slot);
            w.cpu.push(inst.cpu);
            w.own.push(own);
            w.pinned.push(pinned);
            w.gap_s.push(inst.start_s - inst.prev_end_s);
            w.used |= own;
        }
        for k in (0..m.saturating_sub(1)).rev() {
            w.later_use[k] = w.later_use[k + 1] | w.own[k + 1];
        }
        for k in 0..m {
            let dist = (0..bufs.len())
                .map(|b| {
                    (1..=m)
                        .find(|d| w.own[(k + d) % m] & (1u64 << b) != 0)
                        .unwrap_or(usize::MAX)
                })
                .collect();
            w.next_use.push(dist);
        }
        Some(w)
    }

    fn len(&self) -> usize {
        self.slot.len()
    }

    fn bytes(&self, mask: u64) -> u64 {
        bits(mask).map(|b| self.sizes[b]).sum()
    }

    fn paging_s(&self, victims: u64, missing: u64) -> f64 {
        bits(victims).map(|b| self.out_s[b]).sum::<f64>()
            + bits(missing).map(|b| self.in_s[b]).sum::<f64>()
    }

    /// Whether `victims` is a minimal cover of `short` bytes: enough, and none of them superfluous.
    fn minimal_cover(&self, victims: u64, short: u64) -> bool {
        let freed = self.bytes(victims);
        freed >= short && bits(victims).all(|b| freed - self.sizes[b] < short)
    }

    /// The minimal covers of `short` bytes among `cands` at decision `k`: cheapest page-outs first, then (Belady's
    /// rule) those whose buffers are next used furthest ahead.
    fn covers(&self, k: usize, cands: u64, short: u64, nodes: &mut usize) -> Vec<u64> {
        if short == 0 {
            return vec![0];
        }
        let items: Vec<usize> = bits(cands).collect();
        let mut rest = vec![0u64; items.len() + 1];
        for i in (0..items.len()).rev() {
            rest[i] = rest[i + 1] + self.sizes[items[i]];
        }
        let mut out = Vec::new();
        let mut stack = vec![(0usize, 0u64, 0u64)];
        while let Some((i, chosen, sum)) = stack.pop() {
            *nodes += 1;
            if sum >= short {
                if self.minimal_cover(chosen, short) {
                    out.push(chosen);
                }
                continue;
            }
            if i == items.len() || sum + rest[i] < short {
                continue;
            }
            stack.push((i + 1, chosen, sum));
            stack.push((
                i + 1,
                chosen | (1u64 << items[i]),
                sum + self.sizes[items[i]],
            ));
        }
        let soonest = |c: u64| bits(c).map(|b| self.next_use[k][b]).min().unwrap_or(0);
        out.sort_by(|&a, &b| {
            let (ca, cb) = (self.paging_s(a, 0), self.paging_s(b, 0));
            ca.total_cmp(&cb)
                .then(soonest(b).cmp(&soonest(a)))
                .then(a.cmp(&b))
        });
        out
    }

    /// Checks that `victims` (per table slot) is a periodic choice on this window: starting from the resident set
    /// it implies (a buffer is resident at the window's start when its last event in the window is a use, not an
    /// eviction), every decision evicts resident buffers it may evict, as few as cover its shortfall (a minimal
    /// cover), and the window ends where it started. Returns each table slot's paging time.
    fn cycle(&self, victims: &[Vec<BufferId>]) -> Option<Vec<f64>> {
        let m = self.len();
        if victims.len() != m {
            return None;
        }
        let nb = self.sizes.len();
        if victims.iter().flatten().any(|b| b.0 >= nb) {
            return None;
        }
        let vm: Vec<u64> = self.slot.iter().map(|&s| mask_of(&victims[s])).collect();
        let mut r0 = 0u64;
        for b in 0..nb {
            let bit = 1u64 << b;
            let mut status = false;
            for (v, own) in vm.iter().zip(&self.own) {
                if v & bit != 0 {
                    status = false;
                }
                if own & bit != 0 {
                    status = true;
                }
            }
            if status {
                r0 |= bit;
            }
        }
        if self.bytes(r0) > self.capacity {
            return None;
        }
        let mut paging = vec![0.0; m];
        let mut res = r0;
        for k in 0..m {
            let missing = self.own[k] & !res;
            let free = self.capacity.saturating_sub(self.bytes(res));
            let short = self.bytes(missing).saturating_sub(free);
            let cands = res & !self.pinned[k];
            if vm[k] & !cands != 0 || !self.minimal_cover(vm[k], short) {
                return None;
            }
            res = (res & !vm[k]) | missing;
            paging[self.slot[k]] = self.paging_s(vm[k], missing);
        }
        (res == r0).then_some(paging)
    }
}

/// The depth-first search over periodic choices: for each starting resident set, each decision of the window
/// branches on the minimal covers of its shortfall; a branch whose lanes already add up to the bound is cut.
struct SyncDfs<'a> {
    w: &'a SyncWindow,
    /// Lane index of each decision.
    lane: Vec<usize>,
    /// Per lane, the slots' lengths (or works, when longer).
    base: Vec<f64>,
    /// Per lane, the paging decided so far.
    extra: Vec<f64>,
    victims: Vec<u64>,
    paging: Vec<f64>,
    r0: u64,
    /// Cut branches whose paging does not fit the gap before its slot (planning a table as it is).
    gap_fit: bool,
    bound: f64,
    nodes: usize,
    budget: usize,
    /// Complete choices judged (each plans the table a few times), and how many may be.
    evaluations: usize,
    evaluation_budget: usize,
    out_of_budget: bool,
    /// Per starting set, whether a state can still close the window.
    closing: HashMap<(usize, u64), bool>,
}

impl<'a> SyncDfs<'a> {
    fn new(
        w: &'a SyncWindow,
        system: &System,
        gap_fit: bool,
        budget: usize,
        evaluation_budget: usize,
    ) -> Self {
        let mut cpus: Vec<usize> = w.cpu.clone();
        cpus.sort_unstable();
        cpus.dedup();
        let lane: Vec<usize> = w
            .cpu
            .iter()
            .map(|c| cpus.binary_search(c).unwrap_or(0))
            .collect();
        let mut base = vec![0.0; cpus.len()];
        for (k, &s) in w.slot.iter().enumerate() {
            let slot = &system.table.slots[s];
            let work = system
                .components
                .get(slot.component)
                .map_or(0.0, |c| c.work.compute_s());
            base[lane[k]] += slot.length_s.max(work);
        }
        SyncDfs {
            w,
            lane,
            extra: vec![0.0; base.len()],
            base,
            victims: vec![0; w.len()],
            paging: vec![0.0; w.len()],
            r0: 0,
            gap_fit,
            bound: f64::INFINITY,
            nodes: 0,
            budget,
            evaluations: 0,
            evaluation_budget,
            out_of_budget: false,
            closing: HashMap::new(),
        }
    }

    /// The longest lane with the paging decided so far: a lower bound of any completion's repacked period.
    fn packed_s(&self) -> f64 {
        self.base
            .iter()
            .zip(&self.extra)
            .map(|(b, e)| b + e)
            .fold(0.0, f64::max)
    }

    /// The victims of the current leaf per table slot.
    fn victims_by_slot(&self) -> Vec<Vec<BufferId>> {
        let mut v = vec![Vec::new(); self.w.len()];
        for (k, &s) in self.w.slot.iter().enumerate() {
            v[s] = bits(self.victims[k]).map(BufferId).collect();
        }
        v
    }

    /// Runs the search; `leaf` sees each complete periodic choice whose packed period is under the bound and
    /// returns the new bound when the choice improves on it.
    fn run(&mut self, leaf: &mut dyn FnMut(&SyncDfs<'_>) -> Option<f64>) {
        let w = self.w;
        let m = w.len();
        let largest = bits(w.used).map(|b| w.sizes[b]).max().unwrap_or(0);
        // Buffers no decision after their last use may evict: resident at the window's end, so at its start.
        let mut forced = 0u64;
        for b in bits(w.used) {
            let bit = 1u64 << b;
            let last = (0..m).rev().find(|&k| w.own[k] & bit != 0).unwrap_or(0);
            if (last + 1..m).all(|k| w.pinned[k] & bit != 0) {
                forced |= bit;
            }
        }
        // Starting sets, those keeping more (higher bits) first. After a decision that evicts, less memory is free
        // than its smallest victim (a minimal cover), and decisions that do not evict only fill memory: so a
        // cycle that evicts at all starts with less than the largest buffer free, and one that does not keeps
        // every buffer it uses.
        let mut r = w.used;
        loop {
            if self.out_of_budget {
                return;
            }
            let bytes = w.bytes(r);
            let full = r == w.used || w.capacity - bytes.min(w.capacity) < largest;
            if bytes <= w.capacity && full && r & forced == forced {
                self.r0 = r;
                self.closing.clear();
                self.dfs(0, r, leaf);
            }
            if r == 0 {
                break;
            }
            r = (r - 1) & w.used;
        }
    }

    /// The decision's shortfall and the buffers it may evict, in state `res`.
    fn options(&self, k: usize, res: u64) -> (u64, u64, u64) {
        let w = self.w;
        let missing = w.own[k] & !res;
        let free = w.capacity.saturating_sub(w.bytes(res));
        let short = w.bytes(missing).saturating_sub(free);
        // A buffer resident at the start must not be evicted after its last use, or the window cannot close.
        let cands = res & !w.pinned[k] & !(self.r0 & !w.later_use[k]);
        (missing, short, cands)
    }

    /// Whether some choice of the decisions from `k` on, in state `res`, closes the window (memoised per starting
    /// set; the bound does not matter here).
    fn closes(&mut self, k: usize, res: u64) -> bool {
        let w = self.w;
        if k == w.len() {
            return res == self.r0;
        }
        if let Some(&c) = self.closing.get(&(k, res)) {
            return c;
        }
        self.nodes += 1;
        let (missing, short, cands) = self.options(k, res);
        let mut ok = false;
        for cover in w.covers(k, cands, short, &mut self.nodes) {
            if self.gap_fit && w.paging_s(cover, missing) > w.gap_s[k] + EPS {
                continue;
            }
            if self.closes(k + 1, (res & !cover) | missing) {
                ok = true;
                break;
            }
        }
        self.closing.insert((k, res), ok);
        ok
    }

    fn dfs(&mut self, k: usize, res: u64, leaf: &mut dyn FnMut(&SyncDfs<'_>) -> Option<f64>) {
        let w = self.w;
        self.nodes += 1;
        if self.nodes > self.budget || self.evaluations >= self.evaluation_budget {
            self.out_of_budget = true;
            return;
        }
        if k == w.len() {
            if res == self.r0 && self.packed_s() < self.bound - EPS {
                self.evaluations += 1;
                if let Some(b) = leaf(self) {
                    self.bound = self.bound.min(b);
                }
            }
            return;
        }
        let (missing, short, cands) = self.options(k, res);
        for cover in w.covers(k, cands, short, &mut self.nodes) {
            if self.out_of_budget {
                return;
            }
            let p = w.paging_s(cover, missing);
            if self.gap_fit && p > w.gap_s[k] + EPS {
                continue;
            }
            let next = (res & !cover) | missing;
            let lane = self.lane[k];
            self.extra[lane] += p;
            if self.packed_s() < self.bound - EPS && self.closes(k + 1, next) {
                self.victims[k] = cover;
                self.paging[k] = p;
                self.dfs(k + 1, next, leaf);
            }
            self.extra[lane] -= p;
        }
        self.victims[k] = 0;
        self.paging[k] = 0.0;
    }
}

/// The outcome of [`sync_search`].
#[derive(Debug, Clone)]
pub struct SyncSearch {
    /// The best choice found: the victims per slot of `table`, and the repacked table.
    pub best: Option<SyncChoice>,
    /// Whether the search covered every periodic choice (then `best` is optimal among them); false when the
    /// system has more than 64 buffers or the search used its [`SYNC_SEARCH_NODES`] nodes.
    pub exhaustive: bool,
    /// DFS nodes visited.
    pub nodes: usize,
}

/// A periodic sync victim choice and the table it gives.
#[derive(Debug, Clone)]
pub struct SyncChoice {
    /// The repacked (and, if the store needed it, stretched) table.
    pub table: System,
    /// Victims per slot of `table` (indexed like `table.table.slots`), paged out in the paging slot before it.
    pub victims: Vec<Vec<BufferId>>,
    /// Each slot's paging time, seconds (indexed like `table.table.slots`).
    pub paging_s: Vec<f64>,
}

/// Repacks each CPU's slots back to back in their order, with `paging_s[i]` before slot `i` (sync) or added to its
/// window (demand); a slot whose work is longer than it gets room for the work. Returns the table and, per old slot
/// index, its index in the new table.
fn repack(system: &System, mode: Mode, paging_s: &[f64]) -> (System, Vec<usize>) {
    let mut packed = system.clone();
    let mut lane_end: HashMap<usize, f64> = HashMap::new();
    let mut order: Vec<usize> = (0..system.table.slots.len()).collect();
    order.sort_by(|&a, &b| {
        system.table.slots[a]
            .start_s
            .total_cmp(&system.table.slots[b].start_s)
    });
    for i in order {
        let work = system
            .components
            .get(system.table.slots[i].component)
            .map_or(0.0, |c| c.work.compute_s());
        let slot = &mut packed.table.slots[i];
        let room = slot.length_s.max(work);
        let t = lane_end.entry(slot.cpu).or_insert(0.0);
        let p = paging_s.get(i).copied().unwrap_or(0.0);
        match mode {
            Mode::Sync => {
                slot.start_s = *t + p;
                *t = slot.start_s + room;
            }
            _ => {
                slot.start_s = *t;
                *t += p + room;
            }
        }
    }
    packed.table.hyperperiod_s = lane_end.values().copied().fold(0.0, f64::max).max(1e-6);
    let mut idx: Vec<usize> = (0..packed.table.slots.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (&packed.table.slots[a], &packed.table.slots[b]);
        x.start_s.total_cmp(&y.start_s).then(x.cpu.cmp(&y.cpu))
    });
    let mut new_index = vec![0; idx.len()];
    for (pos, &old) in idx.iter().enumerate() {
        new_index[old] = pos;
    }
    packed.table.slots = idx.iter().map(|&i| packed.table.slots[i].clone()).collect();
    (packed, new_index)
}

/// Stretches `packed` until `ok` accepts it: as it is, else in 1% steps up to twice its period (tried first at
/// twice: if that fails too, nothing is). Returns the accepted table.
fn stretch_until(packed: &System, ok: impl Fn(&System) -> bool) -> Option<System> {
    let base = packed.table.hyperperiod_s;
    let at = |k: u32| packed.with_hyperperiod(base * (1.0 + f64::from(k) / 100.0));
    let first = at(0);
    if ok(&first) {
        return Some(first);
    }
    let last = at(100);
    if !ok(&last) {
        return None;
    }
    (1..100).map(at).find(|s| ok(s)).or(Some(last))
}

/// Whether the steady state (every repetition after the first) of `p` has no problem.
fn steady_ok(p: &Plan) -> bool {
    p.slots
        .iter()
        .filter(|s| s.instance.hyperperiod > 0)
        .all(|s| s.problem.is_none())
}

/// Whether `victims` (per slot of `system`'s table) is a periodic choice on this table and the plan that follows
/// it runs the steady state without a problem.
fn fixed_ok(system: &System, w: &SyncWindow, victims: &[Vec<BufferId>], bw: Bandwidths) -> bool {
    table_fits(system)
        && w.cycle(victims).is_some()
        && steady_ok(
            &PlanContext::new(system, Mode::Sync, ANALYSIS_HYPERPERIODS, bw)
                .with_victims(victims.to_vec())
                .plan(),
        )
}

/// The sync period of one periodic choice `victims` (per slot of `system`'s table), as the search judges it:
/// `None` unless it is a periodic choice on the table; else the table repacked with each slot's paging slot before
/// it, stretched until the plan following the choice runs without a problem.
fn evaluate_sync(
    system: &System,
    w: &SyncWindow,
    victims: &[Vec<BufferId>],
    bw: Bandwidths,
) -> Option<SyncChoice> {
    let mut paging = w.cycle(victims)?;
    let moved_to = |new_index: &[usize]| {
        let mut moved = vec![Vec::new(); victims.len()];
        for (old, &new) in new_index.iter().enumerate() {
            moved[new] = victims[old].clone();
        }
        moved
    };
    // On the repacked table the decisions may come in another order across CPUs, and a slot may then page more
    // than on the table as given: repack again with the larger amounts, a few times, until they hold.
    let (mut packed, mut new_index) = repack(system, Mode::Sync, &paging);
    for _ in 0..4 {
        let Some(there) =
            SyncWindow::new(&packed, bw).and_then(|pw| pw.cycle(&moved_to(&new_index)))
        else {
            break;
        };
        let mut grew = false;
        for (old, &new) in new_index.iter().enumerate() {
            if there[new] > paging[old] + EPS {
                paging[old] = there[new];
                grew = true;
            }
        }
        if !grew {
            break;
        }
        (packed, new_index) = repack(system, Mode::Sync, &paging);
    }
    let moved = moved_to(&new_index);
    let mut moved_paging = vec![0.0; victims.len()];
    for (old, &new) in new_index.iter().enumerate() {
        moved_paging[new] = paging[old];
    }
    let table = stretch_until(&packed, |t| {
        SyncWindow::new(t, bw).is_some_and(|tw| fixed_ok(t, &tw, &moved, bw))
    })?;
    Some(SyncChoice {
        table,
        victims: moved,
        paging_s: moved_paging,
    })
}

/// The repacked sync period of one periodic victim choice (`victims[i]`: what the paging slot before table slot
/// `i` pages out; see [`sync_search`]), or `None` when it is not a periodic choice of this table or no stretch up
/// to twice the packed period runs it. This is the function the search minimises; the brute-force test calls it on
/// every choice.
pub fn sync_period_with(system: &System, victims: &[Vec<BufferId>], bw: Bandwidths) -> Option<f64> {
    let w = SyncWindow::new(system, bw)?;
    evaluate_sync(system, &w, victims, bw).map(|c| c.table.table.hyperperiod_s)
}

/// The shortest sync table over periodic victim choices (Fig. 7).
///
/// A periodic choice says, for each slot of the table, which buffers the paging slot before it pages out; it is
/// the same every hyperperiod, so the steady state repeats every hyperperiod (Belady's rule, optimal in page-outs,
/// can cycle over several, and a fixed table must then budget each slot's worst). Victims are chosen only by the
/// slot that needs the room, as few as cover its shortfall (a minimal cover), among the resident buffers no slot
/// running during the paging, starting before the slot, or decided and not finished holds. Each choice is judged
/// by the table it gives: each CPU's slots packed back to back with a paging slot before every slot that pages,
/// then stretched in 1% steps (up to twice) while the plan following the choice has a problem (the shared store not
/// keeping up). The search is exhaustive: a depth-first search over the starting resident set and each decision's
/// minimal covers, cutting branches whose lanes already reach the best period found (the packed length is a lower
/// bound of the stretched one). It gives up after [`SYNC_SEARCH_NODES`] nodes, or does not start for systems with
/// more than 64 buffers; `exhaustive` says so, and [`feasible_table`] then also tries Belady's repacking.
pub fn sync_search(system: &System, bw: Bandwidths) -> SyncSearch {
    let Some(w) = SyncWindow::new(system, bw) else {
        return SyncSearch {
            best: None,
            exhaustive: false,
            nodes: 0,
        };
    };
    let mut best: Option<SyncChoice> = None;
    let mut dfs = SyncDfs::new(
        &w,
        system,
        false,
        SYNC_SEARCH_NODES,
        SYNC_SEARCH_EVALUATIONS,
    );
    dfs.run(&mut |d: &SyncDfs<'_>| {
        let choice = evaluate_sync(system, &w, &d.victims_by_slot(), bw)?;
        let p = choice.table.table.hyperperiod_s;
        let better = best
            .as_ref()
            .is_none_or(|b| p < b.table.table.hyperperiod_s - EPS);
        better.then(|| {
            best = Some(choice);
            p
        })
    });
    let (exhaustive, nodes) = (!dfs.out_of_budget, dfs.nodes);
    // The table may run with other choices as good as this one (ties); report the one its plan follows
    // ([`sync_victims`]), so what the analysis says is what `plan` (and the executor) does.
    if let Some(b) = &mut best {
        let followed = sync_victims(&b.table, bw).and_then(|v| {
            let paging = SyncWindow::new(&b.table, bw)?.cycle(&v)?;
            Some((v, paging))
        });
        if let Some((v, paging)) = followed {
            b.victims = v;
            b.paging_s = paging;
        }
    }
    SyncSearch {
        best,
        exhaustive,
        nodes,
    }
}

/// The periodic choice the sync plan of `system`'s table follows as it is (no repacking): the first, in the search
/// order of [`sync_search`] (cheapest page-outs first, then Belady's furthest next use), whose paging fits the gap
/// before each slot and whose plan runs the steady state without a problem. `None` when none does, or the search is
/// not possible or gives up ([`SYNC_PLAN_NODES`] nodes, [`SYNC_PLAN_EVALUATIONS`] choices planned) without one:
/// the plan then uses Belady's rule.
pub fn sync_victims(system: &System, bw: Bandwidths) -> Option<Vec<Vec<BufferId>>> {
    let w = SyncWindow::new(system, bw)?;
    // A work that does not fit before the next slot on its CPU fails every choice.
    let work_fits = instances(system, 1).iter().all(|i| {
        let work = system
            .components
            .get(i.component)
            .map_or(0.0, |c| c.work.compute_s());
        i.start_s + work <= i.deadline_s + EPS
    });
    if !table_fits(system) || !work_fits {
        return None;
    }
    let mut found: Option<Vec<Vec<BufferId>>> = None;
    let mut dfs = SyncDfs::new(&w, system, true, SYNC_PLAN_NODES, SYNC_PLAN_EVALUATIONS);
    dfs.run(&mut |d: &SyncDfs<'_>| {
        let v = d.victims_by_slot();
        fixed_ok(system, &w, &v, bw).then(|| {
            found = Some(v);
            // The first will do: cut everything else.
            f64::NEG_INFINITY
        })
    });
    found
}
