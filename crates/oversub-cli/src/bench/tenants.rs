//! `oversub bench tenants`: several tenants oversubscribing one pool, run alone, together under plain LRU
//! swapping, and together under the contention-aware plan (Yang & Chen, Alg. 1 and 2).
//!
//! Each tenant follows the paper's task model: its memory is a set of buffers, and each subtask reads one buffer,
//! executes (the accelerator's kernel time, emulated by a timer: the host backend has no accelerator and the CPU is
//! free meanwhile), and writes the buffer back; it cycles over its buffers for some rounds. Alone, a tenant's
//! buffers all fit. Together they need more than the pool holds:
//! - **LRU** (the baseline): a buffer that is not resident is paged in, paging out the least recently used
//!   buffer of any tenant to make room: cyclic access over more than the capacity thrashes.
//! - **planned**: each tenant is a [`Pool::tenant_space`] with its priority (the contention degree W_i measured
//!   from the alone and LRU runs, as the paper does, or the order given); the lowest-priority tenants keep at most
//!   (1 − α_i) of their buffers resident and read and write the rest on the store directly; nobody pages.
//!
//! The figure of merit is each tenant's slowdown against running alone, above all the highest-priority one's.
//!
//! **Priority I/O** (Alg. 1 line 4, the memory command queue served by priority): in the planned runs above the
//! top tenant is whole in memory and never touches the store, so the store's queue order cannot matter to it. A
//! second experiment starts every tenant *cold* (its buffers paged out, as when a task starts or resumes and loads
//! its data): each pages its buffers in up to its quota on first use while the victims stream theirs. It runs the
//! top-ranked tenant alone (cold), then all tenants together (cold) on a FIFO store and on a store with priority
//! I/O ([`oversub_io::StoreBuilder::priority_io`]), `--samples` times each, and reports the top tenant's slowdown
//! with its spread.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use oversub_accel::{DeviceMemory, HostMemory};
use oversub_core::{
    AddressSpace, AlphaRule, Buffer, BufferFlags, PagerError, Pool, PoolConfig, TenantConfig,
};
use oversub_io::SwapStore;
use oversub_report::{format_bytes, text_table, BarChart, BarSeries};
use oversub_tenants::priority;
use serde::Serialize;

use super::paging::EngineArg;
use super::BoxError;

const MIB: u64 = 1 << 20;

/// A comma-separated list of durations (one clap value, not many).
#[derive(Debug, Clone)]
pub struct Durations(Vec<Duration>);

fn parse_duration_list(s: &str) -> Result<Durations, String> {
    s.split(',')
        .map(|part| oversub_arbiter::parse_duration(part.trim()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()
        .map(Durations)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PriorityArg {
    /// W_i from the alone and LRU runs (Alg. 1).
    Measured,
    /// The tenants' order: t0 highest.
    Given,
}

#[derive(Debug, Args)]
pub struct TenantsArgs {
    /// Number of tenants.
    #[arg(long, default_value_t = 3)]
    tenants: usize,
    /// Memory each tenant needs (its buffers together).
    #[arg(long, default_value = "256MiB", value_parser = crate::parse_size_arg)]
    demand: u64,
    /// Size of each buffer (one subtask's data).
    #[arg(long, default_value = "16MiB", value_parser = crate::parse_size_arg)]
    buffer: u64,
    /// Total demand over pool capacity (1.3: the tenants need 30% more than the pool holds).
    #[arg(long, default_value_t = 1.3)]
    oversubscription: f64,
    /// Kernel time per subtask, one per tenant, cycled (e.g. `10ms,20ms,40ms`).
    #[arg(long, default_value = "10ms,20ms,40ms", value_parser = parse_duration_list)]
    compute: Durations,
    /// Passes of each tenant over its buffers.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Runs of each condition; medians are reported.
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Where tenant priorities come from.
    #[arg(long, value_enum, default_value_t = PriorityArg::Measured)]
    priorities: PriorityArg,
    /// Swap-ratio rule of Alg. 2: `fraction` (default) or `printed-ceil`.
    #[arg(long, default_value = "fraction")]
    alpha_rule: AlphaRule,
    /// Directory for the swap files (default: the temp directory).
    #[arg(long)]
    store_dir: Option<PathBuf>,
    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    engine: EngineArg,
    /// Small sizes and one sample, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG chart of the slowdowns into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Skip the cold-start experiment (FIFO against priority I/O).
    #[arg(long)]
    no_priority_io: bool,
    /// Windows of the priority queue to measure in the cold-start experiment (requests let into the engine at
    /// once; 0 means the engine's queue depth), comma-separated.
    #[arg(long, default_value = "0", value_delimiter = ',')]
    priority_windows: Vec<usize>,
}

/// One tenant's figures.
#[derive(Debug, Clone, Serialize)]
struct TenantRow {
    tenant: String,
    compute_ms: f64,
    subtasks: usize,
    demand_bytes: u64,
    alone_s: f64,
    lru_s: f64,
    planned_s: f64,
    slowdown_lru: f64,
    slowdown_planned: f64,
    contention_degree: f64,
    rank: usize,
    alpha: f64,
    resident_limit_bytes: u64,
    lru_paged_bytes: u64,
    planned_direct_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    tenants: usize,
    demand_bytes: u64,
    buffer_bytes: u64,
    capacity_bytes: u64,
    oversubscription: f64,
    rounds: usize,
    samples: usize,
    priorities: &'static str,
    alpha_rule: AlphaRule,
    rows: Vec<TenantRow>,
    highest_priority_slowdown_planned: f64,
    highest_priority_slowdown_lru: f64,
    target_highest_priority_slowdown: f64,
    target_met: bool,
    /// The cold-start experiment; absent with `--no-priority-io`.
    priority_io: Option<PriorityIoReport>,
}

/// The top tenant, cold, alone and together on a FIFO store and with priority I/O: every sample's seconds.
#[derive(Debug, Serialize)]
struct PriorityIoReport {
    tenant: String,
    alone_cold_s: Vec<f64>,
    fifo_s: Vec<f64>,
    /// Median together ÷ median alone.
    slowdown_fifo: f64,
    /// (min, max) of each sample ÷ the median alone.
    slowdown_fifo_range: (f64, f64),
    /// Every tenant's median response time together on the FIFO store.
    all_tenants_fifo_s: Vec<(String, f64)>,
    /// One entry per window measured.
    priority: Vec<PriorityWindowReport>,
    target_slowdown: f64,
    /// The best window's slowdown meets the target.
    target_met: bool,
}

#[derive(Debug, Serialize)]
struct PriorityWindowReport {
    /// Requests let into the engine at once (the engine's queue depth when the option was 0).
    window: usize,
    samples_s: Vec<f64>,
    slowdown: f64,
    slowdown_range: (f64, f64),
    /// Every tenant's median response time.
    all_tenants_s: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One workload with the pool to itself.
    Alone,
    /// All workloads, pool-wide LRU swapping.
    Lru,
}

/// A tenant's workload.
#[derive(Debug, Clone)]
struct Workload {
    name: String,
    compute: Duration,
    buffers: usize,
    buffer_bytes: u64,
    rounds: usize,
}

impl Workload {
    fn demand(&self) -> u64 {
        self.buffers as u64 * self.buffer_bytes
    }

    fn fill_byte(&self, tenant: usize, b: usize) -> u8 {
        (tenant * 31 + b * 7 + 1) as u8
    }
}

/// What one tenant's run measured.
#[derive(Debug, Clone, Copy, Default)]
struct RunOutcome {
    response_s: f64,
    paged_bytes: u64,
    direct_bytes: u64,
}

pub fn run(mut args: TenantsArgs) -> Result<(), BoxError> {
    if args.quick {
        args.demand = args.demand.min(64 * MIB);
        args.buffer = args.buffer.min(4 * MIB);
        args.samples = 1;
        args.rounds = args.rounds.min(2);
    }
    if args.tenants < 2 {
        return Err("--tenants: at least 2 tenants are needed to share a pool".into());
    }
    if args.buffer == 0 || args.demand < args.buffer {
        return Err("--buffer must be at least one byte and no larger than --demand".into());
    }
    if !(args.oversubscription.is_finite() && args.oversubscription >= 1.0) {
        return Err("--oversubscription must be a number of at least 1.0".into());
    }
    if args.samples == 0 || args.rounds == 0 {
        return Err("--samples and --rounds must be at least 1".into());
    }
    if args.compute.0.is_empty() {
        return Err("--compute needs at least one duration".into());
    }
    let buffers = usize::try_from(args.demand / args.buffer)?;
    let workloads: Vec<Workload> = (0..args.tenants)
        .map(|k| Workload {
            name: format!("t{k}"),
            compute: args.compute.0[k % args.compute.0.len()],
            buffers,
            buffer_bytes: args.buffer,
            rounds: args.rounds,
        })
        .collect();
    let total: u64 = workloads.iter().map(Workload::demand).sum();
    let capacity = ((total as f64 / args.oversubscription) as u64) / (2 * MIB) * (2 * MIB);
    // Every tenant pins one buffer while it works on it, so LRU needs room for one each.
    if capacity < args.buffer * args.tenants as u64 {
        return Err(format!(
            "a pool of {} cannot hold one {} buffer per tenant; lower --oversubscription or --buffer",
            format_bytes(capacity),
            format_bytes(args.buffer)
        )
        .into());
    }
    let store_dir = args.store_dir.clone().unwrap_or_else(std::env::temp_dir);
    let env = Env {
        capacity,
        store_bytes: total + 64 * MIB,
        store_dir,
        engine: args.engine,
        rule: args.alpha_rule,
    };

    let steps = (args.tenants + 2) * args.samples
        + if args.no_priority_io {
            0
        } else {
            (2 + args.priority_windows.len()) * args.samples
        };
    let bar = crate::progress_bar(steps as u64, "tenants", "", false);

    // Alone, then together under LRU: these also give Alg. 1 its C_i(1) and C_i(N).
    let mut alone: Vec<Vec<RunOutcome>> = vec![Vec::new(); args.tenants];
    let mut lru: Vec<Vec<RunOutcome>> = vec![Vec::new(); args.tenants];
    for _ in 0..args.samples {
        for (k, w) in workloads.iter().enumerate() {
            bar.set_message(format!("{} alone", w.name));
            let out = run_condition(&env, std::slice::from_ref(w), Mode::Alone, k)?;
            alone[k].push(out[0]);
            bar.inc(1);
        }
        bar.set_message("together, LRU swapping");
        for (k, o) in run_condition(&env, &workloads, Mode::Lru, 0)?
            .into_iter()
            .enumerate()
        {
            lru[k].push(o);
        }
        bar.inc(1);
    }
    let alone_s: Vec<f64> = alone
        .iter()
        .map(|v| median(v.iter().map(|o| o.response_s)))
        .collect();
    let lru_s: Vec<f64> = lru
        .iter()
        .map(|v| median(v.iter().map(|o| o.response_s)))
        .collect();
    let contention: Vec<priority::Contention> = workloads
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let subtasks = u32::try_from(w.buffers * w.rounds).unwrap_or(u32::MAX);
            priority::Contention::new(w.name.clone(), alone_s[k], lru_s[k], subtasks)
        })
        .collect::<Result<_, _>>()?;
    let degrees: Vec<f64> = contention
        .iter()
        .map(priority::Contention::degree)
        .collect();
    let weights: Vec<f64> = match args.priorities {
        PriorityArg::Measured => degrees.clone(),
        PriorityArg::Given => (0..args.tenants)
            .map(|k| (args.tenants - k) as f64)
            .collect(),
    };

    let mut planned: Vec<Vec<RunOutcome>> = vec![Vec::new(); args.tenants];
    let mut quotas = Vec::new();
    for _ in 0..args.samples {
        bar.set_message("together, planned quotas");
        let (outs, q) = run_planned(&env, &workloads, &weights)?;
        for (k, o) in outs.into_iter().enumerate() {
            planned[k].push(o);
        }
        quotas = q;
        bar.inc(1);
    }
    let mut priority_io = None;
    if !args.no_priority_io {
        // The top-ranked tenant by the plan just run.
        let top_name = quotas
            .iter()
            .min_by_key(|q| q.rank)
            .map(|q| q.name.clone())
            .ok_or("no tenants")?;
        let top_k = workloads
            .iter()
            .position(|w| w.name == top_name)
            .ok_or("top tenant not found")?;
        let windows = &args.priority_windows;
        let mut alone_cold = Vec::new();
        // Condition 0 is the FIFO store; condition 1 + i the priority queue with windows[i].
        let conditions = 1 + windows.len();
        let mut top_s: Vec<Vec<f64>> = vec![Vec::new(); conditions];
        let mut all_s: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); args.tenants]; conditions];
        for _ in 0..args.samples {
            bar.set_message(format!("{top_name} alone, cold"));
            let (outs, _) = run_planned_cold(
                &env,
                std::slice::from_ref(&workloads[top_k]),
                &weights[top_k..=top_k],
                None,
            )?;
            alone_cold.push(outs[0].response_s);
            bar.inc(1);
            for c in 0..conditions {
                let window = if c == 0 { None } else { Some(windows[c - 1]) };
                bar.set_message(match window {
                    None => "together, cold, FIFO I/O".to_string(),
                    Some(w) => format!("together, cold, priority I/O (window {w})"),
                });
                let (outs, _) = run_planned_cold(&env, &workloads, &weights, window)?;
                top_s[c].push(outs[top_k].response_s);
                for (k, o) in outs.iter().enumerate() {
                    all_s[c][k].push(o.response_s);
                }
                bar.inc(1);
            }
        }
        let alone = median(alone_cold.iter().copied());
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo / alone, hi / alone)
        };
        let per_tenant = |c: usize| -> Vec<(String, f64)> {
            workloads
                .iter()
                .enumerate()
                .map(|(k, w)| (w.name.clone(), median(all_s[c][k].iter().copied())))
                .collect()
        };
        let depth = env.queue_depth()?;
        let priority: Vec<PriorityWindowReport> = windows
            .iter()
            .enumerate()
            .map(|(i, &w)| PriorityWindowReport {
                window: if w == 0 { depth } else { w },
                slowdown: median(top_s[1 + i].iter().copied()) / alone,
                slowdown_range: range(&top_s[1 + i]),
                all_tenants_s: per_tenant(1 + i),
                samples_s: top_s[1 + i].clone(),
            })
            .collect();
        let best = priority
            .iter()
            .map(|p| p.slowdown)
            .fold(f64::INFINITY, f64::min);
        priority_io = Some(PriorityIoReport {
            tenant: top_name,
            slowdown_fifo: median(top_s[0].iter().copied()) / alone,
            slowdown_fifo_range: range(&top_s[0]),
            all_tenants_fifo_s: per_tenant(0),
            fifo_s: top_s[0].clone(),
            alone_cold_s: alone_cold,
            priority,
            target_slowdown: 1.05,
            target_met: best <= 1.05,
        });
    }
    bar.finish_and_clear();

    let planned_s: Vec<f64> = planned
        .iter()
        .map(|v| median(v.iter().map(|o| o.response_s)))
        .collect();
    let rows: Vec<TenantRow> = workloads
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let q = quotas
                .iter()
                .find(|q: &&oversub_core::TenantQuota| q.name == w.name);
            TenantRow {
                tenant: w.name.clone(),
                compute_ms: w.compute.as_secs_f64() * 1e3,
                subtasks: w.buffers * w.rounds,
                demand_bytes: w.demand(),
                alone_s: alone_s[k],
                lru_s: lru_s[k],
                planned_s: planned_s[k],
                slowdown_lru: lru_s[k] / alone_s[k],
                slowdown_planned: planned_s[k] / alone_s[k],
                contention_degree: degrees[k],
                rank: q.map_or(k, |q| q.rank),
                alpha: q.map_or(0.0, |q| q.alpha),
                resident_limit_bytes: q.map_or(w.demand(), |q| q.resident_limit_bytes),
                lru_paged_bytes: median_u64(lru[k].iter().map(|o| o.paged_bytes)),
                planned_direct_bytes: median_u64(planned[k].iter().map(|o| o.direct_bytes)),
            }
        })
        .collect();
    let top = rows.iter().min_by_key(|r| r.rank).ok_or("no tenants")?;
    let report = Report {
        tenants: args.tenants,
        demand_bytes: args.demand,
        buffer_bytes: args.buffer,
        capacity_bytes: capacity,
        oversubscription: total as f64 / capacity as f64,
        rounds: args.rounds,
        samples: args.samples,
        priorities: match args.priorities {
            PriorityArg::Measured => "measured",
            PriorityArg::Given => "given",
        },
        alpha_rule: args.alpha_rule,
        highest_priority_slowdown_planned: top.slowdown_planned,
        highest_priority_slowdown_lru: top.slowdown_lru,
        target_highest_priority_slowdown: 1.10,
        target_met: top.slowdown_planned <= 1.10,
        rows,
        priority_io,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.plot {
        write_plot(&report, dir)?;
    }
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.collect();
    oversub_report::quartiles(&v).map_or(f64::NAN, |(_, median, _)| median)
}

fn median_u64(values: impl Iterator<Item = u64>) -> u64 {
    median(values.map(|v| v as f64)) as u64
}

/// What every run shares.
#[derive(Debug)]
struct Env {
    capacity: u64,
    store_bytes: u64,
    store_dir: PathBuf,
    engine: EngineArg,
    rule: AlphaRule,
}

impl Env {
    fn pool(&self) -> Result<Pool, BoxError> {
        self.pool_with(None)
    }

    /// The queue depth of the engines the stores get.
    fn queue_depth(&self) -> Result<usize, BoxError> {
        Ok(self.pool()?.store().engine().queue_depth())
    }

    /// A pool whose store serves by priority with this window (0: the engine's depth) when `priority_window` is
    /// given, FIFO otherwise.
    fn pool_with(&self, priority_window: Option<usize>) -> Result<Pool, BoxError> {
        let mut builder = SwapStore::builder().priority_io(priority_window.is_some());
        if let Some(w) = priority_window.filter(|&w| w > 0) {
            builder = builder.priority_window(w);
        }
        let store = builder
            .capacity_bytes(self.store_bytes)
            .engine_choice(self.engine.into())
            .create_temp(&self.store_dir)
            .map_err(|e| format!("creating a swap file in {}: {e}", self.store_dir.display()))?;
        let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
        Ok(Pool::new(
            PoolConfig::new(self.capacity).swap_rule(self.rule),
            device,
            Arc::new(store),
        )?)
    }
}

/// Runs the workloads at once in one pool: alone (one workload) or under LRU swapping.
fn run_condition(
    env: &Env,
    workloads: &[Workload],
    mode: Mode,
    first_index: usize,
) -> Result<Vec<RunOutcome>, BoxError> {
    let pool = env.pool()?;
    let spaces: Vec<AddressSpace> = workloads.iter().map(|_| pool.address_space()).collect();
    let lru = Arc::new(Lru::default());
    // Set-up: every tenant allocates and fills its buffers (under LRU, evicting as it goes); not timed.
    let mut handles: Vec<Vec<Buffer>> = Vec::new();
    for (k, w) in workloads.iter().enumerate() {
        let mut bufs = Vec::with_capacity(w.buffers);
        for b in 0..w.buffers {
            let buf = loop {
                match spaces[k].alloc(w.buffer_bytes, BufferFlags::DEFAULT) {
                    Ok(buf) => break buf,
                    Err(PagerError::OutOfMemory { .. }) if mode == Mode::Lru => {
                        lru.evict_one(&spaces, None)?;
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            spaces[k].write(
                buf,
                0,
                &vec![w.fill_byte(first_index + k, b); w.buffer_bytes as usize],
            )?;
            lru.insert(k, buf);
            bufs.push(buf);
        }
        handles.push(bufs);
    }
    run_threads(
        workloads,
        &spaces,
        &handles,
        first_index,
        |k, buf, scratch, stamp| {
            let space = &spaces[k];
            let mut paged = 0;
            if mode == Mode::Lru {
                paged = lru.acquire(&spaces, k, buf)?;
            }
            space.read(buf, 0, scratch)?;
            stamp(scratch);
            space.write(buf, 0, scratch)?;
            if mode == Mode::Lru {
                lru.release(k, buf);
            }
            Ok((paged, 0))
        },
    )
}

/// Tenants arrive one by one and fill their buffers; later arrivals shrink earlier tenants' quotas.
fn join_tenants(
    pool: &Pool,
    workloads: &[Workload],
    weights: &[f64],
) -> Result<(Vec<AddressSpace>, Vec<Vec<Buffer>>), BoxError> {
    let mut spaces = Vec::new();
    let mut handles = Vec::new();
    for (k, w) in workloads.iter().enumerate() {
        let space = pool.tenant_space(TenantConfig::new(w.name.clone(), w.demand(), weights[k]))?;
        let mut bufs = Vec::with_capacity(w.buffers);
        for b in 0..w.buffers {
            let buf = space.alloc(w.buffer_bytes, BufferFlags::DEFAULT)?;
            space.write_direct(buf, 0, &vec![w.fill_byte(k, b); w.buffer_bytes as usize])?;
            bufs.push(buf);
        }
        spaces.push(space);
        handles.push(bufs);
    }
    Ok((spaces, handles))
}

/// Runs the workloads at once as tenants of one pool under the plan.
fn run_planned(
    env: &Env,
    workloads: &[Workload],
    weights: &[f64],
) -> Result<(Vec<RunOutcome>, Vec<oversub_core::TenantQuota>), BoxError> {
    let pool = env.pool()?;
    let (spaces, handles) = join_tenants(&pool, workloads, weights)?;
    let quotas = pool.tenant_quotas();
    let outcomes = run_threads(workloads, &spaces, &handles, 0, |k, buf, scratch, stamp| {
        let space = &spaces[k];
        let resident = space.info(buf)?.state == oversub_core::BufferState::Resident;
        space.read_direct(buf, 0, scratch)?;
        stamp(scratch);
        space.write_direct(buf, 0, scratch)?;
        Ok((
            0,
            if resident {
                0
            } else {
                2 * scratch.len() as u64
            },
        ))
    })?;
    Ok((outcomes, quotas))
}

/// As [`run_planned`], but every tenant starts cold (its buffers paged out) and pages each buffer in on first use
/// as far as its quota allows; the store serves by priority (with that window) when `priority_window` is given.
fn run_planned_cold(
    env: &Env,
    workloads: &[Workload],
    weights: &[f64],
    priority_window: Option<usize>,
) -> Result<(Vec<RunOutcome>, Vec<oversub_core::TenantQuota>), BoxError> {
    let pool = env.pool_with(priority_window)?;
    let (spaces, handles) = join_tenants(&pool, workloads, weights)?;
    for (space, bufs) in spaces.iter().zip(&handles) {
        for &buf in bufs {
            if space.info(buf)?.state == oversub_core::BufferState::Resident {
                space.page_out(buf)?;
            }
        }
    }
    // Nothing of the set-up may still be in the page cache or in flight.
    pool.store().drop_cache().ok();
    let quotas = pool.tenant_quotas();
    let outcomes = run_threads(workloads, &spaces, &handles, 0, |k, buf, scratch, stamp| {
        let space = &spaces[k];
        let mut paged = 0;
        if space.info(buf)?.state == oversub_core::BufferState::PagedOut {
            match space.page_in(buf) {
                Ok(()) => paged = scratch.len() as u64,
                // Past a victim's quota: it stays on the store and is read and written there.
                Err(PagerError::QuotaExceeded { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let resident = space.info(buf)?.state == oversub_core::BufferState::Resident;
        space.read_direct(buf, 0, scratch)?;
        stamp(scratch);
        space.write_direct(buf, 0, scratch)?;
        Ok((
            paged,
            if resident {
                0
            } else {
                2 * scratch.len() as u64
            },
        ))
    })?;
    Ok((outcomes, quotas))
}

type StampFn<'a> = &'a dyn Fn(&mut [u8]);

/// One thread per tenant; all start their timed rounds together. `access(tenant, buffer, scratch, stamp)` reads
/// the buffer into `scratch`, calls `stamp` (the kernel: it waits the compute time and marks the data), writes it
/// back, and returns the bytes it paged and the bytes it moved directly. Afterwards every buffer is checked.
fn run_threads<F>(
    workloads: &[Workload],
    spaces: &[AddressSpace],
    handles: &[Vec<Buffer>],
    first_index: usize,
    access: F,
) -> Result<Vec<RunOutcome>, BoxError>
where
    F: Fn(usize, Buffer, &mut [u8], StampFn<'_>) -> Result<(u64, u64), BoxError> + Sync,
{
    let barrier = Barrier::new(workloads.len());
    let results: Vec<Result<RunOutcome, BoxError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = workloads
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let barrier = &barrier;
                let access = &access;
                let bufs = &handles[k];
                scope.spawn(move || -> Result<RunOutcome, BoxError> {
                    // Page-aligned, so direct store access needs no bounce buffer.
                    let mut scratch_buf =
                        oversub_io::AlignedBuf::new(w.buffer_bytes as usize, 4096)?;
                    let scratch = scratch_buf.as_mut_slice();
                    let mut out = RunOutcome::default();
                    barrier.wait();
                    let start = Instant::now();
                    for round in 0..w.rounds {
                        for &buf in bufs {
                            let stamp = |data: &mut [u8]| {
                                std::thread::sleep(w.compute);
                                data[..8].copy_from_slice(&(round as u64 + 1).to_le_bytes());
                            };
                            let (paged, direct) = access(k, buf, scratch, &stamp)?;
                            out.paged_bytes += paged;
                            out.direct_bytes += direct;
                        }
                    }
                    out.response_s = start.elapsed().as_secs_f64();
                    Ok(out)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("a tenant thread panicked".into()))
            })
            .collect()
    });
    let outcomes = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    // Nothing lost: every buffer carries the last round's stamp and its original fill.
    for (k, w) in workloads.iter().enumerate() {
        for (b, &buf) in handles[k].iter().enumerate() {
            let mut head = [0u8; 9];
            spaces[k].read_direct(buf, 0, &mut head)?;
            let want_stamp = (w.rounds as u64).to_le_bytes();
            if head[..8] != want_stamp || head[8] != w.fill_byte(first_index + k, b) {
                return Err(format!("{}: buffer {b} lost its data", w.name).into());
            }
        }
    }
    Ok(outcomes)
}

/// Pool-wide least-recently-used swapping, the way a plain pager shares memory: any tenant's idle buffer may go.
#[derive(Debug, Default)]
struct Lru {
    state: Mutex<LruState>,
}

#[derive(Debug, Default)]
struct LruState {
    clock: u64,
    /// (tenant, buffer) → (resident, pinned by its owner, last use).
    entries: HashMap<(usize, Buffer), (bool, bool, u64)>,
}

impl Lru {
    fn lock(&self) -> std::sync::MutexGuard<'_, LruState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, k: usize, buf: Buffer) {
        let mut st = self.lock();
        st.clock += 1;
        let now = st.clock;
        st.entries.insert((k, buf), (true, false, now));
    }

    /// Makes the buffer resident and pins it; returns the bytes paged in and out to do so.
    fn acquire(&self, spaces: &[AddressSpace], k: usize, buf: Buffer) -> Result<u64, BoxError> {
        let mut paged = 0;
        loop {
            {
                let mut st = self.lock();
                st.clock += 1;
                let now = st.clock;
                let e = st.entries.get_mut(&(k, buf)).ok_or("untracked buffer")?;
                if e.0 {
                    *e = (true, true, now);
                    return Ok(paged);
                }
            }
            match spaces[k].page_in(buf) {
                Ok(()) => {
                    paged += spaces[k].info(buf)?.reserved_bytes;
                    let mut st = self.lock();
                    st.clock += 1;
                    let now = st.clock;
                    st.entries.insert((k, buf), (true, true, now));
                    return Ok(paged);
                }
                Err(PagerError::OutOfMemory { .. }) => {
                    paged += self.evict_one(spaces, Some((k, buf)))?;
                }
                // Another tenant chose this buffer and is still paging it out.
                Err(PagerError::OperationInFlight { .. } | PagerError::AlreadyResident(_)) => {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn release(&self, k: usize, buf: Buffer) {
        if let Some(e) = self.lock().entries.get_mut(&(k, buf)) {
            e.1 = false;
        }
    }

    /// Pages out the least recently used unpinned resident buffer; returns its bytes (0 when all are pinned, after
    /// a short wait for their owners).
    fn evict_one(
        &self,
        spaces: &[AddressSpace],
        not: Option<(usize, Buffer)>,
    ) -> Result<u64, BoxError> {
        let victim = {
            let mut st = self.lock();
            let found = st
                .entries
                .iter()
                .filter(|(key, e)| e.0 && !e.1 && Some(**key) != not)
                .min_by_key(|(_, e)| e.2)
                .map(|(key, _)| *key);
            if let Some(key) = found {
                if let Some(e) = st.entries.get_mut(&key) {
                    e.0 = false;
                }
            }
            found
        };
        let Some((vk, vbuf)) = victim else {
            std::thread::sleep(Duration::from_micros(100));
            return Ok(0);
        };
        match spaces[vk].page_out(vbuf) {
            Ok(()) => Ok(spaces[vk].info(vbuf)?.reserved_bytes),
            Err(e) => {
                // Still resident: put it back.
                if let Some(entry) = self.lock().entries.get_mut(&(vk, vbuf)) {
                    entry.0 = true;
                }
                Err(e.into())
            }
        }
    }
}

fn print_report(r: &Report) {
    println!(
        "{} tenants x {} in {} buffers, pool {} ({:.2}x oversubscribed), {} rounds, median of {}; priorities {}",
        r.tenants,
        format_bytes(r.demand_bytes),
        format_bytes(r.buffer_bytes),
        format_bytes(r.capacity_bytes),
        r.oversubscription,
        r.rounds,
        r.samples,
        r.priorities
    );
    let mut rows: Vec<&TenantRow> = r.rows.iter().collect();
    rows.sort_by_key(|t| t.rank);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|t| {
            vec![
                t.tenant.clone(),
                format!("{:.0}", t.compute_ms),
                format!("{:.4}", t.contention_degree),
                t.rank.to_string(),
                format!("{:.2}", t.alpha),
                format_bytes(t.resident_limit_bytes),
                format!("{:.3}", t.alone_s),
                format!("{:.3} ({:.2}x)", t.lru_s, t.slowdown_lru),
                format!("{:.3} ({:.2}x)", t.planned_s, t.slowdown_planned),
                format_bytes(t.lru_paged_bytes),
                format_bytes(t.planned_direct_bytes),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &[
                "tenant",
                "compute_ms",
                "W_i",
                "rank",
                "alpha",
                "resident limit",
                "alone_s",
                "LRU_s (slowdown)",
                "planned_s (slowdown)",
                "LRU paged",
                "planned direct",
            ],
            &table
        )
    );
    println!(
        "highest-priority tenant: slowdown {:.3}x planned (target <= {:.2}x: {}), {:.3}x under LRU",
        r.highest_priority_slowdown_planned,
        r.target_highest_priority_slowdown,
        if r.target_met { "met" } else { "missed" },
        r.highest_priority_slowdown_lru
    );
    if let Some(p) = &r.priority_io {
        println!(
            "\ncold start (every tenant's buffers paged out at the start, paged in on first use), median of {}:",
            p.fifo_s.len()
        );
        let mut head = vec!["tenant".to_string(), "FIFO I/O s".to_string()];
        head.extend(
            p.priority
                .iter()
                .map(|w| format!("priority, window {} s", w.window)),
        );
        let rows: Vec<Vec<String>> = p
            .all_tenants_fifo_s
            .iter()
            .enumerate()
            .map(|(k, (name, fifo))| {
                let mut row = vec![name.clone(), format!("{fifo:.3}")];
                row.extend(p.priority.iter().map(|w| {
                    let s = w.all_tenants_s[k].1;
                    format!("{s:.3} ({:.2}x)", s / fifo)
                }));
                row
            })
            .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        print!("{}", text_table(&head, &rows));
        println!(
            "top tenant {}: alone (cold) {:.3} s; slowdown with FIFO I/O {:.3}x ({:.3}-{:.3})",
            p.tenant,
            median(p.alone_cold_s.iter().copied()),
            p.slowdown_fifo,
            p.slowdown_fifo_range.0,
            p.slowdown_fifo_range.1,
        );
        for w in &p.priority {
            println!(
                "  with priority I/O, window {}: {:.3}x ({:.3}-{:.3})",
                w.window, w.slowdown, w.slowdown_range.0, w.slowdown_range.1
            );
        }
        println!(
            "  target <= {:.2}x with priority I/O: {}",
            p.target_slowdown,
            if p.target_met { "met" } else { "missed" }
        );
    }
}

fn write_plot(r: &Report, dir: &std::path::Path) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
    let mut rows: Vec<&TenantRow> = r.rows.iter().collect();
    rows.sort_by_key(|t| t.rank);
    let mut chart = BarChart::new(
        format!(
            "{} tenants, {:.2}x oversubscribed: slowdown against running alone",
            r.tenants, r.oversubscription
        ),
        "response time / alone",
    );
    chart.categories = rows
        .iter()
        .map(|t| format!("{} (rank {})", t.tenant, t.rank))
        .collect();
    chart.series = vec![
        BarSeries::new(
            "LRU swapping",
            rows.iter().map(|t| Some(t.slowdown_lru)).collect(),
        ),
        BarSeries::new(
            "planned (Alg. 1 + 2)",
            rows.iter().map(|t| Some(t.slowdown_planned)).collect(),
        ),
    ];
    chart.reference = Some(1.0);
    let path = dir.join("tenants-slowdown.svg");
    chart
        .write_svg(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}
