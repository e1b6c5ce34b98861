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
    /// Store time the operations take at the plan's bandwidths, seconds.
    pub paging_s: f64,
    /// Time between the paging's issue and the slot's start, seconds.
    pub available_s: f64,
    /// Why the slot cannot run as planned; None when it can.
    pub problem: Option<String>,
}

/// The analysis of one paging mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeAnalysis {
    /// The table's own period, seconds.
    pub target_period_s: f64,
    /// Whether the steady state runs at that period.
    pub feasible_at_target: bool,
    /// The shortest period the planner finds feasible (async: the table stretched uniformly; sync and demand:
    /// repacked); None when none is found.
    pub min_feasible_period_s: Option<f64>,
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
        ModeAnalysis {
            target_period_s: system.table.hyperperiod_s,
            feasible_at_target: plan::steady_feasible(system, mode, bw),
            min_feasible_period_s: feasible_table(system, mode, bw).map(|s| s.table.hyperperiod_s),
            page_outs_per_hyperperiod: p.steady_page_outs_per_hyperperiod(),
            bytes_paged_per_hyperperiod: p.steady_io_bytes_per_hyperperiod(),
            min_capacity_bytes: ov.map(|o| o.0),
            max_oversubscription: ov.map(|o| o.1),
            problems,
            slots: Some(steady_slots(system, &p)),
        }
    }
}

/// The analysis of a configuration in several modes at the store's bandwidths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanDoc {
    /// The store's page-in bandwidth the plans assume, bytes per second.
    pub read_bytes_per_s: f64,
    /// The store's page-out bandwidth the plans assume, bytes per second.
    pub write_bytes_per_s: f64,
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
        PlanDoc {
            read_bytes_per_s: speed.bw.read_bytes_per_s,
            write_bytes_per_s: speed.bw.write_bytes_per_s,
            bandwidth_source: Some(speed.source),
            demand_bytes: system.demand_bytes(),
            capacity_bytes: system.platform.capacity_bytes,
            hyperperiod_s: Some(system.table.hyperperiod_s),
            modes: modes
                .iter()
                .map(|&m| (m.name(), ModeAnalysis::new(system, m, speed.bw)))
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
