//! Every memory phase of an arbitrated run that took more than 5% longer than the longest one alone is attributed
//! to a cause, from evidence recorded during the run rather than guessed at: transfer-side work that ran during
//! the phase (the gate's log), interrupts and IPIs on the task's CPU, preemption, the hypervisor's steal time.
//! What is left once those are ruled out is reported as such. The same evidence is written as a Chrome
//! trace-event timeline (open it in Perfetto or chrome://tracing).

use std::collections::BTreeMap;
use std::path::Path;

use oversub_arbiter::{GateEvent, GateEventKind, WorkKind};
use serde::Serialize;
use serde_json::{json, Value};

use super::task::{IterationRecord, PhaseRecord};
use crate::LabError;

/// A memory phase above this multiple of the longest alone is an outlier.
pub const OUTLIER_RATIO: f64 = 1.05;

const PHASE_NAMES: [&str; 3] = ["load", "compute", "unload"];

/// One attributed outlier.
#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    pub iteration: usize,
    pub phase: &'static str,
    pub us: f64,
    /// Phase time / longest alone.
    pub ratio: f64,
    pub cause: String,
    pub evidence: String,
}

/// The outliers of one arbitrated run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Attribution {
    /// Memory phases (loads and unloads) looked at.
    pub memory_phases: usize,
    /// Memory phases above OUTLIER_RATIO × the longest alone.
    pub outliers: usize,
    /// Outliers per cause.
    pub by_cause: BTreeMap<String, usize>,
    /// The worst outliers (at most 10), with their evidence.
    pub worst: Vec<Outlier>,
    /// Transfer-side work that overlapped any memory phase (outlier or not): a broken promise of the gate.
    pub overlapping_work: usize,
    /// The first such overlaps, described.
    pub overlaps: Vec<String>,
    /// How often, and by how much, admitted work ran past its promised end.
    pub overruns: Overruns,
}

/// Work admitted under a grant that ran past its promised end (start + n·T(Q), or + the cost).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Overruns {
    /// Pieces of work admitted under a grant.
    pub admitted: usize,
    /// Those that ended after their promised end.
    pub overran: usize,
    pub p99_us: f64,
    pub max_us: f64,
}

fn overruns(work: &[Work], admitted: &[(u64, u64, Option<u64>)]) -> Overruns {
    let mut over: Vec<f64> = Vec::new();
    let mut n = 0;
    for w in work {
        if let Some((_, promised, Some(_))) = admission_of(admitted, w) {
            n += 1;
            over.push(w.end.saturating_sub(promised) as f64 / 1e3);
        }
    }
    over.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        over.get(((over.len() as f64 * q).ceil() as usize).clamp(1, over.len().max(1)) - 1)
            .copied()
            .unwrap_or(0.0)
    };
    Overruns {
        admitted: n,
        overran: over.iter().filter(|&&x| x > 0.0).count(),
        p99_us: pick(0.99),
        max_us: over.last().copied().unwrap_or(0.0),
    }
}

#[derive(Debug, Clone, Copy)]
struct Work {
    start: u64,
    end: u64,
    what: WorkKind,
}

fn work_name(w: WorkKind) -> &'static str {
    match w {
        WorkKind::Transfer => "a storage transfer",
        WorkKind::Copy => "a copy chunk",
        WorkKind::Commit => "a commit (mprotect)",
        WorkKind::Decommit => "a decommit (madvise + mprotect)",
        _ => "transfer-side work",
    }
}

fn ran(events: &[GateEvent]) -> Vec<Work> {
    let mut v: Vec<Work> = events
        .iter()
        .filter_map(|e| match e.kind {
            GateEventKind::Ran { what, .. } => Some(Work {
                start: e.start_ns,
                end: e.end_ns,
                what,
            }),
            _ => None,
        })
        .collect();
    v.sort_by_key(|w| w.start);
    v
}

/// Work that intersects [from, to].
fn overlapping(work: &[Work], from: u64, to: u64) -> impl Iterator<Item = &Work> {
    // Work items are short (a chunk or a memory-map operation): look back at most a second.
    let hi = work.partition_point(|w| w.start < to);
    let lo = work.partition_point(|w| w.start < from.saturating_sub(1_000_000_000));
    work[lo..hi].iter().filter(move |w| w.end > from)
}

/// The admission a piece of work ran under: the last one that started before it.
fn admission_of(admitted: &[(u64, u64, Option<u64>)], w: &Work) -> Option<(u64, u64, Option<u64>)> {
    let i = admitted.partition_point(|a| a.0 <= w.start);
    i.checked_sub(1).map(|i| admitted[i])
}

fn describe_overlap(w: &Work, p: &PhaseRecord, admitted: &[(u64, u64, Option<u64>)]) -> String {
    let inside = w.end.min(p.end_ns).saturating_sub(w.start.max(p.start_ns));
    let how = match admission_of(admitted, w) {
        Some((_, promised, None)) => format!(
            "admitted while memory was unrestricted (promised end {:+.0} us from the phase start)",
            (promised as f64 - p.start_ns as f64) / 1e3
        ),
        Some((_, promised, Some(until))) => format!(
            "ran {:.0} us past its admission's promised end (grant until {:+.0} us from the phase start)",
            (w.end as f64 - promised as f64) / 1e3,
            (until as f64 - p.start_ns as f64) / 1e3
        ),
        None => "with no admission before it".into(),
    };
    format!(
        "{} overlapped the phase by {:.0} us; {how}",
        work_name(w.what),
        inside as f64 / 1e3
    )
}

fn cause_of(
    p: &PhaseRecord,
    work: &[Work],
    admitted: &[(u64, u64, Option<u64>)],
    window_before: (u64, u64),
) -> (String, String) {
    let c = &p.counters;
    if let Some(w) = overlapping(work, p.start_ns, p.end_ns).next() {
        return (
            format!(
                "transfer-side work during the phase ({})",
                work_name(w.what)
            ),
            describe_overlap(w, p, admitted),
        );
    }
    let irq = &c.irqs;
    if irq.tlb_shootdowns + irq.function_calls > 0 {
        return (
            "IPIs on the task's CPU (TLB shootdown / function call)".into(),
            format!(
                "{} TLB shootdowns, {} function calls",
                irq.tlb_shootdowns, irq.function_calls
            ),
        );
    }
    if irq.device + irq.other > 0 {
        return (
            "device interrupts on the task's CPU".into(),
            format!("{} device, {} other interrupts", irq.device, irq.other),
        );
    }
    if c.involuntary_switches > 0 {
        return (
            "the task was preempted".into(),
            format!("{} involuntary context switches", c.involuntary_switches),
        );
    }
    if irq.reschedules > 0 {
        return (
            "rescheduling IPIs on the task's CPU".into(),
            format!("{} rescheduling IPIs", irq.reschedules),
        );
    }
    if c.steal_ticks > 0 {
        return (
            "VM steal time".into(),
            format!("{} steal ticks on the task's CPU", c.steal_ticks),
        );
    }
    let before = overlapping(work, window_before.0, window_before.1).count();
    if before > 0 {
        return (
            "none on the task's CPU; transfer-side work ran in the window before (shared cache)"
                .into(),
            format!(
                "{before} work items in the {:.0} us before the phase",
                (window_before.1 - window_before.0) as f64 / 1e3
            ),
        );
    }
    (
        "unattributed".into(),
        "no interrupt, preemption, steal or transfer-side work seen".into(),
    )
}

/// Attributes the memory-phase outliers of `records` against the longest phases alone (`alone_max_us`: load,
/// compute, unload) and the transfer side's `events`.
pub fn attribute(
    records: &[IterationRecord],
    alone_max_us: [f64; 3],
    events: &[GateEvent],
) -> Attribution {
    let work = ran(events);
    let mut admitted: Vec<(u64, u64, Option<u64>)> = events
        .iter()
        .filter_map(|e| match e.kind {
            GateEventKind::Admitted { grant_until_ns, .. } => {
                Some((e.start_ns, e.end_ns, grant_until_ns))
            }
            _ => None,
        })
        .collect();
    admitted.sort_by_key(|a| a.0);
    let mut a = Attribution::default();
    let mut all = Vec::new();
    let mut prev_end = records.first().map_or(0, |r| r.phases[0].start_ns);
    for (i, r) in records.iter().enumerate() {
        for p in [0, 2] {
            let ph = &r.phases[p];
            a.memory_phases += 1;
            for w in overlapping(&work, ph.start_ns, ph.end_ns) {
                a.overlapping_work += 1;
                if a.overlaps.len() < 10 {
                    a.overlaps.push(format!(
                        "iteration {i} {}: {}",
                        PHASE_NAMES[p],
                        describe_overlap(w, ph, &admitted)
                    ));
                }
            }
            let us = ph.secs() * 1e6;
            let ratio = if alone_max_us[p] > 0.0 {
                us / alone_max_us[p]
            } else {
                0.0
            };
            // The window before: for a load, the rest after the previous unload; for an unload, the compute phase.
            let before = if p == 0 {
                (prev_end, ph.start_ns)
            } else {
                (r.phases[0].end_ns, ph.start_ns)
            };
            if ratio > OUTLIER_RATIO {
                a.outliers += 1;
                let (cause, evidence) = cause_of(ph, &work, &admitted, before);
                *a.by_cause.entry(cause.clone()).or_default() += 1;
                all.push(Outlier {
                    iteration: i,
                    phase: PHASE_NAMES[p],
                    us,
                    ratio,
                    cause,
                    evidence,
                });
            }
        }
        prev_end = r.phases[2].end_ns;
    }
    a.overruns = overruns(&work, &admitted);
    all.sort_by(|x, y| y.ratio.total_cmp(&x.ratio));
    all.truncate(10);
    a.worst = all;
    a
}

/// A Chrome trace-event timeline of several conditions, one after another on `CLOCK_MONOTONIC`.
#[derive(Debug, Default)]
pub struct Trace {
    events: Vec<Value>,
    base_ns: Option<u64>,
    conditions: u32,
}

/// Consecutive gate events of one kind closer than this are drawn as one.
const MERGE_GAP_NS: u64 = 50_000;

impl Trace {
    fn us(&mut self, ns: u64) -> f64 {
        let base = *self.base_ns.get_or_insert(ns);
        (ns as f64 - base as f64) / 1e3
    }

    /// Adds one condition: the PREM task's phases (with the counters and, for outliers, the cause) and the
    /// transfer side's admissions, waits and work.
    pub fn add_condition(
        &mut self,
        label: &str,
        prem_pid: u32,
        records: &[IterationRecord],
        events: &[GateEvent],
        attribution: Option<&Attribution>,
    ) {
        self.conditions += 1;
        let pid = self.conditions;
        self.events
            .push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}}));
        for (tid, name) in [
            (1, format!("PREM task (pid {prem_pid})")),
            (2, "gate: admitted".to_string()),
            (3, "gate: waited".to_string()),
            (4, "transfer side: ran".to_string()),
        ] {
            self.events
                .push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
        }
        let causes: BTreeMap<(usize, &str), &str> = attribution
            .map(|a| {
                a.worst
                    .iter()
                    .map(|o| ((o.iteration, o.phase), o.cause.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        for (i, r) in records.iter().enumerate() {
            for (p, ph) in r.phases.iter().enumerate() {
                let ts = self.us(ph.start_ns);
                let mut args = json!({
                    "iteration": i,
                    "tlb_shootdowns": ph.counters.irqs.tlb_shootdowns,
                    "function_calls": ph.counters.irqs.function_calls,
                    "reschedules": ph.counters.irqs.reschedules,
                    "device_irqs": ph.counters.irqs.device,
                    "involuntary_switches": ph.counters.involuntary_switches,
                    "steal_ticks": ph.counters.steal_ticks,
                });
                if let Some(c) = causes.get(&(i, PHASE_NAMES[p])) {
                    args["outlier_cause"] = json!(c);
                }
                self.events.push(json!({
                    "name": PHASE_NAMES[p], "cat": "prem", "ph": "X", "pid": pid, "tid": 1,
                    "ts": ts, "dur": ph.secs() * 1e6, "args": args,
                }));
            }
        }
        let mut sorted: Vec<&GateEvent> = events.iter().collect();
        sorted.sort_by_key(|e| e.start_ns);
        // Merge runs per (tid, name).
        let mut open: BTreeMap<(u32, String), (u64, u64, u64)> = BTreeMap::new();
        let flush = |this: &mut Trace, key: (u32, String), (s, e, n): (u64, u64, u64)| {
            let ts = this.us(s);
            this.events.push(json!({
                "name": key.1, "cat": "gate", "ph": "X", "pid": pid, "tid": key.0,
                "ts": ts, "dur": (e.saturating_sub(s)) as f64 / 1e3, "args": {"count": n},
            }));
        };
        for e in sorted {
            let key = match e.kind {
                GateEventKind::Admitted { .. } => (2, "admitted".to_string()),
                GateEventKind::Waited => (3, "waited".to_string()),
                GateEventKind::Ran { what, .. } => (4, work_name(what).to_string()),
                _ => (4, "other".to_string()),
            };
            match open.get_mut(&key) {
                Some(run) if e.start_ns <= run.1 + MERGE_GAP_NS => {
                    run.1 = run.1.max(e.end_ns);
                    run.2 += 1;
                }
                _ => {
                    if let Some(prev) = open.insert(key.clone(), (e.start_ns, e.end_ns, 1)) {
                        flush(self, key, prev);
                    }
                }
            }
        }
        for (key, run) in open {
            flush(self, key, run);
        }
    }

    pub fn write(&self, path: &Path) -> Result<(), LabError> {
        let doc = json!({"traceEvents": self.events, "displayTimeUnit": "ms"});
        std::fs::write(path, serde_json::to_vec(&doc)?)?;
        Ok(())
    }
}
