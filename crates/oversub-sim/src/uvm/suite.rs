//! Many simulations at once: every trace source × oversubscription ratio × policy, in parallel across cores.
//!
//! A generated workload is streamed ([`simulate_streamed`]): its generator runs once to learn the pages it touches
//! and once more while all of its runs consume the accesses together, so memory holds the runs' per-page state and
//! a few chunks of accesses, never the trace, whatever its size. A trace file, or a workload run under the oracle
//! (which looks ahead over the whole trace), is read or generated whole once, by the first worker that needs it,
//! shared by all its runs and dropped after its last run, so memory holds a few traces rather than all of them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::policy::{Policy, LAZY_GRP_HW_THRESHOLD};
use super::sim::{
    scan, simulate, simulate_streamed, PreparedTrace, PreparedTraceBuilder, SimConfig, SimResult,
};
use super::workload::{self, WorkloadKind, WorkloadParams};
use super::{trace, Access, SimError};

/// Where a trace comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSource {
    /// A generator, at the suite's size and seed.
    Workload(WorkloadKind),
    /// A trace file (oversub binary or NVBit `mem_trace` text).
    File(PathBuf),
}

impl TraceSource {
    /// The name results carry.
    pub fn name(&self) -> String {
        match self {
            TraceSource::Workload(k) => k.name().to_string(),
            TraceSource::File(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
        }
    }

    /// Generates or reads the trace and prepares it for `config`'s cost model.
    pub fn prepare(
        &self,
        params: &WorkloadParams,
        config: &SimConfig,
    ) -> Result<PreparedTrace, SimError> {
        match self {
            TraceSource::Workload(kind) => {
                let mut builder = PreparedTraceBuilder::new(kind.name(), &config.cost)?;
                let mut failed = None;
                workload::generate_into(*kind, params, &mut |a| {
                    if failed.is_none() {
                        if let Err(e) = builder.push(a) {
                            failed = Some(e);
                        }
                    }
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
                builder.finish()
            }
            TraceSource::File(path) => {
                let mut t = trace::load(path)?;
                t.name = self.name();
                PreparedTrace::new(&t, &config.cost)
            }
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SuiteSpec {
    /// Trace sources (rows of the paper's figures).
    pub sources: Vec<TraceSource>,
    /// Oversubscription ratios (2.0 = 200%).
    pub ratios: Vec<f64>,
    /// Policies.
    pub policies: Vec<Policy>,
    /// Size and seed of generated workloads.
    pub params: WorkloadParams,
    /// Settings every run shares (cost model, eviction); its policy and ratio are replaced per run.
    pub template: SimConfig,
    /// Worker threads (0: one per core).
    pub threads: usize,
}

/// Progress, reported as the suite goes.
#[derive(Debug)]
#[non_exhaustive]
pub enum SuiteEvent<'a> {
    /// A trace is ready.
    TraceReady {
        /// Its name.
        name: &'a str,
        /// Accesses in it.
        accesses: u64,
        /// Problem size.
        footprint_bytes: u64,
        /// Time taken to generate or read it.
        seconds: f64,
    },
    /// A run finished.
    RunDone {
        /// Runs finished so far.
        done: usize,
        /// Runs in the suite.
        total: usize,
        /// Its result.
        result: &'a SimResult,
    },
}

enum Slot {
    Empty,
    Ready(Arc<PreparedTrace>),
    Failed(String),
}

struct Shared {
    slot: Mutex<Slot>,
    remaining: AtomicUsize,
}

/// What one worker takes at a time.
#[derive(Debug, Clone, Copy)]
enum Unit {
    /// Every run of the source with this index, on one stream of its generator.
    Stream(usize),
    /// The run with this index (source × ratio × policy, in result order), on its source's held trace.
    Held(usize),
}

/// The settings of run `within` (ratio × policy, in result order) of a source.
fn config_of(spec: &SuiteSpec, within: usize) -> Option<SimConfig> {
    let n = spec.policies.len().max(1);
    let mut config = spec.template.clone();
    config.ratio = *spec.ratios.get(within / n)?;
    config.policy = *spec.policies.get(within % n)?;
    Some(config)
}

/// Runs every source × ratio × policy; results come back in that order whatever the threads did.
pub fn run_suite(
    spec: &SuiteSpec,
    on_event: &(dyn Fn(SuiteEvent<'_>) + Sync),
) -> Result<Vec<SimResult>, SimError> {
    if spec.sources.is_empty() || spec.ratios.is_empty() || spec.policies.is_empty() {
        return Err(SimError::InvalidParameter(
            "a suite needs at least one trace, one ratio and one policy".into(),
        ));
    }
    let per_source = spec.ratios.len() * spec.policies.len();
    let total = spec.sources.len() * per_source;
    // The oracle needs the whole trace ahead, so a suite with it holds every trace.
    let stream = !spec.policies.contains(&Policy::Oracle);
    let mut units = Vec::new();
    for (s, source) in spec.sources.iter().enumerate() {
        match source {
            TraceSource::Workload(_) if stream => units.push(Unit::Stream(s)),
            _ => units.extend((s * per_source..(s + 1) * per_source).map(Unit::Held)),
        }
    }
    let shared: Vec<Shared> = spec
        .sources
        .iter()
        .map(|_| Shared {
            slot: Mutex::new(Slot::Empty),
            remaining: AtomicUsize::new(per_source),
        })
        .collect();
    let results: Mutex<Vec<Option<SimResult>>> = Mutex::new(vec![None; total]);
    let first_error: Mutex<Option<SimError>> = Mutex::new(None);
    let next_unit = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let threads = if spec.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        spec.threads
    }
    .max(1);
    let workers = threads.min(units.len()).max(1);
    // A streamed source runs its configs on workers of its own: the cores left over go to them.
    let per_stream = (threads / workers).max(1);

    let record = |job: usize, result: SimResult| {
        let n = done.fetch_add(1, Ordering::AcqRel) + 1;
        on_event(SuiteEvent::RunDone {
            done: n,
            total,
            result: &result,
        });
        if let Ok(mut all) = results.lock() {
            if let Some(cell) = all.get_mut(job) {
                *cell = Some(result);
            }
        }
    };
    let worker = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(&unit) = units.get(next_unit.fetch_add(1, Ordering::Relaxed)) else {
            return;
        };
        let outcome: Result<Vec<(usize, SimResult)>, SimError> = match unit {
            Unit::Stream(s) => stream_source(s, spec, per_stream, on_event).map(|rs| {
                rs.into_iter()
                    .zip(s * per_source..)
                    .map(|(r, j)| (j, r))
                    .collect()
            }),
            Unit::Held(job) => held_run(job, spec, &shared, on_event).map(|r| vec![(job, r)]),
        };
        match outcome {
            Ok(runs) => {
                for (job, result) in runs {
                    record(job, result);
                }
            }
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                if let Ok(mut first) = first_error.lock() {
                    first.get_or_insert(e);
                }
                return;
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(worker);
        }
    });
    if let Some(e) = first_error.into_inner().ok().flatten() {
        return Err(e);
    }
    let all = results
        .into_inner()
        .map_err(|_| SimError::InvalidParameter("a suite worker panicked".into()))?;
    all.into_iter()
        .map(|r| r.ok_or_else(|| SimError::InvalidParameter("a suite run did not finish".into())))
        .collect()
}

/// Every run of source `s`, a generated workload, on one stream: a pass of the generator to learn the trace's
/// shape, then one (two with DynaMap-offline) feeding all the runs together.
fn stream_source(
    s: usize,
    spec: &SuiteSpec,
    threads: usize,
    on_event: &(dyn Fn(SuiteEvent<'_>) + Sync),
) -> Result<Vec<SimResult>, SimError> {
    let Some(TraceSource::Workload(kind)) = spec.sources.get(s) else {
        return Err(SimError::InvalidParameter(
            "only a generated workload can be streamed".into(),
        ));
    };
    let kind = *kind;
    let mut replay =
        |sink: &mut dyn FnMut(Access)| workload::generate_into(kind, &spec.params, sink);
    let started = Instant::now();
    let shape = scan(kind.name(), &spec.template.cost, &mut replay)?;
    on_event(SuiteEvent::TraceReady {
        name: &shape.name,
        accesses: shape.accesses(),
        footprint_bytes: shape.footprint_bytes(),
        seconds: started.elapsed().as_secs_f64(),
    });
    let per_source = spec.ratios.len() * spec.policies.len();
    let configs: Vec<SimConfig> = (0..per_source)
        .filter_map(|within| config_of(spec, within))
        .collect();
    simulate_streamed(&shape, &configs, &mut replay, threads)
}

/// Run `job` on its source's trace, held in memory and shared with the source's other runs.
fn held_run(
    job: usize,
    spec: &SuiteSpec,
    shared: &[Shared],
    on_event: &(dyn Fn(SuiteEvent<'_>) + Sync),
) -> Result<SimResult, SimError> {
    let per_source = spec.ratios.len() * spec.policies.len();
    let s = job / per_source;
    let (Some(source), Some(share), Some(config)) = (
        spec.sources.get(s),
        shared.get(s),
        config_of(spec, job % per_source),
    ) else {
        return Err(SimError::InvalidParameter(
            "a suite run out of range".into(),
        ));
    };
    let outcome =
        trace_for(source, share, spec, on_event).and_then(|trace| simulate(&trace, &config));
    if share.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
        if let Ok(mut slot) = share.slot.lock() {
            *slot = Slot::Empty;
        }
    }
    outcome
}

fn trace_for(
    source: &TraceSource,
    share: &Shared,
    spec: &SuiteSpec,
    on_event: &(dyn Fn(SuiteEvent<'_>) + Sync),
) -> Result<Arc<PreparedTrace>, SimError> {
    let mut slot = share
        .slot
        .lock()
        .map_err(|_| SimError::InvalidParameter("a suite worker panicked".into()))?;
    match &*slot {
        Slot::Ready(t) => return Ok(Arc::clone(t)),
        Slot::Failed(msg) => return Err(SimError::InvalidParameter(msg.clone())),
        Slot::Empty => {}
    }
    let started = Instant::now();
    match source.prepare(&spec.params, &spec.template) {
        Ok(t) => {
            let t = Arc::new(t);
            on_event(SuiteEvent::TraceReady {
                name: &t.name,
                accesses: t.accesses(),
                footprint_bytes: t.footprint_bytes(),
                seconds: started.elapsed().as_secs_f64(),
            });
            *slot = Slot::Ready(Arc::clone(&t));
            Ok(t)
        }
        Err(e) => {
            *slot = Slot::Failed(format!("{}: {e}", source.name()));
            Err(e)
        }
    }
}

/// One bar of the paper's figures: a policy's speed-up over LazyGrpHW on one workload at one ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedupRow {
    /// Workload.
    pub workload: String,
    /// Ratio in percent.
    pub ratio_percent: u32,
    /// Policy as the figures name it (LazyPgStatSW is the best of its thresholds, as in the paper).
    pub label: String,
    /// Estimated time.
    pub est_time_s: f64,
    /// LazyGrpHW's time divided by this one (above 1: faster than LazyGrpHW).
    pub speedup: f64,
}

/// Bare ratios below this many percent are refused ([`ratio_from_percent`]): until issue 32 Python took fractions
/// (`2.0` = 200%) and the command line percent, so a bare `2` is far likelier a fraction than 2%. Between 1 and 10
/// the two readings overlap (5 could be 5% or 500%); from 10 up a fraction would be an oversubscription of 1000% or
/// more, which nobody means, so those numbers are read as percent without a doubt. `"5%"` says 5% explicitly.
pub const SMALLEST_BARE_PERCENT: f64 = 10.0;

/// An oversubscription ratio given as a bare number, in percent as the paper writes it (`200` → 2.0, the fraction
/// [`SimConfig`] takes). Refuses negative and non-finite numbers, and numbers above 0 but
/// below [`SMALLEST_BARE_PERCENT`], whose error asks whether the percentage was meant ("did you mean 200?").
pub fn ratio_from_percent(percent: f64) -> Result<f64, SimError> {
    ratio_number(percent, &format_number(percent))
}

fn ratio_number(percent: f64, text: &str) -> Result<f64, SimError> {
    let bad = |reason: String| SimError::BadRatio {
        text: text.to_string(),
        reason,
    };
    if !percent.is_finite() || percent < 0.0 {
        return Err(bad(
            "give a non-negative percentage such as 200 (or 200%, or 2x)".into(),
        ));
    }
    if percent > 0.0 && percent < SMALLEST_BARE_PERCENT {
        return Err(bad(format!(
            "ratios are percent as in the paper: did you mean {}? (write {}% if you do mean {}%)",
            format_number(percent * 100.0),
            format_number(percent),
            format_number(percent)
        )));
    }
    Ok(percent / 100.0)
}

/// `200` rather than `200.0`, `12.5` as it is, for messages.
fn format_number(v: f64) -> String {
    format!("{}", (v * 1e6).round() / 1e6)
}

/// An oversubscription ratio as the command line spells it: percent (`200`, `200%` → 2.0) or a factor (`2x` → 2.0).
/// A bare number is read as [`ratio_from_percent`] reads it (small numbers refused as likely fractions); with `%`
/// or `x` the unit is explicit and any finite, non-negative value is taken.
pub fn parse_ratio(text: &str) -> Result<f64, SimError> {
    let t = text.trim();
    let bad = || SimError::BadRatio {
        text: t.to_string(),
        reason: "give a percentage such as 200 or 200% (or 2x)".into(),
    };
    let explicit = |number: &str, scale: f64| match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(bad()),
    };
    if let Some(x) = t.strip_suffix(['x', 'X']) {
        explicit(x, 1.0)
    } else if let Some(p) = t.strip_suffix('%') {
        explicit(p, 0.01)
    } else {
        match t.parse::<f64>() {
            Ok(v) => ratio_number(v, t),
            Err(_) => Err(bad()),
        }
    }
}

/// Ratio as the paper writes it (2.0 → 200).
pub fn ratio_percent(ratio: f64) -> u32 {
    (ratio * 100.0).round().max(0.0) as u32
}

/// The figures' view of a suite: per workload and ratio, every policy's speed-up over LazyGrpHW, with
/// LazyPgStatSW reduced to its best threshold ("LazyPgStatSW", as Fig. 8 shows it). Rows keep the order of
/// `results`; workload/ratio pairs without a LazyGrpHW run are left out.
pub fn speedups(results: &[SimResult]) -> Vec<SpeedupRow> {
    let runs: Vec<(&str, u32, Policy, f64)> = results
        .iter()
        .map(|r| {
            (
                r.workload.as_str(),
                ratio_percent(r.ratio),
                r.policy,
                r.est_time_s,
            )
        })
        .collect();
    speedups_of(&runs)
}

/// [`speedups`] of runs given as (workload, ratio in percent, policy, estimated time), in the suite's order: the
/// one computation behind a local suite's rows and rows read back from elsewhere (a sweep on Ray).
pub fn speedups_of(runs: &[(&str, u32, Policy, f64)]) -> Vec<SpeedupRow> {
    let mut rows = Vec::new();
    let mut keys: Vec<(&str, u32)> = Vec::new();
    for &(workload, ratio, _, _) in runs {
        if !keys.contains(&(workload, ratio)) {
            keys.push((workload, ratio));
        }
    }
    let base_policy = Policy::LazyGrpHw {
        threshold: LAZY_GRP_HW_THRESHOLD,
    };
    for (workload, ratio) in keys {
        let group: Vec<&(&str, u32, Policy, f64)> = runs
            .iter()
            .filter(|r| r.0 == workload && r.1 == ratio)
            .collect();
        let Some(&&(_, _, _, base_time)) = group.iter().find(|r| r.2 == base_policy) else {
            continue;
        };
        let mut push = |label: String, t: f64| {
            rows.push(SpeedupRow {
                workload: workload.to_string(),
                ratio_percent: ratio,
                label,
                est_time_s: t,
                speedup: if t > 0.0 {
                    base_time / t
                } else {
                    f64::INFINITY
                },
            });
        };
        let mut best_static: Option<f64> = None;
        for &&(_, _, policy, t) in &group {
            if let Policy::LazyPgStatSw { .. } = policy {
                if best_static.is_none_or(|b| t < b) {
                    best_static = Some(t);
                }
                continue;
            }
            push(policy.to_string(), t);
        }
        if let Some(b) = best_static {
            push("LazyPgStatSW".to_string(), b);
        }
    }
    rows
}

/// Geometric mean of positive finite values (the mean of ratios); None when there are none.
pub fn geomean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0u32);
    for v in values {
        if v.is_finite() && v > 0.0 {
            sum += v.ln();
            n += 1;
        }
    }
    (n > 0).then(|| (sum / f64::from(n)).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_percent_and_small_bare_numbers_are_refused() {
        assert_eq!(parse_ratio("200").unwrap(), 2.0);
        assert_eq!(parse_ratio(" 150% ").unwrap(), 1.5);
        assert_eq!(parse_ratio("3x").unwrap(), 3.0);
        assert_eq!(parse_ratio("0").unwrap(), 0.0);
        assert_eq!(parse_ratio("10").unwrap(), 0.1);
        // Explicit units take any non-negative value.
        assert_eq!(parse_ratio("5%").unwrap(), 0.05);
        assert_eq!(parse_ratio("0.5x").unwrap(), 0.5);
        for text in ["2", "2.0", "0.5", "9.99"] {
            let e = parse_ratio(text).unwrap_err().to_string();
            assert!(
                e.contains("ratios are percent as in the paper: did you mean"),
                "{text}: {e}"
            );
        }
        assert!(parse_ratio("2")
            .unwrap_err()
            .to_string()
            .contains("did you mean 200?"));
        assert!(parse_ratio("0.5")
            .unwrap_err()
            .to_string()
            .contains("did you mean 50?"));
        for text in ["-5", "lots", "", "nan", "inf", "-2x", "%"] {
            assert!(
                matches!(parse_ratio(text), Err(SimError::BadRatio { .. })),
                "{text}"
            );
        }
        assert_eq!(ratio_from_percent(200.0).unwrap(), 2.0);
        assert!(ratio_from_percent(3.0)
            .unwrap_err()
            .to_string()
            .contains("did you mean 300?"));
        assert!(ratio_from_percent(-1.0).is_err());
        assert!(ratio_from_percent(f64::NAN).is_err());
    }
}
