//! `oversub bench paging`: the throughput and overhead experiment of the paper's Secs. V-A and V-B, on host memory
//! ([`host`]) or a CUDA GPU ([`cuda`]). [`run`] takes [`PagingOptions`], tells its caller what it does through
//! [`PagingEvent`]s and returns a [`PagingReport`] whose JSON is what `--json` writes.

/// Tells the run's caller `format!(...)` as a [`PagingEvent::Note`] (the callers import `PagingEvent`).
macro_rules! note {
    ($progress:expr, $($arg:tt)*) => {
        $progress(PagingEvent::Note(&format!($($arg)*)))
    };
}

pub mod cuda;
pub mod host;
mod sampler;

use std::path::PathBuf;

use oversub_accel::PageRelease;
use oversub_io::EngineChoice;
use oversub_report::Summary;
use serde::Serialize;

use crate::harness::cache::CacheDropMode;
use crate::LabError;

pub use cuda::CudaPagingReport;
pub use host::HostPagingReport;

pub(crate) const MIB: u64 = 1 << 20;

/// Which memory the paged buffer lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PagingDevice {
    /// System DRAM as device memory (the integrated-GPU model).
    #[default]
    Host,
    /// A CUDA GPU through the driver API: the pager's staging ring and host tier against the bus, the store,
    /// unified memory and keep-the-address baselines (needs an NVIDIA GPU and its driver).
    Cuda,
}

/// What to measure and how; the fields are the flags of `oversub bench paging` (`--peers`, `--json` and `--plot`
/// aside, which the CLI keeps: it flattens this struct, so each flag is declared here once). [`Default`] gives the
/// CLI's defaults (a test in the CLI checks they agree).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PagingOptions {
    /// Size of the paged buffer (e.g. 256MiB, 1GiB).
    #[cfg_attr(feature = "clap", arg(long, default_value = "1GiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub size: u64,
    /// Samples per measurement (with --device cuda, 3 to 5 are enough at 8 GiB).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 20, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub samples: usize,
    /// Swap store: a file (created if absent), a directory to create one in, or a block device (needs --force-store;
    /// its contents are destroyed). Default: a new file in the system's temporary directory, removed afterwards.
    /// Several, comma-separated (`--store /mnt/a,/mnt/b`), stripe the pager's store over them: then the run also
    /// measures page-out and page-in over the first 1, 2, ..., N of them and prints the bandwidth per member count
    /// (the `stripe_sweep` rows of --json); the direct-I/O, demand-paging and raw-limit baselines run on the first
    /// one. With --device cuda, one location only.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_delimiter = ',', value_name = "PATH[,PATH...]")
    )]
    pub store: Vec<PathBuf>,
    /// Stripe unit of a store over several locations (default: --max-io, so each request lands on one member).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub stripe_bytes: Option<u64>,
    /// Device-memory backend.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = PagingDevice::Host))]
    pub device: PagingDevice,
    /// I/O engine of the pager.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = EngineChoice::Auto))]
    pub engine: EngineChoice,
    /// Largest single I/O request of the pager; a buffer's transfer is split only at this size.
    #[cfg_attr(feature = "clap", arg(long, default_value = "4MiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub max_io: u64,
    /// Requests the pager keeps in flight.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 32, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub queue_depth: usize,
    /// Platform profile (`oversub probe --out`) whose `[storage]` grid picks the pager's request size and queue
    /// depth, one point for reads and one for writes (replaces --max-io and --queue-depth).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub io_profile: Option<PathBuf>,
    /// Calibrate the pager's request size and queue depth on the store itself before the run (1, 4, 16 MiB x 8,
    /// 32 in flight over 64 MiB; about a second), as a pool made with io="auto" does (replaces --max-io and
    /// --queue-depth).
    #[cfg_attr(feature = "clap", arg(long))]
    pub io_auto: bool,
    /// Allow overwriting an existing file or block device named by --store, whatever it holds (a file system
    /// signature, another user's store). A mounted or busy device is refused regardless.
    #[cfg_attr(feature = "clap", arg(long = "force-store", alias = "force"))]
    pub force_store: bool,
    /// How the host backend gives a paged-out buffer's memory back: recycle (a pool of physical chunks mapped in
    /// and out, never refaulted; the default), immediate (MADV_DONTNEED, refaulted zeroed at page-in) or lazy
    /// (MADV_FREE).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = PageRelease::Recycle))]
    pub release: PageRelease,
    /// Run the pager without its checksums (on by default, as in any pool). Without this flag the host run also
    /// times a second pool with checksums off over the same store, in the same samples, and reports what the
    /// checksums cost. The cuda run always checks bytes at the start, middle and end of the buffer, and its
    /// device address, as well.
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_checksums: bool,
    /// How to empty the page cache before each read: drop-caches (system-wide, needs root), fadvise (the store's
    /// pages only), or auto (drop-caches when allowed, else fadvise).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = CacheDropMode::Auto))]
    pub cache_drop: CacheDropMode,
    /// CUDA device ordinal (--device cuda).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<i32>))]
    pub gpu: i32,
    /// Size of one staging buffer of the pager's staging ring (--device cuda).
    #[cfg_attr(feature = "clap", arg(long, default_value = "16MiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub staging_chunk: u64,
    /// Number of staging buffers in the ring (--device cuda).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 8, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub staging_chunks: usize,
    /// Stage through pageable instead of pinned host memory (--device cuda).
    #[cfg_attr(feature = "clap", arg(long))]
    pub pageable_staging: bool,
    /// Leave out the unified-memory baseline (--device cuda; it needs NVRTC and managed memory).
    #[cfg_attr(feature = "clap", arg(long))]
    pub skip_unified: bool,
    /// Stage through host memory even where GPUDirect Storage (cuFile) works (--device cuda).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_cufile: bool,
}

impl Default for PagingOptions {
    fn default() -> Self {
        PagingOptions {
            size: 1 << 30,
            samples: 20,
            store: Vec::new(),
            stripe_bytes: None,
            device: PagingDevice::Host,
            engine: EngineChoice::Auto,
            max_io: 4 * MIB,
            queue_depth: 32,
            io_profile: None,
            io_auto: false,
            force_store: false,
            release: PageRelease::Recycle,
            no_checksums: false,
            cache_drop: CacheDropMode::Auto,
            gpu: 0,
            staging_chunk: 16 * MIB,
            staging_chunks: 8,
            pageable_staging: false,
            skip_unified: false,
            no_cufile: false,
        }
    }
}

/// What a paging run tells its caller while it runs (a front end draws bars and prints notes; a library caller
/// may ignore all of it).
#[derive(Debug, Clone, Copy)]
pub enum PagingEvent<'a> {
    /// A stage of `steps` steps begins (`"paging"`, `"stripe sweep"`, `"paging cuda"`); the previous one is over.
    Stage {
        /// The stage's name.
        name: &'a str,
        /// Its steps.
        steps: u64,
    },
    /// What runs now (`"sample 2/5: direct I/O"`).
    Phase(&'a str),
    /// One step of the stage finished.
    StepDone,
    /// A line for the user: the set-up the run chose, a baseline it skipped.
    Note(&'a str),
    /// The last stage is over.
    Finished,
}

/// The callback a paging run reports through.
pub type PagingProgress<'a> = &'a (dyn Fn(PagingEvent<'_>) + Sync);

/// A [`PagingProgress`] that ignores everything.
pub fn no_events(_: PagingEvent<'_>) {}

/// The report of either device; serializes as the device's own report (the JSON of `--json`).
#[derive(Debug, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum PagingReport {
    /// `device = host`.
    Host(HostPagingReport),
    /// `device = cuda`.
    Cuda(CudaPagingReport),
}

/// Runs the experiment `opts` describe.
pub fn run(opts: &PagingOptions, progress: PagingProgress<'_>) -> Result<PagingReport, LabError> {
    if opts.samples == 0 {
        return Err(LabError::InvalidOption(
            "--samples must be at least 1".into(),
        ));
    }
    if opts.size == 0 {
        return Err(LabError::InvalidOption(
            "--size must be at least one byte".into(),
        ));
    }
    match opts.device {
        PagingDevice::Host => host::run(opts, progress).map(PagingReport::Host),
        PagingDevice::Cuda => cuda::run(opts, progress).map(PagingReport::Cuda),
    }
}

/// The pager's I/O engine counters over a run.
#[derive(Debug, Clone, Serialize)]
pub struct PagerIo {
    /// Read requests.
    pub read_requests: u64,
    /// Write requests.
    pub write_requests: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Failed requests.
    pub errors: u64,
    /// Mean latency of a request, seconds.
    pub mean_request_latency_s: f64,
}

impl From<oversub_io::IoCountersSnapshot> for PagerIo {
    fn from(c: oversub_io::IoCountersSnapshot) -> Self {
        let requests = c.reads + c.writes;
        PagerIo {
            read_requests: c.reads,
            write_requests: c.writes,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            errors: c.errors,
            mean_request_latency_s: if requests == 0 {
                0.0
            } else {
                c.latency_ns_total as f64 / requests as f64 / 1e9
            },
        }
    }
}

/// Polls until the I/O side reports completion, then waits a little more so `finish` measures only its own work.
pub(crate) fn wait_complete(done: impl Fn() -> bool) {
    while !done() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
}

/// Each measurement's summary, for those with samples.
pub(crate) fn summarize(
    samples: &std::collections::BTreeMap<&'static str, Vec<f64>>,
) -> std::collections::BTreeMap<&'static str, Summary> {
    samples
        .iter()
        .filter_map(|(name, v)| Summary::from_samples(v).map(|s| (*name, s)))
        .collect()
}

/// `usize::try_from` with the refusal the CLI gives.
pub(crate) fn to_usize(v: u64, refusal: &str) -> Result<usize, LabError> {
    usize::try_from(v).map_err(|_| LabError::InvalidOption(refusal.into()))
}
