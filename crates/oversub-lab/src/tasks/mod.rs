//! The paper's real-platform case study (Yang & Chen, Sec. V-C) on Linux memory cgroups, behind `oversub tasks`.
//!
//! Several commands share an emulated memory: the run's cgroup is limited to the capacity. Their priorities come
//! from Alg. 1 (each alone, then all together: the contention degree W_i) or are given; Alg. 2 picks victims and
//! their swap ratios; then all tasks run at once twice, "default" (only the shared limit: Linux decides whose pages
//! to reclaim) and "planned" (each victim's own group limited to its resident share), and their response times are
//! compared. See docs/tasks.md. [`run`] takes [`TasksOptions`] and returns a [`TasksReport`]; [`cgroup`] is the
//! process control it runs on, [`worker`] the body of the built-in tasks.

use std::path::{Path, PathBuf};
use std::time::Instant;

use oversub_base::format_bytes;
use oversub_base::stats::median_or_nan;
use oversub_tenants::priority::{self, Contention, Ranking};
use oversub_tenants::swap::{self, AlphaRule, Plan};
use oversub_tenants::TenantError;
use serde::Serialize;

use crate::harness::Steps;
use crate::{LabError, Progress};

pub mod cgroup;
mod experiment;
pub mod spec;
pub mod worker;

use cgroup::Controller;
use spec::{TaskArg, TaskSpec};

/// The page size the plan's limits are rounded to (and the unit of the kernel's refault counts).
pub const PAGE: u64 = 4096;

/// Default oversubscription of the emulated memory: the tasks' total demand / 1.3.
const DEFAULT_OVERSUBSCRIPTION: f64 = 1.3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// Three tasks that each write a file of --size and read it back --passes times.
    FileIo,
    /// Three tasks that differ (Alg. 1 can tell them apart): `stream` (--size, read 4×, pure I/O), `compute`
    /// (--size/2, read 3×, 3 hash rounds per byte) and `bulk` (1.5 × --size, read 2×, 1 hash round).
    Mixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Priorities {
    /// Alg. 1: run each task alone, then all together, and rank by W_i = (C_i(N) − C_i(1)) / C_i(1) / n_i.
    Measured,
    /// The order the tasks are listed, first is highest.
    Given,
}

/// The command that runs a built-in task's worker: a program and its first arguments, which end in a call of
/// [`worker::file_io`] with the options parsed from `file-io --file F --size N --passes P [--hash-rounds R]`
/// appended to them.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
}

/// Which tasks to run and how; the fields are the flags of `oversub tasks` (`--detect` and `--json` aside), which
/// flattens this struct. [`Default`] gives the CLI's defaults (a test in the CLI checks they agree).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TasksOptions {
    /// A task: its name, its memory demand and a command run with `sh -c` (repeatable; listed first is highest
    /// priority for `--priorities given`).
    #[cfg_attr(feature = "clap", arg(long = "task", value_name = "NAME:DEMAND:COMMAND",
        value_parser = spec::parse_task_arg, conflicts_with_all = ["config", "builtin"]))]
    pub tasks: Vec<TaskArg>,
    /// Tasks from a TOML file: `capacity = "2GiB"` (optional) and `[[task]]` tables with `name`, `demand`,
    /// `command` and optionally `subtasks` (see docs/tasks.md).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "FILE", conflicts_with = "builtin")
    )]
    pub config: Option<PathBuf>,
    /// A built-in case study (the default when no task is given): `file-io`, the paper's three tasks that write a
    /// file and read it back.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub builtin: Option<Builtin>,
    /// file-io: the size of each task's file, which is also its demand.
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg, default_value = "1GiB"))]
    pub size: u64,
    /// file-io: how many times each task reads its file back.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<u32>))]
    pub passes: u32,
    /// Work directory: the file-io tasks' files and the tasks' logs go in a fresh directory inside it, removed
    /// afterwards. Default: the system's temporary directory.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub dir: Option<PathBuf>,
    /// The emulated memory: the limit of the run's cgroup, shared by all tasks. Default: their total demand / 1.3
    /// (30% oversubscribed).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub capacity: Option<u64>,
    /// Where priorities come from: `measured` (Alg. 1: each task alone, then all together) or `given` (the order
    /// the tasks are listed, first is highest).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Priorities::Measured))]
    pub priorities: Priorities,
    /// n_i of a task for the contention degree (repeatable; default 1).
    #[cfg_attr(feature = "clap", arg(long = "subtasks", value_name = "NAME=N",
        value_parser = spec::parse_subtasks_arg))]
    pub subtasks: Vec<(String, u32)>,
    /// The last victim's swap ratio: `fraction` (α = SWAP_req / MEM(i), in whole pages) or `printed-ceil` (the
    /// paper's printed ⌈SWAP_req / MEM(i)⌉: the whole task).
    #[cfg_attr(feature = "clap", arg(long, value_name = "RULE", default_value = "fraction",
        value_parser = |s: &str| s.parse::<AlphaRule>().map_err(|e| e.to_string())))]
    pub alpha_rule: AlphaRule,
    /// The smallest limit given to a victim: a real process cannot run in 0 bytes (its code and stack are charged
    /// too).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg, default_value = "64MiB"))]
    pub min_limit: u64,
    /// Runs of each measurement; the report gives the median.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, allow_hyphen_values = true,
        value_parser = clap::value_parser!(u32).range(1..=100)))]
    pub repeat: u32,
    /// Untimed runs of all tasks together before any measurement (the first run on a machine pays for cold
    /// caches and fresh disk blocks).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, allow_hyphen_values = true,
        value_parser = clap::value_parser!(u32).range(0..=10)))]
    pub warmup: u32,
    /// Runs the built-in tasks' worker (needed by the built-in case studies; the CLI sets itself).
    #[cfg_attr(feature = "clap", arg(skip))]
    pub worker: Option<WorkerCommand>,
}

impl Default for TasksOptions {
    fn default() -> TasksOptions {
        TasksOptions {
            tasks: Vec::new(),
            config: None,
            builtin: None,
            size: 1 << 30,
            passes: 3,
            dir: None,
            capacity: None,
            priorities: Priorities::Measured,
            subtasks: Vec::new(),
            alpha_rule: AlphaRule::default(),
            min_limit: 64 << 20,
            repeat: 1,
            warmup: 1,
            worker: None,
        }
    }
}

impl TasksOptions {
    /// Refuses bad input (unknown or duplicate names, demands that do not fit, a capacity above the machine's
    /// memory) before any cgroup is touched.
    pub fn check(&self) -> Result<(), LabError> {
        inputs(self, None).map(|_| ())
    }
}

/// The number of progress steps (task runs) [`run`] reports with these options, for sizing a progress bar.
pub fn steps(opts: &TasksOptions) -> Result<u64, LabError> {
    let n = inputs(opts, None)?.tasks.len() as u64;
    let measured = opts.priorities == Priorities::Measured;
    Ok(u64::from(opts.warmup) + u64::from(opts.repeat) * (if measured { n + 1 } else { 0 } + 2))
}

/// Whether this machine has a memory cgroup controller this process may use: the controller found, and the result
/// of creating, limiting and removing a probe group under it.
pub fn detect() -> Result<(Controller, Result<(), LabError>), LabError> {
    let controller = Controller::detect()?;
    let access = controller.check_access().map_err(LabError::from);
    Ok((controller, access))
}

/// A directory removed with everything in it when dropped.
#[derive(Debug)]
struct WorkDir(PathBuf);

impl WorkDir {
    fn create(base: Option<&Path>) -> Result<WorkDir, LabError> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = base.join(format!("oversub-tasks-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir(&path)
            .map_err(|e| format!("cannot create the work directory {}: {e}", path.display()))?;
        Ok(WorkDir(path))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// Everything the checks before any run need, and what the report says about where the tasks came from.
#[derive(Debug)]
struct Inputs {
    tasks: Vec<TaskSpec>,
    capacity_bytes: u64,
    capacity_default: bool,
    builtin: Option<Builtin>,
}

fn inputs(args: &TasksOptions, work: Option<&Path>) -> Result<Inputs, LabError> {
    let (mut tasks, file_capacity, builtin) = if let Some(path) = &args.config {
        let (t, c) = spec::load_config(path)?;
        (t, c, None)
    } else if !args.tasks.is_empty() {
        (spec::from_args(&args.tasks), None, None)
    } else {
        let worker = args.worker.as_ref().ok_or_else(|| {
            LabError::InvalidOption(
                "the built-in tasks need the command that runs their worker".into(),
            )
        })?;
        if args.size == 0 {
            return Err("--size must be more than 0 bytes".into());
        }
        // Without a work directory (the checks before it exists), the paths are placeholders.
        let dir = work.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let b = args.builtin.unwrap_or(Builtin::FileIo);
        let tasks = match b {
            Builtin::FileIo => spec::builtin_file_io(worker, &dir, args.size, args.passes, 3),
            Builtin::Mixed => spec::builtin_mixed(worker, &dir, args.size),
        };
        (tasks, None, Some(b))
    };
    spec::finish(&mut tasks, &args.subtasks)?;
    if tasks.len() < 2 {
        return Err(format!(
            "{} task given: contention needs at least two tasks",
            tasks.len()
        )
        .into());
    }
    let total: u64 = tasks
        .iter()
        .try_fold(0u64, |acc, t| acc.checked_add(t.demand_bytes))
        .ok_or("the demands add up to more than 2^64 bytes")?;
    let capacity_default = args.capacity.is_none() && file_capacity.is_none();
    let capacity = match args.capacity.or(file_capacity) {
        Some(c) => c,
        None => ((total as f64 / DEFAULT_OVERSUBSCRIPTION) as u64) / PAGE * PAGE,
    };
    if capacity == 0 {
        return Err("--capacity must be more than 0 bytes".into());
    }
    for t in &tasks {
        if t.demand_bytes > capacity {
            let e = TenantError::TooLarge {
                tenant: t.name.clone(),
                demand_bytes: t.demand_bytes,
                limit_bytes: capacity,
                what: "the emulated memory (--capacity)",
            };
            return Err(format!(
                "{e}: a task must fit the emulated memory alone (C_i(1) is measured there); give a larger \
                 --capacity or a smaller demand"
            )
            .into());
        }
    }
    if let Some(mem) = mem_total() {
        if capacity > mem {
            return Err(format!(
                "the emulated memory ({}) is more than this machine's {}: its limit would never bind; give a \
                 smaller --capacity or smaller tasks",
                format_bytes(capacity),
                format_bytes(mem)
            )
            .into());
        }
    }
    if args.min_limit == 0 {
        return Err("--min-limit must be more than 0 bytes: a process cannot run in none".into());
    }
    Ok(Inputs {
        tasks,
        capacity_bytes: capacity,
        capacity_default,
        builtin,
    })
}

/// MemTotal from /proc/meminfo.
fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The middle sample, the upper of the two middle ones for an even count (the report's rule for peaks and
/// refaults, kept so their figures do not change); `None` when any sample is missing or there are none.
fn upper_middle(samples: &[Option<u64>]) -> Option<u64> {
    let mut s: Vec<u64> = samples.iter().copied().collect::<Option<Vec<_>>>()?;
    s.sort_unstable();
    s.get(s.len() / 2).copied()
}

/// Per task, per kind of run: the samples.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Samples {
    pub alone_s: Vec<f64>,
    pub together_s: Vec<f64>,
    pub default_s: Vec<f64>,
    pub planned_s: Vec<f64>,
    pub default_peak_bytes: Vec<Option<u64>>,
    pub planned_peak_bytes: Vec<Option<u64>>,
    pub default_refaults: Vec<Option<u64>>,
    pub planned_refaults: Vec<Option<u64>>,
}

#[derive(Debug, Serialize)]
pub struct TaskReport {
    pub name: String,
    pub command: String,
    pub demand_bytes: u64,
    pub subtasks: u32,
    /// W_i (measured priorities only), from the medians.
    pub degree: Option<f64>,
    /// W_i of each repetition alone (its own alone and together runs): the run-to-run spread, (min, max).
    pub degree_range: Option<(f64, f64)>,
    /// 1 is the highest priority.
    pub priority: usize,
    pub victim: bool,
    pub alpha: f64,
    /// The plan's resident limit, before the floor.
    pub planned_resident_bytes: u64,
    /// The limit applied in the planned run (None: only the shared limit).
    pub limit_bytes: Option<u64>,
    pub alone_s: Option<f64>,
    pub together_s: Option<f64>,
    pub default_s: f64,
    pub planned_s: f64,
    pub change_s: f64,
    pub change_pct: f64,
    pub default_peak_bytes: Option<u64>,
    pub planned_peak_bytes: Option<u64>,
    /// Pages of files evicted and read back (`workingset_refault_file` of the task's group), median.
    pub default_refaults: Option<u64>,
    pub planned_refaults: Option<u64>,
    pub samples: Samples,
}

#[derive(Debug, Serialize)]
pub struct Totals {
    pub default_s: f64,
    pub planned_s: f64,
    pub change_s: f64,
    pub change_pct: f64,
    /// Σ (response − alone), when the alone times were measured.
    pub lengthened_default_s: Option<f64>,
    pub lengthened_planned_s: Option<f64>,
    pub lengthened_change_pct: Option<f64>,
    /// The change of the total within each repetition (default and planned runs of the same repetition are
    /// neighbours in time), in percent.
    pub per_repetition_change_pct: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct TasksReport {
    pub controller: Controller,
    pub swap_capped: bool,
    pub builtin: Option<Builtin>,
    pub size_bytes: Option<u64>,
    pub passes: Option<u32>,
    pub capacity_bytes: u64,
    pub capacity_default: bool,
    pub total_demand_bytes: u64,
    pub priorities: Priorities,
    pub alpha_rule: AlphaRule,
    pub min_limit_bytes: u64,
    pub floor_applied: bool,
    pub repeat: u32,
    pub warmup: u32,
    pub ranking: Ranking,
    pub plan: Plan,
    pub tasks: Vec<TaskReport>,
    pub total: Totals,
    pub wall_s: f64,
}

/// Runs the case study: refuses bad input, then (on a usable cgroup controller) the warm-up, Alg. 1's runs when
/// priorities are measured, and the default and planned runs, reporting each finished run to `progress`.
/// Alg. 1's measurements and ranking: each task alone, then all together, `repeat` times, all under the shared
/// limit only; the times go into `samples`.
fn measured_ranking(
    parent: &cgroup::Group,
    tasks: &[TaskSpec],
    repeat: usize,
    samples: &mut [Samples],
    work: &Path,
    bar: &Steps<'_>,
) -> Result<Ranking, LabError> {
    let n = tasks.len();
    let unlimited = vec![None; n];
    let all: Vec<usize> = (0..n).collect();
    for r in 0..repeat {
        for i in 0..n {
            bar.set_message(format!("{} alone", tasks[i].name));
            let out = experiment::run_together(parent, tasks, &[i], &unlimited, "alone", r, work)?;
            samples[i].alone_s.push(out[0].elapsed_s);
            bar.inc(1);
        }
        bar.set_message("all together");
        let out = experiment::run_together(parent, tasks, &all, &unlimited, "together", r, work)?;
        for (i, o) in out.iter().enumerate() {
            samples[i].together_s.push(o.elapsed_s);
        }
        bar.inc(1);
    }
    let apps = tasks
        .iter()
        .zip(samples.iter())
        .map(|(t, s)| {
            Contention::new(
                t.name.clone(),
                median_or_nan(&s.alone_s),
                median_or_nan(&s.together_s),
                t.subtasks,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(priority::assign(&apps)?)
}

pub fn run(args: &TasksOptions, progress: Progress<'_>) -> Result<TasksReport, LabError> {
    // Bad input is refused before any cgroup is touched.
    inputs(args, None)?;
    let controller = Controller::detect()?;
    controller.check_access()?;
    let swept = controller.sweep_stale();
    if swept > 0 {
        tracing::info!("removed {swept} cgroup(s) left behind by earlier runs");
    }

    let work = WorkDir::create(args.dir.as_deref())?;
    let Inputs {
        tasks,
        capacity_bytes,
        capacity_default,
        builtin,
    } = inputs(args, Some(&work.0))?;
    let n = tasks.len();
    let total_demand: u64 = tasks.iter().map(|t| t.demand_bytes).sum();
    let repeat = args.repeat as usize;

    let parent = controller.create_group("tasks")?;
    parent.set_limit(Some(capacity_bytes))?;
    let swap_capped = parent.caps_swap();

    let measured = args.priorities == Priorities::Measured;
    let bar = Steps::new(progress);
    let wall = Instant::now();
    let unlimited = vec![None; n];
    let mut samples = vec![Samples::default(); n];
    let all: Vec<usize> = (0..n).collect();

    for w in 0..args.warmup as usize {
        bar.set_message("warm-up");
        experiment::run_together(&parent, &tasks, &all, &unlimited, "warmup", w, &work.0)?;
        bar.inc(1);
    }

    // Alg. 1's measurements: each alone, then all together, all under the shared limit only.
    let ranking = if measured {
        measured_ranking(&parent, &tasks, repeat, &mut samples, &work.0, &bar)?
    } else {
        let weights: Vec<f64> = (0..n).rev().map(|w| w as f64).collect();
        priority::from_weights(&weights)?
    };

    // Alg. 2 over the demands in priority order; quotas mapped back to the tasks.
    let by_priority: Vec<u64> = ranking
        .order
        .iter()
        .map(|&i| tasks[i].demand_bytes)
        .collect();
    let plan = swap::plan(
        &by_priority,
        capacity_bytes,
        &swap::Options {
            rule: args.alpha_rule,
            page_bytes: PAGE,
        },
    )?;
    let quota = |i: usize| plan.tenants[ranking.rank[i]];
    let mut floor_applied = false;
    let limits: Vec<Option<u64>> = (0..n)
        .map(|i| {
            let q = quota(i);
            q.victim.then(|| {
                if q.resident_limit_bytes < args.min_limit {
                    floor_applied = true;
                    args.min_limit.div_ceil(PAGE) * PAGE
                } else {
                    q.resident_limit_bytes.div_ceil(PAGE) * PAGE
                }
            })
        })
        .collect();

    // The comparison; which goes first alternates, so that drift and warm-up hit both alike.
    for r in 0..repeat {
        let order = if r % 2 == 0 {
            [(false, "default"), (true, "planned")]
        } else {
            [(true, "planned"), (false, "default")]
        };
        for (planned, name) in order {
            bar.set_message(format!("{name} run {}/{repeat}", r + 1));
            let lim = if planned { &limits } else { &unlimited };
            let out = experiment::run_together(&parent, &tasks, &all, lim, name, r, &work.0)?;
            for (i, o) in out.iter().enumerate() {
                if planned {
                    samples[i].planned_s.push(o.elapsed_s);
                    samples[i].planned_peak_bytes.push(o.peak_bytes);
                    samples[i].planned_refaults.push(o.refaults);
                } else {
                    samples[i].default_s.push(o.elapsed_s);
                    samples[i].default_peak_bytes.push(o.peak_bytes);
                    samples[i].default_refaults.push(o.refaults);
                }
            }
            bar.inc(1);
        }
    }
    let wall_s = wall.elapsed().as_secs_f64();
    parent.remove()?;

    let task_reports: Vec<TaskReport> = (0..n)
        .map(|i| {
            let q = quota(i);
            let s = &samples[i];
            let default_s = median_or_nan(&s.default_s);
            let planned_s = median_or_nan(&s.planned_s);
            TaskReport {
                name: tasks[i].name.clone(),
                command: tasks[i].program.display(),
                demand_bytes: tasks[i].demand_bytes,
                subtasks: tasks[i].subtasks,
                degree: measured.then(|| ranking.degrees[i]),
                degree_range: measured
                    .then(|| degree_range(&s.alone_s, &s.together_s, tasks[i].subtasks))
                    .flatten(),
                priority: ranking.rank[i] + 1,
                victim: q.victim,
                alpha: q.alpha,
                planned_resident_bytes: q.resident_limit_bytes,
                limit_bytes: limits[i],
                alone_s: measured.then(|| median_or_nan(&s.alone_s)),
                together_s: measured.then(|| median_or_nan(&s.together_s)),
                default_s,
                planned_s,
                change_s: planned_s - default_s,
                change_pct: pct(planned_s, default_s),
                default_peak_bytes: upper_middle(&s.default_peak_bytes),
                planned_peak_bytes: upper_middle(&s.planned_peak_bytes),
                default_refaults: upper_middle(&s.default_refaults),
                planned_refaults: upper_middle(&s.planned_refaults),
                samples: s.clone(),
            }
        })
        .collect();
    let default_total: f64 = task_reports.iter().map(|t| t.default_s).sum();
    let planned_total: f64 = task_reports.iter().map(|t| t.planned_s).sum();
    let alone_total: Option<f64> = task_reports.iter().map(|t| t.alone_s).sum();
    let total = Totals {
        default_s: default_total,
        planned_s: planned_total,
        change_s: planned_total - default_total,
        change_pct: pct(planned_total, default_total),
        lengthened_default_s: alone_total.map(|a| default_total - a),
        lengthened_planned_s: alone_total.map(|a| planned_total - a),
        lengthened_change_pct: alone_total.map(|a| pct(planned_total - a, default_total - a)),
        per_repetition_change_pct: (0..repeat)
            .map(|r| {
                let d: f64 = samples.iter().map(|s| s.default_s[r]).sum();
                let p: f64 = samples.iter().map(|s| s.planned_s[r]).sum();
                pct(p, d)
            })
            .collect(),
    };
    let report = TasksReport {
        controller,
        swap_capped,
        builtin,
        size_bytes: builtin.map(|_| args.size),
        passes: builtin.map(|_| args.passes),
        capacity_bytes,
        capacity_default,
        total_demand_bytes: total_demand,
        priorities: args.priorities,
        alpha_rule: args.alpha_rule,
        min_limit_bytes: args.min_limit,
        floor_applied,
        repeat: args.repeat,
        warmup: args.warmup,
        ranking,
        plan,
        tasks: task_reports,
        total,
        wall_s,
    };
    drop(work);
    Ok(report)
}

/// (new − old) / old in percent.
pub fn pct(new: f64, old: f64) -> f64 {
    if old == 0.0 {
        f64::NAN
    } else {
        (new - old) / old * 100.0
    }
}

/// W_i = (C(N) − C(1)) / C(1) / n of each repetition, (min, max); None without samples.
pub fn degree_range(alone: &[f64], together: &[f64], subtasks: u32) -> Option<(f64, f64)> {
    let w: Vec<f64> = alone
        .iter()
        .zip(together)
        .filter(|(a, _)| **a > 0.0)
        .map(|(a, t)| (t - a) / a / f64::from(subtasks.max(1)))
        .collect();
    if w.is_empty() {
        return None;
    }
    Some((
        w.iter().copied().fold(f64::INFINITY, f64::min),
        w.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn degree_ranges_come_from_each_repetition() {
        // Alone 1 s, 2 s; together 2 s, 3 s: W = 1.0 and 0.5 per repetition (n = 1), halved with n = 2.
        assert_eq!(degree_range(&[1.0, 2.0], &[2.0, 3.0], 1), Some((0.5, 1.0)));
        assert_eq!(degree_range(&[1.0, 2.0], &[2.0, 3.0], 2), Some((0.25, 0.5)));
        assert_eq!(degree_range(&[], &[], 1), None);
        assert_eq!(degree_range(&[0.0], &[1.0], 1), None);
    }

    #[test]
    fn the_mixed_builtin_has_three_different_tasks() {
        let worker = WorkerCommand {
            program: PathBuf::from("/bin/true"),
            args: Vec::new(),
        };
        let t = spec::builtin_mixed(&worker, Path::new("/tmp"), 1 << 30);
        let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["stream", "compute", "bulk"]);
        let demands: Vec<u64> = t.iter().map(|t| t.demand_bytes).collect();
        assert_eq!(demands, [1 << 30, 1 << 29, 3 << 29]);
    }
}
