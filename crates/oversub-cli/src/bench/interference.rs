//! `oversub bench interference`: how much paging and copies slow CPU tasks that thrash DRAM (the paper's Sec. V-C,
//! Figs. 14-15), and how the SiΓ arbiter removes that interference for PREM tasks (SiΓ Figs. 5-8).

use std::path::PathBuf;

use clap::Args;
use oversub_lab::interference::{
    self as lab, prem, InterferenceOptions, InterferenceReport as Report, PremResult,
    PremTaskCommand, ThrashRow,
};
use oversub_report::{text_table, BarChart, BarSeries, BoxPlot, BoxSeries};

use crate::error::BoxError;

#[derive(Debug, Args)]
pub struct InterferenceArgs {
    #[command(flatten)]
    options: InterferenceOptions,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the figures (SVG) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

impl InterferenceArgs {
    fn options(&self) -> Result<InterferenceOptions, BoxError> {
        Ok(InterferenceOptions {
            // The PREM task's own process is this binary again, as the hidden `bench prem-task`.
            prem_task: Some(PremTaskCommand {
                program: std::env::current_exe()?,
                args: vec!["bench".into(), "prem-task".into()],
            }),
            ..self.options.clone()
        })
    }
}

pub fn run(args: InterferenceArgs) -> Result<(), BoxError> {
    let opts = args.options()?;
    opts.check()?;
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)?;
    }
    let bar = crate::progress_bar(lab::steps(&opts), "interference", "", false);
    let report = lab::run(&opts, &|stage: &str| {
        bar.inc(1);
        bar.set_message(stage.to_string());
    })?;
    bar.finish_and_clear();

    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        println!("results: {}", path.display());
    }
    if let Some(dir) = &args.plot {
        plot(&report, dir)?;
        println!("figures: {}", dir.display());
    }
    Ok(())
}

/// `oversub bench prem-task`: the PREM task's own process, spoken to on stdin and stdout.
pub fn serve_prem_task(args: lab::PremTaskOptions) -> Result<(), BoxError> {
    lab::serve_prem_task(&args, std::io::stdin().lock(), std::io::stdout())?;
    Ok(())
}

fn pct_change(base: f64, with: f64) -> String {
    if base > 0.0 {
        format!("{:+.1}%", (with - base) / base * 100.0)
    } else {
        "-".into()
    }
}

fn print_report(r: &Report) {
    println!(
        "machine: {} CPUs, last-level cache {} MiB{}",
        r.machine.cpus,
        r.machine.llc_bytes >> 20,
        if r.machine.virtual_machine {
            ", virtual machine"
        } else {
            ""
        }
    );
    if !r.thrashing.is_empty() {
        println!("\nPaging vs DRAM-thrashing tasks (Figs. 14-15): lowest thrasher bandwidth and paging-loop time");
        let rows: Vec<Vec<String>> = r
            .thrashing
            .iter()
            .map(|t| {
                vec![
                    t.kind.to_string(),
                    t.tasks.to_string(),
                    format!("{:.0}", t.bw_alone_mbs),
                    format!("{:.0}", t.bw_with_paging_mbs),
                    pct_change(t.bw_alone_mbs, t.bw_with_paging_mbs),
                    format!("{:.1}", t.paging_mean_s_alone * 1e3),
                    format!("{:.1}", t.paging_mean_s_with * 1e3),
                    pct_change(t.paging_mean_s_alone, t.paging_mean_s_with),
                ]
            })
            .collect();
        print!(
            "{}",
            text_table(
                &[
                    "thrashers",
                    "tasks",
                    "bw alone MB/s",
                    "bw w/ paging MB/s",
                    "change",
                    "paging alone ms",
                    "paging w/ thrash ms",
                    "change",
                ],
                &rows
            )
        );
        println!("paper (8-core Jetson AGX Xavier): at most -5% sequential, -17% random-dependent");
    }
    if let Some(p) = &r.prem {
        print_prem(p);
    }
    if !r.starvation.is_empty() {
        println!("\nStarvation (SiΓ Figs. 6, 8): interferer operations completed inside the locked window");
        let rows: Vec<Vec<String>> = r
            .starvation
            .iter()
            .map(|s| {
                vec![
                    format!("{:.1}", s.gc_ratio),
                    s.iterations.to_string(),
                    s.iterations_preemptible.to_string(),
                ]
            })
            .collect();
        print!(
            "{}",
            text_table(
                &["GC ratio", "whole operations", "chunked (preemptible)"],
                &rows
            )
        );
    }
}

fn plot(r: &Report, dir: &std::path::Path) -> Result<(), BoxError> {
    for kind in ["sequential", "random"] {
        let rows: Vec<&ThrashRow> = r.thrashing.iter().filter(|t| t.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        let cats: Vec<String> = rows
            .iter()
            .map(|t| format!("{} task(s)", t.tasks))
            .collect();
        let mut bw = BarChart::new(
            format!(
                "Lowest {kind}-thrasher bandwidth, with and without paging (Fig. {})",
                if kind == "sequential" { 14 } else { 15 }
            ),
            "bandwidth (MB/s)",
        );
        bw.categories = cats.clone();
        bw.series = vec![
            BarSeries::new(
                "thrashers alone",
                rows.iter().map(|t| Some(t.bw_alone_mbs)).collect(),
            ),
            BarSeries::new(
                "with paging",
                rows.iter().map(|t| Some(t.bw_with_paging_mbs)).collect(),
            ),
        ];
        bw.write_svg(&dir.join(format!("thrash-{kind}-bandwidth.svg")))?;
        let mut pt = BarChart::new(
            format!("Paging-loop time beside {kind} thrashers"),
            "page-out + page-in (ms)",
        );
        pt.categories = cats;
        pt.series = vec![
            BarSeries::new(
                "paging alone",
                rows.iter()
                    .map(|t| Some(t.paging_mean_s_alone * 1e3))
                    .collect(),
            ),
            BarSeries::new(
                "with thrashers",
                rows.iter()
                    .map(|t| Some(t.paging_mean_s_with * 1e3))
                    .collect(),
            ),
        ];
        pt.write_svg(&dir.join(format!("thrash-{kind}-paging.svg")))?;
    }
    if let Some(p) = &r.prem {
        plot_prem(p, dir)?;
    }
    if !r.starvation.is_empty() {
        let mut s = BarChart::new(
            "Interferer operations inside the locked window vs GC ratio (SiΓ Figs. 6, 8)",
            "operations completed",
        );
        s.categories = r
            .starvation
            .iter()
            .map(|x| format!("{:.1}", x.gc_ratio))
            .collect();
        s.series = vec![
            BarSeries::new(
                "whole operations",
                r.starvation
                    .iter()
                    .map(|x| Some(x.iterations as f64))
                    .collect(),
            ),
            BarSeries::new(
                "chunked (preemptible)",
                r.starvation
                    .iter()
                    .map(|x| Some(x.iterations_preemptible as f64))
                    .collect(),
            ),
        ];
        s.write_svg(&dir.join("starvation.svg"))?;
    }
    Ok(())
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.3}", x / base)
    } else {
        "-".into()
    }
}

/// One placement's table: each condition's phases (min, mean, p99, max) beside the task alone.
fn print_phases(pl: &oversub_lab::interference::prem::PlacementRuns) {
    let mut conds = vec![("alone".to_string(), &pl.alone)];
    for run in &pl.interferers {
        conds.push((format!("interfered ({})", run.kind.name()), &run.interfered));
        conds.push((format!("arbitrated ({})", run.kind.name()), &run.arbitrated));
    }
    let mut rows = Vec::new();
    for (name, c) in &conds {
        for (i, phase) in ["load", "compute", "unload"].iter().enumerate() {
            let (st, base) = (c.phase(i), pl.alone.phase(i));
            rows.push(vec![
                name.clone(),
                phase.to_string(),
                format!("{:.0}", st.min),
                format!("{:.0}", st.mean),
                format!("{:.0}", st.p99),
                format!("{:.0}", st.max),
                ratio(st.max, base.max),
                ratio(st.mean, base.mean),
            ]);
        }
    }
    print!(
        "{}",
        text_table(
            &[
                "condition",
                "phase",
                "min us",
                "mean us",
                "p99 us",
                "max us",
                "max / alone max",
                "mean / alone mean"
            ],
            &rows
        )
    );
}

fn print_prem(p: &PremResult) {
    let s = &p.settings;
    println!(
        "\nPREM task vs transfers (SiΓ Figs. 5-8): working set {:.1} MiB (85% of LLC), {} iterations per condition, \
         compute x{}, {}, task on CPU {}, transfers on CPU {}",
        s.working_set_bytes as f64 / (1 << 20) as f64,
        s.iterations,
        s.compute_repetitions,
        if s.realtime { "SCHED_FIFO 99" } else { "normal priority (SCHED_FIFO not permitted)" },
        s.task_cpu,
        s.interferer_cpu,
    );
    for pl in &p.placements {
        let a = &pl.announced;
        println!(
            "\nPREM task in {}: announced CPU_MEM load {:.0} us, CPU_COM {:.0} us, CPU_MEM unload {:.0} us; \
             server round trip {:.3} us",
            pl.placement.label(),
            a.load,
            a.compute,
            a.unload,
            s.epsilon_us
        );
        print_phases(pl);
        let rows: Vec<Vec<String>> = pl
            .interferers
            .iter()
            .map(|run| {
                let m = &run.interferer_mbs;
                vec![
                    run.kind.name().to_string(),
                    format!("{:.0}", m.alone),
                    format!(
                        "{:.0} ({:.2})",
                        m.interfered,
                        m.interfered / m.alone.max(1e-9)
                    ),
                    format!(
                        "{:.0} ({:.2})",
                        m.arbitrated,
                        m.arbitrated / m.alone.max(1e-9)
                    ),
                    format!("{:.0}", run.chunk_time_s * 1e6),
                    format!("{:.0}", run.overrun_guard_us),
                    format!("{}/{}", run.gate_waits, run.gate_preemptions),
                ]
            })
            .collect();
        print!(
            "{}",
            text_table(
                &[
                    "interferer",
                    "alone MB/s",
                    "interfered MB/s (ratio)",
                    "arbitrated MB/s (ratio)",
                    "T(Q) us",
                    "learned guard us",
                    "waits/preempted"
                ],
                &rows
            )
        );
        let rows: Vec<Vec<String>> = pl
            .interferers
            .iter()
            .map(|run| {
                vec![
                    run.kind.name().to_string(),
                    format!("{:.1}", run.op_alone_mean_s * 1e3),
                    format!("{:.1}", run.op_arbitrated_mean_s * 1e3),
                    format!("{:.1}", run.op_arbitrated_max_s * 1e3),
                    format!("{:.1}", run.bound_paper_s * 1e3),
                    run.bound_chunked_s
                        .map_or("starves".into(), |b| format!("{:.1}", b * 1e3)),
                    if run
                        .bound_chunked_s
                        .is_some_and(|b| run.op_arbitrated_max_s <= b)
                    {
                        "yes"
                    } else {
                        "no"
                    }
                    .into(),
                ]
            })
            .collect();
        println!("Worst-case completion of one interferer operation under arbitration (Eq. 2) against measurement:");
        print!(
            "{}",
            text_table(
                &[
                    "interferer",
                    "alone ms",
                    "arbitrated mean ms",
                    "arbitrated max ms",
                    "Eq. 2 ms",
                    "Eq. 2 chunked ms",
                    "max within"
                ],
                &rows
            )
        );
        println!(
            "Arbitrated memory phases above {:.2}x the longest alone, by cause:",
            prem::attribution::OUTLIER_RATIO
        );
        let mut rows = Vec::new();
        for run in &pl.interferers {
            let at = &run.attribution;
            if at.by_cause.is_empty() {
                rows.push(vec![
                    run.kind.name().to_string(),
                    format!("0 of {}", at.memory_phases),
                    "-".into(),
                    at.overlapping_work.to_string(),
                ]);
            }
            for (cause, n) in &at.by_cause {
                rows.push(vec![
                    run.kind.name().to_string(),
                    format!("{} of {}", n, at.memory_phases),
                    cause.clone(),
                    at.overlapping_work.to_string(),
                ]);
            }
        }
        print!(
            "{}",
            text_table(
                &[
                    "interferer",
                    "outliers",
                    "cause",
                    "work overlapping any memory phase"
                ],
                &rows
            )
        );
    }
    if !p.threads.is_empty() {
        println!("\nWhere everything ran (sampled during the first arbitrated paging run):");
        let rows: Vec<Vec<String>> = p
            .threads
            .iter()
            .map(|t| {
                vec![
                    t.process.clone(),
                    t.thread.clone(),
                    t.tid.to_string(),
                    t.allowed_cpus.clone(),
                    t.last_cpu.map_or("-".into(), |c| c.to_string()),
                    t.policy.clone(),
                ]
            })
            .collect();
        print!(
            "{}",
            text_table(
                &[
                    "process",
                    "thread",
                    "tid",
                    "allowed CPUs",
                    "last CPU",
                    "policy"
                ],
                &rows
            )
        );
    }
}

fn plot_prem(p: &PremResult, dir: &std::path::Path) -> Result<(), BoxError> {
    let Some(pl) = p.placements.first() else {
        return Ok(());
    };
    let mut conds = vec![("alone".to_string(), &pl.alone)];
    for run in &pl.interferers {
        conds.push((format!("interfered ({})", run.kind.name()), &run.interfered));
        conds.push((format!("arbitrated ({})", run.kind.name()), &run.arbitrated));
    }
    for (i, phase) in ["load", "compute", "unload"].iter().enumerate() {
        let plot = BoxPlot {
            title: format!(
                "PREM {phase} phase ({}): alone, interfered, arbitrated (SiΓ Figs. 5, 7)",
                pl.placement.label()
            ),
            y_label: format!("{phase} phase"),
            series: conds
                .iter()
                .map(|(name, c)| BoxSeries::new(name.as_str(), c.samples_s(i)))
                .collect(),
        };
        plot.write_svg(&dir.join(format!("prem-{phase}.svg")))?;
    }
    let mut t = BarChart::new("Interferer throughput", "MB/s");
    t.categories = pl
        .interferers
        .iter()
        .map(|r| r.kind.name().to_string())
        .collect();
    t.series = vec![
        BarSeries::new(
            "alone",
            pl.interferers
                .iter()
                .map(|r| Some(r.interferer_mbs.alone))
                .collect(),
        ),
        BarSeries::new(
            "interfered",
            pl.interferers
                .iter()
                .map(|r| Some(r.interferer_mbs.interfered))
                .collect(),
        ),
        BarSeries::new(
            "arbitrated",
            pl.interferers
                .iter()
                .map(|r| Some(r.interferer_mbs.arbitrated))
                .collect(),
        ),
    ];
    t.write_svg(&dir.join("prem-interferer.svg"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_defaults_are_the_labs() {
        let args: InterferenceArgs = crate::args::parse_flags(&[]).unwrap();
        assert_eq!(args.options, InterferenceOptions::default());
        // The CLI adds only the command of the PREM task's process.
        let opts = args.options().unwrap();
        assert!(opts.prem_task.is_some());
        assert_eq!(
            InterferenceOptions {
                prem_task: None,
                ..opts
            },
            InterferenceOptions::default()
        );
    }
}
