//! `oversub bench interference`: how much paging and copies slow CPU tasks that thrash DRAM (the paper's Sec. V-C,
//! Figs. 14-15), and how the SiΓ arbiter removes that interference for PREM tasks (SiΓ Figs. 5-8).

pub mod cpu;
pub mod prem;
pub mod thrash;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use oversub_report::{text_table, BarChart, BarSeries, BoxPlot, BoxSeries};
use serde::Serialize;

use super::BoxError;
use prem::{Condition, PremOptions, PremResult, StarvationRow};
use thrash::{ThrashKind, ThrashOptions, ThrashRow};

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    oversub_arbiter::parse_duration(s).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    /// Both experiments.
    All,
    /// Paging vs DRAM-thrashing tasks (Figs. 14-15).
    Thrashing,
    /// A PREM task vs transfers, alone / interfered / arbitrated, and the starvation curve (SiΓ Figs. 5-8).
    Prem,
}

#[derive(Debug, Args)]
pub struct InterferenceArgs {
    /// Short runs (under two minutes in all): 1 s measurement windows, one pass over the PREM data.
    #[arg(long)]
    quick: bool,
    /// Which experiment to run.
    #[arg(long, value_enum, default_value_t = Part::All)]
    part: Part,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the figures (SVG) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Directory for the swap-store files of the paging loops (default: the system's temporary directory).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Length of each thrashing measurement window (default 5s, 1s with --quick).
    #[arg(long, value_parser = parse_duration_arg)]
    measure: Option<Duration>,
    /// Size of the buffers the paging loops page out and in.
    #[arg(long, default_value = "64MiB", value_parser = crate::parse_size_arg)]
    paging_buffer: u64,
    /// Last-level cache size (default: read from sysfs).
    #[arg(long, value_parser = crate::parse_size_arg)]
    llc: Option<u64>,
    /// Passes of the PREM task over its data per condition (default 8, 1 with --quick).
    #[arg(long)]
    passes: Option<usize>,
    /// Pixel data the PREM task walks per pass (the paper's 256 MB).
    #[arg(long, default_value = "256MB", value_parser = crate::parse_size_arg)]
    data: u64,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    llc_bytes: u64,
    virtual_machine: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    thrashing: Vec<ThrashRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prem: Option<PremResult>,
    starvation: Vec<StarvationRow>,
}

pub fn run(args: InterferenceArgs) -> Result<(), BoxError> {
    let cpus = cpu::online_cpus();
    if cpus < 2 {
        return Err("the interference benchmarks need at least two CPUs (one for the tasks, one for paging)".into());
    }
    let llc = match args.llc.or_else(cpu::last_level_cache_bytes) {
        Some(l) if l > 0 => l,
        _ => {
            tracing::warn!("last-level cache size unknown; assuming 8 MiB (give --llc)");
            8 << 20
        }
    };
    if args.paging_buffer < 4096 {
        return Err("--paging-buffer must be at least 4KiB".into());
    }
    if args.data < (1 << 20) {
        return Err("--data must be at least 1MiB".into());
    }
    if args.passes == Some(0) {
        return Err("--passes must be at least 1".into());
    }
    let store_dir = args.store.clone().unwrap_or_else(std::env::temp_dir);
    if !store_dir.is_dir() {
        return Err(format!("--store {} is not a directory", store_dir.display()).into());
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)?;
    }
    let virtual_machine = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.contains(" hypervisor"))
    });
    let measure = args
        .measure
        .unwrap_or(Duration::from_secs(if args.quick { 1 } else { 5 }));

    let thrash_opts = ThrashOptions {
        kinds: vec![ThrashKind::Sequential, ThrashKind::RandomDependent],
        max_tasks: cpus - 1,
        working_set_bytes: 4 * llc,
        measure,
        paging_buffer_bytes: args.paging_buffer,
        store_dir: store_dir.clone(),
    };
    let gc_ratios: Vec<f64> = if args.quick {
        vec![0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.5, 2.0]
    } else {
        (1..=20).map(|i| i as f64 / 10.0).collect()
    };
    let prem_opts = PremOptions {
        llc_bytes: llc,
        data_bytes: args.data,
        passes: args.passes.unwrap_or(if args.quick { 1 } else { 8 }),
        paging_buffer_bytes: args.paging_buffer,
        copy_bytes: if args.quick { 32 << 20 } else { 100_000_000 },
        store_dir,
        task_cpu: 0,
        interferer_cpu: cpus - 1,
        gc_ratios,
        starvation_iterations: if args.quick { 4 } else { 12 },
    };
    let do_thrash = matches!(args.part, Part::All | Part::Thrashing);
    let do_prem = matches!(args.part, Part::All | Part::Prem);
    let total = if do_thrash {
        thrash::windows(&thrash_opts)
    } else {
        0
    } + if do_prem { prem::steps(&prem_opts) } else { 0 };
    let bar = crate::progress_bar(total, "interference", "", false);

    let thrashing = if do_thrash {
        bar.set_message("DRAM thrashers vs paging");
        thrash::run(&thrash_opts, &bar)?
    } else {
        Vec::new()
    };
    let (prem, starvation) = if do_prem {
        bar.set_message("PREM task vs transfers");
        let (p, s) = prem::run(&prem_opts, &bar)?;
        (Some(p), s)
    } else {
        (None, Vec::new())
    };
    bar.finish_and_clear();

    let report = Report {
        machine: Machine {
            cpus,
            llc_bytes: llc,
            virtual_machine,
        },
        thrashing,
        prem,
        starvation,
    };
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
        let s = &p.settings;
        println!(
            "\nPREM task vs transfers (SiΓ Figs. 5-8): working set {:.1} MiB (85% of LLC), {} iterations per condition, \
             compute x{}, {}",
            s.working_set_bytes as f64 / (1 << 20) as f64,
            p.alone.iterations,
            s.compute_repetitions,
            if s.realtime { "SCHED_FIFO 99" } else { "normal priority (SCHED_FIFO not permitted)" }
        );
        println!(
            "announced: CPU_MEM load {:.0} us, CPU_COM {:.0} us, CPU_MEM unload {:.0} us; server round trip {:.3} us",
            s.announced_load_us, s.announced_compute_us, s.announced_unload_us, s.epsilon_us
        );
        let conds: [(&str, &Condition); 5] = [
            ("alone", &p.alone),
            ("interfered (paging)", &p.paging.interfered),
            ("arbitrated (paging)", &p.paging.arbitrated),
            ("interfered (copy)", &p.copy.interfered),
            ("arbitrated (copy)", &p.copy.arbitrated),
        ];
        let mut rows = Vec::new();
        for (name, c) in conds {
            for (phase, st) in [
                ("load", &c.mem_load_us),
                ("compute", &c.compute_us),
                ("unload", &c.mem_unload_us),
            ] {
                let base = match phase {
                    "load" => p.alone.mem_load_us.max,
                    "compute" => p.alone.compute_us.max,
                    _ => p.alone.mem_unload_us.max,
                };
                rows.push(vec![
                    name.to_string(),
                    phase.to_string(),
                    format!("{:.0}", st.min),
                    format!("{:.0}", st.mean),
                    format!("{:.0}", st.max),
                    format!("{:.3}", if base > 0.0 { st.max / base } else { 0.0 }),
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
                    "max us",
                    "max / alone max"
                ],
                &rows
            )
        );
        let rows: Vec<Vec<String>> = [("paging", &p.paging), ("copy", &p.copy)]
            .iter()
            .map(|(name, run)| {
                let m = &run.interferer_mbs;
                vec![
                    name.to_string(),
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
                    "waits/preempted"
                ],
                &rows
            )
        );
        let rows: Vec<Vec<String>> = [("paging", &p.paging), ("copy", &p.copy)]
            .iter()
            .map(|(name, run)| {
                vec![
                    name.to_string(),
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
        let conds: [(&str, &Condition); 5] = [
            ("alone", &p.alone),
            ("interfered (paging)", &p.paging.interfered),
            ("arbitrated (paging)", &p.paging.arbitrated),
            ("interfered (copy)", &p.copy.interfered),
            ("arbitrated (copy)", &p.copy.arbitrated),
        ];
        for (i, phase) in ["load", "compute", "unload"].iter().enumerate() {
            let plot = BoxPlot {
                title: format!(
                    "PREM {phase} phase: alone, interfered, arbitrated (SiΓ Figs. 5, 7)"
                ),
                y_label: format!("{phase} phase"),
                series: conds
                    .iter()
                    .map(|(name, c)| BoxSeries::new(*name, c.samples_s[i].clone()))
                    .collect(),
            };
            plot.write_svg(&dir.join(format!("prem-{phase}.svg")))?;
        }
        let mut t = BarChart::new("Interferer throughput", "MB/s");
        t.categories = vec!["paging".into(), "copy".into()];
        let runs = [&p.paging, &p.copy];
        t.series = vec![
            BarSeries::new(
                "alone",
                runs.iter().map(|r| Some(r.interferer_mbs.alone)).collect(),
            ),
            BarSeries::new(
                "interfered",
                runs.iter()
                    .map(|r| Some(r.interferer_mbs.interfered))
                    .collect(),
            ),
            BarSeries::new(
                "arbitrated",
                runs.iter()
                    .map(|r| Some(r.interferer_mbs.arbitrated))
                    .collect(),
            ),
        ];
        t.write_svg(&dir.join("prem-interferer.svg"))?;
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
