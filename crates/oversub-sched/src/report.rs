//! The planner's analysis of a configuration as serializable documents: what `oversub plan --json` writes and the
//! Python bindings' `plan_schedule` returns.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::System;
use crate::plan::{self, feasible_table, max_oversubscription, Bandwidths, Mode, Plan};
use crate::setup::{BandwidthSource, StoreSpeed};

/// What one slot of the steady state pages, and the time it has for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotPaging {
    /// The component the slot runs.
    pub component: String,
    /// The CPU it runs on.
    pub cpu: usize,
    /// The GPU it holds, if any.
    pub gpu: Option<usize>,
    /// Offset of the slot in the hyperperiod, seconds.
    pub start_s: f64,
    /// Page-outs issued for the slot.
    pub page_outs: usize,
    /// Page-ins issued for the slot.
    pub page_ins: usize,
    /// Bytes that cross to or from the store.
    pub io_bytes: u64,
    /// Time the operations take at the speeds the mode is priced at (`ModeAnalysis::priced_at`), seconds.
    pub paging_s: f64,
    /// Time between the paging's issue and the slot's start, seconds.
    pub available_s: f64,
    /// Why the slot cannot run as planned; None when it can.
    pub problem: Option<String>,
}

/// The analysis of one paging mode.
///
/// With a work inflation (interference, Sec. III-D; [`PlanDoc::new_inflated`]) everything is analysed with every
/// work planned `work_inflation` times as long, and `feasible_at_target_uninflated` /
/// `min_feasible_period_uninflated_s` give the same two answers for the works as declared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeAnalysis {
    /// The table's own period, seconds.
    pub target_period_s: f64,
    /// The page-in speed this mode's paging was priced at, bytes per second.
    pub read_bytes_per_s: f64,
    /// The page-out speed this mode's paging was priced at, bytes per second.
    pub write_bytes_per_s: f64,
    /// Which speeds those are: "direct I/O", "measured demand paging" or "direct I/O (demand not measured)".
    pub priced_at: &'static str,
    /// Whether the steady state runs at that period (works inflated, if they are).
    pub feasible_at_target: bool,
    /// The same for the works as declared (equal to `feasible_at_target` without inflation).
    pub feasible_at_target_uninflated: bool,
    /// The shortest period the planner finds feasible (async: the table stretched uniformly; sync and demand:
    /// repacked); None when none is found. Works inflated, if they are.
    pub min_feasible_period_s: Option<f64>,
    /// The same for the works as declared (equal to `min_feasible_period_s` without inflation).
    pub min_feasible_period_uninflated_s: Option<f64>,
    /// Page-outs per hyperperiod in the steady state.
    pub page_outs_per_hyperperiod: usize,
    /// Bytes to or from the store per hyperperiod in the steady state.
    pub bytes_paged_per_hyperperiod: u64,
    /// The smallest capacity that still works; None when even the full demand does not.
    pub min_capacity_bytes: Option<u64>,
    /// The largest oversubscription that still works (demand / capacity - 1).
    pub max_oversubscription: Option<f64>,
    /// The steady state's problems, one line each.
    pub problems: Vec<String>,
    /// The steady-state paging per slot (the last hyperperiod analysed); left out of the document when None.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<Vec<SlotPaging>>,
}

/// A component's name, or `component N` for an index the system does not have.
fn component_name(system: &System, c: usize) -> String {
    system
        .components
        .get(c)
        .map_or_else(|| format!("component {c}"), |x| x.name.clone())
}

/// The last hyperperiod of `p`, a plan of `system`, slot by slot.
pub fn steady_slots(system: &System, p: &Plan) -> Vec<SlotPaging> {
    let last = p.hyperperiods.saturating_sub(1);
    let base = last as f64 * p.hyperperiod_s;
    p.slots
        .iter()
        .filter(|s| s.instance.hyperperiod == last)
        .map(|s| SlotPaging {
            component: component_name(system, s.instance.component),
            cpu: s.instance.cpu,
            gpu: s.instance.gpu,
            start_s: s.instance.start_s - base,
            page_outs: s.page_outs.len(),
            page_ins: s.page_ins.len(),
            io_bytes: s.ops().map(|o| o.io_bytes).sum(),
            // An empty sum is -0.0.
            paging_s: s.paging_s() + 0.0,
            available_s: s.instance.start_s - s.issue_s,
            problem: s.problem.clone(),
        })
        .collect()
}

impl ModeAnalysis {
    /// Plans `system` in `mode` at bandwidths `bw` over [`plan::ANALYSIS_HYPERPERIODS`] and analyses it, the
    /// per-slot paging included.
    pub fn new(system: &System, mode: Mode, bw: Bandwidths) -> Self {
        let p = plan::plan(system, mode, plan::ANALYSIS_HYPERPERIODS, bw);
        let mut problems: Vec<String> = p
            .slots
            .iter()
            .filter(|s| s.instance.hyperperiod > 0)
            .filter_map(|s| {
                s.problem.as_ref().map(|m| {
                    format!(
                        "{} at {:.1} ms (CPU {}): {m}",
                        component_name(system, s.instance.component),
                        (s.instance.start_s - s.instance.hyperperiod as f64 * p.hyperperiod_s)
                            * 1e3,
                        s.instance.cpu
                    )
                })
            })
            .collect();
        problems.dedup();
        let ov = max_oversubscription(system, mode, bw);
        let (read, write) = bw.priced(mode);
        let feasible = plan::steady_feasible(system, mode, bw);
        let min_period = feasible_table(system, mode, bw).map(|s| s.table.hyperperiod_s);
        ModeAnalysis {
            target_period_s: system.table.hyperperiod_s,
            read_bytes_per_s: read,
            write_bytes_per_s: write,
            priced_at: bw.pricing(mode).describe(),
            feasible_at_target: feasible,
            feasible_at_target_uninflated: feasible,
            min_feasible_period_s: min_period,
            min_feasible_period_uninflated_s: min_period,
            page_outs_per_hyperperiod: p.steady_page_outs_per_hyperperiod(),
            bytes_paged_per_hyperperiod: p.steady_io_bytes_per_hyperperiod(),
            min_capacity_bytes: ov.map(|o| o.0),
            max_oversubscription: ov.map(|o| o.1),
            problems,
            slots: Some(steady_slots(system, &p)),
        }
    }

    /// [`ModeAnalysis::new`] with every work planned `inflate` times as long ([`System::with_work_inflation`]);
    /// the uninflated feasibility and minimum period are filled in beside the inflated ones. `inflate` 1.0 is
    /// `new`.
    pub fn new_inflated(system: &System, mode: Mode, bw: Bandwidths, inflate: f64) -> Self {
        if inflate == 1.0 {
            return ModeAnalysis::new(system, mode, bw);
        }
        let mut a = ModeAnalysis::new(&system.with_work_inflation(inflate), mode, bw);
        a.feasible_at_target_uninflated = plan::steady_feasible(system, mode, bw);
        a.min_feasible_period_uninflated_s =
            feasible_table(system, mode, bw).map(|s| s.table.hyperperiod_s);
        a
    }
}

/// The analysis of a configuration in several modes at the store's bandwidths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanDoc {
    /// The store's page-in bandwidth with direct I/O the plans assume, bytes per second.
    pub read_bytes_per_s: f64,
    /// The store's page-out bandwidth with direct I/O the plans assume, bytes per second.
    pub write_bytes_per_s: f64,
    /// The page-in (fault-in) speed of demand paging, bytes per second; None: not measured (demand is then priced
    /// at the direct speeds; each mode's `priced_at` says).
    pub demand_read_bytes_per_s: Option<f64>,
    /// The page-out speed of demand paging, bytes per second; None: not measured.
    pub demand_write_bytes_per_s: Option<f64>,
    /// The factor every work was planned as taking longer by (interference, Sec. III-D); 1.0: none.
    pub work_inflation: f64,
    /// Where the bandwidths came from; left out of the document when None.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_source: Option<BandwidthSource>,
    /// All buffers' bytes.
    pub demand_bytes: u64,
    /// The platform's memory capacity.
    pub capacity_bytes: u64,
    /// The table's period, seconds; left out of the document when None.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperperiod_s: Option<f64>,
    /// Per mode name, its analysis.
    pub modes: BTreeMap<&'static str, ModeAnalysis>,
}

impl PlanDoc {
    /// Analyses `system` in each of `modes` at `speed` (everything filled in).
    pub fn new(system: &System, speed: StoreSpeed, modes: &[Mode]) -> Self {
        PlanDoc::new_inflated(system, speed, modes, 1.0)
    }

    /// Analyses `system` in each of `modes` at `speed` with every work planned `inflate` times as long (the
    /// interference of paging on the CPU tasks, Sec. III-D; `oversub bench interference` measures it; the caller
    /// checks it is finite and at least 1). Each mode carries the inflated and the uninflated feasibility and
    /// minimum period.
    pub fn new_inflated(system: &System, speed: StoreSpeed, modes: &[Mode], inflate: f64) -> Self {
        PlanDoc {
            read_bytes_per_s: speed.bw.read_bytes_per_s,
            write_bytes_per_s: speed.bw.write_bytes_per_s,
            demand_read_bytes_per_s: speed.bw.demand_read_bytes_per_s,
            demand_write_bytes_per_s: speed.bw.demand_write_bytes_per_s,
            work_inflation: inflate,
            bandwidth_source: Some(speed.source),
            demand_bytes: system.demand_bytes(),
            capacity_bytes: system.platform.capacity_bytes,
            hyperperiod_s: Some(system.table.hyperperiod_s),
            modes: modes
                .iter()
                .map(|&m| {
                    (
                        m.name(),
                        ModeAnalysis::new_inflated(system, m, speed.bw, inflate),
                    )
                })
                .collect(),
        }
    }

    /// The document as `oversub plan --json` writes it: without the bandwidths' source, the period and the
    /// per-slot paging.
    pub fn brief(mut self) -> Self {
        self.bandwidth_source = None;
        self.hyperperiod_s = None;
        for a in self.modes.values_mut() {
            a.slots = None;
        }
        self
    }
}
