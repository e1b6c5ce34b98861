//! `oversub sim uvm`: one workload or the whole study of page-migration policies under oversubscription.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_report::{
    format_bytes, format_seconds, parse_size, text_table, BarChart, BarSeries, HtmlBlock,
    HtmlReport, LineChart, LineSeries,
};
use oversub_sim::uvm::analysis::StackDistance;
use oversub_sim::uvm::cost::CostModel;
use oversub_sim::uvm::policy::Policy;
use oversub_sim::uvm::report::{parse_policies, speedup_of, RunRow, UvmDoc};
use oversub_sim::uvm::sim::{
    EvictionOrder, EvictionUnit, MachineScale, SimConfig, SimResult, TimeModel,
};
use oversub_sim::uvm::suite::{
    self, geomean, ratio_percent, run_suite, SpeedupRow, SuiteEvent, SuiteSpec, TraceSource,
};
use oversub_sim::uvm::summary::{best_static, csv, find, lookup, main_ratio_of, workloads_in};
use oversub_sim::uvm::workload::{self, WorkloadKind, WorkloadParams, WorkloadSize};

use crate::error::BoxError;

/// Size, seed and graph of generated workloads.
#[derive(Debug, Args, Clone)]
pub struct WorkloadOpts {
    /// Small problem sizes: each workload simulates in about a second, far below the paper's proportions (the
    /// L2 and 2 MiB block sit at their floors). With --suite: the quick study instead, fewer workloads at the
    /// paper's proportions (docs/sim-uvm.md).
    #[arg(long)]
    pub quick: bool,
    /// Each workload at the smallest size whose scaled L2 keeps 256 sets (and block 16 pages) at the largest
    /// ratio run: the paper's proportions (hours on 2 cores for the suite).
    #[arg(long, conflicts_with = "scale")]
    pub paper_scale: bool,
    /// Multiply the default problem size by this factor (ignored with --quick).
    #[arg(long, value_name = "FACTOR", allow_hyphen_values = true, value_parser = crate::args::parse_positive_number)]
    pub scale: Option<f64>,
    /// Seed of the random graphs and keys; the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Graph file for BFS, SSSP and PageRank (edge list `u v [w]` or Matrix Market) instead of R-MAT.
    #[arg(long, value_name = "FILE")]
    pub graph: Option<PathBuf>,
}

impl WorkloadOpts {
    pub fn params(&self) -> Result<WorkloadParams, BoxError> {
        let size = match (self.quick, self.scale) {
            _ if self.paper_scale => WorkloadSize::PaperScale { max_ratio: 3.0 },
            (true, _) => WorkloadSize::Quick,
            (false, Some(f)) if f.is_finite() && f > 0.0 => WorkloadSize::Scale(f),
            (false, Some(f)) => {
                return Err(format!("--scale must be a positive number, not {f}").into())
            }
            (false, None) => WorkloadSize::Default,
        };
        Ok(WorkloadParams {
            size,
            seed: self.seed,
            graph: self.graph.clone(),
        })
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DecideArg {
    /// Eqs. 1 and 3 with the constants the paper prints.
    Paper,
    /// Eqs. 1 and 3 with the machine's constants (profile or defaults).
    Machine,
}

/// Simulate page-migration policies for unified memory under oversubscription (Chang et al., SYSTOR'21).
///
/// Examples:
///   oversub sim uvm --workload bfs --ratio 200 --policy dynamap,lazy-grp-hw
///   oversub sim uvm --suite --quick --out sim-uvm
///   oversub sim uvm --trace app.nvbit.txt --ratio 100,200,300
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct UvmArgs {
    /// Every workload × ratios 100, 200, 300 × every policy (the paper's Figs. 8, 11 and 12).
    #[arg(long)]
    suite: bool,
    /// Workloads, comma separated, or `all`: bfs, sssp, nw, gaussian, atax, pagerank, bst.
    #[arg(long, value_delimiter = ',')]
    workload: Vec<String>,
    /// Trace files to simulate (oversub binary or NVBit mem_trace text); may repeat.
    #[arg(long, value_name = "FILE")]
    trace: Vec<PathBuf>,
    /// Oversubscription ratios in percent, (problem − GPU memory) / GPU memory: `200`, `200%`; comma separated.
    #[arg(long, value_delimiter = ',', value_name = "PERCENT")]
    ratio: Vec<String>,
    /// Policies, comma separated, or `all`: eager, eager-wopref, lazy-grp-hw[:N], pin-host,
    /// lazy-pg-stat-sw[:N] (without N: the paper's best of 2, 8, 32, 64, 256), lazy-pg-dyn-sw[:N],
    /// static-map[:SHARE], dynamap, oracle.
    #[arg(long, value_delimiter = ',')]
    policy: Vec<String>,
    #[command(flatten)]
    workload_opts: WorkloadOpts,
    /// Platform profile (docs/profile.md) whose `[uvm]` table sets the machine the clock runs on (bandwidths,
    /// fault costs, remote-line latency, L2); decisions keep the paper's constants unless --decide-with machine.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// GPU L2 size, fixed (default: the paper's 3 MiB scaled with GPU memory).
    #[arg(long, value_name = "SIZE")]
    l2: Option<String>,
    /// How counted events become time.
    #[arg(long, value_enum, default_value = "overlap")]
    time_model: TimeModel,
    /// Sum the overlap model's resources per epoch instead of taking the slowest (a what-if: no overlap).
    #[arg(long)]
    no_overlap: bool,
    /// Whether the L2, prefetch region and eviction unit scale with the simulated GPU memory.
    #[arg(long, value_enum, default_value = "capacity")]
    machine_scale: MachineScale,
    /// Constants DynaMap decides with.
    #[arg(long, value_enum, default_value = "paper")]
    decide_with: DecideArg,
    /// Switch off the driver's thrashing detection (throttling and pinning) for Eager and Eager-woPref.
    #[arg(long)]
    no_thrashing_detection: bool,
    /// Track page utilisation always instead of stopping at a page's first eviction (Sec. 5.1's early stop).
    #[arg(long)]
    no_early_stop: bool,
    /// Window of simulated time over which DynaMap measures f_current, in µs (the paper gives none; 500 is the
    /// driver's thrashing lapse). A what-if on that choice.
    #[arg(long, value_name = "US", value_parser = crate::args::parse_positive_number)]
    rate_window_us: Option<f64>,
    /// Eviction order.
    #[arg(long, value_enum, default_value = "allocation")]
    eviction: EvictionOrder,
    /// Unit evicted at once.
    #[arg(long, value_enum, default_value = "block")]
    eviction_unit: EvictionUnit,
    /// Worker threads (default: one per core).
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<usize>
    )]
    threads: usize,
    /// Write results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write results as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write everything to this folder: results.json, results.csv, the figures as SVG, report.html.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Run the sweep as Ray tasks (one per trace) on the cluster at ADDRESS, or on a local one without it, through
    /// the Python package (`pip install "oversub[ray]"`; `$OVERSUB_PYTHON` picks the interpreter). Same rows and
    /// speedup table as a local run; --json writes the same document, --out its results.json, the speed-up figures
    /// 8, 11, 12 and a report; --csv, --threads and the --no-* switches do not work with it.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "ADDRESS")]
    ray: Option<String>,
}

fn value_name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().replace('-', "_"))
}

/// `oversub sim uvm --ray`: the same sweep through `oversub.sweep` (crate::sim::ray), and with --json or --out the
/// same document as a local run (`UvmDoc`, built from the sweep's rows by `UvmDoc::from_runs`).
fn run_on_ray(args: &UvmArgs, address: &str) -> Result<(), BoxError> {
    let unsupported = [
        (args.csv.is_some(), "--csv"),
        (args.threads != 0, "--threads"),
        (args.no_overlap, "--no-overlap"),
        (args.no_thrashing_detection, "--no-thrashing-detection"),
        (args.no_early_stop, "--no-early-stop"),
        (args.rate_window_us.is_some(), "--rate-window-us"),
        (
            args.workload_opts.paper_scale || (args.suite && args.workload_opts.quick),
            "--paper-scale (and --suite --quick, which uses it)",
        ),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(format!(
            "{flag} is not available with --ray (run without --ray, or use --json)"
        )
        .into());
    }
    // Everything is checked here, before Python and Ray start: the same errors as a local run, and the settings
    // the document describes.
    let sources = parse_sources(args)?;
    let ratios = ratios(args)?;
    let policies = parse_policies(&args.policy)?;
    let template = template(args)?;
    let mut py: Vec<String> = Vec::new();
    let all = args.suite || args.workload.iter().any(|w| w.eq_ignore_ascii_case("all"));
    if all {
        py.extend(["--workloads".into(), "all".into()]);
    } else if !args.workload.is_empty() {
        py.extend(["--workloads".into(), args.workload.join(",")]);
    }
    if !args.trace.is_empty() {
        py.push("--traces".into());
        py.extend(args.trace.iter().map(|t| t.display().to_string()));
    }
    // Percent, as typed: `oversub.sweep` reads ratios with the same parser.
    let ratio_text = if args.ratio.is_empty() {
        ratios
            .iter()
            .map(|r| ratio_percent(*r).to_string())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        args.ratio.join(",")
    };
    py.extend(["--ratios".into(), ratio_text]);
    let policy_text = if args.policy.is_empty() {
        "all".to_string()
    } else {
        args.policy.join(",")
    };
    py.extend(["--policies".into(), policy_text]);
    py.extend(["--seeds".into(), args.workload_opts.seed.to_string()]);
    if args.workload_opts.quick {
        py.push("--quick".into());
    }
    if let Some(f) = args.workload_opts.scale {
        py.extend(super::ray::option("scale", f));
    }
    if let Some(g) = &args.workload_opts.graph {
        py.extend(super::ray::option("graph", g.display()));
    }
    if let Some(p) = &args.profile {
        py.extend(super::ray::option("profile", p.display()));
    }
    if let Some(l2) = &args.l2 {
        py.extend(super::ray::option("l2", l2));
    }
    py.extend(super::ray::option(
        "time_model",
        value_name(args.time_model),
    ));
    py.extend(super::ray::option(
        "machine_scale",
        value_name(args.machine_scale),
    ));
    py.extend(super::ray::option(
        "decide_with",
        value_name(args.decide_with),
    ));
    py.extend(super::ray::option("eviction", value_name(args.eviction)));
    py.extend(super::ray::option(
        "eviction_unit",
        value_name(args.eviction_unit),
    ));
    if args.no_progress {
        py.push("--no-progress".into());
    }
    if args.json.is_none() && args.out.is_none() {
        return super::ray::delegate("uvm", py, address, None, false).map(|_| ());
    }
    let sweep = super::ray::delegate("uvm", py, address, None, true)?
        .ok_or("the Ray sweep's JSON could not be read back")?;
    let order = SweepOrder {
        sources: &sources,
        ratios: &ratios,
        policies: &policies,
    };
    let doc = doc_from_sweep(&sweep, &order, &template)?;
    if let Some(path) = &args.json {
        write_file(path, &serde_json::to_string_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    let Some(dir) = &args.out else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_file(&dir.join("results.json"), &serde_json::to_string(&doc)?)?;
    let rows = &doc.speedups;
    let tables = figure_tables(rows, &ratios);
    print!("{tables}");
    let mut report =
        HtmlReport::new("oversub sim uvm on Ray: page migration under oversubscription");
    report.push(HtmlBlock::Paragraph(format!(
        "{} runs from a sweep run as Ray tasks (oversub.sweep); the per-run analysis figures need a local run.",
        doc.runs.len()
    )));
    report.push(HtmlBlock::Pre(tables));
    for (file, title, chart) in figures(rows, &ratios) {
        let svg = chart.to_svg();
        write_file(&dir.join(file), &svg)?;
        report.push(HtmlBlock::Heading(title));
        report.push(HtmlBlock::Svg(svg));
    }
    report
        .write(&dir.join("report.html"))
        .map_err(|e| format!("{}: {e}", dir.join("report.html").display()))?;
    println!(
        "wrote {}/{{results.json,report.html,fig*.svg}}",
        dir.display()
    );
    Ok(())
}

/// The order a local suite lists its runs in (source × ratio × policy), which the sweep's sorted rows are put back
/// into so that `--ray` and a local run write the same document.
struct SweepOrder<'a> {
    sources: &'a [TraceSource],
    ratios: &'a [f64],
    policies: &'a [Policy],
}

impl SweepOrder<'_> {
    fn key(&self, row: &RunRow, policy: Policy) -> (usize, usize, usize) {
        let at = |i: Option<usize>| i.unwrap_or(usize::MAX);
        (
            at(self.sources.iter().position(|s| s.name() == row.workload)),
            at(self
                .ratios
                .iter()
                .position(|r| ratio_percent(*r) == row.ratio_percent)),
            at(self.policies.iter().position(|p| *p == policy)),
        )
    }
}

/// The local run's document from the JSON `python -m oversub.sweep uvm --json` printed: its rows (each run's
/// `sim_uvm` row, kept apart from its simulation time, which the sweep lists in `sim_seconds`) through
/// `UvmDoc::from_runs`, with the settings the flags give.
fn doc_from_sweep(
    sweep: &serde_json::Value,
    order: &SweepOrder<'_>,
    template: &SimConfig,
) -> Result<UvmDoc, BoxError> {
    let rows = sweep["rows"]
        .as_array()
        .ok_or("the Ray sweep's JSON has no rows")?;
    let times = sweep["sim_seconds"].as_array();
    let mut runs = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let mut row = row.clone();
        let sim_seconds = times
            .and_then(|t| t.get(i))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        if let Some(obj) = row.as_object_mut() {
            obj.insert("sim_seconds".into(), sim_seconds.into());
        }
        let run: RunRow = serde_json::from_value(row)
            .map_err(|e| format!("a row of the Ray sweep's JSON is not a run: {e}"))?;
        let policy = Policy::parse(&run.policy)?;
        runs.push((policy, run));
    }
    runs.sort_by_key(|(policy, run)| order.key(run, *policy));
    let wall_s = sweep["wall_s"].as_f64().unwrap_or(0.0);
    Ok(UvmDoc::from_runs(runs, template, wall_s))
}

/// The ratios asked for as fractions (2.0 = 200%), which the suite takes; typed in percent.
/// The quick study's workloads (`--suite --quick`): NW has the fewest accesses per byte of footprint (about
/// 0.034 M per MiB), so it alone reaches the paper's proportions within a minute on 2 cores.
const QUICK_STUDY_WORKLOADS: [WorkloadKind; 1] = [WorkloadKind::Nw];
/// The quick study's policies: the pair the paper's headline compares, and PinHost beside them.
const QUICK_STUDY_POLICIES: [&str; 3] = ["lazy-grp-hw", "dynamap", "pin-host"];

fn quick_study(args: &UvmArgs) -> bool {
    args.suite && args.workload_opts.quick
}

fn ratios(args: &UvmArgs) -> Result<Vec<f64>, BoxError> {
    if args.ratio.is_empty() {
        return Ok(if quick_study(args) {
            vec![2.0, 3.0]
        } else if args.suite {
            vec![1.0, 2.0, 3.0]
        } else {
            vec![2.0]
        });
    }
    args.ratio
        .iter()
        .map(|r| suite::parse_ratio(r).map_err(BoxError::from))
        .collect()
}

/// The settings every run shares, from the flags; the Ray path builds the same one to describe its document.
fn template(args: &UvmArgs) -> Result<SimConfig, BoxError> {
    let mut cost = match &args.profile {
        Some(p) => CostModel::from_profile(p)?,
        None => CostModel::default(),
    };
    let l2_fixed = args.l2.is_some();
    if let Some(l2) = &args.l2 {
        cost.machine.l2_bytes = parse_size(l2).map_err(|e| format!("--l2: {e}"))?;
    }
    if let DecideArg::Machine = args.decide_with {
        cost.decide_with_machine();
    }
    cost.validate()?;
    let mut template = SimConfig::new(Policy::DynaMap, 2.0);
    template.cost = cost;
    template.l2_fixed = l2_fixed;
    template.time_model = args.time_model;
    template.overlap = !args.no_overlap;
    template.machine_scale = args.machine_scale;
    template.thrashing.enabled = !args.no_thrashing_detection;
    template.pst_early_stop = !args.no_early_stop;
    if let Some(us) = args.rate_window_us {
        template.rate_window_s = us * 1e-6;
    }
    template.series_points = 32;
    template.eviction = args.eviction;
    template.eviction_unit = args.eviction_unit;
    Ok(template)
}

fn parse_sources(args: &UvmArgs) -> Result<Vec<TraceSource>, BoxError> {
    let mut sources = Vec::new();
    let all = args.suite || args.workload.iter().any(|w| w.eq_ignore_ascii_case("all"));
    if quick_study(args) && args.workload.is_empty() {
        sources.extend(
            QUICK_STUDY_WORKLOADS
                .iter()
                .map(|&k| TraceSource::Workload(k)),
        );
    } else if all && args.workload_opts.paper_scale {
        // The whole suite at the paper's proportions: leave out, and say so, what cannot get there (Gaussian).
        for k in WorkloadKind::ALL {
            match workload::paper_scale(k, 3.0) {
                Ok(_) => sources.push(TraceSource::Workload(k)),
                Err(e) => eprintln!("note: {k} left out of the paper-scale suite: {e}"),
            }
        }
    } else if all {
        sources.extend(WorkloadKind::ALL.iter().map(|&k| TraceSource::Workload(k)));
    } else {
        for w in &args.workload {
            sources.push(TraceSource::Workload(WorkloadKind::from_name(w)?));
        }
    }
    sources.extend(args.trace.iter().cloned().map(TraceSource::File));
    if sources.is_empty() {
        return Err(
            "say what to simulate: --workload NAME, --trace FILE or --suite (see --help)".into(),
        );
    }
    Ok(sources)
}

pub fn run(args: UvmArgs) -> Result<(), BoxError> {
    if let Some(address) = &args.ray {
        return run_on_ray(&args, address);
    }
    let sources = parse_sources(&args)?;
    let ratios = ratios(&args)?;
    let policies = if quick_study(&args) && args.policy.is_empty() {
        let names: Vec<String> = QUICK_STUDY_POLICIES.iter().map(|p| p.to_string()).collect();
        parse_policies(&names)?
    } else {
        parse_policies(&args.policy)?
    };
    let template = template(&args)?;
    let mut params = args.workload_opts.params()?;
    if args.workload_opts.paper_scale || quick_study(&args) {
        // Proportional at every ratio run, so at the largest.
        let max_ratio = ratios.iter().copied().fold(0.0, f64::max);
        params.size = WorkloadSize::PaperScale { max_ratio };
    }
    let spec = SuiteSpec {
        sources,
        ratios,
        policies,
        params,
        template,
        threads: args.threads,
    };
    let total = spec.sources.len() * spec.ratios.len() * spec.policies.len();
    let bar = if args.no_progress {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs (eta {eta}) {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    let started = Instant::now();
    let on_event = |event: SuiteEvent<'_>| match event {
        SuiteEvent::TraceReady {
            name,
            accesses,
            footprint_bytes,
            seconds,
        } => {
            tracing::info!(
                "trace {name}: {accesses} accesses, footprint {}, ready in {}",
                format_bytes(footprint_bytes),
                format_seconds(seconds)
            );
            bar.set_message(format!("{name} ready"));
        }
        SuiteEvent::RunDone { result, .. } => {
            bar.inc(1);
            bar.set_message(format!(
                "{} {}% {}",
                result.workload,
                ratio_percent(result.ratio),
                result.policy
            ));
        }
        _ => {}
    };
    let results = run_suite(&spec, &on_event)?;
    bar.finish_and_clear();
    let wall_s = started.elapsed().as_secs_f64();

    let doc = UvmDoc::new(&results, &spec, wall_s);
    let rows = &doc.speedups;
    print!("{}", runs_table(&results, rows));
    let sim_s: f64 = results.iter().map(|r| r.sim_seconds).sum();
    let accesses: u64 = results.iter().map(|r| r.counters.accesses).sum();
    println!(
        "\n{} runs, {} accesses simulated in {} of simulation ({:.1} M accesses/s per core), {} wall",
        results.len(),
        accesses,
        format_seconds(sim_s),
        accesses as f64 / sim_s.max(1e-9) / 1e6,
        format_seconds(wall_s)
    );
    let figure = figure_tables(rows, &spec.ratios);
    if !figure.is_empty() {
        println!("\n{figure}");
    }
    println!("{}", decomposition_table(&results, &spec));

    if let Some(path) = &args.json {
        write_file(path, &serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(path) = &args.csv {
        write_file(path, &csv(&results, rows))?;
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Compact: with every run's series and utilisation the pretty form runs to megabytes.
        write_file(&dir.join("results.json"), &serde_json::to_string(&doc)?)?;
        write_file(&dir.join("results.csv"), &csv(&results, rows))?;
        let mut report = HtmlReport::new("oversub sim uvm: page migration under oversubscription");
        let m = &spec.template.cost.machine;
        report.push(HtmlBlock::Paragraph(format!(
            "{} runs of {} policies on {} traces at ratios {}. Time model: {:?}{}; machine: fault batch {} + {} \
             per fault, remote line {} hidden by {} misses in flight, bus {:.1} GB/s, copy setup {}; L2 and \
             2 MiB granularities {}. DynaMap decides with H = {}, B_PCI = {:.1} GB/s. Speed-ups are LazyGrpHW's \
             estimated time over each policy's.",
            results.len(),
            spec.policies.len(),
            spec.sources.len(),
            spec.ratios
                .iter()
                .map(|r| format!("{}%", ratio_percent(*r)))
                .collect::<Vec<_>>()
                .join(", "),
            spec.template.time_model,
            if spec.template.overlap { "" } else { " (overlap off)" },
            format_seconds(m.fault_batch_s),
            format_seconds(m.fault_service_s),
            format_seconds(m.remote_line_latency_s),
            m.outstanding_misses,
            m.pci_bytes_per_s / 1e9,
            format_seconds(m.transfer_setup_s),
            match spec.template.machine_scale {
                MachineScale::Capacity => "scaled with GPU memory",
                MachineScale::None => "at the paper's absolute sizes",
            },
            format_seconds(spec.template.cost.decision.fault_s),
            spec.template.cost.decision.pci_bytes_per_s / 1e9,
        )));
        report.push(HtmlBlock::Heading("Where the time went".into()));
        report.push(HtmlBlock::Pre(decomposition_table(&results, &spec)));
        for (file, title, svg) in analysis_figures(&results, &spec)? {
            write_file(&dir.join(&file), &svg)?;
            report.push(HtmlBlock::Heading(title));
            report.push(HtmlBlock::Svg(svg));
        }
        for (file, title, chart) in figures(rows, &spec.ratios) {
            let svg = chart.to_svg();
            write_file(&dir.join(file), &svg)?;
            report.push(HtmlBlock::Heading(title));
            report.push(HtmlBlock::Svg(svg));
        }
        report.push(HtmlBlock::Heading("All runs".into()));
        report.push(HtmlBlock::Pre(runs_table(&results, rows)));
        report
            .write(&dir.join("report.html"))
            .map_err(|e| format!("{}: {e}", dir.join("report.html").display()))?;
        println!(
            "wrote {}/{{results.json,results.csv,report.html,fig*.svg}}",
            dir.display()
        );
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), BoxError> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn runs_table(results: &[SimResult], rows: &[SpeedupRow]) -> String {
    let body: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let c = &r.counters;
            vec![
                r.workload.clone(),
                format!("{}%", ratio_percent(r.ratio)),
                r.policy.to_string(),
                format_seconds(r.est_time_s),
                speedup_of(rows, r).map_or_else(|| "-".into(), |s| format!("{s:.3}")),
                c.faults.to_string(),
                c.migrations.to_string(),
                c.evictions.to_string(),
                format!("{:.2}", r.evictions_per_page),
                c.remote_accesses.to_string(),
                c.cache_hits.to_string(),
                format_bytes(c.bytes_h2d),
                format_bytes(c.bytes_d2h),
                format!("{:.1}", r.accesses_per_s() / 1e6),
            ]
        })
        .collect();
    text_table(
        &[
            "workload",
            "ratio",
            "policy",
            "est_time",
            "speedup",
            "faults",
            "migrations",
            "evictions",
            "evict/page",
            "remote",
            "l2_hits",
            "h2d",
            "d2h",
            "Macc/s",
        ],
        &body,
    )
}

/// Fig. 8 order of the bars.
const FIG8: [&str; 11] = [
    "Eager",
    "Eager-woPref",
    "LazyGrpHW",
    "PinHost",
    "LazyPgStatSW",
    "LazyPgDynSW",
    "LazyPgDynSW-noPenalty",
    "StaticMap(0.5)",
    "DynaMap",
    "DynaMap-offline",
    "Oracle",
];

/// The resources of the overlap model, in `TimeParts` order.
const RESOURCES: [&str; 5] = ["bus h2d", "bus d2h", "driver", "GPU mem", "warps"];

/// Per workload at the main ratio, for the policies the paper's argument rests on: evictions per page, the
/// estimated time, its serial counterpart, and the resource that bound most epochs with its share of the summed
/// busy time — the decomposition of the headline.
fn decomposition_table(results: &[SimResult], spec: &SuiteSpec) -> String {
    let main = main_ratio(spec);
    let key = [
        "Eager",
        "Eager-woPref",
        "LazyGrpHW",
        "PinHost",
        "LazyPgDynSW",
        "DynaMap",
        "DynaMap-offline",
    ];
    let body: Vec<Vec<String>> = results
        .iter()
        .filter(|r| ratio_percent(r.ratio) == main && key.contains(&r.policy.to_string().as_str()))
        .map(|r| {
            let b = &r.breakdown;
            let p = &b.parts;
            let parts = [p.bus_h2d_s, p.bus_d2h_s, p.driver_s, p.gpu_mem_s, p.warps_s];
            let total: f64 = parts.iter().sum();
            let (bound, _) = b
                .bound_epochs
                .iter()
                .enumerate()
                .max_by_key(|(_, n)| **n)
                .unwrap_or((0, &0));
            let share = |i: usize| {
                parts
                    .get(i)
                    .map_or(0.0, |v| if total > 0.0 { v / total * 100.0 } else { 0.0 })
            };
            vec![
                r.workload.clone(),
                r.policy.to_string(),
                format!("{:.1}", r.evictions_per_page),
                format_seconds(r.est_time_s),
                format_seconds(r.serial_time_s),
                RESOURCES.get(bound).copied().unwrap_or("-").to_string(),
                format!(
                    "{:.0}/{:.0}/{:.0}/{:.0}/{:.0}",
                    share(0),
                    share(1),
                    share(2),
                    share(3),
                    share(4)
                ),
                format_seconds(b.instrumentation_s),
                format!("{}/{}", r.counters.throttles, r.counters.pins),
                format!(
                    "{}/{}{}",
                    format_bytes(r.geometry.l2_bytes),
                    format_bytes(r.geometry.block_bytes),
                    // Marked where a floor, not the paper's proportion, set them.
                    if r.geometry.proportional {
                        ""
                    } else {
                        " (floor)"
                    }
                ),
                match r.counters.low_util_requests {
                    0 => "-".to_string(),
                    n => format!(
                        "{:.0}%",
                        r.counters.low_util_l2_hits as f64 / n as f64 * 100.0
                    ),
                },
                match (
                    r.f_under_per_s,
                    r.series.iter().map(|p| p.f_over).reduce(f64::max),
                ) {
                    (Some(f), Some(o)) if r.policy == Policy::DynaMap => {
                        format!("{:.0}/s, {o:.2}", f)
                    }
                    _ => "-".to_string(),
                },
            ]
        })
        .collect();
    if body.is_empty() {
        return String::new();
    }
    format!(
        "Where the time went at {main}% (busy time by resource, % of the summed parts: h2d/d2h/driver/GPU \
         mem/warps):\n{}",
        text_table(
            &[
                "workload",
                "policy",
                "evict/page",
                "est_time",
                "serial_time",
                "bound by",
                "busy shares %",
                "instrum.",
                "throttle/pin",
                "L2/block",
                "L2 low-util",
                "f_under, max f_over",
            ],
            &body,
        )
    )
}

fn main_ratio(spec: &SuiteSpec) -> u32 {
    main_ratio_of(&spec.ratios)
}

/// Rate of `count` per second along a run's series, against time in seconds.
fn rate_series(
    r: &SimResult,
    count: impl Fn(&oversub_sim::uvm::sim::EpochPoint) -> u64,
) -> Vec<(f64, f64)> {
    r.series
        .iter()
        .filter(|p| p.span_s > 0.0)
        .map(|p| (p.time_s, count(p) as f64 / p.span_s))
        .collect()
}

fn line_chart(title: String, x_label: &str, y_label: &str, series: Vec<LineSeries>) -> LineChart {
    LineChart {
        title,
        x_label: x_label.to_string(),
        y_label: y_label.to_string(),
        series,
        log_x: false,
        log_y: false,
        step: true,
        vertical_markers: Vec::new(),
        y_range: None,
    }
}

fn series(name: impl Into<String>, points: Vec<(f64, f64)>) -> LineSeries {
    LineSeries {
        name: name.into(),
        points,
        dashed: false,
    }
}

/// Figs. 2-5, 7, 9 and 10 from the runs (and, for Fig. 2, the Gaussian trace again): (file, title, SVG).
fn analysis_figures(
    results: &[SimResult],
    spec: &SuiteSpec,
) -> Result<Vec<(String, String, String)>, BoxError> {
    let main = main_ratio(spec);
    let mut out = Vec::new();
    let has = |w: &str| results.iter().any(|r| r.workload == w);

    // Fig. 7: the decision model's curves.
    let cost = &spec.template.cost;
    let mut curves = Vec::new();
    for f in [0.0, 1.0, 4.0, 16.0] {
        let pts = cost.cost_curves(f);
        curves.push(LineSeries {
            name: format!("C_GPU, f_over = {f}"),
            points: pts.iter().map(|p| (p.0 as f64, p.2 * 1e6)).collect(),
            dashed: false,
        });
    }
    curves.push(LineSeries {
        name: "C_CPU".into(),
        points: cost
            .cost_curves(0.0)
            .iter()
            .map(|p| (p.0 as f64, p.1 * 1e6))
            .collect(),
        dashed: true,
    });
    let mut fig7 = line_chart(
        "Fig. 7: C_CPU (Eq. 1) against C_GPU (Eq. 3) for x bytes used, the decision constants"
            .into(),
        "bytes of the page used (x)",
        "cost (µs)",
        curves,
    );
    fig7.step = false;
    out.push(("fig7.svg".into(), fig7.title.clone(), fig7.to_svg()));

    // Fig. 3 and 4: utilisation at eviction under the default driver, Gaussian (the paper's example).
    let fig34 = ["gaussian", "pagerank"]
        .into_iter()
        .find(|w| has(w))
        .and_then(|w| find(results, w, main, "Eager").map(|r| (w, r)));
    if let Some((w, r)) = fig34 {
        let total: u64 = r.utilisation.at_eviction.iter().sum();
        let line = cost.line_bytes;
        let mut chart = BarChart::new(
            format!("Fig. 3a: lines used by pages before their eviction, {w} at {main}%, Eager"),
            "share of evictions",
        );
        chart.categories = (0..r.utilisation.at_eviction.len())
            .map(|l| format!("{}", l as u64 * line))
            .collect();
        chart.series = vec![BarSeries::new(
            "evictions",
            r.utilisation
                .at_eviction
                .iter()
                .map(|&n| Some(n as f64 / total.max(1) as f64))
                .collect(),
        )];
        out.push(("fig3.svg".into(), chart.title.clone(), chart.to_svg()));
        let mut chart = BarChart::new(
            format!(
                "Fig. 4: share of next residencies in the same eighth of the page used as the current one, {w} at {main}%, Eager"
            ),
            "P(next utilisation in the same eighth)",
        );
        let pairs = &r.utilisation.current_vs_next;
        chart.categories = (0..8).map(|i| format!("{}-{}/8", i, i + 1)).collect();
        chart.series = vec![BarSeries::new(
            "same eighth next time",
            pairs
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let n: u64 = row.iter().sum();
                    (n > 0).then(|| row.get(i).copied().unwrap_or(0) as f64 / n as f64)
                })
                .collect(),
        )];
        out.push(("fig4.svg".into(), chart.title.clone(), chart.to_svg()));
    }

    // Figs. 5, 9, 10 on PageRank.
    if has("pagerank") {
        let w = "pagerank";
        let mut fig5 = Vec::new();
        for policy in ["Eager", "DynaMap"] {
            if let Some(r) = find(results, w, main, policy) {
                fig5.push(series(policy, rate_series(r, |p| p.faults)));
            }
        }
        if !fig5.is_empty() {
            let mut c = line_chart(
                format!("Fig. 5: page-fault rate over time, PageRank at {main}%"),
                "estimated time (s)",
                "faults per second",
                fig5,
            );
            c.log_y = true;
            out.push(("fig5.svg".into(), c.title.clone(), c.to_svg()));
        }
        if let Some(r) = find(results, w, main, "DynaMap") {
            let c = line_chart(
                format!("DynaMap's f_over (Eq. 2) over time, PageRank at {main}%"),
                "estimated time (s)",
                "f_over",
                vec![series(
                    "f_over",
                    r.series.iter().map(|p| (p.time_s, p.f_over)).collect(),
                )],
            );
            out.push(("fig5-fover.svg".into(), c.title.clone(), c.to_svg()));
        }
        let mut fig9 = Vec::new();
        for policy in ["LazyGrpHW", "DynaMap"] {
            if let Some(r) = find(results, w, main, policy) {
                fig9.push(series(
                    format!("{policy} migrations"),
                    rate_series(r, |p| p.migrations),
                ));
                let mut ev = series(
                    format!("{policy} evictions"),
                    rate_series(r, |p| p.evictions),
                );
                ev.dashed = true;
                fig9.push(ev);
            }
        }
        if !fig9.is_empty() {
            let mut c = line_chart(
                format!("Fig. 9: migration and eviction rates, PageRank at {main}%"),
                "estimated time (s)",
                "pages per second",
                fig9,
            );
            c.log_y = true;
            out.push(("fig9.svg".into(), c.title.clone(), c.to_svg()));
        }
        let mut fig10 = Vec::new();
        if let Some(r) = find(results, w, main, "DynaMap") {
            fig10.push(series("DynaMap", rate_series(r, |p| p.faults)));
        }
        if let Some(r) = best_static(results, w, main) {
            fig10.push(series(r.policy.to_string(), rate_series(r, |p| p.faults)));
        }
        if !fig10.is_empty() {
            let mut c = line_chart(
                format!(
                    "Fig. 10: page-fault rate, DynaMap against LazyPgStatSW, PageRank at {main}%"
                ),
                "estimated time (s)",
                "faults per second",
                fig10,
            );
            c.log_y = true;
            out.push(("fig10.svg".into(), c.title.clone(), c.to_svg()));
        }
    }

    // Fig. 2: stack distances of the Gaussian trace at three granularities.
    if spec
        .sources
        .iter()
        .any(|s| matches!(s, TraceSource::Workload(WorkloadKind::Gaussian)))
    {
        let mut sd = StackDistance::new(&[cost.line_bytes, cost.page_bytes, 64 * 1024])?;
        workload::generate_into(WorkloadKind::Gaussian, &spec.params, &mut |a| {
            sd.push(a.addr)
        })?;
        let cdfs = sd.finish();
        let mut c = line_chart(
            "Fig. 2: LRU stack distance of Gaussian's accesses at three granularities".into(),
            "stack distance (bytes, log)",
            "CDF of accesses (re-references)",
            cdfs.iter()
                .map(|c| {
                    series(
                        format!("{} granularity", format_bytes(c.granularity_bytes)),
                        c.points.clone(),
                    )
                })
                .collect(),
        );
        c.log_x = true;
        if let Some(r) = find(results, "gaussian", main, "DynaMap") {
            c.vertical_markers = vec![
                (r.geometry.l2_bytes as f64, "L2".into()),
                (
                    (r.capacity_pages * cost.page_bytes) as f64,
                    "GPU memory".into(),
                ),
            ];
        }
        out.push(("fig2.svg".into(), c.title.clone(), c.to_svg()));
    }
    Ok(out)
}

/// Figure tables on stdout: speed-up per workload and policy at each ratio, with the geometric mean.
fn figure_tables(rows: &[SpeedupRow], ratios: &[f64]) -> String {
    let workloads = workloads_in(rows);
    if workloads.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for &ratio in ratios {
        let ratio = ratio_percent(ratio);
        let labels: Vec<&str> = FIG8
            .iter()
            .copied()
            .filter(|l| {
                workloads
                    .iter()
                    .any(|w| lookup(rows, w, ratio, l).is_some())
            })
            .collect();
        let mut header = vec!["speed-up vs LazyGrpHW"];
        header.extend(labels.iter());
        let mut body: Vec<Vec<String>> =
            workloads
                .iter()
                .map(|w| {
                    let mut row = vec![w.clone()];
                    row.extend(labels.iter().map(|l| {
                        lookup(rows, w, ratio, l).map_or_else(|| "-".into(), format_speedup)
                    }));
                    row
                })
                .collect();
        let mut mean = vec!["geomean".to_string()];
        mean.extend(labels.iter().map(|l| {
            geomean(workloads.iter().filter_map(|w| lookup(rows, w, ratio, l)))
                .map_or_else(|| "-".into(), format_speedup)
        }));
        body.push(mean);
        out.push_str(&format!("At {ratio}% oversubscription:\n"));
        out.push_str(&text_table(&header, &body));
        out.push('\n');
    }
    out
}

fn format_speedup(s: f64) -> String {
    if s < 0.01 {
        "<0.01".into()
    } else {
        format!("{s:.2}")
    }
}

/// The paper's Figs. 8, 11 and 12 as bar charts (those the runs allow).
fn figures(rows: &[SpeedupRow], ratios_f: &[f64]) -> Vec<(String, String, BarChart)> {
    let workloads = workloads_in(rows);
    let mut categories = workloads.clone();
    categories.push("geomean".into());
    let series_for = |ratio: u32, label: &str| -> Option<BarSeries> {
        let mut values: Vec<Option<f64>> = workloads
            .iter()
            .map(|w| lookup(rows, w, ratio, label))
            .collect();
        if values.iter().all(Option::is_none) {
            return None;
        }
        values.push(geomean(values.iter().flatten().copied()));
        Some(BarSeries::new(label, values))
    };
    let chart = |title: String, series: Vec<BarSeries>| {
        let mut c = BarChart::new(title, "speed-up over LazyGrpHW (log)");
        c.categories = categories.clone();
        c.series = series;
        c.log_y = true;
        c.reference = Some(1.0);
        c.floor = Some(0.01);
        c
    };
    let mut out = Vec::new();
    let ratios: Vec<u32> = ratios_f.iter().map(|r| ratio_percent(*r)).collect();
    let main_ratio = main_ratio_of(ratios_f);
    let fig8: Vec<BarSeries> = FIG8
        .iter()
        .filter_map(|l| series_for(main_ratio, l))
        .collect();
    if !fig8.is_empty() {
        let title =
            format!("Fig. 8: speed-up at {main_ratio}% oversubscription, normalised to LazyGrpHW");
        out.push(("fig8.svg".to_string(), title.clone(), chart(title, fig8)));
    }
    let fig11: Vec<BarSeries> = [
        "StaticMap(0.2)",
        "StaticMap(0.5)",
        "StaticMap(0.9)",
        "DynaMap",
    ]
    .iter()
    .filter_map(|l| series_for(main_ratio, l))
    .collect();
    if fig11.len() > 1 {
        let title = format!("Fig. 11: DynaMap against StaticMap at {main_ratio}%");
        out.push(("fig11.svg".to_string(), title.clone(), chart(title, fig11)));
    }
    let fig12: Vec<BarSeries> = ratios
        .iter()
        .filter_map(|&r| {
            series_for(r, "DynaMap").map(|mut s| {
                s.name = format!("DynaMap at {r}%");
                s
            })
        })
        .collect();
    if fig12.len() > 1 {
        let title =
            "Fig. 12: DynaMap at each oversubscription ratio, normalised to LazyGrpHW".to_string();
        out.push(("fig12.svg".to_string(), title.clone(), chart(title, fig12)));
    }
    out
}
