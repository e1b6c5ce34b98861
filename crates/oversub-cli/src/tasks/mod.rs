//! `oversub tasks`: the paper's real-platform case study (Yang & Chen, Sec. V-C) on Linux memory cgroups.
//!
//! Several commands share an emulated memory: the run's cgroup is limited to `--capacity`. Their priorities come
//! from Alg. 1 (each alone, then all together: the contention degree W_i) or are given; Alg. 2 picks victims and
//! their swap ratios; then all tasks run at once twice, "default" (only the shared limit: Linux decides whose pages
//! to reclaim) and "planned" (each victim's own group limited to its resident share), and their response times are
//! compared. See docs/tasks.md.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use oversub_report::{format_bytes, text_table};
use oversub_tenants::cgroup::Controller;
use oversub_tenants::priority::{self, Contention, Ranking};
use oversub_tenants::swap::{self, AlphaRule, Plan};
use oversub_tenants::TenantError;
use serde::Serialize;

use crate::bench::BoxError;

mod experiment;
mod spec;
mod worker;

use spec::{TaskArg, TaskSpec};

const PAGE: u64 = 4096;

/// Default oversubscription of the emulated memory: the tasks' total demand / 1.3.
const DEFAULT_OVERSUBSCRIPTION: f64 = 1.3;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TasksArgs {
    #[command(subcommand)]
    command: Option<TasksCommand>,

    /// Print which memory cgroup controller was found and whether this process may use it, then exit.
    #[arg(long)]
    detect: bool,

    /// A task: its name, its memory demand and a command run with `sh -c` (repeatable; listed first is highest
    /// priority for `--priorities given`).
    #[arg(long = "task", value_name = "NAME:DEMAND:COMMAND", value_parser = spec::parse_task_arg,
          conflicts_with_all = ["config", "builtin"])]
    tasks: Vec<TaskArg>,

    /// Tasks from a TOML file: `capacity = "2GiB"` (optional) and `[[task]]` tables with `name`, `demand`,
    /// `command` and optionally `subtasks` (see docs/tasks.md).
    #[arg(long, value_name = "FILE", conflicts_with = "builtin")]
    config: Option<PathBuf>,

    /// A built-in case study (the default when no task is given): `file-io`, the paper's three tasks that write a
    /// file and read it back.
    #[arg(long, value_enum)]
    builtin: Option<Builtin>,

    /// file-io: the size of each task's file, which is also its demand.
    #[arg(long, value_parser = crate::parse_size_arg, default_value = "1GiB")]
    size: u64,

    /// file-io: how many times each task reads its file back.
    #[arg(long, default_value_t = 3)]
    passes: u32,

    /// Work directory: the file-io tasks' files and the tasks' logs go in a fresh directory inside it, removed
    /// afterwards. Default: the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// The emulated memory: the limit of the run's cgroup, shared by all tasks. Default: their total demand / 1.3
    /// (30% oversubscribed).
    #[arg(long, value_parser = crate::parse_size_arg)]
    capacity: Option<u64>,

    /// Where priorities come from: `measured` (Alg. 1: each task alone, then all together) or `given` (the order
    /// the tasks are listed, first is highest).
    #[arg(long, value_enum, default_value_t = Priorities::Measured)]
    priorities: Priorities,

    /// n_i of a task for the contention degree (repeatable; default 1).
    #[arg(long = "subtasks", value_name = "NAME=N", value_parser = spec::parse_subtasks_arg)]
    subtasks: Vec<(String, u32)>,

    /// The last victim's swap ratio: `fraction` (α = SWAP_req / MEM(i), in whole pages) or `printed-ceil` (the
    /// paper's printed ⌈SWAP_req / MEM(i)⌉: the whole task).
    #[arg(long, value_name = "RULE", default_value = "fraction",
          value_parser = |s: &str| s.parse::<AlphaRule>().map_err(|e| e.to_string()))]
    alpha_rule: AlphaRule,

    /// The smallest limit given to a victim: a real process cannot run in 0 bytes (its code and stack are charged
    /// too).
    #[arg(long, value_parser = crate::parse_size_arg, default_value = "64MiB")]
    min_limit: u64,

    /// Runs of each measurement; the report gives the median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,

    /// Untimed runs of all tasks together before any measurement (the first run on a machine pays for cold
    /// caches and fresh disk blocks).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=10))]
    warmup: u32,

    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// The built-in tasks' bodies, run inside their cgroups.
    #[command(subcommand, hide = true)]
    Worker(worker::WorkerCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Builtin {
    /// Three tasks that each write a file of --size and read it back --passes times.
    FileIo,
    /// Three tasks that differ (Alg. 1 can tell them apart): `stream` (--size, read 4×, pure I/O), `compute`
    /// (--size/2, read 3×, 3 hash rounds per byte) and `bulk` (1.5 × --size, read 2×, 1 hash round).
    Mixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Priorities {
    /// Alg. 1: run each task alone, then all together, and rank by W_i = (C_i(N) − C_i(1)) / C_i(1) / n_i.
    Measured,
    /// The order the tasks are listed, first is highest.
    Given,
}

pub fn run(args: TasksArgs) -> Result<(), BoxError> {
    if let Some(TasksCommand::Worker(cmd)) = args.command {
        return worker::run(cmd);
    }
    if args.detect {
        return detect();
    }
    experiment_cmd(&args)
}

fn detect() -> Result<(), BoxError> {
    let controller = Controller::detect()?;
    println!("{}", controller.describe());
    match controller.check_access() {
        Ok(()) => {
            println!(
                "usable: yes (created, limited and removed a probe group under {})",
                controller.dir.display()
            );
            Ok(())
        }
        Err(e) => {
            println!("usable: no");
            Err(e.into())
        }
    }
}

/// A directory removed with everything in it when dropped.
#[derive(Debug)]
struct WorkDir(PathBuf);

impl WorkDir {
    fn create(base: Option<&Path>) -> Result<WorkDir, BoxError> {
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

fn inputs(args: &TasksArgs, work: Option<&Path>) -> Result<Inputs, BoxError> {
    let (mut tasks, file_capacity, builtin) = if let Some(path) = &args.config {
        let (t, c) = spec::load_config(path)?;
        (t, c, None)
    } else if !args.tasks.is_empty() {
        (spec::from_args(&args.tasks), None, None)
    } else {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the oversub binary for the built-in tasks: {e}"))?;
        if args.size == 0 {
            return Err("--size must be more than 0 bytes".into());
        }
        // Without a work directory (the checks before it exists), the paths are placeholders.
        let dir = work.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let b = args.builtin.unwrap_or(Builtin::FileIo);
        let tasks = match b {
            Builtin::FileIo => spec::builtin_file_io(&exe, &dir, args.size, args.passes, 3),
            Builtin::Mixed => spec::builtin_mixed(&exe, &dir, args.size),
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

fn median(samples: &[f64]) -> f64 {
    oversub_report::quartiles(samples).map_or(f64::NAN, |(_, median, _)| median)
}

fn median_u64(samples: &[Option<u64>]) -> Option<u64> {
    let mut s: Vec<u64> = samples.iter().copied().collect::<Option<Vec<_>>>()?;
    s.sort_unstable();
    s.get(s.len() / 2).copied()
}

/// Per task, per kind of run: the samples.
#[derive(Debug, Default, Clone, Serialize)]
struct Samples {
    alone_s: Vec<f64>,
    together_s: Vec<f64>,
    default_s: Vec<f64>,
    planned_s: Vec<f64>,
    default_peak_bytes: Vec<Option<u64>>,
    planned_peak_bytes: Vec<Option<u64>>,
    default_refaults: Vec<Option<u64>>,
    planned_refaults: Vec<Option<u64>>,
}

#[derive(Debug, Serialize)]
struct TaskReport {
    name: String,
    command: String,
    demand_bytes: u64,
    subtasks: u32,
    /// W_i (measured priorities only), from the medians.
    degree: Option<f64>,
    /// W_i of each repetition alone (its own alone and together runs): the run-to-run spread, (min, max).
    degree_range: Option<(f64, f64)>,
    /// 1 is the highest priority.
    priority: usize,
    victim: bool,
    alpha: f64,
    /// The plan's resident limit, before the floor.
    planned_resident_bytes: u64,
    /// The limit applied in the planned run (None: only the shared limit).
    limit_bytes: Option<u64>,
    alone_s: Option<f64>,
    together_s: Option<f64>,
    default_s: f64,
    planned_s: f64,
    change_s: f64,
    change_pct: f64,
    default_peak_bytes: Option<u64>,
    planned_peak_bytes: Option<u64>,
    /// Pages of files evicted and read back (`workingset_refault_file` of the task's group), median.
    default_refaults: Option<u64>,
    planned_refaults: Option<u64>,
    samples: Samples,
}

#[derive(Debug, Serialize)]
struct Totals {
    default_s: f64,
    planned_s: f64,
    change_s: f64,
    change_pct: f64,
    /// Σ (response − alone), when the alone times were measured.
    lengthened_default_s: Option<f64>,
    lengthened_planned_s: Option<f64>,
    lengthened_change_pct: Option<f64>,
    /// The change of the total within each repetition (default and planned runs of the same repetition are
    /// neighbours in time), in percent.
    per_repetition_change_pct: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    controller: Controller,
    swap_capped: bool,
    builtin: Option<Builtin>,
    size_bytes: Option<u64>,
    passes: Option<u32>,
    capacity_bytes: u64,
    capacity_default: bool,
    total_demand_bytes: u64,
    priorities: Priorities,
    alpha_rule: AlphaRule,
    min_limit_bytes: u64,
    floor_applied: bool,
    repeat: u32,
    warmup: u32,
    ranking: Ranking,
    plan: Plan,
    tasks: Vec<TaskReport>,
    total: Totals,
    wall_s: f64,
}

fn experiment_cmd(args: &TasksArgs) -> Result<(), BoxError> {
    // Bad input is refused before any cgroup is touched.
    inputs(args, None)?;
    if let Some(path) = &args.json {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(format!(
                "--json {}: the directory it would go in does not exist",
                path.display()
            )
            .into());
        }
    }
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
    let runs =
        u64::from(args.warmup) + repeat as u64 * (if measured { n as u64 + 1 } else { 0 } + 2);
    let bar = crate::progress_bar(runs, "tasks", " runs", false);
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
        for r in 0..repeat {
            for i in 0..n {
                bar.set_message(format!("{} alone", tasks[i].name));
                let out = experiment::run_together(
                    &parent,
                    &tasks,
                    &[i],
                    &unlimited,
                    "alone",
                    r,
                    &work.0,
                )?;
                samples[i].alone_s.push(out[0].elapsed_s);
                bar.inc(1);
            }
            bar.set_message("all together");
            let out = experiment::run_together(
                &parent, &tasks, &all, &unlimited, "together", r, &work.0,
            )?;
            for (i, o) in out.iter().enumerate() {
                samples[i].together_s.push(o.elapsed_s);
            }
            bar.inc(1);
        }
        let apps = tasks
            .iter()
            .zip(&samples)
            .map(|(t, s)| {
                Contention::new(
                    t.name.clone(),
                    median(&s.alone_s),
                    median(&s.together_s),
                    t.subtasks,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        priority::assign(&apps)?
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
    bar.finish_and_clear();
    let wall_s = wall.elapsed().as_secs_f64();
    parent.remove()?;

    let task_reports: Vec<TaskReport> = (0..n)
        .map(|i| {
            let q = quota(i);
            let s = &samples[i];
            let default_s = median(&s.default_s);
            let planned_s = median(&s.planned_s);
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
                alone_s: measured.then(|| median(&s.alone_s)),
                together_s: measured.then(|| median(&s.together_s)),
                default_s,
                planned_s,
                change_s: planned_s - default_s,
                change_pct: pct(planned_s, default_s),
                default_peak_bytes: median_u64(&s.default_peak_bytes),
                planned_peak_bytes: median_u64(&s.planned_peak_bytes),
                default_refaults: median_u64(&s.default_refaults),
                planned_refaults: median_u64(&s.planned_refaults),
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
    let report = Report {
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
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    print!("{}", render(&report));
    drop(work);
    Ok(())
}

/// (new − old) / old in percent.
fn pct(new: f64, old: f64) -> f64 {
    if old == 0.0 {
        f64::NAN
    } else {
        (new - old) / old * 100.0
    }
}

fn secs(s: f64) -> String {
    format!("{s:.2} s")
}

/// W_i = (C(N) − C(1)) / C(1) / n of each repetition, (min, max); None without samples.
fn degree_range(alone: &[f64], together: &[f64], subtasks: u32) -> Option<(f64, f64)> {
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

fn signed(s: f64, pct: f64) -> String {
    format!("{s:+.2} s ({pct:+.1}%)")
}

/// Whether Alg. 1's ranking stands above the run-to-run noise: adjacent tasks' W_i ranges (over the repetitions) do
/// not overlap.
fn separation(r: &Report) -> String {
    let mut by_rank: Vec<&TaskReport> = r.tasks.iter().collect();
    by_rank.sort_by_key(|t| t.priority);
    let mut overlaps = Vec::new();
    for pair in by_rank.windows(2) {
        if let (Some((lo, _)), Some((_, hi))) = (pair[0].degree_range, pair[1].degree_range) {
            if lo <= hi {
                overlaps.push(format!("{} and {}", pair[0].name, pair[1].name));
            }
        }
    }
    if r.repeat < 3 {
        return format!(
            "W_i ranges over {} repetition(s); use --repeat 3 or more to tell the ranking from noise\n",
            r.repeat
        );
    }
    if overlaps.is_empty() {
        "W_i separated beyond the run-to-run spread: every task's lowest W_i is above the next task's highest\n"
            .to_string()
    } else {
        format!(
            "W_i NOT separated beyond the run-to-run spread: the ranges of {} overlap, so noise may have decided \
             their order\n",
            overlaps.join(", ")
        )
    }
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    let source = match r.builtin {
        Some(Builtin::FileIo) => format!(
            "built-in file-io: {} tasks, each writes a {} file and reads it back {}×",
            r.tasks.len(),
            format_bytes(r.size_bytes.unwrap_or(0)),
            r.passes.unwrap_or(0)
        ),
        Some(Builtin::Mixed) => format!(
            "built-in mixed: stream ({} read 4×, no compute), compute ({} read 3×, 3 hash rounds per byte), bulk \
             ({} read 2×, 1 hash round)",
            format_bytes(r.size_bytes.unwrap_or(0)),
            format_bytes(r.size_bytes.unwrap_or(0) / 2),
            format_bytes(r.size_bytes.unwrap_or(0) * 3 / 2)
        ),
        None => format!("{} tasks", r.tasks.len()),
    };
    out.push_str(&format!("oversub tasks: {source}\n"));
    out.push_str(&format!(
        "memory: {} of demand on {} of emulated memory ({}limit of the run's {} group, {:.0}% oversubscribed); \
         swap {}\n",
        format_bytes(r.total_demand_bytes),
        format_bytes(r.capacity_bytes),
        if r.capacity_default { "default: demand / 1.3; " } else { "" },
        r.controller.version,
        (r.total_demand_bytes as f64 / r.capacity_bytes as f64 - 1.0) * 100.0,
        if r.swap_capped {
            "capped by the limits"
        } else {
            "not accounted (no swap limit file): limits cap memory only"
        }
    ));
    out.push_str(&match r.priorities {
        Priorities::Measured => format!(
            "priorities: measured (Alg. 1), each task alone then all together under the shared limit, median of {}\n",
            r.repeat
        ),
        Priorities::Given => "priorities: given (the order listed)\n".to_string(),
    });
    let victims: Vec<String> = r
        .tasks
        .iter()
        .filter(|t| t.victim)
        .map(|t| {
            format!(
                "{} (α = {:.3}, keeps {})",
                t.name,
                t.alpha,
                format_bytes(t.planned_resident_bytes)
            )
        })
        .collect();
    out.push_str(&format!(
        "plan (Alg. 2, rule {}): {} must leave memory; victims: {}\n",
        match r.alpha_rule {
            AlphaRule::Fraction => "fraction",
            AlphaRule::PrintedCeil => "printed-ceil",
        },
        format_bytes(r.plan.swap_required_bytes),
        if victims.is_empty() {
            "none".to_string()
        } else {
            victims.join(", ")
        }
    ));
    if r.floor_applied {
        out.push_str(&format!(
            "note: a victim's limit was raised to the floor --min-limit {} (a process cannot run in less)\n",
            format_bytes(r.min_limit_bytes)
        ));
    }
    out.push('\n');

    let measured = r.priorities == Priorities::Measured;
    let mut header = vec!["task", "W_i", "priority", "demand", "limit"];
    if measured {
        header.extend(["alone", "together"]);
    }
    header.extend(["default", "planned", "change"]);
    let mut rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .map(|t| {
            let mut row = vec![
                t.name.clone(),
                match (t.degree, t.degree_range) {
                    (Some(w), Some((lo, hi))) => format!("{w:.3} ({lo:.3}-{hi:.3})"),
                    (Some(w), None) => format!("{w:.3}"),
                    _ => "-".to_string(),
                },
                t.priority.to_string(),
                format_bytes(t.demand_bytes),
                t.limit_bytes.map_or_else(|| "-".to_string(), format_bytes),
            ];
            if measured {
                row.push(t.alone_s.map_or_else(|| "-".to_string(), secs));
                row.push(t.together_s.map_or_else(|| "-".to_string(), secs));
            }
            row.extend([
                secs(t.default_s),
                secs(t.planned_s),
                signed(t.change_s, t.change_pct),
            ]);
            row
        })
        .collect();
    let mut total_row = vec![
        "total".to_string(),
        String::new(),
        String::new(),
        format_bytes(r.total_demand_bytes),
        String::new(),
    ];
    if measured {
        let alone: f64 = r.tasks.iter().filter_map(|t| t.alone_s).sum();
        let together: f64 = r.tasks.iter().filter_map(|t| t.together_s).sum();
        total_row.extend([secs(alone), secs(together)]);
    }
    total_row.extend([
        secs(r.total.default_s),
        secs(r.total.planned_s),
        signed(r.total.change_s, r.total.change_pct),
    ]);
    rows.push(total_row);
    out.push_str(&text_table(&header, &rows));
    if measured {
        out.push_str(&separation(r));
    }
    if let (Some(d), Some(p), Some(c)) = (
        r.total.lengthened_default_s,
        r.total.lengthened_planned_s,
        r.total.lengthened_change_pct,
    ) {
        out.push_str(&format!(
            "lengthened latency (Σ response − alone): default {}, planned {} ({c:+.1}%)\n",
            secs(d),
            secs(p)
        ));
    }
    if r.total.per_repetition_change_pct.len() > 1 {
        let changes: Vec<String> = r
            .total
            .per_repetition_change_pct
            .iter()
            .map(|c| format!("{c:+.1}%"))
            .collect();
        out.push_str(&format!(
            "total change within each repetition (planned against the default run next to it): {}\n",
            changes.join(", ")
        ));
    }
    out.push('\n');
    let bytes = |p: Option<u64>| p.map_or_else(|| "-".to_string(), format_bytes);
    let pages = |p: Option<u64>| bytes(p.map(|n| n.saturating_mul(PAGE)));
    let memory_rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                bytes(t.default_peak_bytes),
                bytes(t.planned_peak_bytes),
                pages(t.default_refaults),
                pages(t.planned_refaults),
            ]
        })
        .collect();
    out.push_str(&text_table(
        &[
            "task",
            "peak default",
            "peak planned",
            "refaulted default",
            "refaulted planned",
        ],
        &memory_rows,
    ));
    out.push_str(
        "peak: most memory charged to the task's group; refaulted: file pages evicted and read back \
         (workingset_refault_file × 4 KiB), the page cache's thrashing\n",
    );
    out.push_str(&format!(
        "change = planned − default; response times are spawn to exit; {} runs in {}\n",
        r.warmup
            + if measured {
                r.repeat * (r.tasks.len() as u32 + 3)
            } else {
                r.repeat * 2
            },
        secs(r.wall_s)
    ));
    out
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
        let t = spec::builtin_mixed(Path::new("/bin/true"), Path::new("/tmp"), 1 << 30);
        let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["stream", "compute", "bulk"]);
        let demands: Vec<u64> = t.iter().map(|t| t.demand_bytes).collect();
        assert_eq!(demands, [1 << 30, 1 << 29, 3 << 29]);
    }
}
