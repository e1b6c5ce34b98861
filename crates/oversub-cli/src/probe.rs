//! `oversub probe`: measures this machine's virtual-memory, copy and storage costs with the methods of Vesely et
//! al. (ISPASS 2016), prints them beside the paper's figures, and writes the platform profile that `plan`, `run`,
//! `sim uvm` and `sim swap` read with `--profile`.

use std::path::PathBuf;
use std::sync::Mutex;

use clap::Args;
use oversub_lab::profile::{measure, to_profile, ProbeOptions, ProbeResults};
use oversub_probe::system;
use oversub_profile::VERSION;
use oversub_report::{
    format_bytes, format_seconds, text_table, text_table_left, BarChart, BarSeries,
};

use crate::error::BoxError;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    options: ProbeOptions,
    /// Where to write the platform profile (TOML, docs/profile.md).
    #[arg(long, value_name = "FILE", default_value = "profile.toml")]
    out: PathBuf,
    /// Do not write a profile.
    #[arg(long, conflicts_with = "out")]
    no_profile: bool,
    /// Write every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write SVG figures (Fig. 2, 4, 6 and the storage grid) into this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// No progress bar (also OVERSUB_NO_PROGRESS=1).
    #[arg(long)]
    no_progress: bool,
}

pub fn run(args: ProbeArgs) -> Result<(), BoxError> {
    let selected = args.options.selected()?;
    for path in [args.json.as_ref(), (!args.no_profile).then_some(&args.out)]
        .into_iter()
        .flatten()
    {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(format!(
                "{}: the directory it would go in does not exist",
                path.display()
            )
            .into());
        }
    }
    if let Some(t) = args.options.storage_seconds {
        if !(t.is_finite() && t > 0.0) {
            return Err(format!("--storage-seconds must be a positive number, not {t}").into());
        }
    }
    if let Some(d) = &args.options.dir {
        if !d.is_dir() {
            return Err(format!("--dir {}: not a directory", d.display()).into());
        }
    }
    let plan = args.options.plan();
    let sys = system::SystemInfo::detect();
    let steps = plan.steps(&selected, &sys);
    let bar = crate::progress_bar(steps, "probe", "", args.no_progress);
    let bar_lock = Mutex::new(());
    let tick = |what: &str| {
        // Ticks may come from probe threads; the lock keeps position and message together.
        let _g = bar_lock.lock();
        bar.inc(1);
        if bar.position() > bar.length().unwrap_or(0) {
            bar.set_length(bar.position());
        }
        bar.set_message(what.to_string());
    };
    let report = measure(&plan, &selected, &sys, &tick);
    bar.finish_and_clear();
    let report = report?;

    print!("{}", render(&report, &sys));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        for written in plots(&report, dir)? {
            println!("wrote {}", written.display());
        }
    }
    if !args.no_profile {
        let (profile, notes) = to_profile(&report, &plan);
        for n in &notes {
            println!("note: {n}");
        }
        profile.save(&args.out)?;
        println!(
            "wrote the platform profile {} (schema version {VERSION}; see docs/profile.md)",
            args.out.display()
        );
    }
    Ok(())
}

fn gbs(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB/s", b / 1e9)
    } else {
        format!("{:.0} MB/s", b / 1e6)
    }
}

fn render(r: &ProbeResults, sys: &system::SystemInfo) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "oversub probe{} on {} ({} CPUs{}; kernel {}; THP {}) in {:.1} s\n\n",
        if r.quick { " --quick" } else { "" },
        sys.cpu_model.as_deref().unwrap_or("an unknown CPU"),
        sys.cpus,
        if sys.virtualized {
            ", virtual machine"
        } else {
            ""
        },
        sys.kernel.as_deref().unwrap_or("?"),
        sys.thp_mode.as_deref().unwrap_or("unavailable"),
        r.wall_s
    ));
    let mut rows: Vec<Vec<String>> = Vec::new();
    memory_rows(r, &mut rows);
    io_and_gpu_rows(r, &mut rows);
    out.push_str(&text_table_left(
        &["measurement", "this machine", "paper (Vesely et al.)"],
        &rows,
        3,
    ));
    out.push('\n');
    details(r, &mut out);
    out
}

/// The summary's rows of the CPU's memory system: TLB, page faults, shootdowns, the B+-tree.
fn memory_rows(r: &ProbeResults, rows: &mut Vec<Vec<String>>) {
    let mut row =
        |m: &str, here: String, paper: &str| rows.push(vec![m.into(), here, paper.into()]);
    if let Some(t) = &r.tlb {
        let how = match t.miss_count {
            oversub_profile::MissCount::Perf => "counted",
            oversub_profile::MissCount::Derived => "derived",
        };
        row(
            &format!("TLB miss latency, 4 KiB pages (misses {how})"),
            t.base.latency_s.map_or("n/a".into(), format_seconds),
            "CPU 0.023 µs, GPU 0.58 µs (Table 3)",
        );
        row(
            "page-stride access, 4 KiB pages",
            format_seconds(t.base.page_stride.access_s),
            "CPU 0.030 µs (477 µs / 15,938 accesses)",
        );
        if let Some(h) = &t.huge {
            row(
                "page-stride access, transparent huge pages",
                format_seconds(h.page_stride.access_s),
                "huge pages remove TLB misses (Sec. IV-B)",
            );
        }
        if let (Some(first), Some(last)) = (t.concurrency.first(), t.concurrency.last()) {
            row(
                &format!(
                    "TLB miss latency, {} → {} misses in flight",
                    first.chains, last.chains
                ),
                format!(
                    "{} → {}",
                    format_seconds(first.latency_s),
                    format_seconds(last.latency_s)
                ),
                "GPU: flat to 16 walks, then climbs (Fig. 2)",
            );
        }
    }
    if let Some(f) = &r.faults {
        if let Some(p) = f.soft.first() {
            row(
                &format!("soft page fault, {} thread(s)", p.threads),
                format_seconds(p.mean_latency_s),
                "CPU 1.7 µs",
            );
        }
        if let Some(p) = f.soft.last() {
            row(
                &format!("soft page faults, {} threads", p.threads),
                format!(
                    "{}, {:.0}/ms",
                    format_seconds(p.mean_latency_s),
                    p.throughput_per_s / 1e3
                ),
                "",
            );
        }
        if let Some(p) = f.uffd.first() {
            row(
                &format!("userfaultfd fault, {} thread(s)", p.threads),
                format_seconds(p.mean_latency_s),
                "GPU 5 µs at 1 fault (Fig. 6)",
            );
        }
        if let Some(p) = f.uffd.last() {
            row(
                &format!("userfaultfd faults, {} threads", p.threads),
                format!(
                    "{}, {:.0}/ms",
                    format_seconds(p.mean_latency_s),
                    p.throughput_per_s / 1e3
                ),
                "GPU 100-140 µs, 260/ms at 64 (Fig. 6)",
            );
        }
        if let Some(why) = &f.uffd_unavailable {
            row("userfaultfd faults", "n/a".into(), why);
        }
    }
    if let Some(s) = &r.shootdown {
        for p in s.iter().filter(|p| p.remote_threads > 0) {
            let paper = match (p.op.as_str(), p.pages) {
                ("mprotect", 1) => "GPU 4.2 µs single entry (Table 4)",
                ("mprotect", _) => "GPU 4.4 µs all entries (Table 4)",
                _ => "",
            };
            row(
                &format!(
                    "shootdown: {} of {} page(s), {} other thread(s)",
                    p.op, p.pages, p.remote_threads
                ),
                format_seconds(p.mean_s),
                paper,
            );
        }
    }
    if let Some(b) = &r.btree {
        for huge in [false, true] {
            if let Some(u) = b.runs.iter().find(|x| !x.sorted && x.huge_pages == huge) {
                row(
                    &format!(
                        "B+-tree unsorted / sorted (4 KiB sorted = 1), {}",
                        if huge { "huge pages" } else { "4 KiB pages" }
                    ),
                    format!("{:.2}×", u.slowdown),
                    if huge {
                        "1.5× and 7× with 1 GiB pages (Fig. 4)"
                    } else {
                        "6× (XSBench) and 26× (BPT) (Fig. 4)"
                    },
                );
            }
        }
    }
}

/// The summary's rows of copies, the store and the GPU, and what was skipped.
fn io_and_gpu_rows(r: &ProbeResults, rows: &mut Vec<Vec<String>>) {
    let mut row =
        |m: &str, here: String, paper: &str| rows.push(vec![m.into(), here, paper.into()]);
    if let Some(c) = &r.copy {
        row("memcpy, one thread", gbs(c.median_bytes_per_s), "");
    }
    if let Some(s) = &r.storage {
        if let Some(p) = s.operating_point() {
            row(
                &format!(
                    "store direct read / write, {} at QD {} ({})",
                    format_bytes(p.block_bytes as u64),
                    p.queue_depth,
                    s.engine
                ),
                format!("{} / {}", gbs(p.read_bytes_per_s), gbs(p.write_bytes_per_s)),
                "",
            );
        }
    }
    if let Some(g) = &r.gpu {
        row(
            &format!("GPU {}: H2D / D2H pinned", g.name),
            format!(
                "{} / {}",
                gbs(g.h2d_pinned_bytes_per_s),
                gbs(g.d2h_pinned_bytes_per_s)
            ),
            "",
        );
        row(
            "GPU H2D / D2H pageable",
            format!(
                "{} / {}",
                gbs(g.h2d_pageable_bytes_per_s),
                gbs(g.d2h_pageable_bytes_per_s)
            ),
            "",
        );
        if let (Some(first), Some(last)) = (g.managed_faults.first(), g.managed_faults.last()) {
            row(
                &format!(
                    "managed-memory fault, {} → {} in flight",
                    first.concurrency, last.concurrency
                ),
                format!(
                    "{} → {}",
                    format_seconds(first.latency_s),
                    format_seconds(last.latency_s)
                ),
                "GPU 5 → 140 µs (Fig. 6)",
            );
        }
        if let Some(p) = g.prefetch_bytes_per_s {
            row("managed-memory prefetch", gbs(p), "");
        }
        row(
            &format!(
                "VMM map / unmap of one {} chunk",
                format_bytes(g.vmm_granularity_bytes)
            ),
            format!(
                "{} / {}",
                format_seconds(g.vmm_map_s),
                format_seconds(g.vmm_unmap_s)
            ),
            "",
        );
        if let Some(p) = g.preempt_busy_s {
            row(
                "high-priority kernel while the GPU is busy",
                format!(
                    "{} (idle {})",
                    format_seconds(p),
                    g.preempt_idle_s.map_or("n/a".into(), format_seconds)
                ),
                "",
            );
        }
    }
    for (what, why) in &r.skipped {
        row(what, "skipped".into(), why);
    }
}

/// The notes and detail tables below the summary.
fn details(r: &ProbeResults, out: &mut String) {
    if let Some(t) = &r.tlb {
        if let Some(why) = &t.counter_unavailable {
            out.push_str(&format!(
                "TLB misses were derived from the access pattern (one per page touched), not counted: {why}\n"
            ));
        }
        if let Some(why) = &t.huge_unavailable {
            out.push_str(&format!("no huge-page run: {why}\n"));
        }
        out.push_str("\nFig. 2: TLB miss latency against misses in flight (4 KiB pages)\n");
        let rows: Vec<Vec<String>> = t
            .concurrency
            .iter()
            .map(|p| {
                vec![
                    p.chains.to_string(),
                    format_seconds(p.latency_s),
                    format!("{:.1}", p.misses_per_s / 1e6),
                    format_seconds(p.page_stride_step_s),
                    format_seconds(p.line_stride_step_s),
                ]
            })
            .collect();
        out.push_str(&text_table(
            &[
                "in flight",
                "latency/miss",
                "misses/µs",
                "4 KiB step",
                "64 B step",
            ],
            &rows,
        ));
    }
    if let Some(f) = &r.faults {
        out.push_str("\nFig. 6: page faults against concurrency\n");
        let mut rows = Vec::new();
        for (kind, pts) in [("soft", &f.soft), ("userfaultfd", &f.uffd)] {
            for p in pts.iter() {
                let split = |g: fn(&oversub_probe::derive::FaultSplit) -> f64| {
                    p.split.as_ref().map_or("".into(), |s| format_seconds(g(s)))
                };
                rows.push(vec![
                    kind.to_string(),
                    p.threads.to_string(),
                    format_seconds(p.mean_latency_s),
                    format_seconds(p.median_latency_s),
                    format!("{:.0}", p.throughput_per_s / 1e3),
                    split(|s| s.queueing_s),
                    split(|s| s.servicing_s),
                    split(|s| s.resume_s),
                ]);
            }
        }
        out.push_str(&text_table(
            &[
                "kind",
                "threads",
                "mean",
                "median",
                "faults/ms",
                "queueing",
                "servicing",
                "resume",
            ],
            &rows,
        ));
    }
    if let Some(s) = &r.shootdown {
        out.push_str("\nTable 4: shootdowns\n");
        let rows: Vec<Vec<String>> = s
            .iter()
            .map(|p| {
                vec![
                    p.op.clone(),
                    p.pages.to_string(),
                    p.remote_threads.to_string(),
                    format_seconds(p.mean_s),
                    format_seconds(p.median_s),
                ]
            })
            .collect();
        out.push_str(&text_table(
            &["operation", "pages", "other threads", "mean", "median"],
            &rows,
        ));
    }
    if let Some(b) = &r.btree {
        out.push_str(&format!(
            "\nFig. 4: {} lookups in a B+-tree of {} keys ({})\n",
            b.lookups,
            b.keys,
            format_bytes(b.tree_bytes)
        ));
        let rows: Vec<Vec<String>> = b
            .runs
            .iter()
            .map(|x| {
                vec![
                    if x.sorted { "sorted" } else { "unsorted" }.into(),
                    if x.huge_pages { "2 MiB (THP)" } else { "4 KiB" }.into(),
                    x.huge_backed_bytes.map_or("?".into(), format_bytes),
                    format!("{:.3}", x.time_s),
                    format!("{:.2}", x.lookups_per_s / 1e6),
                    format!("{:.2}×", x.slowdown),
                ]
            })
            .collect();
        out.push_str(&text_table(
            &[
                "keys",
                "pages",
                "huge-backed",
                "time s",
                "Mlookups/s",
                "vs sorted 4 KiB",
            ],
            &rows,
        ));
    }
    if let Some(s) = &r.storage {
        out.push_str(&format!(
            "\nstore: sequential {} I/O on {} ({}), MB/s read / write\n",
            if s.direct {
                "O_DIRECT"
            } else {
                "buffered (the file system refused O_DIRECT)"
            },
            s.file.display(),
            s.engine
        ));
        let (blocks, qds) = s.axes();
        let header: Vec<String> = std::iter::once("block".to_string())
            .chain(qds.iter().map(|q| format!("QD {q}")))
            .collect();
        let rows: Vec<Vec<String>> = blocks
            .iter()
            .map(|&b| {
                std::iter::once(format_bytes(b as u64))
                    .chain(qds.iter().map(|&q| {
                        s.point(b, q).map_or(String::new(), |p| {
                            format!(
                                "{:.0} / {:.0}",
                                p.read_bytes_per_s / 1e6,
                                p.write_bytes_per_s / 1e6
                            )
                        })
                    }))
                    .collect()
            })
            .collect();
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        out.push_str(&text_table(&header, &rows));
        if s.kept {
            out.push_str(&format!(
                "kept {} for comparison, e.g.: fio --name=cmp --filename={} --direct=1 --rw=read --bs=4M \
                 --iodepth=32 --ioengine=io_uring --runtime=5 --time_based\n",
                s.file.display(),
                s.file.display()
            ));
        }
    }
}

fn plots(r: &ProbeResults, dir: &std::path::Path) -> Result<Vec<PathBuf>, BoxError> {
    let mut written = Vec::new();
    let mut save = |chart: BarChart, name: &str| -> Result<(), BoxError> {
        let path = dir.join(name);
        chart
            .write_svg(&path)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        written.push(path);
        Ok(())
    };
    if let Some(t) = &r.tlb {
        let mut c = BarChart::new(
            "TLB miss latency against misses in flight (cf. Fig. 2)",
            "latency per miss (ns)",
        );
        c.categories = t.concurrency.iter().map(|p| p.chains.to_string()).collect();
        c.series = vec![BarSeries::new(
            "4 KiB pages",
            t.concurrency
                .iter()
                .map(|p| Some(p.latency_s * 1e9))
                .collect(),
        )];
        save(c, "tlb-concurrency.svg")?;
    }
    if let Some(f) = &r.faults {
        for (kind, pts, name) in [
            ("soft", &f.soft, "faults-soft.svg"),
            ("userfaultfd", &f.uffd, "faults-uffd.svg"),
        ] {
            if pts.is_empty() {
                continue;
            }
            let mut c = BarChart::new(
                format!(
                    "{kind} page-fault latency against concurrent faulting threads (cf. Fig. 6)"
                ),
                "µs per fault",
            );
            c.categories = pts.iter().map(|p| p.threads.to_string()).collect();
            c.series = if pts.iter().all(|p| p.split.is_some()) {
                vec![
                    BarSeries::new(
                        "queueing",
                        pts.iter()
                            .map(|p| p.split.as_ref().map(|s| s.queueing_s * 1e6))
                            .collect(),
                    ),
                    BarSeries::new(
                        "servicing",
                        pts.iter()
                            .map(|p| p.split.as_ref().map(|s| s.servicing_s * 1e6))
                            .collect(),
                    ),
                    BarSeries::new(
                        "resume",
                        pts.iter()
                            .map(|p| p.split.as_ref().map(|s| s.resume_s * 1e6))
                            .collect(),
                    ),
                    BarSeries::new(
                        "total",
                        pts.iter().map(|p| Some(p.mean_latency_s * 1e6)).collect(),
                    ),
                ]
            } else {
                vec![BarSeries::new(
                    "mean",
                    pts.iter().map(|p| Some(p.mean_latency_s * 1e6)).collect(),
                )]
            };
            save(c, name)?;
        }
    }
    if let Some(b) = &r.btree {
        let mut c = BarChart::new(
            "B+-tree lookups, normalised to sorted keys on 4 KiB pages (cf. Fig. 4)",
            "run time (sorted 4 KiB = 1)",
        );
        c.categories = vec!["sorted".into(), "unsorted".into()];
        let mut series = Vec::new();
        for huge in [false, true] {
            let v: Vec<Option<f64>> = [true, false]
                .iter()
                .map(|&s| {
                    b.runs
                        .iter()
                        .find(|x| x.sorted == s && x.huge_pages == huge)
                        .map(|x| x.slowdown)
                })
                .collect();
            if v.iter().any(Option::is_some) {
                series.push(BarSeries::new(
                    if huge { "2 MiB pages" } else { "4 KiB pages" },
                    v,
                ));
            }
        }
        c.series = series;
        c.reference = Some(1.0);
        save(c, "btree-locality.svg")?;
    }
    if let Some(s) = &r.storage {
        let (blocks, qds) = s.axes();
        for (dir_name, read) in [("read", true), ("write", false)] {
            let mut c = BarChart::new(format!("store direct {dir_name} bandwidth"), "MB/s");
            c.categories = blocks.iter().map(|&b| format_bytes(b as u64)).collect();
            c.series = qds
                .iter()
                .map(|&q| {
                    BarSeries::new(
                        format!("QD {q}"),
                        blocks
                            .iter()
                            .map(|&b| {
                                s.point(b, q).map(|p| {
                                    (if read {
                                        p.read_bytes_per_s
                                    } else {
                                        p.write_bytes_per_s
                                    }) / 1e6
                                })
                            })
                            .collect(),
                    )
                })
                .collect();
            save(c, &format!("storage-{dir_name}.svg"))?;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod flag_tests {
    use super::*;

    #[test]
    fn the_flags_defaults_are_the_labs() {
        let args: ProbeArgs = crate::args::parse_flags(&[]).unwrap();
        assert_eq!(args.options, ProbeOptions::default());
        assert_eq!(args.out, PathBuf::from("profile.toml"));
    }
}
