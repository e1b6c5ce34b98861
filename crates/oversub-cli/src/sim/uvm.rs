//! `oversub sim uvm`: one workload or the whole study of page-migration policies under oversubscription.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_report::{
    format_bytes, format_seconds, parse_size, text_table, BarChart, BarSeries, HtmlBlock,
    HtmlReport,
};
use oversub_sim::uvm::cost::CostModel;
use oversub_sim::uvm::policy::Policy;
use oversub_sim::uvm::report::{parse_policies, speedup_of, UvmDoc};
use oversub_sim::uvm::sim::{EvictionOrder, EvictionUnit, SimConfig, SimResult};
use oversub_sim::uvm::suite::{
    self, geomean, ratio_percent, run_suite, SpeedupRow, SuiteEvent, SuiteSpec, TraceSource,
};
use oversub_sim::uvm::workload::{WorkloadKind, WorkloadParams, WorkloadSize};

use crate::bench::BoxError;

/// Size, seed and graph of generated workloads.
#[derive(Debug, Args, Clone)]
pub struct WorkloadOpts {
    /// Small problem sizes: each workload simulates in about a second.
    #[arg(long)]
    pub quick: bool,
    /// Multiply the default problem size by this factor (ignored with --quick).
    #[arg(long, value_name = "FACTOR")]
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
enum OrderArg {
    /// Least recently migrated first (NVIDIA's driver).
    Allocation,
    /// Least recently used first.
    Lru,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum UnitArg {
    Page,
    Group,
    Block,
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
    /// Platform profile (docs/profile.md) whose `[uvm]` table overrides the paper's constants (B_C, B_G, B_PCI,
    /// H, L2).
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// GPU L2 size (default 3MiB, the paper's Table 2).
    #[arg(long, value_name = "SIZE")]
    l2: Option<String>,
    /// Eviction order.
    #[arg(long, value_enum, default_value = "allocation")]
    eviction: OrderArg,
    /// Unit evicted at once.
    #[arg(long, value_enum, default_value = "page")]
    eviction_unit: UnitArg,
    /// Worker threads (default: one per core).
    #[arg(long, default_value_t = 0)]
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
}

fn parse_ratio(text: &str) -> Result<f64, BoxError> {
    suite::parse_ratio(text).ok_or_else(|| {
        format!("bad ratio `{text}`: give a percentage such as 200 or 200% (or 2x)").into()
    })
}

fn parse_sources(args: &UvmArgs) -> Result<Vec<TraceSource>, BoxError> {
    let mut sources = Vec::new();
    let all = args.suite || args.workload.iter().any(|w| w.eq_ignore_ascii_case("all"));
    if all {
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
    let sources = parse_sources(&args)?;
    let ratios: Vec<f64> = if args.ratio.is_empty() {
        if args.suite {
            vec![1.0, 2.0, 3.0]
        } else {
            vec![2.0]
        }
    } else {
        args.ratio
            .iter()
            .map(|r| parse_ratio(r))
            .collect::<Result<_, _>>()?
    };
    let policies = parse_policies(&args.policy)?;
    let mut cost = match &args.profile {
        Some(p) => CostModel::from_profile(p)?,
        None => CostModel::default(),
    };
    if let Some(l2) = &args.l2 {
        cost.l2_bytes = parse_size(l2).map_err(|e| format!("--l2: {e}"))?;
        cost.validate()?;
    }
    let mut template = SimConfig::new(Policy::DynaMap, 2.0);
    template.cost = cost;
    template.eviction = match args.eviction {
        OrderArg::Allocation => EvictionOrder::Allocation,
        OrderArg::Lru => EvictionOrder::Lru,
    };
    template.eviction_unit = match args.eviction_unit {
        UnitArg::Page => EvictionUnit::Page,
        UnitArg::Group => EvictionUnit::Group,
        UnitArg::Block => EvictionUnit::Block,
    };
    let spec = SuiteSpec {
        sources,
        ratios,
        policies,
        params: args.workload_opts.params()?,
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
    let figure = figure_tables(rows, &spec);
    if !figure.is_empty() {
        println!("\n{figure}");
    }

    if let Some(path) = &args.json {
        write_file(path, &serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(path) = &args.csv {
        write_file(path, &csv(&results, rows))?;
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write_file(
            &dir.join("results.json"),
            &serde_json::to_string_pretty(&doc)?,
        )?;
        write_file(&dir.join("results.csv"), &csv(&results, rows))?;
        let mut report = HtmlReport::new("oversub sim uvm: page migration under oversubscription");
        report.push(HtmlBlock::Paragraph(format!(
            "{} runs of {} policies on {} traces at ratios {}; estimated times from the SYSTOR'21 cost model \
             (H = {} per fault, B_PCI = {:.1} GB/s, L2 = {}). Speed-ups are LazyGrpHW's estimated time over each \
             policy's.",
            results.len(),
            spec.policies.len(),
            spec.sources.len(),
            spec.ratios
                .iter()
                .map(|r| format!("{}%", ratio_percent(*r)))
                .collect::<Vec<_>>()
                .join(", "),
            format_seconds(spec.template.cost.fault_s),
            spec.template.cost.pci_bytes_per_s / 1e9,
            format_bytes(spec.template.cost.l2_bytes),
        )));
        for (file, title, chart) in figures(rows, &spec) {
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
const FIG8: [&str; 9] = [
    "Eager",
    "Eager-woPref",
    "LazyGrpHW",
    "PinHost",
    "LazyPgStatSW",
    "LazyPgDynSW",
    "StaticMap(0.5)",
    "DynaMap",
    "Oracle",
];

fn workloads_in(rows: &[SpeedupRow]) -> Vec<String> {
    let mut w: Vec<String> = Vec::new();
    for r in rows {
        if !w.contains(&r.workload) {
            w.push(r.workload.clone());
        }
    }
    w
}

fn lookup(rows: &[SpeedupRow], workload: &str, ratio: u32, label: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.ratio_percent == ratio && r.label == label)
        .map(|r| r.speedup)
}

/// Figure tables on stdout: speed-up per workload and policy at each ratio, with the geometric mean.
fn figure_tables(rows: &[SpeedupRow], spec: &SuiteSpec) -> String {
    let workloads = workloads_in(rows);
    if workloads.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for &ratio in &spec.ratios {
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
fn figures(rows: &[SpeedupRow], spec: &SuiteSpec) -> Vec<(String, String, BarChart)> {
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
    let ratios: Vec<u32> = spec.ratios.iter().map(|r| ratio_percent(*r)).collect();
    let main_ratio = if ratios.contains(&200) {
        200
    } else {
        ratios.first().copied().unwrap_or(200)
    };
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

fn csv(results: &[SimResult], rows: &[SpeedupRow]) -> String {
    let mut out = String::from(
        "workload,ratio,policy,est_time_s,speedup_vs_lazygrphw,faults,migrations,prefetches,evictions,\
         evictions_per_page,remote_accesses,cache_hits,gpu_mem_accesses,bytes_h2d,bytes_d2h,accesses,sim_seconds\n",
    );
    for r in results {
        let c = &r.counters;
        out.push_str(&format!(
            "{},{},{},{:e},{},{},{},{},{},{},{},{},{},{},{},{},{:.6}\n",
            r.workload.replace(',', ";"),
            ratio_percent(r.ratio),
            r.policy.to_string().replace(',', ";"),
            r.est_time_s,
            speedup_of(rows, r).map_or_else(String::new, |s| format!("{s:.6}")),
            c.faults,
            c.migrations,
            c.prefetches,
            c.evictions,
            r.evictions_per_page,
            c.remote_accesses,
            c.cache_hits,
            c.gpu_mem_accesses,
            c.bytes_h2d,
            c.bytes_d2h,
            c.accesses,
            r.sim_seconds
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_parse_as_percentages() {
        assert_eq!(parse_ratio("200").unwrap(), 2.0);
        assert_eq!(parse_ratio("150%").unwrap(), 1.5);
        assert_eq!(parse_ratio("3x").unwrap(), 3.0);
        assert!(parse_ratio("-5").is_err());
        assert!(parse_ratio("lots").is_err());
    }
}
