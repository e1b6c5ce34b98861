//! `oversub bench paging`: the throughput and overhead experiment of the paper's Secs. V-A and V-B. The
//! measurement is `oversub_lab::paging` (what each sample times is described there); this module parses the flags
//! into its options, draws its progress, prints the tables and writes the JSON and plots of its report, and hands
//! `--peers` to the Python lab.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use oversub_base::sync::lock;
use oversub_lab::paging::host::{HostPagingReport, Ratio, SweepRow, MAIN_PLOT, NAMES};
use oversub_lab::paging::{PagerIo, PagingEvent, PagingOptions, PagingReport};
use oversub_report::{format_bytes, format_seconds, text_table, BoxPlot, BoxSeries, Summary};

use crate::error::BoxError;

#[derive(Debug, Args)]
pub struct PagingArgs {
    #[command(flatten)]
    pub(super) options: PagingOptions,
    /// Measure oversub beside the engines an ML engineer would otherwise use (plain O_DIRECT, DeepSpeed's async
    /// I/O handle, KvikIO) in one run: hands over to `python -m oversub.lab.paging --peers` with --size, --store
    /// (the first location) and --samples as repetitions (`pip install "oversub[peers]"`; `$OVERSUB_PYTHON`
    /// picks the interpreter). Peers that are not installed are named and skipped.
    #[arg(long)]
    pub(super) peers: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Draw the box plot of Fig. 12 to this SVG file (the async calls of Fig. 13 go to NAME-async.svg).
    #[arg(long)]
    pub(super) plot: Option<PathBuf>,
}

pub fn run(args: PagingArgs) -> Result<(), BoxError> {
    if args.options.samples == 0 {
        return Err("--samples must be at least 1".into());
    }
    if args.peers {
        return run_peers(&args);
    }
    let bars = Bars::default();
    let report = oversub_lab::paging::run(&args.options, &|e| bars.show(e))?;
    bars.clear();
    match report {
        PagingReport::Host(report) => render_host(&args, &report),
        PagingReport::Cuda(report) => super::paging_cuda::render(&args, &report),
        _ => Err("a paging report of a device this command does not know".into()),
    }
}

/// The progress bars of a paging run, one per stage, drawn from the run's events.
#[derive(Debug, Default)]
pub(super) struct Bars(std::sync::Mutex<Option<ProgressBar>>);

impl Bars {
    pub(super) fn show(&self, event: PagingEvent<'_>) {
        let mut bar = lock(&self.0);
        match event {
            PagingEvent::Stage { name, steps } => {
                if let Some(old) = bar.take() {
                    old.finish_and_clear();
                }
                *bar = Some(match name {
                    "paging cuda" => crate::progress_bar(steps, name, "", false),
                    _ => {
                        let template = if name == "paging" {
                            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg} (eta {eta})"
                        } else {
                            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}"
                        };
                        let b = ProgressBar::new(steps);
                        b.set_style(
                            ProgressStyle::with_template(template)
                                .unwrap_or_else(|_| ProgressStyle::default_bar()),
                        );
                        b
                    }
                });
            }
            PagingEvent::Phase(what) => {
                if let Some(b) = bar.as_ref() {
                    b.set_message(what.to_string());
                }
            }
            PagingEvent::StepDone => {
                if let Some(b) = bar.as_ref() {
                    b.inc(1);
                }
            }
            PagingEvent::Note(line) => eprintln!("{line}"),
            PagingEvent::Finished => {
                if let Some(old) = bar.take() {
                    old.finish_and_clear();
                }
            }
        }
    }

    /// Clears a bar a failed run left.
    pub(super) fn clear(&self) {
        if let Some(old) = lock(&self.0).take() {
            old.finish_and_clear();
        }
    }
}

/// Prints the tables and writes the JSON and plots of a host run.
fn render_host(args: &PagingArgs, report: &HostPagingReport) -> Result<(), BoxError> {
    print_tables(args.options.size, &report.results, &report.ratios);
    println!("pager I/O: {}", pager_io_line(&report.pager_io));
    if !report.stripe_sweep.is_empty() {
        println!("{}", sweep_table(&report.stripe_sweep));
    }
    println!(
        "CPU per GiB paged (median, process user + system, host release {:?}): {}",
        args.options.release,
        report
            .cpu_s_per_gib
            .iter()
            .map(|(n, v)| format!("{n} {v:.3} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(json) = &args.json {
        write_json(json, report)?;
    }
    if let Some(plot) = &args.plot {
        write_plots(plot, args.options.size, &report.samples_s)?;
    }
    Ok(())
}

/// Writes `report` as pretty JSON to `path`.
pub(super) fn write_json(path: &Path, report: &impl serde::Serialize) -> Result<(), BoxError> {
    std::fs::write(path, serde_json::to_string_pretty(report)?)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The pager's I/O counters in a line.
pub(super) fn pager_io_line(io: &PagerIo) -> String {
    format!(
        "{} read in {} requests, {} written in {} requests, {} errors, mean request latency {}",
        format_bytes(io.bytes_read),
        io.read_requests,
        format_bytes(io.bytes_written),
        io.write_requests,
        io.errors,
        format_seconds(io.mean_request_latency_s)
    )
}

fn sweep_table(rows: &[SweepRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.members.to_string(),
                format!("{:.3}", r.page_out_gib_s),
                format!("{:.3}", r.page_in_gib_s),
                format!("{:.2}x", r.page_out_ratio),
                format!("{:.2}x", r.page_in_ratio),
            ]
        })
        .collect();
    format!(
        "bandwidth per member count (median of the samples; ratios to the first member alone):\n{}",
        text_table(
            &[
                "members",
                "page-out GiB/s",
                "page-in GiB/s",
                "page-out ratio",
                "page-in ratio",
            ],
            &body,
        )
    )
}

/// The table of timings, one row per measurement of `names` that has results, with `rate` naming its rate.
pub(super) fn summary_table(
    names: &[&str],
    results: &BTreeMap<&'static str, Summary>,
    rate: impl Fn(&str, &Summary) -> String,
) -> String {
    let rows: Vec<Vec<String>> = names
        .iter()
        .filter_map(|name| results.get(name).map(|s| (name, s)))
        .map(|(name, s)| {
            vec![
                name.to_string(),
                format_seconds(s.min_s),
                format_seconds(s.median_s),
                format_seconds(s.mean_s),
                format_seconds(s.p99_s),
                format_seconds(s.max_s),
                format_seconds(s.std_s),
                rate(name, s),
            ]
        })
        .collect();
    text_table(
        &[
            "measurement",
            "min",
            "median",
            "mean",
            "p99",
            "max",
            "std dev",
            "median rate",
        ],
        &rows,
    )
}

fn print_tables(size: u64, results: &BTreeMap<&'static str, Summary>, ratios: &[Ratio]) {
    let table = summary_table(&NAMES, results, |name, s| {
        if name.starts_with("async") {
            "-".to_string()
        } else {
            oversub_report::format_rate_mbs(size, s.median_s)
        }
    });
    println!("{table}");
    let rows: Vec<Vec<String>> = ratios
        .iter()
        .map(|r| {
            vec![
                r.name.to_string(),
                format!("{:.3}", r.value),
                r.target.clone(),
                if r.met { "met" } else { "MISSED" }.to_string(),
                r.paper.map_or("-".into(), |p| format!("{p:.2}")),
            ]
        })
        .collect();
    println!(
        "{}",
        text_table(&["ratio", "value", "target", "", "paper"], &rows)
    );
}

fn write_plots(
    path: &Path,
    size: u64,
    samples: &BTreeMap<&'static str, Vec<f64>>,
) -> Result<(), BoxError> {
    let titles = [
        format!("Time to page in or out {} (Fig. 12)", format_bytes(size)),
        format!(
            "Time inside the async calls, {} (Fig. 13)",
            format_bytes(size)
        ),
    ];
    write_box_plots(path, samples, (&NAMES, MAIN_PLOT), titles, false)
}

/// The two box plots of a paging run: the first `names.1` of `names.0` under `titles[0]` at `path`, the rest (the
/// async calls) under `titles[1]` at `STEM-async.svg` beside it. With `skip_empty`, a measurement without samples
/// is left out instead of drawn empty.
pub(super) fn write_box_plots(
    path: &Path,
    samples: &BTreeMap<&'static str, Vec<f64>>,
    names: (&[&str], usize),
    titles: [String; 2],
    skip_empty: bool,
) -> Result<(), BoxError> {
    let series = |names: &[&str]| -> Vec<BoxSeries> {
        names
            .iter()
            .filter_map(|n| {
                let v = samples.get(n).cloned().unwrap_or_default();
                (!(skip_empty && v.is_empty())).then(|| BoxSeries::new(*n, v))
            })
            .collect()
    };
    let [main_title, async_title] = titles;
    let (names, split) = names;
    let main = BoxPlot {
        title: main_title,
        y_label: "time".into(),
        series: series(&names[..split]),
    };
    main.write_svg(path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    let async_path = path.with_file_name(format!("{stem}-async.svg"));
    let asyncs = BoxPlot {
        title: async_title,
        y_label: "time".into(),
        series: series(&names[split..]),
    };
    asyncs
        .write_svg(&async_path)
        .map_err(|e| format!("writing {}: {e}", async_path.display()))?;
    eprintln!("wrote {} and {}", path.display(), async_path.display());
    Ok(())
}

/// `bench paging --peers`: the Python lab puts oversub and its peers in one process (DeepSpeed and KvikIO are
/// Python libraries), with the same cache drops and buffer.
fn run_peers(args: &PagingArgs) -> Result<(), BoxError> {
    use std::process::{Command, Stdio};
    let py = std::env::var("OVERSUB_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "oversub.lab.paging", "--peers", "--size"])
        .arg(args.options.size.to_string())
        .arg("--repeats")
        .arg(args.options.samples.to_string());
    if let Some(first) = args.options.store.first() {
        cmd.arg("--store").arg(first);
    }
    if let Some(json) = &args.json {
        let out = cmd
            .arg("--json")
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| {
                format!("--peers runs `{py} -m oversub.lab.paging`, which could not start: {e}")
            })?;
        if !out.status.success() {
            return Err(peers_error(&py));
        }
        std::fs::write(json, &out.stdout)
            .map_err(|e| format!("writing {}: {e}", json.display()))?;
        eprintln!("wrote {}", json.display());
        return Ok(());
    }
    let status = cmd.status().map_err(|e| {
        format!("--peers runs `{py} -m oversub.lab.paging`, which could not start: {e}")
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(peers_error(&py))
    }
}

fn peers_error(py: &str) -> BoxError {
    format!(
        "`{py} -m oversub.lab.paging --peers` failed (see above); it needs the oversub Python package with NumPy \
         (pip install \"oversub[peers]\" adds the peers)"
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_defaults_are_the_labs() {
        // One declaration: the flags are the lab's fields, so their defaults must be its `Default` (Python's are
        // held to the same in python/tests/test_lab.py).
        let args: PagingArgs = crate::args::parse_flags(&[]).unwrap();
        assert_eq!(args.options, PagingOptions::default());
        assert!(!args.peers && args.json.is_none() && args.plot.is_none());
        let args: PagingArgs = crate::args::parse_flags(&[
            "--engine",
            "psync",
            "--release",
            "lazy",
            "--cache-drop",
            "fadvise",
            "--device",
            "cuda",
            "--force",
        ])
        .unwrap();
        assert_eq!(args.options.engine, oversub_io::EngineChoice::Psync);
        assert_eq!(args.options.release, oversub_accel::PageRelease::Lazy);
        assert_eq!(
            args.options.cache_drop,
            oversub_lab::harness::cache::CacheDropMode::Fadvise
        );
        assert_eq!(args.options.device, oversub_lab::paging::PagingDevice::Cuda);
        assert!(args.options.force_store);
    }
}
