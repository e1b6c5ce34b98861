//! The tenants benchmark behind `oversub bench tenants`: several tenants oversubscribing one pool, run alone,
//! together under plain LRU swapping, and together under the contention-aware plan (Yang & Chen, Alg. 1 and 2).
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

use oversub_base::format_bytes;
use oversub_base::stats::{median_or_nan, median_u64};
use oversub_base::sync::lock;
use oversub_core::{
    AddressSpace, AlphaRule, Buffer, BufferFlags, PagerError, Pool, PoolSpec, TenantConfig,
};
use oversub_io::EngineChoice;
use oversub_tenants::priority;
use serde::Serialize;

use crate::harness::Steps;
use crate::{LabError, Progress};

const MIB: u64 = 1 << 20;

/// Where tenant priorities come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Priorities {
    /// W_i from the alone and LRU runs (Alg. 1).
    Measured,
    /// The tenants' order: t0 highest.
    Given,
}

/// What to measure; the fields are the flags of `oversub bench tenants` (`--json` and `--plot` aside), which
/// flattens this struct. [`Default`] gives the CLI's defaults (a test in the CLI checks they agree).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TenantsOptions {
    /// Number of tenants.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub tenants: usize,
    /// Memory each tenant needs (its buffers together).
    #[cfg_attr(feature = "clap", arg(long, default_value = "256MiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub demand: u64,
    /// Size of each buffer (one subtask's data).
    #[cfg_attr(feature = "clap", arg(long, default_value = "16MiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub buffer: u64,
    /// Total demand over pool capacity (1.3: the tenants need 30% more than the pool holds).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1.3, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_number))]
    pub oversubscription: f64,
    /// Kernel time per subtask, one per tenant, cycled (e.g. `10ms,20ms,40ms`).
    #[cfg_attr(feature = "clap", arg(long, default_value = "10ms,20ms,40ms", value_delimiter = ',',
        value_parser = crate::args::parse_duration))]
    pub compute: Vec<Duration>,
    /// Passes of each tenant over its buffers.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub rounds: usize,
    /// Runs of each condition; medians are reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub samples: usize,
    /// Where tenant priorities come from.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Priorities::Measured))]
    pub priorities: Priorities,
    /// Swap-ratio rule of Alg. 2: `fraction` (default) or `printed-ceil`.
    #[cfg_attr(feature = "clap", arg(long, default_value = "fraction"))]
    pub alpha_rule: AlphaRule,
    /// Directory for the swap files (default: the temp directory).
    #[cfg_attr(feature = "clap", arg(long))]
    pub store_dir: Option<PathBuf>,
    /// I/O engine.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = EngineChoice::Auto))]
    pub engine: EngineChoice,
    /// Small sizes and one sample, for a quick look.
    #[cfg_attr(feature = "clap", arg(long))]
    pub quick: bool,
    /// Skip the cold-start experiment (FIFO against priority I/O).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_priority_io: bool,
    /// Windows of the priority queue to measure in the cold-start experiment (requests let into the engine at
    /// once; 0 means the engine's queue depth), comma-separated.
    #[cfg_attr(feature = "clap", arg(long, default_value = "0", value_delimiter = ',', allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>))]
    pub priority_windows: Vec<usize>,
}

impl Default for TenantsOptions {
    fn default() -> TenantsOptions {
        TenantsOptions {
            tenants: 3,
            demand: 256 * MIB,
            buffer: 16 * MIB,
            oversubscription: 1.3,
            compute: [10, 20, 40].map(Duration::from_millis).to_vec(),
            rounds: 3,
            samples: 3,
            priorities: Priorities::Measured,
            alpha_rule: AlphaRule::default(),
            store_dir: None,
            engine: EngineChoice::Auto,
            quick: false,
            no_priority_io: false,
            priority_windows: vec![0],
        }
    }
}

impl TenantsOptions {
    /// The options a run really uses: `quick` caps the sizes, samples and rounds.
    fn effective(&self) -> TenantsOptions {
        let mut o = self.clone();
        if o.quick {
            o.demand = o.demand.min(64 * MIB);
            o.buffer = o.buffer.min(4 * MIB);
            o.samples = 1;
            o.rounds = o.rounds.min(2);
        }
        o
    }
}

/// The number of progress steps [`run`] reports with these options, for sizing a progress bar.
pub fn steps(opts: &TenantsOptions) -> u64 {
    let o = opts.effective();
    let steps = (o.tenants + 2) * o.samples
        + if o.no_priority_io {
            0
        } else {
            (2 + o.priority_windows.len()) * o.samples
        };
    steps as u64
}

/// One tenant's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TenantRow {
    pub tenant: String,
    pub compute_ms: f64,
    pub subtasks: usize,
    pub demand_bytes: u64,
    pub alone_s: f64,
    pub lru_s: f64,
    pub planned_s: f64,
    pub slowdown_lru: f64,
    pub slowdown_planned: f64,
    pub contention_degree: f64,
    pub rank: usize,
    pub alpha: f64,
    pub resident_limit_bytes: u64,
    pub lru_paged_bytes: u64,
    pub planned_direct_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct TenantsReport {
    pub tenants: usize,
    pub demand_bytes: u64,
    pub buffer_bytes: u64,
    pub capacity_bytes: u64,
    pub oversubscription: f64,
    pub rounds: usize,
    pub samples: usize,
    pub priorities: &'static str,
    pub alpha_rule: AlphaRule,
    pub rows: Vec<TenantRow>,
    pub highest_priority_slowdown_planned: f64,
    pub highest_priority_slowdown_lru: f64,
    pub target_highest_priority_slowdown: f64,
    pub target_met: bool,
    /// The cold-start experiment; absent with `--no-priority-io`.
    pub priority_io: Option<PriorityIoReport>,
}

/// The top tenant, cold, alone and together on a FIFO store and with priority I/O: every sample's seconds.
#[derive(Debug, Serialize)]
pub struct PriorityIoReport {
    pub tenant: String,
    pub alone_cold_s: Vec<f64>,
    pub fifo_s: Vec<f64>,
    /// Median together ÷ median alone.
    pub slowdown_fifo: f64,
    /// (min, max) of each sample ÷ the median alone.
    pub slowdown_fifo_range: (f64, f64),
    /// Every tenant's median response time together on the FIFO store.
    pub all_tenants_fifo_s: Vec<(String, f64)>,
    /// One entry per window measured.
    pub priority: Vec<PriorityWindowReport>,
    pub target_slowdown: f64,
    /// The best window's slowdown meets the target.
    pub target_met: bool,
}

#[derive(Debug, Serialize)]
pub struct PriorityWindowReport {
    /// Requests let into the engine at once (the engine's queue depth when the option was 0).
    pub window: usize,
    pub samples_s: Vec<f64>,
    pub slowdown: f64,
    pub slowdown_range: (f64, f64),
    /// Every tenant's median response time.
    pub all_tenants_s: Vec<(String, f64)>,
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

/// Runs the tenants alone, together under LRU swapping and together under the plan (and, unless
/// `no_priority_io`, the cold-start experiment), reporting each finished step to `progress`.
/// Refuses options the experiment cannot run with, naming the flag.
fn validate(args: &TenantsOptions) -> Result<(), LabError> {
    if args.tenants < 2 {
        return Err(LabError::InvalidOption(
            "--tenants: at least 2 tenants are needed to share a pool".into(),
        ));
    }
    if args.buffer == 0 || args.demand < args.buffer {
        return Err(LabError::InvalidOption(
            "--buffer must be at least one byte and no larger than --demand".into(),
        ));
    }
    if !(args.oversubscription.is_finite() && args.oversubscription >= 1.0) {
        return Err(LabError::InvalidOption(
            "--oversubscription must be a number of at least 1.0".into(),
        ));
    }
    if args.samples == 0 || args.rounds == 0 {
        return Err(LabError::InvalidOption(
            "--samples and --rounds must be at least 1".into(),
        ));
    }
    if args.compute.is_empty() {
        return Err(LabError::InvalidOption(
            "--compute needs at least one duration".into(),
        ));
    }
    Ok(())
}

/// The cold start of the top-ranked tenant (by the plan just run): alone, and together with FIFO store I/O and with
/// the priority queue at each window.
fn priority_io(
    env: &Env,
    workloads: &[Workload],
    weights: &[f64],
    quotas: &[oversub_core::TenantQuota],
    args: &TenantsOptions,
    bar: &Steps<'_>,
) -> Result<PriorityIoReport, LabError> {
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
            env,
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
            let (outs, _) = run_planned_cold(env, workloads, weights, window)?;
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
    Ok(PriorityIoReport {
        tenant: top_name,
        slowdown_fifo: median(top_s[0].iter().copied()) / alone,
        slowdown_fifo_range: range(&top_s[0]),
        all_tenants_fifo_s: per_tenant(0),
        fifo_s: top_s[0].clone(),
        alone_cold_s: alone_cold,
        priority,
        target_slowdown: 1.05,
        target_met: best <= 1.05,
    })
}

pub fn run(opts: &TenantsOptions, progress: Progress<'_>) -> Result<TenantsReport, LabError> {
    let args = opts.effective();
    validate(&args)?;
    let buffers = usize::try_from(args.demand / args.buffer)?;
    let workloads: Vec<Workload> = (0..args.tenants)
        .map(|k| Workload {
            name: format!("t{k}"),
            compute: args.compute[k % args.compute.len()],
            buffers,
            buffer_bytes: args.buffer,
            rounds: args.rounds,
        })
        .collect();
    let total: u64 = workloads.iter().map(Workload::demand).sum();
    let capacity = ((total as f64 / args.oversubscription) as u64) / (2 * MIB) * (2 * MIB);
    // Every tenant pins one buffer while it works on it, so LRU needs room for one each.
    if capacity < args.buffer * args.tenants as u64 {
        return Err(LabError::InvalidOption(format!(
            "a pool of {} cannot hold one {} buffer per tenant; lower --oversubscription or --buffer",
            format_bytes(capacity),
            format_bytes(args.buffer)
        )));
    }
    let store_dir = args.store_dir.clone().unwrap_or_else(std::env::temp_dir);
    let env = Env {
        capacity,
        store_bytes: total + 64 * MIB,
        store_dir,
        engine: args.engine,
        rule: args.alpha_rule,
    };

    let bar = Steps::new(progress);

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
        Priorities::Measured => degrees.clone(),
        Priorities::Given => (0..args.tenants)
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
    let priority_io = if args.no_priority_io {
        None
    } else {
        Some(priority_io(
            &env, &workloads, &weights, &quotas, &args, &bar,
        )?)
    };

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
                lru_paged_bytes: median_bytes(lru[k].iter().map(|o| o.paged_bytes)),
                planned_direct_bytes: median_bytes(planned[k].iter().map(|o| o.direct_bytes)),
            }
        })
        .collect();
    let top = rows.iter().min_by_key(|r| r.rank).ok_or("no tenants")?;
    let report = TenantsReport {
        tenants: args.tenants,
        demand_bytes: args.demand,
        buffer_bytes: args.buffer,
        capacity_bytes: capacity,
        oversubscription: total as f64 / capacity as f64,
        rounds: args.rounds,
        samples: args.samples,
        priorities: match args.priorities {
            Priorities::Measured => "measured",
            Priorities::Given => "given",
        },
        alpha_rule: args.alpha_rule,
        highest_priority_slowdown_planned: top.slowdown_planned,
        highest_priority_slowdown_lru: top.slowdown_lru,
        target_highest_priority_slowdown: 1.10,
        target_met: top.slowdown_planned <= 1.10,
        rows,
        priority_io,
    };
    Ok(report)
}

/// The median of the samples, NaN when there are none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    median_or_nan(&values.collect::<Vec<_>>())
}

/// The median of byte counts (`oversub_base`'s: the mean of the middle two for an even count, rounded down), 0 when
/// there are none.
fn median_bytes(values: impl Iterator<Item = u64>) -> u64 {
    median_u64(&values.collect::<Vec<_>>()).unwrap_or(0)
}

/// What every run shares.
#[derive(Debug)]
struct Env {
    capacity: u64,
    store_bytes: u64,
    store_dir: PathBuf,
    engine: EngineChoice,
    rule: AlphaRule,
}

impl Env {
    fn pool(&self) -> Result<Pool, LabError> {
        self.pool_with(None)
    }

    /// The queue depth of the engines the stores get.
    fn queue_depth(&self) -> Result<usize, LabError> {
        Ok(self.pool()?.store().engine().queue_depth())
    }

    /// A pool whose store serves by priority with this window (0: the engine's depth) when `priority_window` is
    /// given, FIFO otherwise.
    fn pool_with(&self, priority_window: Option<usize>) -> Result<Pool, LabError> {
        let mut spec = PoolSpec::new(self.capacity)
            .stores([&self.store_dir])
            .store_capacity(self.store_bytes)
            .engine(self.engine)
            .swap_rule(self.rule);
        if let Some(w) = priority_window {
            spec = spec.priority(Some(w).filter(|&w| w > 0));
        }
        spec.open().map_err(|e| match e {
            PagerError::Store(e) => LabError::from(format!(
                "creating a swap file in {}: {e}",
                self.store_dir.display()
            )),
            other => other.into(),
        })
    }
}

/// Runs the workloads at once in one pool: alone (one workload) or under LRU swapping.
fn run_condition(
    env: &Env,
    workloads: &[Workload],
    mode: Mode,
    first_index: usize,
) -> Result<Vec<RunOutcome>, LabError> {
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
) -> Result<(Vec<AddressSpace>, Vec<Vec<Buffer>>), LabError> {
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
) -> Result<(Vec<RunOutcome>, Vec<oversub_core::TenantQuota>), LabError> {
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
) -> Result<(Vec<RunOutcome>, Vec<oversub_core::TenantQuota>), LabError> {
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
) -> Result<Vec<RunOutcome>, LabError>
where
    F: Fn(usize, Buffer, &mut [u8], StampFn<'_>) -> Result<(u64, u64), LabError> + Sync,
{
    let barrier = Barrier::new(workloads.len());
    let results: Vec<Result<RunOutcome, LabError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = workloads
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let barrier = &barrier;
                let access = &access;
                let bufs = &handles[k];
                scope.spawn(move || -> Result<RunOutcome, LabError> {
                    // Page-aligned, so direct store access needs no bounce buffer.
                    let mut scratch_buf =
                        oversub_io::AlignedBuf::new(w.buffer_bytes as usize, 4096)
                            .map_err(oversub_io::IoError::from)?;
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
        lock(&self.state)
    }

    fn insert(&self, k: usize, buf: Buffer) {
        let mut st = self.lock();
        st.clock += 1;
        let now = st.clock;
        st.entries.insert((k, buf), (true, false, now));
    }

    /// Makes the buffer resident and pins it; returns the bytes paged in and out to do so.
    fn acquire(&self, spaces: &[AddressSpace], k: usize, buf: Buffer) -> Result<u64, LabError> {
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
    ) -> Result<u64, LabError> {
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
