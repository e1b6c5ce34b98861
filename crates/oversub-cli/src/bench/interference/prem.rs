//! Part 2 of `oversub bench interference`: a PREM task against transfers (SiΓ Sec. 5, Figs. 5-8).
//!
//! The PREM task (pinned to the first CPU, SCHED_FIFO where allowed) walks 256 MB of RGB pixels in iterations
//! whose working set (input and output) is 85% of the last-level cache: load (copy the slice into a local buffer),
//! compute (RGB to Y, repeated so that compute is to load as in the paper's Table 2), unload (copy the Y values
//! out). An interferer on the last CPU pages buffers out and in through oversub's pager, or copies memory in
//! 1 MiB chunks (a copy-engine stand-in). Each runs alone, together (interfered), and together with the arbiter
//! (arbitrated): the PREM task announces its phases and the interferer obeys the grants.
//!
//! Announced lengths: a memory phase is announced with its longest length seen alone (transfers must wait at
//! least that long) and a compute phase with its shortest (a grant must end before the earliest moment the next
//! memory phase can start; announcing the longest would let a chunk overlap the unload whenever compute finishes
//! early).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use oversub_accel::HostMemory;
use oversub_arbiter::analysis::{transfer_bound, PremPhases};
use oversub_arbiter::{measure_copy_time, Arbiter, ArbiterConfig, Gate, Task};
use oversub_core::{BufferFlags, Pool, PoolConfig};
use oversub_io::SwapStore;
use serde::Serialize;

use super::cpu;
use crate::bench::BoxError;

/// Table 2 of the SiΓ paper, TX1 averages (µs): the proportions the PREM task is tuned to.
pub const PAPER_TX1_US: (f64, f64, f64) = (444.0, 8784.0, 716.0);

/// What the interferer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfererKind {
    /// Page buffers out and in through oversub's pager (host backend, swap store).
    Paging,
    /// Copy memory between two large buffers in 1 MiB chunks (a copy engine stand-in).
    Copy,
}

impl InterfererKind {
    pub fn name(self) -> &'static str {
        match self {
            InterfererKind::Paging => "paging",
            InterfererKind::Copy => "copy",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PremOptions {
    pub llc_bytes: u64,
    /// Pixel data walked per pass (the paper's 256 MB).
    pub data_bytes: u64,
    /// Passes over the data per condition.
    pub passes: usize,
    /// Buffers the paging interferer pages out and in (two of this size).
    pub paging_buffer_bytes: u64,
    /// Bytes the copy interferer copies per operation (the paper's TX1 H2D copy: 100 MB).
    pub copy_bytes: u64,
    pub store_dir: PathBuf,
    pub task_cpu: usize,
    pub interferer_cpu: usize,
    /// GC ratios of the starvation curve.
    pub gc_ratios: Vec<f64>,
    /// PREM iterations per starvation point.
    pub starvation_iterations: usize,
}

/// min / mean / max in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PhaseStats {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

impl PhaseStats {
    fn of(samples_s: &[f64]) -> PhaseStats {
        if samples_s.is_empty() {
            return PhaseStats {
                min: 0.0,
                mean: 0.0,
                max: 0.0,
            };
        }
        let n = samples_s.len() as f64;
        PhaseStats {
            min: samples_s.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
            mean: samples_s.iter().sum::<f64>() / n * 1e6,
            max: samples_s.iter().copied().fold(0.0, f64::max) * 1e6,
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
    /// Every phase's samples in seconds (load, compute, unload), for the box plots.
    #[serde(skip)]
    pub samples_s: [Vec<f64>; 3],
}

/// Throughput of an interferer, MB/s (10^6 bytes per second).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InterfererMbs {
    pub alone: f64,
    pub interfered: f64,
    pub arbitrated: f64,
}

/// One interferer kind's three conditions.
#[derive(Debug, Clone, Serialize)]
pub struct InterfererRuns {
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
    /// Eq. 2 in whole chunks, with T(MG) = chunks × T(Q) (`None`: a window holds no chunk).
    pub bound_chunked_s: Option<f64>,
    /// Chunks per operation.
    pub op_chunks: u64,
    /// The gate's chunk time T(Q), seconds.
    pub chunk_time_s: f64,
    pub gate_waits: u64,
    pub gate_preemptions: u64,
}

/// Settings of the PREM task, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct PremSettings {
    pub llc_bytes: u64,
    pub working_set_bytes: u64,
    pub data_bytes: u64,
    pub passes: usize,
    pub compute_repetitions: usize,
    pub realtime: bool,
    /// The phases announced to the arbiter, µs (load and unload: longest alone; compute: shortest alone).
    pub announced_load_us: f64,
    pub announced_compute_us: f64,
    pub announced_unload_us: f64,
    /// Server round trip ε, µs (mean of many requests).
    pub epsilon_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PremResult {
    pub alone: Condition,
    pub interfered: Condition,
    pub arbitrated: Condition,
    pub interferer_mbs: InterfererMbs,
    pub paging: InterfererRuns,
    pub copy: InterfererRuns,
    pub settings: PremSettings,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct StarvationRow {
    pub gc_ratio: f64,
    /// Non-preemptible operations of GC × T(C) completed inside the locked window (Fig. 6/8, blue).
    pub iterations: u64,
    /// The same work split into admitted 1 MiB chunks, i.e. preemptible at chunk boundaries (Fig. 8, red).
    pub iterations_preemptible: u64,
}

/// Progress-bar steps of `run`.
pub fn steps(opts: &PremOptions) -> u64 {
    // calibration, alone, 2 interferers x (alone, interfered, arbitrated), starvation points
    2 + 6 + opts.gc_ratios.len() as u64
}

/// The PREM task's buffers and kernels.
struct PremTask {
    input: Vec<u8>,
    output: Vec<u8>,
    local_in: Vec<u8>,
    local_out: Vec<u8>,
    compute_reps: usize,
    /// Idle time after each iteration, as a fraction of the iteration, so that a SCHED_FIFO task stays under the
    /// kernel's real-time throttling budget (95% of each second by default) instead of being stopped for 50 ms.
    rest_fraction: f64,
}

#[derive(Debug, Default, Clone)]
struct PhaseTimes {
    load: Vec<f64>,
    compute: Vec<f64>,
    unload: Vec<f64>,
}

impl PhaseTimes {
    fn condition(&self) -> Condition {
        Condition {
            mem_load_us: PhaseStats::of(&self.load),
            compute_us: PhaseStats::of(&self.compute),
            mem_unload_us: PhaseStats::of(&self.unload),
            iterations: self.load.len(),
            samples_s: [self.load.clone(), self.compute.clone(), self.unload.clone()],
        }
    }
}

/// What the PREM task announces.
#[derive(Debug, Clone, Copy)]
struct Announce {
    load: Duration,
    compute: Duration,
    unload: Duration,
}

impl PremTask {
    fn new(llc_bytes: u64, data_bytes: u64) -> PremTask {
        // 85% of the LLC holds one iteration's input (3 bytes a pixel) and output (1 byte a pixel).
        let ws = llc_bytes * 85 / 100;
        let pixels = (ws / 4).max(4096) as usize / 64 * 64;
        let total_pixels = (data_bytes / 3) as usize / pixels * pixels;
        let total_pixels = total_pixels.max(pixels);
        let mut input = vec![0u8; total_pixels * 3];
        crate::mem::fill_random(&mut input, 0x2545_F491_4F6C_DD1D);
        // Every buffer is written once here, so no phase pays for first-touch page faults.
        PremTask {
            input,
            output: vec![1u8; total_pixels],
            local_in: vec![1u8; pixels * 3],
            local_out: vec![1u8; pixels],
            compute_reps: 1,
            rest_fraction: 0.0,
        }
    }

    fn working_set(&self) -> u64 {
        (self.local_in.len() + self.local_out.len()) as u64
    }

    fn iterations_per_pass(&self) -> usize {
        self.output.len() / self.local_out.len()
    }

    fn load(&mut self, i: usize) {
        let n = self.local_in.len();
        self.local_in
            .copy_from_slice(&self.input[i * n..(i + 1) * n]);
    }

    fn compute(&mut self) {
        for _ in 0..self.compute_reps {
            self.compute_once();
        }
    }

    fn compute_once(&mut self) {
        for (y, px) in self
            .local_out
            .iter_mut()
            .zip(std::hint::black_box(&self.local_in).chunks_exact(3))
        {
            let v = 77 * px[0] as u32 + 150 * px[1] as u32 + 29 * px[2] as u32;
            *y = (v >> 8) as u8;
        }
        std::hint::black_box(&mut self.local_out);
    }

    fn unload(&mut self, i: usize) {
        let m = self.local_out.len();
        self.output[i * m..(i + 1) * m].copy_from_slice(&self.local_out);
    }

    /// Runs `iterations` PREM iterations (cycling over the data), announcing phases when a task is given, and
    /// calling `tick` after each.
    fn run(
        &mut self,
        iterations: usize,
        task: Option<(&Task, Announce)>,
        mut tick: impl FnMut(),
    ) -> Result<PhaseTimes, BoxError> {
        let per_pass = self.iterations_per_pass();
        let mut times = PhaseTimes::default();
        for k in 0..iterations {
            let i = k % per_pass;
            if let Some((t, a)) = task {
                t.mem(a.load)?;
            }
            let t0 = Instant::now();
            self.load(i);
            let t1 = Instant::now();
            let t2 = Instant::now();
            match task {
                // A long compute phase is re-announced as it progresses: before each repetition, the shortest time
                // the rest can take. The window then never ends long before the real phase does, even when the
                // phase runs slow.
                Some((t, a)) => {
                    let per_rep = a.compute / self.compute_reps.max(1) as u32;
                    for r in 0..self.compute_reps {
                        t.com(
                            (per_rep * (self.compute_reps - r) as u32)
                                .max(Duration::from_micros(1)),
                        )?;
                        self.compute_once();
                    }
                }
                None => self.compute(),
            }
            let t3 = Instant::now();
            if let Some((t, a)) = task {
                t.mem(a.unload)?;
            }
            let t4 = Instant::now();
            self.unload(i);
            let t5 = Instant::now();
            times.load.push((t1 - t0).as_secs_f64());
            times.compute.push((t3 - t2).as_secs_f64());
            times.unload.push((t5 - t4).as_secs_f64());
            if self.rest_fraction > 0.0 {
                let rest = (t5 - t0).mul_f64(self.rest_fraction);
                if let Some((t, _)) = task {
                    // Idle time touches no memory: transfers may use it.
                    t.com(rest.max(Duration::from_micros(1)))?;
                }
                std::thread::sleep(rest);
            }
            tick();
        }
        if let Some((t, _)) = task {
            t.no_oper()?;
        }
        Ok(times)
    }
}

/// The interferer's loop, on its own CPU: runs operations until `stop`, each admitted by `gate` when given.
struct Interferer {
    ops: u64,
    bytes: u64,
    op_times: Vec<f64>,
    elapsed: f64,
}

fn run_interferer(
    kind: InterfererKind,
    opts: &PremOptions,
    gate: Option<Arc<Gate>>,
    stop: &AtomicBool,
    ready: &Barrier,
) -> Result<Interferer, BoxError> {
    if let Err(e) = cpu::pin_to_cpu(opts.interferer_cpu) {
        tracing::warn!(
            "cannot pin the interferer to CPU {}: {e}",
            opts.interferer_cpu
        );
    }
    let mut op_times = Vec::new();
    let mut bytes = 0u64;
    let result = match kind {
        InterfererKind::Paging => {
            let size = opts.paging_buffer_bytes;
            let cap = (2 * size).next_multiple_of(2 << 20) + (8 << 20);
            let store = Arc::new(
                SwapStore::builder()
                    .capacity_bytes(cap)
                    .create_temp(&opts.store_dir)?,
            );
            let mut config = PoolConfig::new(cap);
            if let Some(g) = &gate {
                config = config.gate(Arc::clone(g));
            }
            // Created on the pinned thread, so the pool's I/O thread shares the interferer's CPU.
            let pool = Pool::new(config, Arc::new(HostMemory::default()), store)?;
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
            let mut failure = None;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = (|| -> Result<(), BoxError> {
                    for b in bufs {
                        space.page_out(b)?;
                    }
                    for b in bufs {
                        space.page_in(b)?;
                    }
                    Ok(())
                })();
                if let Err(e) = r {
                    failure = Some(e);
                    break;
                }
                // Counted only when the whole operation fit the run.
                if !stop.load(Ordering::Relaxed) {
                    op_times.push(t.elapsed().as_secs_f64());
                    bytes += 4 * size;
                }
            }
            let elapsed = start.elapsed().as_secs_f64();
            match failure {
                Some(e) => Err(e),
                None => Ok(elapsed),
            }
        }
        InterfererKind::Copy => {
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
                    if let Some(g) = &gate {
                        g.admit();
                    }
                    dst[off..off + len].copy_from_slice(&src[off..off + len]);
                    off += len;
                }
                std::hint::black_box(&mut dst);
                if !stop.load(Ordering::Relaxed) {
                    op_times.push(t.elapsed().as_secs_f64());
                    bytes += n as u64;
                }
            }
            Ok(start.elapsed().as_secs_f64())
        }
    };
    let elapsed = result?;
    Ok(Interferer {
        ops: op_times.len() as u64,
        bytes,
        op_times,
        elapsed,
    })
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

/// Runs the PREM task on its CPU while (optionally) an interferer runs on the other.
fn run_condition(
    prem: &mut PremTask,
    opts: &PremOptions,
    iterations: usize,
    interferer: Option<(InterfererKind, Option<Arc<Gate>>)>,
    task: Option<(&Task, Announce)>,
    realtime: bool,
) -> Result<(PhaseTimes, Option<Interferer>), BoxError> {
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        let handle = interferer.map(|(kind, gate)| {
            let (stop, ready) = (&stop, &ready);
            s.spawn(move || run_interferer(kind, opts, gate, stop, ready))
        });
        if handle.is_some() {
            ready.wait();
        }
        let times = prem_thread(prem, opts, iterations, task, realtime);
        stop.store(true, Ordering::Relaxed);
        let inter = match handle {
            Some(h) => Some(
                h.join()
                    .map_err(|_| BoxError::from("the interferer thread panicked"))??,
            ),
            None => None,
        };
        Ok((times?, inter))
    })
}

/// Runs the PREM iterations on the task CPU, at real-time priority when allowed, in a thread of its own so the
/// caller's scheduling is untouched.
fn prem_thread(
    prem: &mut PremTask,
    opts: &PremOptions,
    iterations: usize,
    task: Option<(&Task, Announce)>,
    realtime: bool,
) -> Result<PhaseTimes, BoxError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Err(e) = cpu::pin_to_cpu(opts.task_cpu) {
                tracing::warn!("cannot pin the PREM task to CPU {}: {e}", opts.task_cpu);
            }
            if realtime {
                let _ = cpu::try_realtime(99);
            }
            prem.run(iterations, task, || {})
        })
        .join()
        .map_err(|_| BoxError::from("the PREM thread panicked"))?
    })
}

/// The share of each period that the kernel withholds from real-time tasks (`None` when throttling is off).
fn rt_throttle_share() -> Option<f64> {
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

fn server_round_trip(arbiter: &Arbiter) -> f64 {
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(arbiter.request(Duration::from_micros(100)));
    }
    t.elapsed().as_secs_f64() / n as f64
}

pub fn run(
    opts: &PremOptions,
    progress: &ProgressBar,
) -> Result<(PremResult, Vec<StarvationRow>), BoxError> {
    let mut prem = PremTask::new(opts.llc_bytes, opts.data_bytes);
    let per_pass = prem.iterations_per_pass();
    let iterations = per_pass * opts.passes.max(1);

    // Real-time priority: try it in a throwaway thread to learn whether it is allowed.
    let realtime = std::thread::spawn(|| cpu::try_realtime(99).unwrap_or(false))
        .join()
        .unwrap_or(false);
    if !realtime {
        tracing::warn!("SCHED_FIFO not permitted; the PREM task runs at normal priority");
    } else if let Some(share) = rt_throttle_share() {
        // Twice the throttled share: the budget is counted per period, and iterations do not align with it.
        prem.rest_fraction = 2.0 * share;
        tracing::info!(
            "real-time throttling leaves {:.0}% of each period to other tasks; the PREM task rests {:.0}% after each iteration",
            share * 100.0,
            prem.rest_fraction * 100.0
        );
    }

    // Calibrate compute repetitions to the paper's compute/load proportion.
    let cal = run_condition(&mut prem, opts, per_pass.clamp(2, 6), None, None, realtime)?.0;
    let load = PhaseStats::of(&cal.load).mean;
    let compute = PhaseStats::of(&cal.compute).mean;
    let target = PAPER_TX1_US.1 / PAPER_TX1_US.0;
    prem.compute_reps = ((target * load / compute.max(1e-3)).round() as usize).clamp(1, 10_000);
    tracing::info!(
        load_us = load,
        compute_us = compute,
        reps = prem.compute_reps,
        "PREM task calibrated to compute/load = {target:.1}"
    );
    progress.inc(1);

    let (alone_times, _) = run_condition(&mut prem, opts, iterations, None, None, realtime)?;
    progress.inc(1);
    let alone = alone_times.condition();
    let announce = Announce {
        load: Duration::from_secs_f64(alone.mem_load_us.max * 1e-6),
        compute: Duration::from_secs_f64(alone.compute_us.min * 1e-6),
        unload: Duration::from_secs_f64(alone.mem_unload_us.max * 1e-6),
    };

    let arbiter = Arbiter::in_process(ArbiterConfig {
        chunk_time: Some(measure_copy_time(1 << 20)),
        ..ArbiterConfig::default()
    })?;
    let epsilon = server_round_trip(&arbiter);
    // The bound's phases: memory phases at their announced worst case (the unload followed by the rest the task
    // takes, which transfers cannot count on), compute at its announced shortest and its longest alone.
    let rest_worst = Duration::from_secs_f64(
        (alone.mem_load_us.max + alone.compute_us.max + alone.mem_unload_us.max)
            * 1e-6
            * prem.rest_fraction,
    );
    let phases = PremPhases {
        load_s: announce.load.as_secs_f64(),
        compute_s: announce.compute.as_secs_f64(),
        compute_worst_s: alone.compute_us.max * 1e-6,
        unload_s: (announce.unload + rest_worst).as_secs_f64(),
        load_worst_s: announce.load.as_secs_f64(),
        unload_worst_s: (announce.unload + rest_worst).as_secs_f64(),
    };

    let mut runs = Vec::new();
    for kind in [InterfererKind::Paging, InterfererKind::Copy] {
        // The interferer alone, for its throughput and operation time.
        let alone_inter = {
            let stop = AtomicBool::new(false);
            let ready = Barrier::new(2);
            let secs = (iterations as f64
                * (alone.mem_load_us.mean + alone.compute_us.mean + alone.mem_unload_us.mean)
                * 1e-6)
                .clamp(0.5, 10.0);
            std::thread::scope(|s| {
                let h = s.spawn(|| run_interferer(kind, opts, None, &stop, &ready));
                ready.wait();
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.store(true, Ordering::Relaxed);
                h.join()
                    .map_err(|_| BoxError::from("the interferer thread panicked"))?
            })?
        };
        progress.inc(1);
        let (interfered, inter) = run_condition(
            &mut prem,
            opts,
            iterations,
            Some((kind, None)),
            None,
            realtime,
        )?;
        progress.inc(1);
        let gate = Arc::new(Gate::new(arbiter.clone()));
        // The paging interferer's pool measures T(Q) on its store when it starts; the copy loop's is a memcpy's.
        if kind == InterfererKind::Copy {
            gate.set_chunk_time(arbiter.chunk_time())?;
        }
        let task = arbiter.register_task()?;
        let (arbitrated, arb_inter) = run_condition(
            &mut prem,
            opts,
            iterations,
            Some((kind, Some(Arc::clone(&gate)))),
            Some((&task, announce)),
            realtime,
        )?;
        drop(task);
        progress.inc(1);
        let inter = inter.ok_or("interferer result missing")?;
        let arb_inter = arb_inter.ok_or("interferer result missing")?;
        let chunk_s = gate.chunk_time().as_secs_f64();
        // Eq. 2 as printed takes the operation's length alone; the chunked form takes its worst case as chunks,
        // each of at most T(Q).
        let op_bytes = match kind {
            InterfererKind::Paging => 4 * opts.paging_buffer_bytes,
            InterfererKind::Copy => opts.copy_bytes,
        };
        let op_chunks = op_bytes.div_ceil(gate.chunk_bytes().max(1));
        let paper = transfer_bound(alone_inter.mean_op(), &phases, epsilon, chunk_s)?;
        let chunked = transfer_bound(op_chunks as f64 * chunk_s, &phases, epsilon, chunk_s)?;
        let stats = gate.stats();
        tracing::info!(
            kind = kind.name(),
            alone_mbs = alone_inter.mbs(),
            interfered_mbs = inter.mbs(),
            arbitrated_mbs = arb_inter.mbs(),
            ops = arb_inter.ops,
            "interferer done"
        );
        runs.push(InterfererRuns {
            interfered: interfered.condition(),
            arbitrated: arbitrated.condition(),
            interferer_mbs: InterfererMbs {
                alone: alone_inter.mbs(),
                interfered: inter.mbs(),
                arbitrated: arb_inter.mbs(),
            },
            op_arbitrated_max_s: arb_inter.max_op(),
            op_arbitrated_mean_s: arb_inter.mean_op(),
            op_alone_mean_s: alone_inter.mean_op(),
            bound_paper_s: paper.paper_s,
            bound_chunked_s: chunked.chunked_s,
            op_chunks,
            chunk_time_s: chunk_s,
            gate_waits: stats.waits,
            gate_preemptions: stats.preemptions,
        });
    }
    let copy = runs.pop().ok_or("copy runs missing")?;
    let paging = runs.pop().ok_or("paging runs missing")?;

    let starvation = starvation(&mut prem, opts, &arbiter, announce, realtime, progress)?;

    let settings = PremSettings {
        llc_bytes: opts.llc_bytes,
        working_set_bytes: prem.working_set(),
        data_bytes: prem.input.len() as u64,
        passes: opts.passes,
        compute_repetitions: prem.compute_reps,
        realtime,
        announced_load_us: announce.load.as_secs_f64() * 1e6,
        announced_compute_us: announce.compute.as_secs_f64() * 1e6,
        announced_unload_us: announce.unload.as_secs_f64() * 1e6,
        epsilon_us: epsilon * 1e6,
    };
    Ok((
        PremResult {
            alone,
            interfered: paging.interfered.clone(),
            arbitrated: paging.arbitrated.clone(),
            interferer_mbs: paging.interferer_mbs,
            paging,
            copy,
            settings,
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
    progress: &ProgressBar,
) -> Result<Vec<StarvationRow>, BoxError> {
    let copy_time = arbiter.chunk_time();
    let chunk_bytes = arbiter.chunk_bytes() as usize;
    let src = vec![0x3cu8; 64 << 20];
    let mut dst = vec![1u8; 64 << 20];
    let mut rows = Vec::new();
    let iterations = opts.starvation_iterations.max(1);
    for &gc in &opts.gc_ratios {
        let op = announce.compute.mul_f64(gc);
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
            std::thread::scope(|s| -> Result<(), BoxError> {
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
                task.com(announce.compute)?;
                ready.wait();
                let r = prem_thread(prem, opts, iterations, Some((&task, announce)), realtime);
                locked.store(false, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
                // A worker waiting on the gate is released once the task is gone.
                drop(task);
                worker
                    .join()
                    .map_err(|_| BoxError::from("the starvation worker panicked"))?;
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
