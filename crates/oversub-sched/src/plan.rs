//! The foreknowledge planner: which buffers to page out and in before each slot, when, and whether it fits.
//!
//! The table is unrolled over `hyperperiods` repetitions. Slot instances are decided in the order their paging is
//! issued. Before an instance starts, its buffers must be resident; when they do not fit, victims are chosen among
//! resident buffers nobody uses meanwhile:
//! - `Async` and `Sync` know the table, so they evict the buffer whose next use lies furthest ahead (Belady's rule,
//!   optimal in the number of page-outs for equal sizes), preferring read-only buffers with a stored copy on ties
//!   since their page-out writes nothing. `Async` issues the paging at the start of the previous slot on the same
//!   CPU, so it overlaps that slot's work (Fig. 8); `Sync` runs it as a paging slot right before the instance
//!   (Fig. 7).
//! - `Demand` knows nothing ahead: at the instance's start it evicts the least recently used buffers and pages
//!   synchronously inside the slot (Fig. 6).
//!
//! The store is one queue: operations run one after another at the given bandwidths, page-outs before the page-ins
//! that need their memory, so the capacity is never exceeded at any instant.

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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidths {
    /// Page-in speed.
    pub read_bytes_per_s: f64,
    /// Page-out speed.
    pub write_bytes_per_s: f64,
}

impl Bandwidths {
    fn read_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.read_bytes_per_s.max(1.0)
    }

    fn write_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.write_bytes_per_s.max(1.0)
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
    bandwidths: Bandwidths,
    mode: Mode,
    /// Uses after this time count as never (a finite sequence); `None`: the table repeats forever.
    horizon_s: Option<f64>,
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
            mode,
            horizon_s: None,
        }
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

    /// A fresh state: nothing resident, nothing stored.
    pub fn initial_state(&self) -> PlannerState {
        PlannerState {
            resident: BTreeSet::new(),
            stored: BTreeSet::new(),
            last_use_s: HashMap::new(),
            pending: Vec::new(),
            store_free_s: f64::NEG_INFINITY,
        }
    }

    fn used_bytes(&self, state: &PlannerState) -> u64 {
        state.resident.iter().map(|b| self.sizes[b.0]).sum()
    }

    /// What instance `idx` needs given `state`.
    pub fn need(&self, state: &PlannerState, idx: usize) -> Need {
        let inst = &self.instances[idx];
        let issue = self.issue_s(inst);
        let missing: Vec<BufferId> = inst
            .buffers
            .iter()
            .copied()
            .filter(|b| !state.resident.contains(b))
            .collect();
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
        let bw = self.bandwidths;
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
        let missing: Vec<BufferId> = inst
            .buffers
            .iter()
            .copied()
            .filter(|b| !state.resident.contains(b))
            .collect();
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
        let (paging_start, work_start) = if issue < 0.0 || no_ops {
            // Nothing to page, or issued before the table starts (done during set-up, however long that takes).
            (issue.min(inst.start_s), inst.start_s)
        } else {
            match self.mode {
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
            }
        };
        let paging_end = paging_start + paging_s;
        if !no_ops && issue >= 0.0 {
            state.store_free_s = paging_end;
        }
        let completion = work_start + work_s;
        if completion > inst.deadline_s + eps && problem.is_none() {
            problem = Some(format!(
                "work completes {:.1} ms after its deadline ({:.1} ms of paging in the way)",
                (completion - inst.deadline_s) * 1e3,
                paging_s * 1e3
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

    /// Plans every instance with the mode's own victim choice.
    pub fn plan(&self) -> Plan {
        let mut state = self.initial_state();
        let mut slots = Vec::with_capacity(self.instances.len());
        for idx in self.decision_order() {
            let need = self.need(&state, idx);
            let (victims, problem) = match self.choose_victims(&state, idx, &need) {
                Some(v) => (v, None),
                None => {
                    let inst = &self.instances[idx];
                    let name = &self.system.components[inst.component].name;
                    (
                        need.candidates.clone(),
                        Some(format!(
                            "{name} needs {} more bytes than the capacity leaves, and everything else resident is in use",
                            need.shortfall_bytes
                        )),
                    )
                }
            };
            slots.push(self.apply(&mut state, idx, &victims, problem));
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

fn issue_for(mode: Mode, inst: &Instance) -> f64 {
    match mode {
        Mode::Async => inst.prev_start_s,
        // Sync and demand page on the instance's own lane, in the gap before it or inside it.
        Mode::Sync => inst.prev_end_s,
        Mode::Demand => inst.start_s,
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
pub fn plan(system: &System, mode: Mode, hyperperiods: usize, bandwidths: Bandwidths) -> Plan {
    PlanContext::new(system, mode, hyperperiods.max(1), bandwidths).plan()
}

/// Repetitions planned to judge feasibility: the first fills memory, the later ones are the steady state.
pub const ANALYSIS_HYPERPERIODS: usize = 4;

/// Whether the steady state (every repetition after the first) runs as planned.
pub fn steady_feasible(system: &System, mode: Mode, bandwidths: Bandwidths) -> bool {
    if !table_fits(system) {
        return false;
    }
    let p = plan(system, mode, ANALYSIS_HYPERPERIODS, bandwidths);
    p.slots
        .iter()
        .filter(|s| s.instance.hyperperiod > 0)
        .all(|s| s.problem.is_none())
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
/// - `Sync` repacks each CPU's slots back to back with a paging slot before every slot that pages (Fig. 7);
/// - `Demand` repacks them with each slot's window widened by the paging it does at its start (Fig. 6).
///
/// Paging amounts are each slot's most in the steady state of a plan on a relaxed table; if the repacked table still has a
/// problem (the store is shared by all CPUs), it is stretched until it has none. `None` when nothing works.
pub fn feasible_table(system: &System, mode: Mode, bandwidths: Bandwidths) -> Option<System> {
    let uniform =
        min_feasible_hyperperiod(system, mode, bandwidths).map(|h| system.with_hyperperiod(h));
    if mode == Mode::Async {
        return uniform;
    }
    let relaxed = uniform
        .clone()
        .unwrap_or_else(|| system.with_hyperperiod(system.table.hyperperiod_s * 8.0));
    let p = plan(&relaxed, mode, ANALYSIS_HYPERPERIODS, bandwidths);
    // Belady's choices can repeat over several hyperperiods, so a fixed table gives each slot the most paging it
    // does in any steady-state repetition.
    let mut paging_s = vec![0.0f64; system.table.slots.len()];
    for s in p.slots.iter().filter(|s| s.instance.hyperperiod > 0) {
        paging_s[s.instance.slot] = paging_s[s.instance.slot].max(s.paging_s());
    }
    let mut packed = system.clone();
    let mut lane_end: HashMap<usize, f64> = HashMap::new();
    let mut order: Vec<usize> = (0..system.table.slots.len()).collect();
    order.sort_by(|&a, &b| {
        system.table.slots[a]
            .start_s
            .total_cmp(&system.table.slots[b].start_s)
    });
    for i in order {
        let slot = &mut packed.table.slots[i];
        let t = lane_end.entry(slot.cpu).or_insert(0.0);
        match mode {
            Mode::Sync => {
                slot.start_s = *t + paging_s[i];
                *t = slot.start_s + slot.length_s;
            }
            _ => {
                slot.start_s = *t;
                *t += paging_s[i] + slot.length_s;
            }
        }
    }
    packed.table.hyperperiod_s = lane_end.values().copied().fold(0.0, f64::max).max(1e-6);
    packed
        .table
        .slots
        .sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.cpu.cmp(&b.cpu)));
    // Stretch in 1% steps until the shared store keeps up, up to twice the packed length.
    let base = packed.table.hyperperiod_s;
    let repacked = (0..=100)
        .map(|k| packed.with_hyperperiod(base * (1.0 + k as f64 / 100.0)))
        .find(|s| steady_feasible(s, mode, bandwidths));
    match (repacked, uniform) {
        (Some(r), Some(u)) if u.table.hyperperiod_s < r.table.hyperperiod_s => Some(u),
        (Some(r), _) => Some(r),
        (None, u) => u,
    }
}
