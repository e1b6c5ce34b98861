//! `oversub plan`, `oversub run` and `oversub demo`: the table-driven schedule runtime from the command line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_report::{
    format_bytes, format_seconds, text_table, HtmlBlock, HtmlReport, MarkerKind, SpanKind, Timeline,
};
use oversub_sched::plan::{self, feasible_table};
use oversub_sched::setup::{self, StoreSpeed};
use oversub_sched::{Bandwidths, Mode, PlanDoc, Prime, Readahead, RunOptions, RunResult, System};
use serde::Serialize;

use crate::error::BoxError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Foreknowledge, asynchronous paging during the preceding slot (Fig. 8).
    Async,
    /// Foreknowledge, a synchronous paging slot before each component (Fig. 7).
    Sync,
    /// No foreknowledge: LRU eviction and synchronous paging at slot start (Fig. 6).
    Demand,
    /// All three, one after another.
    All,
}

impl ModeArg {
    fn modes(self) -> Vec<Mode> {
        match self {
            ModeArg::Async => vec![Mode::Async],
            ModeArg::Sync => vec![Mode::Sync],
            ModeArg::Demand => vec![Mode::Demand],
            ModeArg::All => Mode::ALL.to_vec(),
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Configuration file (TOML; see examples/paper.toml).
    config: PathBuf,
    /// Platform profile (`oversub probe --out FILE`; docs/profile.md) whose [storage] table gives the store's
    /// bandwidths. Without it, the store is measured quickly.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Demand-paging speeds, READ[,WRITE] in bytes per second (e.g. 1.43e9,1.43e9; one number: both ways): demand
    /// is then priced at them (concurrent per CPU, the store shared at its direct speed). Without it they are
    /// measured on the configuration's store (a memory-mapped file with the kernel's readahead, as `oversub run`
    /// demand-pages by default).
    #[arg(long, value_name = "READ[,WRITE]", allow_hyphen_values = true)]
    demand_bandwidth: Option<String>,
    /// Plan every work as taking this many times as long: the interference of paging with the CPU tasks
    /// (Sec. III-D). At least 1.0; the table then shows the feasibility and minimum period without it beside.
    #[arg(
        long,
        default_value_t = 1.0,
        allow_hyphen_values = true,
        value_parser = parse_inflation,
        conflicts_with = "inflate_from"
    )]
    inflate: f64,
    /// Take --inflate from a JSON file written by `oversub bench interference --json FILE`: the worst slowdown of
    /// a CPU task under paging, i.e. the largest of (a) each DRAM-thrashing row's bandwidth alone over its
    /// bandwidth with the paging loop running (the same memory traffic takes that much longer) and (b) the PREM
    /// task's mean iteration time (load + compute + unload) with the paging interferer over alone. Values under 1
    /// count as 1. The number used is printed.
    #[arg(long, value_name = "FILE")]
    inflate_from: Option<PathBuf>,
    /// Write the analysis as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Configuration file (TOML; see examples/paper.toml).
    config: PathBuf,
    /// Paging mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Async)]
    mode: ModeArg,
    /// Repetitions of the table to run and count.
    #[arg(long, default_value_t = 5, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    hyperperiods: usize,
    /// Repetitions run first and not counted (memory fills and the store absorbs the set-up's writes).
    #[arg(
        long,
        default_value_t = 1,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    warmup: usize,
    /// Extra warm-up repetitions allowed after --warmup until the table runs on time (see `oversub demo --help`);
    /// the summary says how many it took.
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    extra_warmup: usize,
    /// Run each mode at the shortest period the planner finds feasible for it instead of the table's own.
    #[arg(long)]
    at_min_period: bool,
    /// Platform profile (docs/profile.md) whose [storage] table gives the store's bandwidths; without it the store
    /// is measured quickly.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Write the summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Chrome trace-event timeline (opens in Perfetto) per mode: FILE, or FILE-MODE.json for several.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write an SVG timeline like Figs. 5-8 per mode: FILE, or FILE-MODE.svg for several.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Do not pin lane threads to their CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Plan the works as taking this many times as long (>= 1; interference from the paging's memory traffic,
    /// Sec. III-D; `oversub bench interference` measures it). The works themselves run as they are.
    #[arg(
        long,
        default_value_t = 1.0,
        allow_hyphen_values = true,
        value_parser = parse_inflation,
        conflicts_with = "inflate_from"
    )]
    inflate: f64,
    /// Take --inflate from a JSON file written by `oversub bench interference --json` (see `oversub plan --help`).
    #[arg(long, value_name = "FILE")]
    inflate_from: Option<PathBuf>,
    /// Demand mode: the kernel's readahead on the memory-mapped store (`kernel`: Linux's demand paging as the
    /// paper measured it; `off`: every touched 4 KiB page is a fault that reads just that page).
    #[arg(long, value_enum, default_value_t = Readahead::Kernel)]
    demand_readahead: Readahead,
}

fn parse_inflation(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 1.0 => Ok(f),
        Ok(f) => Err(format!(
            "{f} is not an inflation factor: give a number >= 1 (1.17 = works take 17% longer)"
        )),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder for the HTML report, timelines and traces.
    #[arg(long, default_value = "oversub-demo")]
    out: PathBuf,
    /// Repetitions of the table per run, counted.
    #[arg(long, default_value_t = 5, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    hyperperiods: usize,
    /// Repetitions run first and not counted.
    #[arg(
        long,
        default_value_t = 2,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    warmup: usize,
    /// Extra warm-up repetitions allowed after --warmup, until the table runs on time: a slow start (a store or
    /// memory still cold after the set-up) makes the first repetitions late, and the table catches up only as fast
    /// as the store's idle time allows. The warm-up ends at the first repetition that ran on time, or whose lateness stopped
    /// falling; the report says how many it took. 0: exactly --warmup.
    #[arg(
        long,
        default_value_t = 10,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    extra_warmup: usize,
    /// Swap store location (directory or file); default: the system's temporary directory. Several,
    /// comma-separated (`--store /mnt/a,/mnt/b`), stripe the pager's store over them (demand paging uses the
    /// first).
    #[arg(long, value_delimiter = ',', value_name = "PATH[,PATH...]")]
    store: Vec<PathBuf>,
    /// Largest memory unit the demo may use per component (the paper's is 1 GiB; five units are allocated).
    #[arg(
        long,
        default_value = "1GiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    max_unit: u64,
    /// Share of a 500 ms slot that one swap (a unit out and a unit in, at the store's measured speeds) takes: 1.0
    /// is the paper's example, where paging fills the whole slot.
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true, value_parser = parse_share)]
    swap_share: f64,
    /// Do not search the largest swap share at which async paging still meets the target (1.0, 0.9, …).
    #[arg(long)]
    no_share_search: bool,
    /// Demand mode's readahead on the memory-mapped store (see `oversub run --help`).
    #[arg(long, value_enum, default_value_t = Readahead::Kernel)]
    demand_readahead: Readahead,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 && f <= 4.0 => Ok(f),
        Ok(f) => Err(format!(
            "{f} is not a swap share: give a number in (0, 4], e.g. 1.0 or 0.25"
        )),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// The store's bandwidths from the profile, else measured, said on stderr.
fn bandwidths(profile: Option<&Path>, system: &System) -> Result<StoreSpeed, BoxError> {
    let speed = setup::store_speed(None, profile, system)?;
    match profile {
        Some(p) => eprintln!(
            "store bandwidths from {}: {}",
            p.display(),
            describe_bw(speed.bw)
        ),
        None => eprintln!(
            "store measured with the pager ({} round trips, slowest of 3): {}",
            format_bytes(setup::MEASURE_BYTES),
            describe_bw(speed.bw)
        ),
    }
    Ok(speed)
}

/// `bw` with demand-paging speeds measured on the configuration's store (said on stderr).
fn demand_speeds(
    bw: Bandwidths,
    system: &System,
    readahead: Readahead,
) -> Result<Bandwidths, BoxError> {
    let d = setup::measure_demand(
        system.platform.stores.first().map(PathBuf::as_path),
        readahead,
    )?;
    eprintln!(
        "demand paging measured on the store ({} mapped, readahead {}, slowest of 3): fault-in {:.0} MB/s, \
         write-back {:.0} MB/s",
        format_bytes(setup::MEASURE_BYTES),
        if readahead == Readahead::Off { "off" } else { "kernel" },
        d.read_bytes_per_s / 1e6,
        d.write_bytes_per_s / 1e6
    );
    Ok(bw.with_demand(d.read_bytes_per_s, d.write_bytes_per_s))
}

fn describe_bw(bw: Bandwidths) -> String {
    format!(
        "page-in {:.0} MB/s, page-out {:.0} MB/s",
        bw.read_bytes_per_s / 1e6,
        bw.write_bytes_per_s / 1e6
    )
}

fn load(path: &Path) -> Result<System, BoxError> {
    Ok(oversub_sched::load_system(path)?)
}

/// The shortest period at which `mode` runs the table (async: stretched uniformly; sync and demand: repacked).
fn min_feasible_period(system: &System, mode: Mode, bw: Bandwidths) -> Option<f64> {
    feasible_table(system, mode, bw).map(|s| s.table.hyperperiod_s)
}

fn describe_system(system: &System) -> String {
    let demand = system.demand_bytes();
    let cap = system.platform.capacity_bytes;
    format!(
        "{} components, {} slots per {} hyperperiod; buffers {} on a pool of {} ({:.0}% oversubscription)",
        system.components.len(),
        system.table.slots.len(),
        format_seconds(system.table.hyperperiod_s),
        format_bytes(demand),
        format_bytes(cap),
        (demand as f64 / cap.max(1) as f64 - 1.0).max(0.0) * 100.0
    )
}

fn opt_period(p: Option<f64>) -> String {
    p.map_or_else(|| "none found".into(), format_seconds)
}

/// The worst slowdown of a CPU task under paging in an `oversub bench interference --json` file, and what it
/// was measured on.
fn slowdown_from(path: &Path) -> Result<(f64, String), BoxError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--inflate-from {}: {e}", path.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        format!(
            "--inflate-from {}: not JSON ({e}); give a file written by `oversub bench interference --json`",
            path.display()
        )
    })?;
    let worst = oversub_sched::inflation::worst_slowdown(&doc).ok_or_else(|| {
        format!(
            "--inflate-from {}: no slowdown under paging in it (no `thrashing` rows with bw_alone_mbs and \
             bw_with_paging_mbs, no `prem` alone and paging.interfered timings); give a file written by \
             `oversub bench interference --json`",
            path.display()
        )
    })?;
    Ok((worst.factor, worst.what))
}

/// The work inflation factor: `inflate`, or the worst slowdown in an `oversub bench interference --json` file.
fn resolve_inflation(inflate: f64, inflate_from: Option<&Path>) -> Result<f64, BoxError> {
    Ok(match inflate_from {
        Some(path) => {
            let (slowdown, what) = slowdown_from(path)?;
            let used = slowdown.max(1.0);
            println!(
                "work inflation x{used:.3} from {}: the worst slowdown of a CPU task under paging, {what} \
                 (x{slowdown:.3}{})",
                path.display(),
                if slowdown < 1.0 { ", counted as 1" } else { "" }
            );
            used
        }
        None => {
            if !(inflate.is_finite() && inflate >= 1.0) {
                return Err(format!(
                    "--inflate must be a number at least 1.0 (works planned that many times as long), not {}",
                    inflate
                )
                .into());
            }
            if inflate != 1.0 {
                println!("work inflation x{:.3} (--inflate)", inflate);
            }
            inflate
        }
    })
}

pub fn plan_cmd(args: PlanArgs) -> Result<(), BoxError> {
    let system = load(&args.config)?;
    println!("{}: {}", args.config.display(), describe_system(&system));
    let inflate = resolve_inflation(args.inflate, args.inflate_from.as_deref())?;
    let mut speed = bandwidths(args.profile.as_deref(), &system)?;
    if let Some(text) = &args.demand_bandwidth {
        let parse = |t: &str| {
            t.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    format!(
                        "--demand-bandwidth {text}: {t:?} is not a positive number of bytes per second \
                         (READ[,WRITE], e.g. 1.43e9,1.43e9)"
                    )
                })
        };
        let mut parts = text.splitn(2, ',');
        let read = parse(parts.next().unwrap_or(""))?;
        let write = parts.next().map_or(Ok(read), parse)?;
        speed.bw = speed.bw.with_demand(read, write);
    } else {
        speed.bw = demand_speeds(speed.bw, &system, Readahead::Kernel)?;
    }
    let doc = PlanDoc::new_inflated(&system, speed, &Mode::ALL, inflate);
    let analyses = &doc.modes;
    let inflated = inflate != 1.0;
    let rows: Vec<Vec<String>> = Mode::ALL
        .iter()
        .filter_map(|m| analyses.get(m.name()).map(|a| (m, a)))
        .map(|(m, a)| {
            let yes = |b: bool| if b { "yes" } else { "NO" }.to_string();
            let mut row = vec![m.name().to_string(), yes(a.feasible_at_target)];
            if inflated {
                row.push(yes(a.feasible_at_target_uninflated));
            }
            row.push(opt_period(a.min_feasible_period_s));
            if inflated {
                row.push(opt_period(a.min_feasible_period_uninflated_s));
            }
            row.extend([
                a.page_outs_per_hyperperiod.to_string(),
                format_bytes(a.bytes_paged_per_hyperperiod),
                a.min_capacity_bytes.map_or("-".into(), format_bytes),
                a.max_oversubscription
                    .map_or("-".into(), |o| format!("{:.0}%", o * 100.0)),
            ]);
            row
        })
        .collect();
    let mut header = vec!["mode", "feasible at its period"];
    if inflated {
        header.push("(uninflated)");
    }
    header.push("min feasible period");
    if inflated {
        header.push("(uninflated)");
    }
    header.extend([
        "page-outs / hyperperiod",
        "paged / hyperperiod",
        "min capacity",
        "max oversubscription",
    ]);
    println!("{}", text_table(&header, &rows));
    for m in Mode::ALL {
        if let Some(a) = analyses.get(m.name()) {
            println!(
                "  {m} priced at {}: {}",
                a.priced_at,
                describe_bw(Bandwidths::direct(a.read_bytes_per_s, a.write_bytes_per_s))
            );
        }
    }
    for m in Mode::ALL {
        if let Some(a) = analyses.get(m.name()) {
            for p in a.problems.iter().take(5) {
                println!("  {m}: {p}");
            }
            if a.problems.len() > 5 {
                println!("  {m}: … and {} more", a.problems.len() - 5);
            }
        }
    }
    // Per slot: what async paging needs and the time it has (the previous slot on the CPU).
    let steady = analyses
        .get(Mode::Async.name())
        .and_then(|a| a.slots.as_deref())
        .unwrap_or_default();
    let rows: Vec<Vec<String>> = steady
        .iter()
        .map(|s| {
            vec![
                s.component.clone(),
                format!("CPU {}", s.cpu),
                format_seconds(s.start_s),
                format!("{} out, {} in", s.page_outs, s.page_ins),
                format_bytes(s.io_bytes),
                format_seconds(s.paging_s),
                format_seconds(s.available_s),
                s.problem.clone().unwrap_or_else(|| "ok".into()),
            ]
        })
        .collect();
    println!("\nasync paging per slot (steady state):");
    println!(
        "{}",
        text_table(
            &[
                "slot",
                "cpu",
                "start",
                "operations",
                "bytes",
                "paging time",
                "time available",
                "verdict"
            ],
            &rows
        )
    );
    if let Some(path) = &args.json {
        let out = doc.brief();
        std::fs::write(path, serde_json::to_string_pretty(&out)?)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// A progress bar counting slot instances.
fn slots_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} slots {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// How a run is made.
#[derive(Debug, Clone, Copy)]
struct RunHow {
    hyperperiods: usize,
    warmup: usize,
    /// Extra warm-up repetitions allowed until the table runs on time.
    extra_warmup: usize,
    bw: Bandwidths,
    pin: bool,
    inflate: f64,
    readahead: Readahead,
}

/// Plans (with the works inflated, if asked) and runs `system` in `mode`, with a progress bar.
fn run_mode(
    system: &System,
    mode: Mode,
    how: RunHow,
    bar: &ProgressBar,
) -> Result<RunResult, BoxError> {
    let planning = if how.inflate != 1.0 {
        system.with_work_inflation(how.inflate)
    } else {
        system.clone()
    };
    let p = plan::plan(
        &planning,
        mode,
        how.hyperperiods + how.warmup + how.extra_warmup,
        how.bw,
    );
    let pool = setup::pool_for(system)?;
    let space = pool.address_space();
    let progress_bar = bar.clone();
    let base = bar.position();
    // The store is read back after the set-up's writes until it reads at the speed the plan assumed, so the table
    // does not start with a backlog (demand mode: one round; its faults are priced at another speed).
    let prime = match mode {
        Mode::Demand => Prime::default(),
        _ => Prime::until(how.bw.read_bytes_per_s),
    };
    let options = RunOptions {
        pin_threads: how.pin,
        settle_s: 0.5,
        warmup_hyperperiods: how.warmup,
        progress: Some(Arc::new(move |done, _total| {
            progress_bar.set_position(base + done as u64)
        })),
        demand_readahead: how.readahead,
        prime,
        max_extra_warmup: how.extra_warmup,
    };
    let r = oversub_sched::run(system, &space, &p, &options)?;
    // A warm-up that ended early leaves the repetitions it did not need: the bar moves past them.
    bar.set_position(base + p.slots.len() as u64);
    Ok(r)
}

/// Prints a line above the progress bar, or on stderr where the bar is not drawn (output piped to a file), so
/// long work always shows progress.
fn progress_line(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// The warm-up a run had: as asked, or longer until the table ran on time.
fn describe_warmup(r: &RunResult) -> String {
    let extra = r.warmup_hyperperiods - r.warmup_asked;
    if extra == 0 {
        format!("{} warm-up repetition(s)", r.warmup_hyperperiods)
    } else {
        format!(
            "{} warm-up repetitions: {} asked, {extra} more until the table ran on time or stopped catching up",
            r.warmup_hyperperiods, r.warmup_asked
        )
    }
}

/// One line per finished run: its verdict, how the store was primed and, when it missed, where the misses came
/// from.
fn run_line(n: usize, label: &str, r: &RunResult, started: Instant) -> String {
    let prime = r.prime.as_ref().map_or_else(String::new, |p| {
        let speeds: Vec<String> = p
            .read_bytes_per_s
            .iter()
            .map(|b| format!("{:.2}", b / 1e9))
            .collect();
        format!(
            "; store primed in {:.1} s ({} round{} reading {} GB/s{})",
            p.seconds,
            p.rounds,
            if p.rounds == 1 { "" } else { "s" },
            speeds.join(" → "),
            if p.reached {
                ""
            } else {
                ", short of the plan's speed"
            }
        )
    });
    let mut line = format!(
        "[{:>4.0} s] run {n}, {label}: {} ({} misses of {} counted slots; {}){prime}",
        started.elapsed().as_secs_f64(),
        if r.met_target() { "met" } else { "MISSED" },
        r.deadline_misses,
        r.counted_slots(),
        describe_warmup(r),
    );
    if r.deadline_misses + r.warmup_misses > 0 {
        line.push_str("\n         ");
        line.push_str(&oversub_sched::miss_profile(r).describe(r.hyperperiod_s));
    }
    line
}

/// The figure of a run: a row per CPU and GPU, the store's operations, and what the store holds.
fn timeline(system: &System, r: &RunResult, title: String) -> Timeline {
    let mut cpus: Vec<usize> = r.slots.iter().map(|s| s.cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut gpus: Vec<usize> = r.slots.iter().filter_map(|s| s.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let mut rows: Vec<String> = cpus.iter().map(|c| format!("CPU {c}")).collect();
    rows.extend(gpus.iter().map(|g| format!("GPU {g}")));
    let store_row = rows.len();
    rows.push("store I/O".into());
    let holds_row = rows.len();
    rows.push("store holds".into());
    let mut t = Timeline::new(title, rows);
    let row_of_cpu = |c: usize| cpus.iter().position(|&x| x == c).unwrap_or(0);
    let row_of_gpu = |g: usize| cpus.len() + gpus.iter().position(|&x| x == g).unwrap_or(0);
    for s in &r.slots {
        let detail = format!(
            "{} (hyperperiod {}): planned {:.1} ms, started {:.1} ms, done {:.1} ms, deadline {:.1} ms{}",
            s.component,
            s.hyperperiod,
            s.planned_start_s * 1e3,
            s.actual_start_s * 1e3,
            s.completion_s * 1e3,
            s.deadline_s * 1e3,
            if s.met { "" } else { " — MISSED" }
        );
        t.add_span(
            row_of_cpu(s.cpu),
            s.actual_start_s,
            s.completion_s,
            s.component.clone(),
            SpanKind::Work,
            detail.clone(),
        );
        if let Some(g) = s.gpu {
            t.add_span(
                row_of_gpu(g),
                s.actual_start_s,
                s.completion_s,
                s.component.clone(),
                SpanKind::Work,
                detail,
            );
        }
        if s.paging_wait_s > 1e-4 {
            let kind = if r.mode == "demand" {
                SpanKind::Fault
            } else {
                SpanKind::Paging
            };
            t.add_span(
                row_of_cpu(s.cpu),
                s.actual_start_s - s.paging_wait_s,
                s.actual_start_s,
                "paging".to_string(),
                kind,
                format!(
                    "{} waited {:.1} ms for paging",
                    s.component,
                    s.paging_wait_s * 1e3
                ),
            );
        }
        if !s.met {
            t.add_marker(
                row_of_cpu(s.cpu),
                s.completion_s,
                MarkerKind::Miss,
                format!("{} missed", s.component),
            );
        }
    }
    // What the store holds: every buffer the set-up did not page back in starts out there.
    let mut out_since: BTreeMap<String, f64> = system
        .buffers()
        .iter()
        .map(|(c, b)| format!("{}.{}", system.components[*c].name, b.name))
        .filter(|name| !r.resident_at_start.contains(name))
        .map(|name| (name, 0.0))
        .collect();
    for op in &r.ops {
        // The renderer marks page-ins and page-outs with their own arrows.
        let kind = if op.kind == "in" {
            SpanKind::PageIn
        } else {
            SpanKind::PageOut
        };
        t.add_span(
            store_row,
            op.start_s,
            op.end_s,
            op.buffer.clone(),
            kind,
            format!(
                "page-{} of {} ({}) for {}",
                op.kind,
                op.buffer,
                format_bytes(op.io_bytes),
                op.for_component
            ),
        );
        if op.kind == "in" {
            if let Some(since) = out_since.remove(&op.buffer) {
                t.add_span(
                    holds_row,
                    since,
                    op.start_s,
                    op.buffer.clone(),
                    SpanKind::Holds,
                    format!("{} on the store", op.buffer),
                );
            }
        } else {
            out_since.insert(op.buffer.clone(), op.end_s);
        }
    }
    let end = r.slots.iter().map(|s| s.completion_s).fold(0.0, f64::max);
    for (name, since) in out_since {
        t.add_span(
            holds_row,
            since,
            end,
            name.clone(),
            SpanKind::Holds,
            format!("{name} on the store"),
        );
    }
    t
}

fn per_mode_path(base: &Path, mode: Mode, several: bool, ext: &str) -> PathBuf {
    if !several {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map_or_else(|| "timeline".into(), |s| s.to_string_lossy().into_owned());
    base.with_file_name(format!("{stem}-{}.{ext}", mode.name()))
}

#[derive(Debug, Serialize)]
struct ModeSummary {
    target_period_s: f64,
    met_target: bool,
    deadline_misses: usize,
    max_lateness_s: f64,
    bytes_paged: u64,
    store_busy_s: f64,
    min_feasible_period_s: Option<f64>,
    hyperperiods_counted: usize,
    warmup_hyperperiods: usize,
    warmup_misses: usize,
    warmup_asked: usize,
    major_faults: u64,
    work_inflation: f64,
    misses: oversub_sched::MissProfile,
}

/// The cells every run summary shows: period, verdict, misses, worst lateness, bytes paged.
fn outcome_cells(r: &RunResult) -> Vec<String> {
    vec![
        format_seconds(r.hyperperiod_s),
        if r.met_target() { "met" } else { "MISSED" }.into(),
        format!("{} of {}", r.deadline_misses, r.counted_slots()),
        format_seconds(r.max_lateness_s),
        format_bytes(r.bytes_paged),
    ]
}

fn summary_rows(results: &[(Mode, RunResult, Option<f64>)]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|(m, r, minp)| {
            let mut row = vec![m.name().to_string()];
            row.extend(outcome_cells(r));
            row.extend([format_seconds(r.store_busy_s), opt_period(*minp)]);
            row
        })
        .collect()
}

const SUMMARY_HEADER: [&str; 8] = [
    "mode",
    "period",
    "deadlines",
    "misses",
    "worst lateness",
    "bytes paged",
    "store busy",
    "min feasible period (plan)",
];

pub fn run_cmd(args: RunArgs) -> Result<(), BoxError> {
    let system = load(&args.config)?;
    eprintln!("{}: {}", args.config.display(), describe_system(&system));
    let user: Vec<&str> = system
        .components
        .iter()
        .filter(|c| !c.work.is_builtin())
        .map(|c| c.name.as_str())
        .collect();
    if !user.is_empty() {
        return Err(format!(
            "{}: component{} {} {} no built-in work (work = {{ spin_ms = … }} or {{ sleep_ms = … }}): `oversub run` \
             runs built-in works only; run your own code with the library (oversub_sched::Runtime::work) or \
             Python (oversub.run_schedule(config, work={{\"{}\": fn}}))",
            args.config.display(),
            if user.len() > 1 { "s" } else { "" },
            user.join(", "),
            if user.len() > 1 { "have" } else { "has" },
            user[0]
        )
        .into());
    }
    let inflate = resolve_inflation(args.inflate, args.inflate_from.as_deref())?;
    let modes = args.mode.modes();
    let speed = bandwidths(args.profile.as_deref(), &system)?;
    let mut bw = speed.bw;
    if modes.contains(&Mode::Demand) && !bw.demand_measured() {
        bw = demand_speeds(bw, &system, args.demand_readahead)?;
    }
    let planning = if inflate != 1.0 {
        system.with_work_inflation(inflate)
    } else {
        system.clone()
    };
    let several = modes.len() > 1;
    let mut results = Vec::new();
    let bar = slots_bar(
        (modes.len()
            * (args.hyperperiods + args.warmup + args.extra_warmup)
            * system.table.slots.len()) as u64,
    );
    for mode in modes {
        // The planner's searches are costly: find the feasible table once, for the report and for --at-min-period.
        let min_table = feasible_table(&planning, mode, bw);
        let minp = min_table.as_ref().map(|s| s.table.hyperperiod_s);
        let table = if args.at_min_period {
            let t = min_table.ok_or_else(|| format!("{mode}: no feasible period found"))?;
            let mut run_table = system.clone();
            run_table.table = t.table;
            run_table
        } else {
            system.clone()
        };
        bar.set_message(format!(
            "{mode} at {}",
            format_seconds(table.table.hyperperiod_s)
        ));
        let how = RunHow {
            hyperperiods: args.hyperperiods,
            warmup: args.warmup,
            extra_warmup: args.extra_warmup,
            bw,
            pin: !args.no_pin,
            inflate,
            readahead: args.demand_readahead,
        };
        let r = run_mode(&table, mode, how, &bar)?;
        if let Some(svg) = &args.svg {
            let path = per_mode_path(svg, mode, several, "svg");
            timeline(
                &table,
                &r,
                format!("{mode} paging, period {}", format_seconds(r.hyperperiod_s)),
            )
            .write_svg(&path)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        if let Some(trace) = &args.trace {
            let path = per_mode_path(trace, mode, several, "json");
            timeline(&table, &r, format!("{mode} paging"))
                .write_chrome_trace(&path)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        results.push((mode, r, minp));
    }
    bar.finish_and_clear();
    println!("{}", text_table(&SUMMARY_HEADER, &summary_rows(&results)));
    for (mode, r, _) in &results {
        if r.warmup_hyperperiods > r.warmup_asked {
            println!("{mode}: {}", describe_warmup(r));
        }
        if r.deadline_misses + r.warmup_misses > 0 {
            println!(
                "{mode}: {}",
                oversub_sched::miss_profile(r).describe(r.hyperperiod_s)
            );
        }
    }
    if let Some(path) = &args.json {
        let modes: BTreeMap<&str, ModeSummary> = results
            .iter()
            .map(|(m, r, minp)| {
                (
                    m.name(),
                    ModeSummary {
                        target_period_s: r.hyperperiod_s,
                        met_target: r.met_target(),
                        deadline_misses: r.deadline_misses,
                        max_lateness_s: r.max_lateness_s,
                        bytes_paged: r.bytes_paged,
                        store_busy_s: r.store_busy_s,
                        min_feasible_period_s: *minp,
                        hyperperiods_counted: r.hyperperiods - r.warmup_hyperperiods,
                        warmup_hyperperiods: r.warmup_hyperperiods,
                        warmup_misses: r.warmup_misses,
                        warmup_asked: r.warmup_asked,
                        major_faults: r.major_faults,
                        work_inflation: inflate,
                        misses: oversub_sched::miss_profile(r),
                    },
                )
            })
            .collect();
        std::fs::write(
            path,
            serde_json::to_string_pretty(&serde_json::json!({ "modes": modes }))?,
        )
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

const PAPER_TOML: &str = oversub_sched::demo::PAPER_TOML;

/// The paper's example scaled to this store (`oversub_sched::demo::scale_paper`): the system, the unit and the
/// time scale.
fn demo_system(
    paper: &System,
    bw: Bandwidths,
    share: f64,
    max_unit: u64,
    stores: &[PathBuf],
) -> (System, u64, f64) {
    let d = oversub_sched::demo::scale_paper(paper, bw, share, max_unit, stores);
    (d.system, d.unit_bytes, d.time_scale)
}

/// Swap shares the demo searches, largest first.
const SHARES: [f64; 10] = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1];

pub fn demo_cmd(args: DemoArgs) -> Result<(), BoxError> {
    let started = Instant::now();
    let paper = oversub_sched::parse_system(PAPER_TOML, "examples/paper.toml")?;
    eprintln!(
        "oversub demo: the paper's example (Figs. 5-8), run for real with the three paging modes"
    );
    let speeds = DemoSpeeds::measure(&args)?;
    let bw = speeds.bw;
    let (system, unit, time_scale) =
        demo_system(&paper, bw, args.swap_share, args.max_unit, &args.store);
    let scale_note = scale_note(time_scale, unit);
    eprintln!(
        "swap share {:.2}: unit {} per component (one swap = {:.0} ms of a 500 ms slot), capacity 4 units (25% \
         oversubscription); {scale_note}",
        args.swap_share,
        format_bytes(unit),
        args.swap_share * 500.0
    );
    let (runs, minp) = demo_runs(&system, bw);
    // The planner's prediction of the largest share async meets at the target, at this store's speeds.
    let predicted_share = SHARES.iter().copied().find(|&sh| {
        let (s, _, _) = demo_system(&paper, bw, sh, args.max_unit, &args.store);
        plan::steady_feasible(&s, Mode::Async, bw)
    });
    let mut demo = Demo::start(&args, bw, &runs, started)?;
    demo.report.push(HtmlBlock::Paragraph(format!(
        "The example of Bakita & Anderson (RTSS 2022), Figs. 5-8: components A, B, C (500 ms) on CPU 0 with the \
         GPU and D, E (750 ms) on CPU 1, period 1500 ms, one unit of memory each, capacity for four units. Swap \
         share {:.2} (one unit out and one in take {:.0} ms of a 500 ms slot); unit {}; {scale_note}. Store: {}; \
         demand paging: fault-in {:.0} MB/s, write-back {:.0} MB/s (readahead {}).",
        args.swap_share,
        args.swap_share * 500.0,
        format_bytes(unit),
        describe_bw(speeds.direct),
        speeds.demand.read_bytes_per_s / 1e6,
        speeds.demand.write_bytes_per_s / 1e6,
        args.demand_readahead_name(),
    )));
    demo.run_tables(runs)?;
    let (largest_share_met, share_runs) = demo.search_share(&paper)?;
    demo.bar.finish_and_clear();
    let Demo {
        mut report,
        results,
        ..
    } = demo;

    let rows = demo_rows(&results, &minp);
    println!("{}", text_table(&DEMO_HEADER, &rows));
    let share_line = format!(
        "largest swap share async met at the target period: {} (planner predicts {}; asked {:.2})",
        largest_share_met.map_or_else(|| "none".into(), |s| format!("{s:.2}")),
        predicted_share.map_or_else(|| "none".into(), |s| format!("{s:.2}")),
        args.swap_share
    );
    println!("{share_line}");
    if let Some(predicted) = predicted_share {
        explain_missed_shares(
            predicted,
            largest_share_met,
            args.swap_share,
            &results,
            &share_runs,
        );
    }
    let paper_periods = paper_periods(&paper);
    let cmp_rows = comparison_rows(&paper_periods, &minp, &results);
    println!(
        "minimum feasible periods (swap share {:.2}):\n{}",
        args.swap_share,
        text_table(&COMPARISON_HEADER, &cmp_rows)
    );
    // The summary goes above the runs' sections, below the introduction.
    report.blocks.splice(
        1..1,
        [
            HtmlBlock::Table {
                header: DEMO_HEADER.iter().map(|s| s.to_string()).collect(),
                rows,
            },
            HtmlBlock::Paragraph(share_line),
            HtmlBlock::Heading("Minimum feasible periods".into()),
            HtmlBlock::Table {
                header: COMPARISON_HEADER.iter().map(|s| s.to_string()).collect(),
                rows: cmp_rows,
            },
        ],
    );
    let index = args.out.join("index.html");
    report
        .write(&index)
        .map_err(|e| format!("writing {}: {e}", index.display()))?;
    let json = serde_json::json!({
        "swap_share": args.swap_share,
        "largest_swap_share_met": largest_share_met,
        "predicted_largest_swap_share": predicted_share,
        "unit_bytes": unit,
        "time_scale": time_scale,
        "read_bytes_per_s": speeds.direct.read_bytes_per_s,
        "write_bytes_per_s": speeds.direct.write_bytes_per_s,
        "demand_read_bytes_per_s": speeds.demand.read_bytes_per_s,
        "demand_write_bytes_per_s": speeds.demand.write_bytes_per_s,
        "demand_readahead": args.demand_readahead_name(),
        "paper_bandwidths_min_period_s": paper_periods.iter().map(|(m, p)| (m.name(), *p)).collect::<BTreeMap<_, _>>(),
        "runs": results.iter().map(|(label, m, r)| run_json(label, *m, r, &minp)).collect::<Vec<_>>(),
    });
    let json_path = args.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)?)
        .map_err(|e| format!("writing {}: {e}", json_path.display()))?;
    eprintln!(
        "report: {} (timelines, Chrome traces, results.json) — {:.0} s",
        index.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The store's speeds as the demo measured them with the pager (direct I/O) and through a mapping (demand paging).
struct DemoSpeeds {
    direct: Bandwidths,
    demand: oversub_core::DemandSpeeds,
    /// Both, as the planner takes them.
    bw: Bandwidths,
}

impl DemoSpeeds {
    /// Measures the store of `args` both ways and says the speeds on stderr.
    fn measure(args: &DemoArgs) -> Result<DemoSpeeds, BoxError> {
        let direct = setup::measure_bandwidths(&args.store, setup::MEASURE_BYTES)?;
        let demand = oversub_core::measure_demand_bandwidths_with(
            Some(&setup::store_dir(args.store.first().map(PathBuf::as_path))?),
            setup::MEASURE_BYTES,
            3,
            args.demand_readahead,
        )?;
        let bw = direct.with_demand(demand.read_bytes_per_s, demand.write_bytes_per_s);
        eprintln!(
            "store measured with the pager: {}; demand paging (mmap, readahead {}): fault-in {:.0} MB/s, write-back \
             {:.0} MB/s",
            describe_bw(direct),
            args.demand_readahead_name(),
            demand.read_bytes_per_s / 1e6,
            demand.write_bytes_per_s / 1e6
        );
        Ok(DemoSpeeds { direct, demand, bw })
    }
}

/// How the demo's time scale is described.
fn scale_note(time_scale: f64, unit: u64) -> String {
    if time_scale < 1.0 {
        format!(
            "time scaled by {time_scale:.3} (units capped at {})",
            format_bytes(unit)
        )
    } else {
        "real time scale (1500 ms period), unit sized from the store's bandwidth".to_string()
    }
}

/// A run of the demo: its label, mode and the system it runs.
type DemoRun = (String, Mode, System);

/// The async runs at smaller swap shares, by share.
type ShareRuns = Vec<(f64, RunResult)>;

/// The runs the demo starts with (every mode at the target period, then each at its minimum feasible period where
/// that is longer) and each mode's minimum feasible period.
fn demo_runs(system: &System, bw: Bandwidths) -> (Vec<DemoRun>, BTreeMap<Mode, Option<f64>>) {
    let target = system.table.hyperperiod_s;
    let mut runs: Vec<DemoRun> = Mode::ALL
        .iter()
        .map(|&m| (format!("{m} at the target period"), m, system.clone()))
        .collect();
    let mut minp: BTreeMap<Mode, Option<f64>> = BTreeMap::new();
    for m in Mode::ALL {
        let t = feasible_table(system, m, bw);
        minp.insert(m, t.as_ref().map(|s| s.table.hyperperiod_s));
        if let Some(t) = t {
            if t.table.hyperperiod_s > target * 1.001 {
                runs.push((format!("{m} at its min feasible period"), m, t));
            }
        }
    }
    (runs, minp)
}

/// The demo's runs in progress: what each run needs, the report they add to, and their results.
struct Demo<'a> {
    args: &'a DemoArgs,
    how: RunHow,
    /// Repetitions each run's plan covers (the progress bar counts their slots).
    repetitions: usize,
    started: Instant,
    bar: ProgressBar,
    report: HtmlReport,
    results: Vec<(String, Mode, RunResult)>,
}

impl<'a> Demo<'a> {
    /// The progress bar sized for `runs`, the output folder made and the report begun.
    fn start(
        args: &'a DemoArgs,
        bw: Bandwidths,
        runs: &[DemoRun],
        started: Instant,
    ) -> Result<Demo<'a>, BoxError> {
        let how = RunHow {
            hyperperiods: args.hyperperiods,
            warmup: args.warmup,
            extra_warmup: args.extra_warmup,
            bw,
            pin: true,
            inflate: 1.0,
            readahead: args.demand_readahead,
        };
        let repetitions = args.hyperperiods + args.warmup + args.extra_warmup;
        let total: usize = runs
            .iter()
            .map(|(_, _, s)| s.table.slots.len() * repetitions)
            .sum();
        let bar = slots_bar(total as u64);
        std::fs::create_dir_all(&args.out)
            .map_err(|e| format!("creating {}: {e}", args.out.display()))?;
        Ok(Demo {
            args,
            how,
            repetitions,
            started,
            bar,
            report: HtmlReport::new("oversub demo: GPU memory oversubscription with foreknowledge"),
            results: Vec::new(),
        })
    }

    /// Runs `table` in `mode` under `label` on the progress bar.
    fn run(&self, label: &str, mode: Mode, table: &System) -> Result<RunResult, BoxError> {
        self.bar.set_message(label.to_string());
        run_mode(table, mode, self.how, &self.bar)
    }

    /// Says a finished run, writes its timeline and trace, adds its section to the report and keeps its result.
    fn record(
        &mut self,
        label: String,
        mode: Mode,
        table: &System,
        r: RunResult,
    ) -> Result<(), BoxError> {
        let n = self.results.len() + 1;
        progress_line(&self.bar, run_line(n, &label, &r, self.started));
        let name = format!("run{n}-{}", mode.name());
        let tl = timeline(
            table,
            &r,
            format!("{label}: period {}", format_seconds(r.hyperperiod_s)),
        );
        let svg_path = self.args.out.join(format!("{name}.svg"));
        tl.write_svg(&svg_path)
            .map_err(|e| format!("writing {}: {e}", svg_path.display()))?;
        let trace_path = self.args.out.join(format!("{name}.trace.json"));
        tl.write_chrome_trace(&trace_path)
            .map_err(|e| format!("writing {}: {e}", trace_path.display()))?;
        let report = &mut self.report;
        report.push(HtmlBlock::Heading(format!(
            "{label} ({})",
            format_seconds(r.hyperperiod_s)
        )));
        report.push(HtmlBlock::Paragraph(format!(
            "{} deadline misses of {} counted slots ({} in the {} before them), worst lateness {}, {} paged{}.",
            r.deadline_misses,
            r.counted_slots(),
            r.warmup_misses,
            describe_warmup(&r),
            format_seconds(r.max_lateness_s),
            format_bytes(r.bytes_paged),
            if mode == Mode::Demand {
                format!(", {} major page faults", r.major_faults)
            } else {
                String::new()
            }
        )));
        if r.deadline_misses + r.warmup_misses > 0 {
            report.push(HtmlBlock::Paragraph(format!(
                "Where the misses come from: {}.",
                oversub_sched::miss_profile(&r).describe(r.hyperperiod_s)
            )));
        }
        report.push(HtmlBlock::Svg(tl.to_svg()));
        report.push(HtmlBlock::Link {
            text: "Chrome trace (open in Perfetto)".into(),
            href: format!("{name}.trace.json"),
        });
        self.results.push((label, mode, r));
        Ok(())
    }

    /// Makes `runs`, and a run at 1.3 × the minimum feasible period after each run at the minimum that missed.
    fn run_tables(&mut self, mut runs: Vec<DemoRun>) -> Result<(), BoxError> {
        let mut i = 0;
        while i < runs.len() {
            let (label, mode, table) = runs[i].clone();
            i += 1;
            let r = self.run(&label, mode, &table)?;
            // A plan is only as good as its bandwidth estimate: when the planned minimum misses in reality, try
            // 30% more, so the report shows a period that runs do meet.
            if !r.met_target() && label.ends_with("at its min feasible period") {
                let longer = table.with_hyperperiod(table.table.hyperperiod_s * 1.3);
                self.bar
                    .inc_length((longer.table.slots.len() * self.repetitions) as u64);
                runs.push((
                    format!("{mode} at 1.3 × its min feasible period"),
                    mode,
                    longer,
                ));
            }
            self.record(label, mode, &table, r)?;
        }
        Ok(())
    }

    /// The largest swap share async still meets the target at: the run at the requested share (the first), then
    /// smaller shares until one meets it. Also the runs at the smaller shares.
    fn search_share(&mut self, paper: &System) -> Result<(Option<f64>, ShareRuns), BoxError> {
        let args = self.args;
        let met_at_share = self
            .results
            .first()
            .is_some_and(|(_, m, r)| *m == Mode::Async && r.met_target());
        let mut largest_share_met = met_at_share.then_some(args.swap_share);
        let mut share_runs: Vec<(f64, RunResult)> = Vec::new();
        if met_at_share || args.no_share_search {
            return Ok((largest_share_met, share_runs));
        }
        for sh in SHARES
            .iter()
            .copied()
            .filter(|&sh| sh < args.swap_share - 1e-9)
        {
            let (s, u, _) = demo_system(paper, self.how.bw, sh, args.max_unit, &args.store);
            let label = format!(
                "async at the target period, swap share {sh:.1} (unit {})",
                format_bytes(u)
            );
            self.bar
                .inc_length((s.table.slots.len() * self.repetitions) as u64);
            let r = self.run(&label, Mode::Async, &s)?;
            let met = r.met_target();
            share_runs.push((sh, r.clone()));
            self.record(label, Mode::Async, &s, r)?;
            if met {
                largest_share_met = Some(sh);
                break;
            }
        }
        Ok((largest_share_met, share_runs))
    }
}

const DEMO_HEADER: [&str; 8] = [
    "run",
    "period",
    "deadlines",
    "misses",
    "worst lateness",
    "bytes paged",
    "major faults",
    "min feasible period (plan)",
];

/// The demo's summary table, a row per run.
fn demo_rows(
    results: &[(String, Mode, RunResult)],
    minp: &BTreeMap<Mode, Option<f64>>,
) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|(label, m, r)| {
            let mut row = vec![label.clone()];
            row.extend(outcome_cells(r));
            row.push(if *m == Mode::Demand {
                r.major_faults.to_string()
            } else {
                "-".into()
            });
            row.push(opt_period(minp.get(m).copied().flatten()));
            row
        })
        .collect()
}

/// Met below the prediction: says where the misses of the runs at shares the planner thought feasible came from.
fn explain_missed_shares(
    predicted: f64,
    largest_share_met: Option<f64>,
    asked: f64,
    results: &[(String, Mode, RunResult)],
    share_runs: &[(f64, RunResult)],
) {
    let met = largest_share_met.unwrap_or(0.0);
    if met >= predicted - 0.1 + 1e-9 {
        return;
    }
    let async_at_share = |sh: f64| -> Option<&RunResult> {
        if (sh - asked).abs() < 1e-9 {
            results.first().map(|(_, _, r)| r)
        } else {
            share_runs
                .iter()
                .find(|(s, _)| (s - sh).abs() < 1e-9)
                .map(|(_, r)| r)
        }
    };
    for sh in SHARES
        .iter()
        .copied()
        .filter(|&sh| sh <= predicted + 1e-9 && sh > met + 1e-9)
    {
        if let Some(r) = async_at_share(sh) {
            println!(
                "  share {sh:.2}, which the planner predicted feasible, missed: {}",
                oversub_sched::miss_profile(r).describe(r.hyperperiod_s)
            );
        }
    }
}

/// Each mode's minimum feasible period by our planner at the paper's bandwidth assumptions (4 GiB/s direct I/O,
/// 1.33 GiB/s demand paging; Sec. III-B) and its 1 GiB units.
fn paper_periods(paper: &System) -> BTreeMap<Mode, Option<f64>> {
    let gib = (1u64 << 30) as f64;
    let paper_bw = Bandwidths::direct(4.0 * gib, 4.0 * gib).with_demand(1.33 * gib, 1.33 * gib);
    Mode::ALL
        .iter()
        .map(|&m| (m, min_feasible_period(paper, m, paper_bw)))
        .collect()
}

const COMPARISON_HEADER: [&str; 5] = [
    "mode",
    "paper's analysis",
    "our planner, paper's bandwidths",
    "our planner, this store",
    "shortest period met in runs",
];

/// The paper's analysis beside ours: its periods, our planner at its bandwidths and at this store's, and the
/// shortest period the runs met (one set of speeds for all three modes).
fn comparison_rows(
    paper_periods: &BTreeMap<Mode, Option<f64>>,
    minp: &BTreeMap<Mode, Option<f64>>,
    results: &[(String, Mode, RunResult)],
) -> Vec<Vec<String>> {
    let met_in_runs = |m: Mode| {
        results
            .iter()
            .filter(|(label, rm, r)| *rm == m && r.met_target() && !label.contains("swap share"))
            .map(|(_, _, r)| r.hyperperiod_s)
            .reduce(f64::min)
    };
    let cmp_row = |name: &str, paper_s: &str, m: Mode| {
        vec![
            name.to_string(),
            paper_s.to_string(),
            opt_period(paper_periods.get(&m).copied().flatten()),
            opt_period(minp.get(&m).copied().flatten()),
            opt_period(met_in_runs(m)),
        ]
    };
    vec![
        cmp_row("async", "1.50 s", Mode::Async),
        cmp_row("sync (paging slot)", "2.50 s", Mode::Sync),
        cmp_row("demand", "6.00 s", Mode::Demand),
    ]
}

/// A run in the demo's `results.json`.
fn run_json(
    label: &str,
    m: Mode,
    r: &RunResult,
    minp: &BTreeMap<Mode, Option<f64>>,
) -> serde_json::Value {
    serde_json::json!({
        "label": label, "mode": m.name(), "period_s": r.hyperperiod_s, "met_target": r.met_target(),
        "deadline_misses": r.deadline_misses, "max_lateness_s": r.max_lateness_s, "bytes_paged": r.bytes_paged,
        "counted_slots": r.counted_slots(), "warmup_misses": r.warmup_misses,
        "warmup_hyperperiods": r.warmup_hyperperiods, "warmup_asked": r.warmup_asked,
        "major_faults": r.major_faults,
        "min_feasible_period_s": minp.get(&m).copied().flatten(),
        "prime": r.prime,
        "misses": oversub_sched::miss_profile(r),
    })
}

impl DemoArgs {
    fn demand_readahead_name(&self) -> &'static str {
        match self.demand_readahead {
            Readahead::Kernel => "kernel",
            Readahead::Off => "off",
        }
    }
}
