//! `oversub bench paging`: the throughput and overhead experiment of the paper's Secs. V-A and V-B. The
//! measurement is `oversub_lab::paging` (what each sample times is described there); this module parses the flags
//! into its options, draws its progress, prints the tables and writes the JSON and plots of its report, and hands
//! `--peers` to the Python lab.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_accel::PageRelease;
use oversub_base::sync::lock;
use oversub_io::EngineChoice;
use oversub_lab::harness::cache::CacheDropMode;
use oversub_lab::paging::host::{HostPagingReport, Ratio, SweepRow, MAIN_PLOT, NAMES};
use oversub_lab::paging::{PagerIo, PagingDevice, PagingEvent, PagingOptions, PagingReport};
use oversub_report::{format_bytes, format_seconds, text_table, BoxPlot, BoxSeries, Summary};

use crate::error::BoxError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceKind {
    /// System DRAM as device memory (the integrated-GPU model).
    Host,
    /// A CUDA GPU through the driver API: the pager's staging ring and host tier against the bus, the store,
    /// unified memory and keep-the-address baselines (needs an NVIDIA GPU and its driver).
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// io_uring when the kernel allows it, else psync.
    Auto,
    /// io_uring only.
    Uring,
    /// preadv/pwritev on a thread pool.
    Psync,
}

impl From<EngineArg> for EngineChoice {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Auto => EngineChoice::Auto,
            EngineArg::Uring => EngineChoice::Uring,
            EngineArg::Psync => EngineChoice::Psync,
        }
    }
}

#[derive(Debug, Args)]
pub struct PagingArgs {
    /// Size of the paged buffer (e.g. 256MiB, 1GiB).
    #[arg(
        long,
        default_value = "1GiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    pub(super) size: u64,
    /// Samples per measurement (with --device cuda, 3 to 5 are enough at 8 GiB).
    #[arg(long, default_value_t = 20, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    pub(super) samples: usize,
    /// Swap store: a file (created if absent), a directory to create one in, or a block device (needs --force-store;
    /// its contents are destroyed). Default: a new file in the system's temporary directory, removed afterwards.
    /// Several, comma-separated (`--store /mnt/a,/mnt/b`), stripe the pager's store over them: then the run also
    /// measures page-out and page-in over the first 1, 2, ..., N of them and prints the bandwidth per member count
    /// (the `stripe_sweep` rows of --json); the direct-I/O, demand-paging and raw-limit baselines run on the first
    /// one. With --device cuda, one location only.
    #[arg(long, value_delimiter = ',', value_name = "PATH[,PATH...]")]
    pub(super) store: Vec<PathBuf>,
    /// Stripe unit of a store over several locations (default: --max-io, so each request lands on one member).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::args::parse_positive_size_arg)]
    pub(super) stripe_bytes: Option<u64>,
    /// Device-memory backend.
    #[arg(long, value_enum, default_value_t = DeviceKind::Host)]
    pub(super) device: DeviceKind,
    /// I/O engine of the pager.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub(super) engine: EngineArg,
    /// Largest single I/O request of the pager; a buffer's transfer is split only at this size.
    #[arg(
        long,
        default_value = "4MiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    pub(super) max_io: u64,
    /// Requests the pager keeps in flight.
    #[arg(long, default_value_t = 32, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    pub(super) queue_depth: usize,
    /// Platform profile (`oversub probe --out`) whose `[storage]` grid picks the pager's request size and queue
    /// depth, one point for reads and one for writes (replaces --max-io and --queue-depth).
    #[arg(long, value_name = "FILE")]
    pub(super) io_profile: Option<PathBuf>,
    /// Calibrate the pager's request size and queue depth on the store itself before the run (1, 4, 16 MiB x 8,
    /// 32 in flight over 64 MiB; about a second), as a pool made with io="auto" does (replaces --max-io and
    /// --queue-depth).
    #[arg(long)]
    pub(super) io_auto: bool,
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
    /// Allow overwriting an existing file or block device named by --store, whatever it holds (a file system
    /// signature, another user's store). A mounted or busy device is refused regardless.
    #[arg(long = "force-store", alias = "force")]
    pub(super) force: bool,
    /// How the host backend gives a paged-out buffer's memory back: recycle (a pool of physical chunks mapped in
    /// and out, never refaulted; the default), immediate (MADV_DONTNEED, refaulted zeroed at page-in) or lazy
    /// (MADV_FREE).
    #[arg(long, value_enum, default_value_t = ReleaseArg::Recycle)]
    pub(super) release: ReleaseArg,
    /// Run the pager without its checksums (on by default, as in any pool). Without this flag the host run also
    /// times a second pool with checksums off over the same store, in the same samples, and reports what the
    /// checksums cost. The cuda run always checks bytes at the start, middle and end of the buffer, and its
    /// device address, as well.
    #[arg(long)]
    pub(super) no_checksums: bool,
    /// How to empty the page cache before each read: drop-caches (system-wide, needs root), fadvise (the store's
    /// pages only), or auto (drop-caches when allowed, else fadvise).
    #[arg(long, value_enum, default_value_t = CacheDropArg::Auto)]
    pub(super) cache_drop: CacheDropArg,
    /// CUDA device ordinal (--device cuda).
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<i32>
    )]
    pub(super) gpu: i32,
    /// Size of one staging buffer of the pager's staging ring (--device cuda).
    #[arg(
        long,
        default_value = "16MiB",
        allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg
    )]
    pub(super) staging_chunk: u64,
    /// Number of staging buffers in the ring (--device cuda).
    #[arg(long, default_value_t = 8, allow_hyphen_values = true, value_parser = crate::args::parse_count::<usize>)]
    pub(super) staging_chunks: usize,
    /// Stage through pageable instead of pinned host memory (--device cuda).
    #[arg(long)]
    pub(super) pageable_staging: bool,
    /// Leave out the unified-memory baseline (--device cuda; it needs NVRTC and managed memory).
    #[arg(long)]
    pub(super) skip_unified: bool,
    /// Stage through host memory even where GPUDirect Storage (cuFile) works (--device cuda).
    #[arg(long)]
    pub(super) no_cufile: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReleaseArg {
    /// Physical chunks recycled through a memfd pool.
    Recycle,
    /// madvise(MADV_DONTNEED) at page-out.
    Immediate,
    /// madvise(MADV_FREE) at page-out.
    Lazy,
}

impl From<ReleaseArg> for PageRelease {
    fn from(r: ReleaseArg) -> Self {
        match r {
            ReleaseArg::Recycle => PageRelease::Recycle,
            ReleaseArg::Immediate => PageRelease::Immediate,
            ReleaseArg::Lazy => PageRelease::Lazy,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheDropArg {
    /// drop-caches when allowed, else fadvise.
    Auto,
    /// echo 3 > /proc/sys/vm/drop_caches (page, dentry and inode caches, as in the paper).
    DropCaches,
    /// posix_fadvise(DONTNEED) on the store.
    Fadvise,
}

impl From<CacheDropArg> for CacheDropMode {
    fn from(c: CacheDropArg) -> Self {
        match c {
            CacheDropArg::Auto => CacheDropMode::Auto,
            CacheDropArg::DropCaches => CacheDropMode::DropCaches,
            CacheDropArg::Fadvise => CacheDropMode::Fadvise,
        }
    }
}

impl PagingArgs {
    /// The lab's options for these flags.
    pub(super) fn options(&self) -> PagingOptions {
        PagingOptions {
            size: self.size,
            samples: self.samples,
            store: self.store.clone(),
            stripe_bytes: self.stripe_bytes,
            device: match self.device {
                DeviceKind::Host => PagingDevice::Host,
                DeviceKind::Cuda => PagingDevice::Cuda,
            },
            engine: self.engine.into(),
            max_io: self.max_io,
            queue_depth: self.queue_depth,
            io_profile: self.io_profile.clone(),
            io_auto: self.io_auto,
            force_store: self.force,
            release: self.release.into(),
            no_checksums: self.no_checksums,
            cache_drop: self.cache_drop.into(),
            gpu: self.gpu,
            staging_chunk: self.staging_chunk,
            staging_chunks: self.staging_chunks,
            pageable_staging: self.pageable_staging,
            skip_unified: self.skip_unified,
            no_cufile: self.no_cufile,
        }
    }
}

pub fn run(args: PagingArgs) -> Result<(), BoxError> {
    if args.samples == 0 {
        return Err("--samples must be at least 1".into());
    }
    if args.peers {
        return run_peers(&args);
    }
    let bars = Bars::default();
    let report = oversub_lab::paging::run(&args.options(), &|e| bars.show(e))?;
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
    print_tables(args.size, &report.results, &report.ratios);
    println!("pager I/O: {}", pager_io_line(&report.pager_io));
    if !report.stripe_sweep.is_empty() {
        println!("{}", sweep_table(&report.stripe_sweep));
    }
    println!(
        "CPU per GiB paged (median, process user + system, host release {:?}): {}",
        args.release,
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
        write_plots(plot, args.size, &report.samples_s)?;
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
    let series = |names: &[&str]| -> Vec<BoxSeries> {
        names
            .iter()
            .map(|n| BoxSeries {
                name: n.to_string(),
                samples_s: samples.get(n).cloned().unwrap_or_default(),
            })
            .collect()
    };
    let main = BoxPlot {
        title: format!("Time to page in or out {} (Fig. 12)", format_bytes(size)),
        y_label: "time".into(),
        series: series(&NAMES[..MAIN_PLOT]),
    };
    main.write_svg(path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    let async_path = path.with_file_name(format!("{stem}-async.svg"));
    let asyncs = BoxPlot {
        title: format!(
            "Time inside the async calls, {} (Fig. 13)",
            format_bytes(size)
        ),
        y_label: "time".into(),
        series: series(&NAMES[MAIN_PLOT..]),
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
        .arg(args.size.to_string())
        .arg("--repeats")
        .arg(args.samples.to_string());
    if let Some(first) = args.store.first() {
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
