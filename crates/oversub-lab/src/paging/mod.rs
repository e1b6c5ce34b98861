//! `oversub bench paging`: the throughput and overhead experiment of the paper's Secs. V-A and V-B, on host memory
//! ([`host`]) or a CUDA GPU ([`cuda`]). [`run`] takes [`PagingOptions`], tells its caller what it does through
//! [`PagingEvent`]s and returns a [`PagingReport`] whose JSON is what `--json` writes.

pub mod cuda;
pub mod host;

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
pub enum PagingDevice {
    /// System DRAM as device memory (the integrated-GPU model).
    #[default]
    Host,
    /// A CUDA GPU through the driver API.
    Cuda,
}

/// What to measure and how; the fields are the flags of `oversub bench paging` (`--peers` aside, which the CLI
/// hands to Python). [`Default`] gives the CLI's defaults.
#[derive(Debug, Clone)]
pub struct PagingOptions {
    /// Size of the paged buffer, bytes.
    pub size: u64,
    /// Samples per measurement.
    pub samples: usize,
    /// Store locations (a file, a directory to create one in, a block device); several stripe the store (host
    /// only). Empty: a new file in the temporary directory.
    pub store: Vec<PathBuf>,
    /// Stripe unit of a striped store (default: `max_io`).
    pub stripe_bytes: Option<u64>,
    /// Device-memory backend.
    pub device: PagingDevice,
    /// The pager's I/O engine.
    pub engine: EngineChoice,
    /// Largest single I/O request of the pager.
    pub max_io: u64,
    /// Requests the pager keeps in flight.
    pub queue_depth: usize,
    /// Platform profile whose `[storage]` grid picks the pager's request size and queue depth (host only).
    pub io_profile: Option<PathBuf>,
    /// Calibrate the pager's request size and queue depth on the store first (host only).
    pub io_auto: bool,
    /// Allow overwriting an existing file or block device named in `store`.
    pub force_store: bool,
    /// How the host backend gives a paged-out buffer's memory back.
    pub release: PageRelease,
    /// Run the pager without its checksums (else the host run also times a pool without them).
    pub no_checksums: bool,
    /// How to empty the page cache before each read.
    pub cache_drop: CacheDropMode,
    /// CUDA device ordinal.
    pub gpu: i32,
    /// Size of one staging buffer of the pager's staging ring (cuda).
    pub staging_chunk: u64,
    /// Staging buffers in the ring (cuda).
    pub staging_chunks: usize,
    /// Stage through pageable instead of pinned host memory (cuda).
    pub pageable_staging: bool,
    /// Leave out the unified-memory baseline (cuda).
    pub skip_unified: bool,
    /// Stage through host memory even where GPUDirect Storage works (cuda).
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
