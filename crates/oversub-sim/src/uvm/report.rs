//! A suite's results as serializable documents: what `oversub sim uvm --json` writes and the Python bindings'
//! `sim_uvm` returns.

use serde::{Deserialize, Serialize};

use super::cost::CostModel;
use super::policy::{Policy, LAZY_PG_STAT_THRESHOLDS};
use super::sim::{
    EpochPoint, EvictionOrder, EvictionUnit, Geometry, MachineScale, SimConfig, SimResult,
    TimeBreakdown, TimeModel, Utilisation,
};
use super::suite::{ratio_percent, speedups_of, SpeedupRow, SuiteSpec};
use super::SimError;

/// Policies named as on the command line: none or `all` is the whole suite ([`Policy::suite`]); a bare
/// `lazy-pg-stat-sw` (no threshold) stands for the paper's thresholds ([`LAZY_PG_STAT_THRESHOLDS`]). Each policy
/// appears once, in the order first named.
pub fn parse_policies(names: &[String]) -> Result<Vec<Policy>, SimError> {
    if names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case("all")) {
        return Ok(Policy::suite());
    }
    let mut out: Vec<Policy> = Vec::new();
    for name in names {
        let p = Policy::parse(name)?;
        let bare = !name.contains([':', '(', '=']);
        let expanded: Vec<Policy> = match p {
            Policy::LazyPgStatSw { .. } if bare => LAZY_PG_STAT_THRESHOLDS
                .iter()
                .map(|&threshold| Policy::LazyPgStatSw { threshold })
                .collect(),
            other => vec![other],
        };
        for p in expanded {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// A run's speed-up over LazyGrpHW on its workload and ratio, from the figures' rows
/// ([`speedups`](super::suite::speedups)); for a LazyPgStatSW threshold, which the rows reduce to the best one, from
/// LazyGrpHW's time. None without a LazyGrpHW run to compare with.
pub fn speedup_of(rows: &[SpeedupRow], r: &SimResult) -> Option<f64> {
    let label = r.policy.to_string();
    let ratio = ratio_percent(r.ratio);
    rows.iter()
        .find(|s| s.workload == r.workload && s.ratio_percent == ratio && s.label == label)
        .map(|s| s.speedup)
        .or_else(|| {
            let base = rows.iter().find(|s| {
                s.workload == r.workload && s.ratio_percent == ratio && s.label == "LazyGrpHW"
            })?;
            (r.est_time_s > 0.0).then(|| base.est_time_s / r.est_time_s)
        })
}

/// One run of a suite as a row of the JSON document. It deserializes too, so that rows simulated elsewhere (a sweep
/// on Ray, `oversub.sweep`) come back into the same document ([`UvmDoc::from_runs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The trace's name.
    pub workload: String,
    /// Oversubscription ratio, percent (the paper's unit, named so in every output: `ratio_percent`).
    pub ratio_percent: u32,
    /// The policy, as the figures name it.
    pub policy: String,
    /// Estimated run time under the suite's time model, seconds.
    pub est_time_s: f64,
    /// The serial estimate (Eqs. 1 and 3's constants, events summed), seconds.
    pub serial_time_s: f64,
    /// LazyGrpHW's time over this one ([`speedup_of`]); filled in by [`UvmDoc::from_runs`].
    pub speedup_vs_lazygrphw: Option<f64>,
    /// Driver service events: faults on unmapped pages and access-counter notifications.
    pub faults: u64,
    /// Pages moved to the GPU, prefetched ones included.
    pub migrations: u64,
    /// Of those, pages the prefetcher brought.
    pub prefetches: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Batches the faults were serviced in.
    pub fault_batches: u64,
    /// Copies to the GPU and to the host.
    pub transfers_h2d: u64,
    /// Copies to the host.
    pub transfers_d2h: u64,
    /// Accesses the instrumentation tracked.
    pub pst_updates: u64,
    /// Faults the thrashing detection throttled.
    pub throttles: u64,
    /// Pages it pinned to the host.
    pub pins: u64,
    /// Evictions per page touched.
    pub evictions_per_page: f64,
    /// L2 misses served from host memory over the bus.
    pub remote_accesses: u64,
    /// Accesses served by the L2.
    pub cache_hits: u64,
    /// L2 misses served by GPU memory.
    pub gpu_mem_accesses: u64,
    /// Bytes over the bus to the GPU.
    pub bytes_h2d: u64,
    /// Bytes over the bus to the host.
    pub bytes_d2h: u64,
    /// Accesses simulated.
    pub accesses: u64,
    /// Bytes the trace touches.
    pub footprint_bytes: u64,
    /// GPU memory, bytes.
    pub gpu_memory_bytes: u64,
    /// Where the overlap model's time went.
    pub breakdown: TimeBreakdown,
    /// The L2 and driver granularities the run used.
    pub geometry: Geometry,
    /// The run over time (Figs. 5, 9, 10).
    pub series: Vec<EpochPoint>,
    /// Utilisation at eviction (Figs. 3, 4).
    pub utilisation: Utilisation,
    /// DynaMap's f_under, faults per second of simulated time before the first eviction (None: no eviction).
    #[serde(default)]
    pub f_under_per_s: Option<f64>,
    /// Share of the requests to low-utilised pages the L2 served (Fig. 3b; the paper: 91%). None: no such request.
    #[serde(default)]
    pub low_util_l2_hit_rate: Option<f64>,
    /// Wall time of the simulation itself, seconds.
    pub sim_seconds: f64,
}

impl RunRow {
    /// The row of `r`, with its speed-up over LazyGrpHW and pages of `page_bytes`.
    pub fn new(r: &SimResult, speedup: Option<f64>, page_bytes: u64) -> Self {
        let c = &r.counters;
        RunRow {
            workload: r.workload.clone(),
            ratio_percent: ratio_percent(r.ratio),
            policy: r.policy.to_string(),
            est_time_s: r.est_time_s,
            serial_time_s: r.serial_time_s,
            speedup_vs_lazygrphw: speedup,
            faults: c.faults,
            migrations: c.migrations,
            prefetches: c.prefetches,
            evictions: c.evictions,
            fault_batches: c.fault_batches,
            transfers_h2d: c.transfers_h2d,
            transfers_d2h: c.transfers_d2h,
            pst_updates: c.pst_updates,
            throttles: c.throttles,
            pins: c.pins,
            evictions_per_page: r.evictions_per_page,
            remote_accesses: c.remote_accesses,
            cache_hits: c.cache_hits,
            gpu_mem_accesses: c.gpu_mem_accesses,
            bytes_h2d: c.bytes_h2d,
            bytes_d2h: c.bytes_d2h,
            accesses: c.accesses,
            footprint_bytes: r.footprint_pages * page_bytes,
            gpu_memory_bytes: r.capacity_pages * page_bytes,
            breakdown: r.breakdown,
            geometry: r.geometry,
            series: r.series.clone(),
            utilisation: r.utilisation.clone(),
            f_under_per_s: r.f_under_per_s,
            low_util_l2_hit_rate: (c.low_util_requests > 0)
                .then(|| c.low_util_l2_hits as f64 / c.low_util_requests as f64),
            sim_seconds: r.sim_seconds,
        }
    }
}

/// One curve pair of Fig. 7.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostCurve {
    /// f_over.
    pub f_over: f64,
    /// (bytes used, C_CPU seconds, C_GPU seconds) per line count.
    pub points: Vec<(u64, f64, f64)>,
    /// Smallest bytes used at which migrating is cheaper, if any.
    pub crossover_bytes: Option<u64>,
}

impl CostCurve {
    /// Fig. 7's four levels of pressure.
    pub fn figure7(cost: &CostModel) -> Vec<CostCurve> {
        [0.0, 1.0, 4.0, 16.0]
            .into_iter()
            .map(|f_over| CostCurve {
                f_over,
                points: cost.cost_curves(f_over),
                crossover_bytes: cost
                    .crossover_lines(f_over)
                    .map(|l| u64::from(l) * cost.line_bytes),
            })
            .collect()
    }
}

/// A suite's results: every run, the figures' speed-ups and the settings they were simulated with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UvmDoc {
    /// One row per run, in the results' order.
    pub runs: Vec<RunRow>,
    /// The figures' rows ([`speedups`](super::suite::speedups)).
    pub speedups: Vec<SpeedupRow>,
    /// The cost model's constants: decision constants and machine.
    pub cost_model: CostModel,
    /// How time was estimated.
    pub time_model: TimeModel,
    /// Whether the L2 and driver granularities were scaled with GPU memory.
    pub machine_scale: MachineScale,
    /// Fig. 7: C_CPU and C_GPU (seconds) against bytes used, at f_over 0, 1, 4 and 16.
    pub cost_curves: Vec<CostCurve>,
    /// The eviction order.
    pub eviction: EvictionOrder,
    /// The unit evicted at once.
    pub eviction_unit: EvictionUnit,
    /// Wall time of the whole suite, seconds.
    pub wall_seconds: f64,
}

impl UvmDoc {
    /// The document of `results`, run from `spec` in `wall_seconds`.
    pub fn new(results: &[SimResult], spec: &SuiteSpec, wall_seconds: f64) -> Self {
        let page = spec.template.cost.page_bytes;
        let runs = results
            .iter()
            .map(|r| (r.policy, RunRow::new(r, None, page)))
            .collect();
        Self::from_runs(runs, &spec.template, wall_seconds)
    }

    /// The document of runs simulated with `template`'s settings, each with its policy, in the order the document
    /// lists them: what [`UvmDoc::new`] makes of a local suite, and what a front end makes of rows that were
    /// simulated elsewhere (`oversub sim uvm --ray`), so that both write one shape. The speed-ups (the figures' rows
    /// and each run's `speedup_vs_lazygrphw`) are computed here from the runs' estimated times.
    pub fn from_runs(runs: Vec<(Policy, RunRow)>, template: &SimConfig, wall_seconds: f64) -> Self {
        let keys: Vec<(&str, u32, Policy, f64)> = runs
            .iter()
            .map(|(p, r)| (r.workload.as_str(), r.ratio_percent, *p, r.est_time_s))
            .collect();
        let rows = speedups_of(&keys);
        let runs = runs
            .into_iter()
            .map(|(_, mut r)| {
                r.speedup_vs_lazygrphw = row_speedup(&rows, &r);
                r
            })
            .collect();
        UvmDoc {
            runs,
            speedups: rows,
            cost_model: template.cost.clone(),
            time_model: template.time_model,
            machine_scale: template.machine_scale,
            cost_curves: CostCurve::figure7(&template.cost),
            eviction: template.eviction,
            eviction_unit: template.eviction_unit,
            wall_seconds,
        }
    }
}

/// [`speedup_of`] for a row rather than a result.
fn row_speedup(rows: &[SpeedupRow], r: &RunRow) -> Option<f64> {
    let same = |s: &&SpeedupRow| s.workload == r.workload && s.ratio_percent == r.ratio_percent;
    rows.iter()
        .filter(same)
        .find(|s| s.label == r.policy)
        .map(|s| s.speedup)
        .or_else(|| {
            let base = rows.iter().filter(same).find(|s| s.label == "LazyGrpHW")?;
            (r.est_time_s > 0.0).then(|| base.est_time_s / r.est_time_s)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_lazy_pg_stat_expands_to_the_papers_thresholds() {
        let p = parse_policies(&["lazy-pg-stat-sw".into(), "dynamap".into()]).unwrap();
        assert_eq!(p.len(), LAZY_PG_STAT_THRESHOLDS.len() + 1);
        let p = parse_policies(&["lazy-pg-stat-sw:8".into()]).unwrap();
        assert_eq!(p, vec![Policy::LazyPgStatSw { threshold: 8 }]);
        assert_eq!(parse_policies(&[]).unwrap().len(), Policy::suite().len());
        assert!(parse_policies(&["nope".into()]).is_err());
    }
}
