//! Part 2 of `oversub bench interference`: a PREM task against transfers (SiΓ Sec. 5, Figs. 5-8).
//!
//! The PREM task (`task.rs`; pinned to the first CPU, SCHED_FIFO where allowed) runs in a process of its own
//! (`child.rs`, the headline, as on the paper's platform) or as a thread of the benchmark (labelled "one
//! process"). An interferer on the last CPU pages buffers out and in through oversub's pager, or copies memory in
//! 1 MiB chunks (a copy-engine stand-in, with ordinary or non-temporal stores). Each runs alone, together
//! (interfered), and together with the arbiter (arbitrated): the PREM task announces its phases and the
//! interferer obeys the grants. Every phase is recorded with the kernel's counters of the task's CPU, every
//! gate decision and every transfer with its interval, so each outlier is attributed (`attribution.rs`).
//!
//! Announced lengths: a memory phase is announced with its longest length seen alone (transfers must wait at
//! least that long) and a compute phase with its shortest (a grant must end before the earliest moment the next
//! memory phase can start; announcing the longest would let a chunk overlap the unload whenever compute finishes
//! early).

pub mod attribution;
pub mod child;
pub mod counters;
pub mod task;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::harness::Steps;
use oversub_accel::{HostMemory, HostMemoryConfig, PageRelease};
use oversub_arbiter::analysis::{transfer_bound, PremPhases};
use oversub_arbiter::{
    measure_copy_time, Arbiter, ArbiterConfig, Gate, GateEvent, GateEventKind, MonotonicClock,
    Task, WorkKind,
};
use oversub_core::{BufferFlags, PoolSpec};
use serde::Serialize;

use crate::harness::cpu;
use crate::LabError;
use attribution::{Attribution, Trace};
use child::{PremProcess, PremTaskCommand};
use task::{Announce, IterationRecord, PremTask, PAPER_TX1_US};

/// SCHED_FIFO priority of the interferer and its pool's threads (the PREM task runs at 99).
const TRANSFER_PRIORITY: i32 = 50;

/// Where the PREM task runs relative to the transfer side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// A process of its own, against the arbiter in /dev/shm (the paper's setting: the CPU task and the GPU driver
    /// do not share an address space, so the pager's memory-map changes send it no TLB shootdowns).
    Separate,
    /// A thread of the benchmark's process, sharing the pager's address space.
    OneProcess,
}

impl Placement {
    pub fn label(self) -> &'static str {
        match self {
            Placement::Separate => "own process",
            Placement::OneProcess => "one process",
        }
    }
}

/// What the interferer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum InterfererKind {
    /// Page buffers out and in through oversub's pager (host backend with lazy page release, swap store).
    Paging,
    /// The same with pages released at once at page-out (`MADV_DONTNEED`) and refaulted at page-in, the host
    /// backend's default: the ablation that shows what lazy release buys under the arbiter.
    PagingDontneed,
    /// Copy memory between two large buffers in 1 MiB chunks (a copy-engine stand-in), with ordinary stores.
    Copy,
    /// The same copies with non-temporal stores, which do not allocate in the CPU caches (as a DMA copy engine's
    /// writes do not).
    CopyNt,
}

impl InterfererKind {
    pub fn name(self) -> &'static str {
        match self {
            InterfererKind::Paging => "paging",
            InterfererKind::PagingDontneed => "paging-dontneed",
            InterfererKind::Copy => "copy",
            InterfererKind::CopyNt => "copy-nt",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PremOptions {
    pub llc_bytes: u64,
    /// Pixel data walked per pass (the paper's 256 MB).
    pub data_bytes: u64,
    /// PREM iterations per condition (the paper's 1350).
    pub iterations: usize,
    /// Buffers the paging interferer pages out and in (two of this size).
    pub paging_buffer_bytes: u64,
    /// Bytes the copy interferer copies per operation (the paper's TX1 H2D copy: 100 MB).
    pub copy_bytes: u64,
    /// Directories for the paging interferer's swap store (several: one store striped over them).
    pub store_dirs: Vec<PathBuf>,
    pub task_cpu: usize,
    pub interferer_cpu: usize,
    pub placements: Vec<Placement>,
    pub interferers: Vec<InterfererKind>,
    /// GC ratios of the starvation curve.
    pub gc_ratios: Vec<f64>,
    /// PREM iterations per starvation point.
    pub starvation_iterations: usize,
    /// Write a Chrome trace-event timeline here.
    pub trace: Option<PathBuf>,
    /// The conditions run in this many interleaved rounds.
    pub rounds: usize,
    /// Runs the PREM task in a process of its own.
    pub task_command: PremTaskCommand,
}

/// min / mean / p99 / max in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PhaseStats {
    pub min: f64,
    pub mean: f64,
    pub p99: f64,
    pub max: f64,
}

impl PhaseStats {
    fn of(samples_s: &[f64]) -> PhaseStats {
        if samples_s.is_empty() {
            return PhaseStats::default();
        }
        let mut v = samples_s.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let p99 = v[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1];
        PhaseStats {
            min: v[0] * 1e6,
            mean: v.iter().sum::<f64>() / n as f64 * 1e6,
            p99: p99 * 1e6,
            max: v[n - 1] * 1e6,
        }
    }
}

/// The PREM task's phases in one condition.
#[derive(Debug, Clone, Serialize)]
pub struct Condition {
    pub mem_load_us: PhaseStats,
    pub compute_us: PhaseStats,
    pub mem_unload_us: PhaseStats,
    pub iterations: usize,
    #[serde(skip)]
    pub records: Vec<IterationRecord>,
}

impl Condition {
    fn of(records: Vec<IterationRecord>) -> Condition {
        let samples_s: [Vec<f64>; 3] =
            std::array::from_fn(|p| records.iter().map(|r| r.phases[p].secs()).collect());
        Condition {
            mem_load_us: PhaseStats::of(&samples_s[0]),
            compute_us: PhaseStats::of(&samples_s[1]),
            mem_unload_us: PhaseStats::of(&samples_s[2]),
            iterations: records.len(),
            records,
        }
    }

    /// Phase `p`'s samples in seconds (0 load, 1 compute, 2 unload), for the box plots.
    pub fn samples_s(&self, p: usize) -> Vec<f64> {
        self.records.iter().map(|r| r.phases[p].secs()).collect()
    }

    pub fn phase(&self, p: usize) -> &PhaseStats {
        match p {
            0 => &self.mem_load_us,
            1 => &self.compute_us,
            _ => &self.mem_unload_us,
        }
    }
}

/// Throughput of an interferer, MB/s (10^6 bytes per second).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InterfererMbs {
    pub alone: f64,
    pub interfered: f64,
    pub arbitrated: f64,
}

/// One interferer kind's two conditions beside the PREM task, under one placement.
#[derive(Debug, Clone, Serialize)]
pub struct InterfererRuns {
    pub kind: InterfererKind,
    pub interfered: Condition,
    pub arbitrated: Condition,
    pub interferer_mbs: InterfererMbs,
    /// Longest and mean interferer operation under arbitration, seconds (one operation: page out and in both
    /// buffers, or one copy).
    pub op_arbitrated_max_s: f64,
    pub op_arbitrated_mean_s: f64,
    /// Mean operation alone.
    pub op_alone_mean_s: f64,
    /// Eq. 2 as printed, with T(MG) = the operation's mean length alone.
    pub bound_paper_s: f64,
    /// Eq. 2 in whole chunks, with T(MG) = chunks × T(Q) plus the gated memory-map operations (`None`: a window
    /// holds no chunk).
    pub bound_chunked_s: Option<f64>,
    /// Chunks per operation.
    pub op_chunks: u64,
    /// The gate's chunk time T(Q), seconds.
    pub chunk_time_s: f64,
    /// Worst-case time of the operation's gated memory-map operations (commit and decommit), seconds.
    pub op_memory_map_s: f64,
    pub gate_waits: u64,
    pub gate_preemptions: u64,
    /// The overrun guard the gate learned (the longest admitted work ran past its promise), µs.
    pub overrun_guard_us: f64,
    /// The arbitrated run's outliers and their causes.
    pub attribution: Attribution,
}

/// The runs of one placement of the PREM task.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementRuns {
    pub placement: Placement,
    pub alone: Condition,
    pub announced: AnnouncedUs,
    pub interferers: Vec<InterfererRuns>,
}

/// The phases announced to the arbiter, µs (load and unload: longest alone; compute: shortest alone).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AnnouncedUs {
    pub load: f64,
    pub compute: f64,
    pub unload: f64,
}

impl AnnouncedUs {
    fn of(announce: &Announce) -> AnnouncedUs {
        AnnouncedUs {
            load: announce.load_ns as f64 * 1e-3,
            compute: announce.compute_ns as f64 * 1e-3,
            unload: announce.unload_ns as f64 * 1e-3,
        }
    }

    /// The announcement these lengths make (whole nanoseconds).
    fn announce(&self) -> Announce {
        Announce {
            load_ns: (self.load * 1e3) as u64,
            compute_ns: (self.compute * 1e3) as u64,
            unload_ns: (self.unload * 1e3) as u64,
        }
    }
}

/// Settings of the PREM task, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct PremSettings {
    pub llc_bytes: u64,
    pub working_set_bytes: u64,
    pub data_bytes: u64,
    pub iterations: usize,
    pub compute_repetitions: usize,
    pub realtime: bool,
    pub rest_fraction: f64,
    /// Server round trip ε, µs (mean of many requests).
    pub epsilon_us: f64,
    /// Lead-in before the first memory phase of a run, µs.
    pub lead_us: f64,
    /// Interleaved rounds the iterations of each condition were split into.
    pub rounds: usize,
    pub task_cpu: usize,
    pub interferer_cpu: usize,
}

/// A thread, where it may run and where it last ran.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadPlace {
    pub process: String,
    pub thread: String,
    pub tid: u32,
    pub allowed_cpus: String,
    pub last_cpu: Option<usize>,
    /// Scheduling policy and real-time priority, e.g. "SCHED_FIFO 50" or "SCHED_OTHER".
    pub policy: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PremResult {
    pub settings: PremSettings,
    pub placements: Vec<PlacementRuns>,
    /// Every thread of the benchmark and of the PREM process, sampled during the first arbitrated paging run.
    pub threads: Vec<ThreadPlace>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct StarvationRow {
    pub gc_ratio: f64,
    /// Non-preemptible operations of GC × T(C) completed inside the locked window (Fig. 6/8, blue).
    pub iterations: u64,
    /// The same work split into admitted 1 MiB chunks, i.e. preemptible at chunk boundaries (Fig. 8, red).
    pub iterations_preemptible: u64,
}

/// Progress-bar length of `run`, in PREM iterations plus one step per other stage.
pub fn steps(opts: &PremOptions) -> u64 {
    let conditions = opts.placements.len() * (1 + 2 * opts.interferers.len());
    let stages = 2 + opts.placements.len() * opts.interferers.len() + opts.gc_ratios.len();
    (conditions * opts.iterations + stages) as u64
}

/// The share of each period that the kernel withholds from real-time tasks (`None` when throttling is off).
pub(crate) fn rt_throttle_share() -> Option<f64> {
    let read = |f: &str| -> Option<f64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let runtime = read("sched_rt_runtime_us")?;
    let period = read("sched_rt_period_us")?;
    (runtime >= 0.0 && period > 0.0 && runtime < period).then(|| 1.0 - runtime / period)
}

/// Puts the calling thread where the PREM task runs: pinned to `task_cpu`, and at SCHED_FIFO 99 when `realtime`
/// and permitted. Returns whether it runs real-time.
pub(crate) fn enter_task_cpu(task_cpu: usize, realtime: bool) -> bool {
    if let Err(e) = cpu::pin_to_cpu(task_cpu) {
        tracing::warn!("cannot pin the PREM task to CPU {task_cpu}: {e}");
    }
    realtime && cpu::try_realtime(99).unwrap_or(false)
}

/// The PREM task, in a process of its own or in a thread of this one.
enum Runner {
    Child(PremProcess),
    Thread {
        prem: Box<PremTask>,
        task: Task,
        cpu: usize,
        realtime: bool,
    },
}

/// Starts the PREM task's child process and calibrates its compute repetitions to the paper's compute/load
/// proportion (Table I's TX1 times); returns the child, what it reported about itself, and the repetitions.
fn start_calibrated_task(
    opts: &PremOptions,
    arbiter_path: &std::path::Path,
) -> Result<(PremProcess, child::ChildInfo, usize), LabError> {
    let mut child = PremProcess::spawn(
        &opts.task_command,
        opts.task_cpu,
        opts.llc_bytes,
        opts.data_bytes,
        arbiter_path,
    )?;
    let info = child.info.clone();
    if !info.realtime {
        tracing::warn!("SCHED_FIFO not permitted; the PREM task runs at normal priority");
    } else if info.rest_fraction > 0.0 {
        tracing::info!(
            "real-time throttling: the PREM task rests {:.0}% after each iteration",
            info.rest_fraction * 100.0
        );
    }

    // Calibrate compute repetitions to the paper's compute/load proportion, in the child.
    let cal_iterations = info.iterations_per_pass.clamp(2, 6);
    let cal = Condition::of(child.run(cal_iterations, None, Duration::ZERO, |_| {})?);
    let target = PAPER_TX1_US.1 / PAPER_TX1_US.0;
    let reps = ((target * cal.mem_load_us.mean / cal.compute_us.mean.max(1e-3)).round() as usize)
        .clamp(1, 10_000);
    child.set_compute_reps(reps)?;
    tracing::info!(
        load_us = cal.mem_load_us.mean,
        compute_us = cal.compute_us.mean,
        reps,
        "PREM task calibrated to compute/load = {target:.1}"
    );
    Ok((child, info, reps))
}

/// The phases Eq. 2's bound takes, from what the task announced and how it ran alone; and its alone maxima (load,
/// compute, unload, µs) for the attribution of late phases.
fn bound_phases(
    announce: &Announce,
    alone: &Condition,
    rest_fraction: f64,
) -> (PremPhases, [f64; 3]) {
    // The bound's phases: memory phases at their announced worst case (the unload followed by the rest the
    // task takes, which transfers cannot count on), compute at its announced shortest and its longest alone.
    let rest_worst_s = (alone.mem_load_us.max + alone.compute_us.max + alone.mem_unload_us.max)
        * 1e-6
        * rest_fraction;
    let phases = PremPhases {
        load_s: announce.load_ns as f64 * 1e-9,
        compute_s: announce.compute_ns as f64 * 1e-9,
        compute_worst_s: alone.compute_us.max * 1e-6,
        unload_s: announce.unload_ns as f64 * 1e-9 + rest_worst_s,
        load_worst_s: announce.load_ns as f64 * 1e-9,
        unload_worst_s: announce.unload_ns as f64 * 1e-9 + rest_worst_s,
    };
    let alone_max = [
        alone.mem_load_us.max,
        alone.compute_us.max,
        alone.mem_unload_us.max,
    ];
    (phases, alone_max)
}

/// One accumulator per interferer kind, each with its own recording gate on the arbiter.
fn accumulators(opts: &PremOptions, arbiter: &Arbiter) -> Result<Vec<KindAccumulator>, LabError> {
    opts.interferers
        .iter()
        .map(|&kind| -> Result<KindAccumulator, LabError> {
            let gate = Arc::new(Gate::new(arbiter.clone()));
            // The paging interferer's pool measures T(Q) on its store when it starts; the copy loop's is a
            // memcpy's.
            if matches!(kind, InterfererKind::Copy | InterfererKind::CopyNt) {
                gate.set_chunk_time(arbiter.chunk_time())?;
            }
            gate.set_recording(true);
            Ok(KindAccumulator::new(kind, gate))
        })
        .collect()
}

/// What a placement's interferer kinds share when each kind's runs are put together.
struct KindSummary<'a, 's> {
    opts: &'a PremOptions,
    progress: &'a Steps<'s>,
    label: &'a str,
    pid: u32,
    alone: &'a Condition,
    alone_max: [f64; 3],
    phases: &'a PremPhases,
    epsilon: f64,
    rounds: usize,
}

impl KindSummary<'_, '_> {
    /// One interferer kind's results: its throughput alone (measured once per kind, kept in `interferer_alone`),
    /// the task's conditions beside it, the attribution of late phases, and the paper's and the chunked bounds.
    fn runs(
        &self,
        acc: KindAccumulator,
        interferer_alone: &mut Vec<(InterfererKind, f64, f64)>,
        trace: &mut Option<Trace>,
    ) -> Result<InterfererRuns, LabError> {
        let KindSummary {
            opts,
            progress,
            label,
            alone,
            alone_max,
            phases,
            epsilon,
            rounds,
            ..
        } = *self;
        let kind = acc.kind;
        // The interferer alone, for its throughput and operation time (once per kind).
        let (alone_mean_op, alone_mbs) = match interferer_alone.iter().find(|x| x.0 == kind) {
            Some(&(_, op, mbs)) => (op, mbs),
            None => {
                progress.set_message(format!("{} interferer alone", kind.name()));
                let stop = AtomicBool::new(false);
                let ready = Barrier::new(2);
                let secs = (opts.iterations as f64
                    * (alone.mem_load_us.mean + alone.compute_us.mean + alone.mem_unload_us.mean)
                    * 1e-6
                    / rounds as f64)
                    .clamp(0.5, 10.0);
                let i = std::thread::scope(|s| {
                    let h = s.spawn(|| run_interferer(kind, opts, None, &stop, &ready));
                    ready.wait();
                    std::thread::sleep(Duration::from_secs_f64(secs));
                    stop.store(true, Ordering::Relaxed);
                    h.join()
                        .map_err(|_| LabError::from("the interferer thread panicked"))?
                })?;
                interferer_alone.push((kind, i.mean_op(), i.mbs()));
                (i.mean_op(), i.mbs())
            }
        };
        progress.inc(1);
        let interfered = Condition::of(acc.interfered);
        let arbitrated = Condition::of(acc.arbitrated);
        let events = acc.gate.take_events();
        let attribution = attribution::attribute(&arbitrated.records, alone_max, &events);
        if let Some(t) = trace {
            t.add_condition(
                &format!("{label}: interfered ({})", kind.name()),
                self.pid,
                &interfered.records,
                &[],
                None,
            );
            t.add_condition(
                &format!("{label}: arbitrated ({})", kind.name()),
                self.pid,
                &arbitrated.records,
                &events,
                Some(&attribution),
            );
        }
        let chunk_s = acc.chunk_time_s.max(1e-9);
        // Eq. 2 as printed takes the operation's length alone; the chunked form takes its worst case as chunks,
        // each of at most T(Q), plus its gated memory-map operations.
        let op_bytes = match kind {
            InterfererKind::Paging | InterfererKind::PagingDontneed => 4 * opts.paging_buffer_bytes,
            InterfererKind::Copy | InterfererKind::CopyNt => opts.copy_bytes,
        };
        let op_chunks = op_bytes.div_ceil(acc.gate.chunk_bytes().max(1));
        let paper = transfer_bound(alone_mean_op.max(1e-9), phases, epsilon, chunk_s)?;
        let chunked = transfer_bound(
            op_chunks as f64 * chunk_s + acc.arb.op_memory_map_s,
            phases,
            epsilon,
            chunk_s,
        )?;
        let stats = acc.gate.stats();
        tracing::info!(
            kind = kind.name(),
            placement = label,
            alone_mbs,
            interfered_mbs = acc.inter.mbs(),
            arbitrated_mbs = acc.arb.mbs(),
            ops = acc.arb.ops,
            outliers = attribution.outliers,
            "interferer done"
        );
        Ok(InterfererRuns {
            kind,
            interfered,
            arbitrated,
            interferer_mbs: InterfererMbs {
                alone: alone_mbs,
                interfered: acc.inter.mbs(),
                arbitrated: acc.arb.mbs(),
            },
            op_arbitrated_max_s: acc.arb.max_op(),
            op_arbitrated_mean_s: acc.arb.mean_op(),
            op_alone_mean_s: alone_mean_op,
            bound_paper_s: paper.paper_s,
            bound_chunked_s: chunked.chunked_s,
            op_chunks,
            chunk_time_s: chunk_s,
            op_memory_map_s: acc.arb.op_memory_map_s,
            gate_waits: stats.waits,
            gate_preemptions: stats.preemptions,
            overrun_guard_us: acc.gate.overrun_guard().as_secs_f64() * 1e6,
            attribution,
        })
    }
}

impl Runner {
    /// The runner of `placement`: the PREM child (lent from `child`, given back after the placement) or a task
    /// thread in this process, calibrated alike.
    fn for_placement(
        placement: Placement,
        child: &mut Option<PremProcess>,
        opts: &PremOptions,
        reps: usize,
        info: &child::ChildInfo,
        arbiter: &Arbiter,
    ) -> Result<Runner, LabError> {
        Ok(match placement {
            Placement::Separate => {
                Runner::Child(child.take().ok_or("the PREM child was already used")?)
            }
            Placement::OneProcess => {
                let mut prem = PremTask::new(opts.llc_bytes, opts.data_bytes, opts.task_cpu);
                prem.compute_reps = reps;
                prem.rest_fraction = info.rest_fraction;
                Runner::Thread {
                    prem: Box::new(prem),
                    task: arbiter.register_task()?,
                    cpu: opts.task_cpu,
                    realtime: info.realtime,
                }
            }
        })
    }

    fn run(
        &mut self,
        iterations: usize,
        announce: Option<Announce>,
        lead: Duration,
        progress: &Steps<'_>,
    ) -> Result<Vec<IterationRecord>, LabError> {
        match self {
            Runner::Child(p) => {
                let mut seen = 0;
                let r = p.run(iterations, announce, lead, |done| {
                    progress.inc((done - seen) as u64);
                    seen = done;
                })?;
                progress.inc((r.len() - seen.min(r.len())) as u64);
                Ok(r)
            }
            Runner::Thread {
                prem,
                task,
                cpu,
                realtime,
            } => {
                let (cpu, realtime, task) = (*cpu, *realtime, &*task);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        enter_task_cpu(cpu, realtime);
                        prem.run(iterations, announce.map(|a| (task, a)), lead, || {
                            progress.inc(1)
                        })
                    })
                    .join()
                    .map_err(|_| LabError::from("the PREM thread panicked"))?
                })
            }
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Runner::Child(p) => p.info.pid,
            Runner::Thread { .. } => std::process::id(),
        }
    }
}

/// The interferer's loop, on its own CPU: runs operations until `stop`, each admitted by `gate` when given.
struct Interferer {
    ops: u64,
    bytes: u64,
    op_times: Vec<f64>,
    elapsed: f64,
    /// Worst-case commit + decommit time of one operation under the gate (paging only).
    op_memory_map_s: f64,
}

impl Interferer {
    fn mbs(&self) -> f64 {
        if self.elapsed > 0.0 {
            self.bytes as f64 / self.elapsed / 1e6
        } else {
            0.0
        }
    }

    fn mean_op(&self) -> f64 {
        if self.op_times.is_empty() {
            0.0
        } else {
            self.op_times.iter().sum::<f64>() / self.op_times.len() as f64
        }
    }

    fn max_op(&self) -> f64 {
        self.op_times.iter().copied().fold(0.0, f64::max)
    }
}

impl Interferer {
    fn empty() -> Interferer {
        Interferer {
            ops: 0,
            bytes: 0,
            op_times: Vec::new(),
            elapsed: 0.0,
            op_memory_map_s: 0.0,
        }
    }

    /// Adds another run's operations (rounds of one condition).
    fn absorb(&mut self, other: Interferer) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.op_times.extend(other.op_times);
        self.elapsed += other.elapsed;
        self.op_memory_map_s = self.op_memory_map_s.max(other.op_memory_map_s);
    }
}

/// One interferer kind's records over the rounds.
struct KindAccumulator {
    kind: InterfererKind,
    gate: Arc<Gate>,
    interfered: Vec<IterationRecord>,
    arbitrated: Vec<IterationRecord>,
    inter: Interferer,
    arb: Interferer,
    chunk_time_s: f64,
}

impl KindAccumulator {
    fn new(kind: InterfererKind, gate: Arc<Gate>) -> KindAccumulator {
        KindAccumulator {
            kind,
            gate,
            interfered: Vec::new(),
            arbitrated: Vec::new(),
            inter: Interferer::empty(),
            arb: Interferer::empty(),
            chunk_time_s: 0.0,
        }
    }
}

/// Copies `src` into `dst` with non-temporal stores where the CPU has them (x86-64), else ordinarily.
fn copy_non_temporal(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Streaming stores need 16-byte aligned destinations: copy the unaligned head and tail ordinarily.
        let head = dst.as_ptr().align_offset(16).min(n);
        dst[..head].copy_from_slice(&src[..head]);
        let body = (n - head) / 16 * 16;
        let (d, s) = (dst[head..].as_mut_ptr(), src[head..].as_ptr());
        for off in (0..body).step_by(16) {
            // SAFETY: off + 16 <= body <= n - head, so both 16-byte accesses lie inside `dst[head..n]` and
            // `src[head..n]`; the destination is 16-byte aligned (head was chosen so); SSE2 is part of x86-64.
            unsafe {
                let v = _mm_loadu_si128(s.add(off).cast::<__m128i>());
                _mm_stream_si128(d.add(off).cast::<__m128i>(), v);
            }
        }
        // SAFETY: a store fence has no memory-safety preconditions; it orders the streaming stores above.
        unsafe { _mm_sfence() };
        dst[head + body..n].copy_from_slice(&src[head + body..n]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..n].copy_from_slice(&src[..n]);
}

fn run_interferer(
    kind: InterfererKind,
    opts: &PremOptions,
    gate: Option<Arc<Gate>>,
    stop: &AtomicBool,
    ready: &Barrier,
) -> Result<Interferer, LabError> {
    if let Err(e) = cpu::pin_to_cpu(opts.interferer_cpu) {
        tracing::warn!(
            "cannot pin the interferer to CPU {}: {e}",
            opts.interferer_cpu
        );
    }
    // The pager at real-time priority (below the PREM task's 99, on another CPU), like a copy engine that is not
    // descheduled mid-chunk: admitted work then ends when it promised instead of waiting behind other threads on
    // its CPU. The pool's threads (gated worker, I/O engine) are started from this thread below and inherit the
    // policy. Not the copy
    // loop: it computes without pause, and real-time throttling then stops it for 50 ms in the middle of a chunk.
    if matches!(
        kind,
        InterfererKind::Paging | InterfererKind::PagingDontneed
    ) && !matches!(cpu::try_realtime(TRANSFER_PRIORITY), Ok(true))
    {
        tracing::debug!("SCHED_FIFO not permitted for the pager");
    }
    let mut op_times = Vec::new();
    let mut bytes = 0u64;
    let mut op_memory_map_s = 0.0;
    let elapsed = match kind {
        InterfererKind::Paging | InterfererKind::PagingDontneed => {
            let size = opts.paging_buffer_bytes;
            let cap = (2 * size).next_multiple_of(2 << 20) + (8 << 20);
            // Without checksums: hashing reads every buffer on the pool's checksum thread, which the gate does not
            // admit (yet), so it would be memory traffic outside the grants (docs/arbiter.md, "Not done here").
            let mut spec = PoolSpec::new(cap)
                .stores(opts.store_dirs.iter())
                .store_capacity(cap)
                .checksums(false);
            if let Some(g) = &gate {
                spec = spec.gate(Arc::clone(g));
            }
            // Created on the pinned thread, so the pool's I/O threads share the interferer's CPU.
            let release = if kind == InterfererKind::Paging {
                PageRelease::Lazy
            } else {
                PageRelease::Immediate
            };
            let device = HostMemory::new(HostMemoryConfig {
                release,
                ..HostMemoryConfig::default()
            });
            let pool = spec.memory(Arc::new(device)).open()?;
            if let Some(costs) = pool.gate_costs() {
                op_memory_map_s = 2.0
                    * (costs.commit_time(size).as_secs_f64()
                        + costs.decommit_time(size).as_secs_f64());
            }
            let space = pool.address_space();
            let bufs = [
                space.alloc(size, BufferFlags::DEFAULT)?,
                space.alloc(size, BufferFlags::DEFAULT)?,
            ];
            for b in bufs {
                space.write(b, 0, &vec![0xa5u8; size as usize])?;
            }
            // One untimed round first: the store file's blocks are allocated on the first writes.
            for b in bufs {
                space.page_out(b)?;
            }
            for b in bufs {
                space.page_in(b)?;
            }
            ready.wait();
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                for b in bufs {
                    space.page_out(b)?;
                }
                for b in bufs {
                    space.page_in(b)?;
                }
                // Counted only when the whole operation fit the run.
                if !stop.load(Ordering::Relaxed) {
                    op_times.push(t.elapsed().as_secs_f64());
                    bytes += 4 * size;
                }
            }
            start.elapsed().as_secs_f64()
        }
        InterfererKind::Copy | InterfererKind::CopyNt => {
            let n = opts.copy_bytes as usize;
            let src = vec![0x5au8; n];
            let mut dst = vec![1u8; n];
            let chunk = gate
                .as_ref()
                .map_or(1 << 20, |g| g.chunk_bytes() as usize)
                .max(1);
            ready.wait();
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let mut off = 0;
                while off < n {
                    let len = chunk.min(n - off);
                    let admission = gate.as_ref().map(|g| g.admit());
                    let t0 = MonotonicClock::now();
                    if kind == InterfererKind::CopyNt {
                        copy_non_temporal(&mut dst[off..off + len], &src[off..off + len]);
                    } else {
                        dst[off..off + len].copy_from_slice(&src[off..off + len]);
                    }
                    if let (Some(g), Some(a)) = (&gate, &admission) {
                        let end_ns = MonotonicClock::now();
                        g.finished(a, end_ns);
                        g.record(GateEvent {
                            start_ns: t0,
                            end_ns,
                            kind: GateEventKind::Ran {
                                what: WorkKind::Copy,
                                bytes: len as u64,
                            },
                        });
                    }
                    off += len;
                }
                std::hint::black_box(&mut dst);
                if !stop.load(Ordering::Relaxed) {
                    op_times.push(t.elapsed().as_secs_f64());
                    bytes += n as u64;
                }
            }
            start.elapsed().as_secs_f64()
        }
    };
    Ok(Interferer {
        ops: op_times.len() as u64,
        bytes,
        op_times,
        elapsed,
        op_memory_map_s,
    })
}

/// Runs the PREM task while (optionally) an interferer runs on the other CPU.
#[allow(clippy::too_many_arguments)]
fn run_condition(
    runner: &mut Runner,
    opts: &PremOptions,
    iterations: usize,
    interferer: Option<(InterfererKind, Option<Arc<Gate>>)>,
    announce: Option<Announce>,
    lead: Duration,
    progress: &Steps<'_>,
    threads: Option<&mut Vec<ThreadPlace>>,
) -> Result<(Vec<IterationRecord>, Option<Interferer>), LabError> {
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    let pid = runner.pid();
    std::thread::scope(|s| {
        let handle = interferer.map(|(kind, gate)| {
            let (stop, ready) = (&stop, &ready);
            s.spawn(move || run_interferer(kind, opts, gate, stop, ready))
        });
        if handle.is_some() {
            ready.wait();
        }
        let records = runner.run(iterations, announce, lead, progress);
        if let Some(t) = threads {
            *t = thread_places(std::process::id());
            if pid != std::process::id() {
                t.extend(thread_places(pid));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let inter = match handle {
            Some(h) => Some(
                h.join()
                    .map_err(|_| LabError::from("the interferer thread panicked"))??,
            ),
            None => None,
        };
        Ok((records?, inter))
    })
}

/// Pins every thread of this process to `cpu` (threads started later inherit it), so that in the separate-process
/// placement nothing of the transfer side ever runs on the PREM task's CPU.
fn pin_process_to(cpu_index: usize) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for tid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if let Err(e) = cpu::pin_thread_to_cpu(tid, cpu_index) {
            tracing::debug!("cannot pin thread {tid} to CPU {cpu_index}: {e}");
        }
    }
}

/// Every thread of `pid`: its name, allowed CPUs and the CPU it last ran on.
fn thread_places(pid: u32) -> Vec<ThreadPlace> {
    let process = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<ThreadPlace> = dir
        .flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let base = e.path();
            let thread = std::fs::read_to_string(base.join("comm"))
                .ok()?
                .trim()
                .to_string();
            let status = std::fs::read_to_string(base.join("status")).unwrap_or_default();
            let allowed_cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            // Field 39 of stat is the CPU it last ran on; the fields after the command's ')' start at field 3.
            let stat = std::fs::read_to_string(base.join("stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            let last_cpu = fields.get(36).and_then(|f| f.parse().ok());
            // Fields 40 and 41: real-time priority and policy.
            let policy = match (fields.get(38), fields.get(37)) {
                (Some(&"1"), Some(p)) => format!("SCHED_FIFO {p}"),
                (Some(&"2"), Some(p)) => format!("SCHED_RR {p}"),
                (Some(&"0"), _) => "SCHED_OTHER".to_string(),
                (Some(other), _) => format!("policy {other}"),
                (None, _) => String::new(),
            };
            Some(ThreadPlace {
                process: process.clone(),
                thread,
                tid,
                allowed_cpus,
                last_cpu,
                policy,
            })
        })
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

fn server_round_trip(arbiter: &Arbiter) -> f64 {
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(arbiter.request(Duration::from_micros(100)));
    }
    t.elapsed().as_secs_f64() / n as f64
}

/// A name for this run's shared arbiter.
fn arbiter_name() -> String {
    format!("bench-prem-{}", std::process::id())
}

pub fn run(
    opts: &PremOptions,
    progress: &Steps<'_>,
) -> Result<(PremResult, Vec<StarvationRow>), LabError> {
    // Everything of the transfer side runs on the interferer's CPU; the PREM task pins itself to its own.
    pin_process_to(opts.interferer_cpu);
    let arbiter = Arbiter::create_shared(
        &arbiter_name(),
        ArbiterConfig {
            chunk_time: Some(measure_copy_time(1 << 20)),
            ..ArbiterConfig::default()
        },
    )?;
    let arbiter_path = arbiter
        .path()
        .ok_or("the shared arbiter has no path")?
        .to_path_buf();
    let mut trace = opts.trace.as_ref().map(|_| Trace::default());

    // The PREM child first: it measures whether SCHED_FIFO is allowed and the rest it needs.
    let (child, info, reps) = start_calibrated_task(opts, &arbiter_path)?;
    // Lent to the separate-process placement's runner and given back after it.
    let mut child = Some(child);
    progress.inc(1);
    let epsilon = server_round_trip(&arbiter);
    // Covers the longest batch a gate admits while memory is unrestricted (32 chunks of the slowest T(Q) seen
    // here, a few ms each) with room to spare.
    let lead = Duration::from_millis(200);
    progress.inc(1);

    let mut placements = Vec::new();
    let mut threads = Vec::new();
    let mut interferer_alone: Vec<(InterfererKind, f64, f64)> = Vec::new();
    let rounds = opts.rounds.clamp(1, opts.iterations);
    for &placement in &opts.placements {
        let mut runner = Runner::for_placement(placement, &mut child, opts, reps, &info, &arbiter)?;
        let label = placement.label();
        // The announced lengths come from a first alone run of one round's length (not counted): memory phases at
        // their longest, compute at its shortest.
        progress.set_message(format!(
            "PREM task ({label}) alone, for the announced lengths"
        ));
        let first = opts.iterations.div_ceil(rounds);
        let (warm, _) = run_condition(
            &mut runner,
            opts,
            first,
            None,
            None,
            lead,
            &Steps::hidden(),
            None,
        )?;
        let warm = Condition::of(warm);
        let announce = Announce {
            load_ns: (warm.mem_load_us.max * 1e3) as u64,
            compute_ns: (warm.compute_us.min * 1e3) as u64,
            unload_ns: (warm.mem_unload_us.max * 1e3) as u64,
        };

        // The conditions in interleaved rounds, so that slow drifts of the machine (a VM's neighbours) fall on all
        // of them alike.
        let mut alone_records = Vec::new();
        let mut per_kind = accumulators(opts, &arbiter)?;
        for round in 0..rounds {
            let n = opts.iterations / rounds + usize::from(round < opts.iterations % rounds);
            progress.set_message(format!(
                "PREM task ({label}) alone, round {}/{rounds}",
                round + 1
            ));
            alone_records
                .extend(run_condition(&mut runner, opts, n, None, None, lead, progress, None)?.0);
            for acc in &mut per_kind {
                let kind = acc.kind;
                progress.set_message(format!(
                    "PREM task ({label}) vs {}, round {}/{rounds}",
                    kind.name(),
                    round + 1
                ));
                let (r, inter) = run_condition(
                    &mut runner,
                    opts,
                    n,
                    Some((kind, None)),
                    None,
                    lead,
                    progress,
                    None,
                )?;
                acc.interfered.extend(r);
                acc.inter.absorb(inter.ok_or("interferer result missing")?);
                progress.set_message(format!(
                    "PREM task ({label}) vs {}, arbitrated, round {}/{rounds}",
                    kind.name(),
                    round + 1
                ));
                let sample_threads = threads.is_empty() && kind == InterfererKind::Paging;
                // Pager threads record into the gate from their own clock reads; the gate's T(Q) is the pool's.
                let (r, inter) = run_condition(
                    &mut runner,
                    opts,
                    n,
                    Some((kind, Some(Arc::clone(&acc.gate)))),
                    Some(announce),
                    lead,
                    progress,
                    sample_threads.then_some(&mut threads),
                )?;
                acc.arbitrated.extend(r);
                let inter = inter.ok_or("interferer result missing")?;
                acc.chunk_time_s = acc.chunk_time_s.max(acc.gate.chunk_time().as_secs_f64());
                acc.arb.absorb(inter);
            }
        }
        let alone = Condition::of(alone_records);
        if let Some(t) = &mut trace {
            t.add_condition(
                &format!("{label}: alone"),
                runner.pid(),
                &alone.records,
                &[],
                None,
            );
        }
        let (phases, alone_max) = bound_phases(&announce, &alone, info.rest_fraction);

        let summary = KindSummary {
            opts,
            progress,
            label,
            pid: runner.pid(),
            alone: &alone,
            alone_max,
            phases: &phases,
            epsilon,
            rounds,
        };
        let mut runs = Vec::new();
        for acc in per_kind {
            runs.push(summary.runs(acc, &mut interferer_alone, &mut trace)?);
        }
        if let Runner::Child(p) = runner {
            child = Some(p);
        }
        placements.push(PlacementRuns {
            placement,
            announced: AnnouncedUs::of(&announce),
            alone,
            interferers: runs,
        });
    }
    drop(child);

    progress.set_message("starvation curve");
    let starvation = {
        let mut prem = PremTask::new(opts.llc_bytes, opts.data_bytes, opts.task_cpu);
        prem.compute_reps = reps;
        prem.rest_fraction = info.rest_fraction;
        let first = placements.first().ok_or("no placement was run")?;
        let announce = first.announced.announce();
        starvation(&mut prem, opts, &arbiter, announce, info.realtime, progress)?
    };

    if let (Some(t), Some(path)) = (&trace, &opts.trace) {
        t.write(path)?;
    }
    let settings = PremSettings {
        llc_bytes: opts.llc_bytes,
        working_set_bytes: info.working_set_bytes,
        data_bytes: info.data_bytes,
        iterations: opts.iterations,
        compute_repetitions: reps,
        realtime: info.realtime,
        rest_fraction: info.rest_fraction,
        epsilon_us: epsilon * 1e6,
        lead_us: lead.as_secs_f64() * 1e6,
        rounds: opts.rounds.clamp(1, opts.iterations),
        task_cpu: opts.task_cpu,
        interferer_cpu: opts.interferer_cpu,
    };
    Ok((
        PremResult {
            settings,
            placements,
            threads,
        },
        starvation,
    ))
}
/// Fig. 6/8: how many interferer operations of GC × T(C) complete inside the locked window (from the PREM task's
/// first announcement to its NO_OPER), non-preemptible (a whole operation must fit one grant) and preemptible
/// (the same work in admitted 1 MiB chunks).
fn starvation(
    prem: &mut PremTask,
    opts: &PremOptions,
    arbiter: &Arbiter,
    announce: Announce,
    realtime: bool,
    progress: &Steps<'_>,
) -> Result<Vec<StarvationRow>, LabError> {
    let copy_time = arbiter.chunk_time();
    let chunk_bytes = arbiter.chunk_bytes() as usize;
    let src = vec![0x3cu8; 64 << 20];
    let mut dst = vec![1u8; 64 << 20];
    let mut rows = Vec::new();
    let iterations = opts.starvation_iterations.max(1);
    for &gc in &opts.gc_ratios {
        let op = Duration::from_nanos(announce.compute_ns).mul_f64(gc);
        let mut counts = [0u64; 2];
        for (which, preemptible) in [false, true].into_iter().enumerate() {
            let gate = Gate::new(arbiter.clone());
            gate.set_chunk_time(copy_time)?;
            if !preemptible {
                // One admission for the whole operation: it must fit the rest of the window.
                gate.set_chunk_time(op.max(Duration::from_nanos(1)))?;
            }
            let task = arbiter.register_task()?;
            let done = AtomicU64::new(0);
            let locked = AtomicBool::new(true);
            let stop = AtomicBool::new(false);
            let ready = Barrier::new(2);
            std::thread::scope(|s| -> Result<(), LabError> {
                let worker = s.spawn(|| {
                    if let Err(e) = cpu::pin_to_cpu(opts.interferer_cpu) {
                        tracing::debug!("pin: {e}");
                    }
                    ready.wait();
                    let mut off = 0usize;
                    let mut copy_chunk = |dst: &mut Vec<u8>| {
                        if off + chunk_bytes > dst.len() {
                            off = 0;
                        }
                        dst[off..off + chunk_bytes].copy_from_slice(&src[off..off + chunk_bytes]);
                        off += chunk_bytes;
                    };
                    while !stop.load(Ordering::Relaxed) {
                        // One operation is `op` of copying: admitted whole (it must fit the rest of a window), or
                        // chunk by chunk (it may be stopped at any chunk boundary and resumed in the next window).
                        let mut worked = Duration::ZERO;
                        if !preemptible {
                            gate.admit();
                        }
                        while worked < op && !stop.load(Ordering::Relaxed) {
                            if preemptible {
                                gate.admit();
                            }
                            let t = Instant::now();
                            copy_chunk(&mut dst);
                            worked += t.elapsed();
                        }
                        if locked.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                // The PREM task holds the window from its first announcement to NO_OPER; the worker starts first
                // so it is waiting on the gate when the window opens.
                task.com(Duration::from_nanos(announce.compute_ns))?;
                ready.wait();
                let r = std::thread::scope(|s2| {
                    s2.spawn(|| {
                        enter_task_cpu(opts.task_cpu, realtime);
                        prem.run(iterations, Some((&task, announce)), Duration::ZERO, || {})
                    })
                    .join()
                    .map_err(|_| LabError::from("the PREM thread panicked"))
                    .and_then(|r| r)
                });
                locked.store(false, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
                // A worker waiting on the gate is released once the task is gone.
                drop(task);
                worker
                    .join()
                    .map_err(|_| LabError::from("the starvation worker panicked"))?;
                r.map(|_| ())
            })?;
            counts[which] = done.load(Ordering::Relaxed);
        }
        rows.push(StarvationRow {
            gc_ratio: gc,
            iterations: counts[0],
            iterations_preemptible: counts[1],
        });
        progress.inc(1);
    }
    Ok(rows)
}
