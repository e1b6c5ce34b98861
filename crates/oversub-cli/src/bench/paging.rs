//! `oversub bench paging`: the throughput and overhead experiment of the paper's Secs. V-A and V-B.
//!
//! Each sample times, on the same store and the same bytes: oversub's synchronous page-out and page-in, its async
//! calls (start and finish separately, with the I/O left to complete in between), a single `O_DIRECT` `read()` /
//! `O_DIRECT|O_SYNC` `write()`, demand paging through `mmap` (minus the same walk over resident memory), and the raw
//! limit of the store (io_uring, queue depth 32, 1 MiB requests, preallocated memory). The page cache is dropped
//! before every timed operation.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use oversub_accel::{DeviceMemory, HostMemory, HostMemoryConfig, PageRelease};
use oversub_core::{AddressSpace, Buffer, BufferFlags, Pool, PoolConfig};
use oversub_io::tuning::{best_points, GridPoint};
use oversub_io::{Direction, EngineChoice, IoEngine, IoRequest, IoVec, SwapStore, UringEngine};
use oversub_report::{format_bytes, format_seconds, text_table, BoxPlot, BoxSeries, Summary};
use serde::Serialize;

use super::BoxError;
use crate::mem::{fill_random, Mapping};

const MIB: u64 = 1 << 20;

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
    #[arg(long, default_value = "1GiB", value_parser = crate::parse_size_arg)]
    pub(super) size: u64,
    /// Samples per measurement (with --device cuda, 3 to 5 are enough at 8 GiB).
    #[arg(long, default_value_t = 20)]
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
    #[arg(long, value_parser = crate::parse_size_arg)]
    pub(super) stripe_bytes: Option<u64>,
    /// Device-memory backend.
    #[arg(long, value_enum, default_value_t = DeviceKind::Host)]
    pub(super) device: DeviceKind,
    /// I/O engine of the pager.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub(super) engine: EngineArg,
    /// Largest single I/O request of the pager; a buffer's transfer is split only at this size.
    #[arg(long, default_value = "4MiB", value_parser = crate::parse_size_arg)]
    pub(super) max_io: u64,
    /// Requests the pager keeps in flight.
    #[arg(long, default_value_t = 32)]
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
    #[arg(long, default_value_t = 0)]
    pub(super) gpu: i32,
    /// Size of one staging buffer of the pager's staging ring (--device cuda).
    #[arg(long, default_value = "16MiB", value_parser = crate::parse_size_arg)]
    pub(super) staging_chunk: u64,
    /// Number of staging buffers in the ring (--device cuda).
    #[arg(long, default_value_t = 8)]
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

/// CPU seconds this process has used so far, every thread, user and system.
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we pass; a zeroed rusage is a valid value of it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
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

/// The measurement names, in report order (also the JSON keys).
const NAMES: [&str; 13] = [
    "oversub_page_in",
    "oversub_page_out",
    "direct_read",
    "direct_write",
    "demand_paging_read",
    "raw_limit_read",
    "raw_limit_write",
    "async_page_in_start",
    "async_page_in_finish",
    "async_page_out_start",
    "async_page_out_finish",
    "unchecked_page_in",
    "unchecked_page_out",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheDrop {
    /// `echo 3 > /proc/sys/vm/drop_caches`: page, dentry and inode caches, as in the paper.
    DropCaches,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on the store file only.
    Fadvise,
}

impl CacheDrop {
    pub(super) fn choose(arg: CacheDropArg) -> Result<CacheDrop, BoxError> {
        match arg {
            CacheDropArg::Fadvise => return Ok(CacheDrop::Fadvise),
            CacheDropArg::DropCaches => {
                write_drop_caches()
                    .map_err(|e| format!("cannot write /proc/sys/vm/drop_caches: {e}"))?;
                return Ok(CacheDrop::DropCaches);
            }
            CacheDropArg::Auto => {}
        }
        Ok(if write_drop_caches().is_ok() {
            CacheDrop::DropCaches
        } else {
            tracing::info!("cannot write /proc/sys/vm/drop_caches; dropping the store's pages with posix_fadvise");
            CacheDrop::Fadvise
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            CacheDrop::DropCaches => "drop_caches",
            CacheDrop::Fadvise => "posix_fadvise",
        }
    }

    /// [`apply`](Self::apply) to every one of `fds` (the system-wide drop only once).
    pub(super) fn apply_all(self, fds: &[libc::c_int]) -> Result<(), BoxError> {
        match self {
            CacheDrop::DropCaches => self.apply(fds.first().copied().unwrap_or(-1)),
            CacheDrop::Fadvise => fds.iter().try_for_each(|&fd| self.apply(fd)),
        }
    }

    pub(super) fn apply(self, fd: libc::c_int) -> Result<(), BoxError> {
        match self {
            CacheDrop::DropCaches => write_drop_caches()?,
            CacheDrop::Fadvise => {
                // DONTNEED skips dirty pages (a buffered store's fresh writes): write them back first.
                // SAFETY: fdatasync and fadvise on an open fd have no memory-safety preconditions.
                let rc = unsafe {
                    libc::fdatasync(fd);
                    libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                if rc != 0 {
                    return Err(std::io::Error::from_raw_os_error(rc).into());
                }
            }
        }
        Ok(())
    }
}

fn write_drop_caches() -> std::io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"3")
}

/// A file descriptor closed on drop.
pub(super) struct Fd(pub(super) libc::c_int);

impl Fd {
    pub(super) fn open(path: &Path, flags: libc::c_int) -> Result<Fd, BoxError> {
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: c is a valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "open {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            )
            .into());
        }
        Ok(Fd(fd))
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Removes the benchmark's own store files when the run ends, however it ends.
pub(super) struct RemoveOnDrop(pub(super) Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Loops a single read()/write() system call over short transfers (one call for the whole size in practice).
pub(super) fn rw_all(
    fd: libc::c_int,
    ptr: *mut u8,
    len: usize,
    write: bool,
) -> Result<(), BoxError> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: ptr+done..ptr+len lies inside a live mapping owned by the caller.
        let n = unsafe {
            let p = ptr.add(done);
            if write {
                libc::pwrite(fd, p.cast(), len - done, done as libc::off_t)
            } else {
                libc::pread(fd, p.cast(), len - done, done as libc::off_t)
            }
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("{}: {err}", if write { "write" } else { "read" }).into());
        }
        if n == 0 {
            return Err("unexpected end of store".into());
        }
        done += n as usize;
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct Ratio {
    name: &'static str,
    value: f64,
    target: String,
    met: bool,
    paper: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    size_bytes: u64,
    samples: usize,
    cache_drop: &'static str,
    engine: &'static str,
    raw_engine: &'static str,
    direct_io: bool,
    store: String,
    max_io_bytes: u64,
    queue_depth: usize,
    results: BTreeMap<&'static str, Summary>,
    /// Every sample in seconds, in the order taken, so a figure can be decomposed (e.g. a bimodal page-in).
    samples_s: BTreeMap<&'static str, Vec<f64>>,
    ratios: Vec<Ratio>,
    /// The pager's I/O engine counters over the whole run.
    pager_io: PagerIo,
    /// How the host backend released paged-out memory.
    release: String,
    /// Where the pager's request size and queue depth came from.
    io_point: String,
    /// Median CPU seconds (process, all threads) per GiB of each synchronous pager operation.
    cpu_s_per_gib: BTreeMap<&'static str, f64>,
    /// The raw limit's grid: one pass each way per block size and queue depth.
    raw_grid: Vec<RawPoint>,
    /// The grid point the raw-limit reads used.
    raw_best_read: RawPoint,
    /// The grid point the raw-limit writes used.
    raw_best_write: RawPoint,
    /// Files or devices the store is striped over (1: not striped).
    members: usize,
    /// Stripe unit of a striped store, bytes.
    stripe_bytes: u64,
    /// Page-out and page-in over the first 1, 2, ..., `members` members (empty with one member).
    stripe_sweep: Vec<SweepRow>,
}

/// One row of the stripe sweep: the pager over the first `members` members.
#[derive(Debug, Clone, Copy, Serialize)]
struct SweepRow {
    members: usize,
    /// Median page-out time, seconds.
    page_out_s: f64,
    /// Median page-in time, seconds.
    page_in_s: f64,
    page_out_gib_s: f64,
    page_in_gib_s: f64,
    /// Bandwidth over that of one member.
    page_out_ratio: f64,
    page_in_ratio: f64,
}

/// Block sizes of the raw limit's grid.
const RAW_GRID_BLOCKS: [usize; 3] = [1 << 20, 4 << 20, 16 << 20];
/// Queue depths of the raw limit's grid.
const RAW_GRID_DEPTHS: [usize; 2] = [8, 32];

/// One point of the raw limit's grid.
#[derive(Debug, Clone, Copy, Serialize)]
struct RawPoint {
    block_bytes: u64,
    queue_depth: usize,
    read_bytes_per_s: f64,
    write_bytes_per_s: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct PagerIo {
    pub(super) read_requests: u64,
    pub(super) write_requests: u64,
    pub(super) bytes_read: u64,
    pub(super) bytes_written: u64,
    pub(super) errors: u64,
    pub(super) mean_request_latency_s: f64,
}

impl std::fmt::Display for PagerIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} read in {} requests, {} written in {} requests, {} errors, mean request latency {}",
            format_bytes(self.bytes_read),
            self.read_requests,
            format_bytes(self.bytes_written),
            self.write_requests,
            self.errors,
            format_seconds(self.mean_request_latency_s)
        )
    }
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

pub fn run(args: PagingArgs) -> Result<(), BoxError> {
    if args.samples == 0 {
        return Err("--samples must be at least 1".into());
    }
    if args.peers {
        return run_peers(&args);
    }
    if args.size == 0 {
        return Err("--size must be at least one byte".into());
    }
    if args.device == DeviceKind::Cuda {
        return super::paging_cuda::run(args);
    }
    let max_io = usize::try_from(args.max_io).map_err(|_| "--max-io too large")?;
    let size = usize::try_from(args.size).map_err(|_| "--size too large for this machine")?;

    // Resolve the store paths: the first also takes the baselines.
    let resolved: Vec<(PathBuf, bool)> = if args.store.is_empty() {
        vec![resolve_store(None, args.force)?]
    } else {
        args.store
            .iter()
            .map(|p| resolve_store(Some(p), args.force))
            .collect::<Result<_, _>>()?
    };
    let _cleanup = RemoveOnDrop(
        resolved
            .iter()
            .filter(|(_, created)| *created)
            .map(|(p, _)| p.clone())
            .collect(),
    );
    let paths: Vec<PathBuf> = resolved.iter().map(|(p, _)| p.clone()).collect();
    let path = paths[0].clone();
    let store_names = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let capacity = args.size.next_multiple_of(2 * MIB);
    let mut builder = SwapStore::builder()
        .max_io_bytes(max_io)
        .queue_depth(args.queue_depth);
    let mut io_source = "defaults (--max-io, --queue-depth)".to_string();
    if let Some(profile) = &args.io_profile {
        let p = oversub_profile::Profile::load(profile)?;
        let grid: Vec<GridPoint> = p
            .storage
            .as_ref()
            .map(|s| {
                s.points
                    .iter()
                    .map(|q| GridPoint {
                        block_bytes: q.block_bytes,
                        queue_depth: q.queue_depth,
                        read_bytes_per_s: q.read_bytes_per_s,
                        write_bytes_per_s: q.write_bytes_per_s,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (read, write) = best_points(&grid)
            .map_err(|e| format!("{}: [storage] points: {e}", profile.display()))?;
        builder = builder.io_points(read, write);
        io_source = format!(
            "{}: reads {} x {}, writes {} x {}",
            profile.display(),
            format_bytes(read.block_bytes as u64),
            read.queue_depth,
            format_bytes(write.block_bytes as u64),
            write.queue_depth
        );
    }
    let mut builder = builder
        .engine_choice(args.engine.into())
        .keep(true)
        // --force-store already said the benchmark may overwrite an existing store's contents.
        .force(args.force);
    if let Some(stripe) = args.stripe_bytes {
        builder = builder.stripe_bytes(stripe);
    }
    let mut store = open_striped(&builder, &paths, capacity)?;
    if args.io_auto {
        if args.io_profile.is_some() {
            return Err("give --io-auto or --io-profile, not both".into());
        }
        let done = store.calibrate(&oversub_io::tuning::Calibration::default())?;
        io_source = format!(
            "auto (calibrated in {:.2} s over {} points): reads {} x {}, writes {} x {}",
            done.seconds,
            done.grid.len(),
            format_bytes(done.read.block_bytes as u64),
            done.read.queue_depth,
            format_bytes(done.write.block_bytes as u64),
            done.write.queue_depth
        );
    }
    if store.capacity_bytes() < args.size {
        return Err(format!(
            "store {store_names} holds {} but the benchmark needs {}",
            format_bytes(store.capacity_bytes()),
            format_bytes(args.size)
        )
        .into());
    }
    let members = store.member_count();
    let stripe_bytes = store.stripe_bytes();
    let store = Arc::new(store);
    eprintln!("pager I/O point: {io_source}");
    let direct = store.is_direct();
    let engine_name = store.engine().name();
    let align = store.alignment();
    let io_len = size.next_multiple_of(align);

    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::new(HostMemoryConfig {
        release: args.release.into(),
        ..HostMemoryConfig::default()
    }));
    let pool = Pool::new(
        PoolConfig::new(capacity.next_multiple_of(2 * MIB)).verify_checksums(!args.no_checksums),
        Arc::clone(&device),
        Arc::clone(&store),
    )?;
    let space = pool.address_space();
    let buffer = space.alloc(args.size, BufferFlags::DEFAULT)?;
    {
        let ptr = space.host_ptr(buffer)?;
        // SAFETY: the buffer is resident and `size` bytes long; nothing else accesses it now.
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, size) };
        fill_random(bytes, 0x00DD_BA11);
    }
    // The same pager with checksums off, over the same store (one buffer is out at a time, so the slot is shared),
    // to put a figure on what the checksums cost.
    let unchecked = if args.no_checksums {
        None
    } else {
        let pool = Pool::new(
            PoolConfig::new(capacity.next_multiple_of(2 * MIB)).verify_checksums(false),
            device,
            Arc::clone(&store),
        )?;
        let space = pool.address_space();
        let buffer = space.alloc(args.size, BufferFlags::DEFAULT)?;
        let ptr = space.host_ptr(buffer)?;
        // SAFETY: as above.
        fill_random(
            unsafe { std::slice::from_raw_parts_mut(ptr, size) },
            0x0BAD_5EED,
        );
        Some((pool, space, buffer))
    };

    // Baseline resources: raw engine and its preallocated, prefaulted buffer (random bytes, also the write source).
    let raw_engine: Arc<dyn IoEngine> = match UringEngine::new(32) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            tracing::warn!("io_uring unavailable for the raw limit ({e}); using psync");
            Arc::new(oversub_io::PsyncEngine::new(32)?)
        }
    };
    let mut raw_buf = Mapping::anonymous(io_len)?;
    fill_random(raw_buf.as_mut_slice(), 0x5EED);
    let direct_flag = if direct { libc::O_DIRECT } else { 0 };
    if !direct {
        tracing::warn!("the store refuses O_DIRECT: the direct-I/O baselines run buffered too");
    }
    let rw_fd = Fd::open(&path, libc::O_RDWR | direct_flag)?;
    if members > 1 && is_block_device(&path) {
        // The baselines use the first member alone, over the whole size.
        // SAFETY: plain syscall on an open fd.
        let end = unsafe { libc::lseek(rw_fd.0, 0, libc::SEEK_END) };
        if end < 0 || (end as u64) < io_len as u64 {
            return Err(format!(
                "the baselines run on the first --store location, {}, which holds less than --size {}",
                path.display(),
                format_bytes(args.size)
            )
            .into());
        }
    }
    let cache = CacheDrop::choose(args.cache_drop)?;

    eprintln!(
        "oversub bench paging: {} on {} ({}, {}), engine {engine_name}, max I/O {}, queue depth {}, cache drop {}",
        format_bytes(args.size),
        store_names,
        match (store.is_block_device(), members) {
            (true, 1) => "block device".to_string(),
            (false, 1) => "file".to_string(),
            (true, n) => format!("{n} block devices, striped by {}", format_bytes(stripe_bytes)),
            (false, n) => format!("{n} members, striped by {}", format_bytes(stripe_bytes)),
        },
        if direct { "O_DIRECT" } else { "buffered" },
        format_bytes(args.max_io),
        args.queue_depth,
        cache.name()
    );
    if members > 1 {
        eprintln!(
            "the direct-I/O, demand-paging and raw-limit baselines run on the first member, {}",
            path.display()
        );
    }

    let steps = args.samples as u64 * if unchecked.is_some() { 11 } else { 9 };
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg} (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut samples: BTreeMap<&'static str, Vec<f64>> =
        NAMES.iter().map(|n| (*n, Vec::new())).collect();
    let mut push = |name: &'static str, d: Duration| {
        if let Some(v) = samples.get_mut(name) {
            v.push(d.as_secs_f64());
        }
    };
    // CPU seconds of the whole process (I/O threads included) per synchronous page-out and page-in.
    let mut cpu: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let store_fds = store.member_fds();

    // The store's limit: the best block size and queue depth of a small grid, one pass each way per point (cache
    // dropped), so "raw limit" is the best this store does rather than one fixed point.
    bar.set_message("raw limit: block size x queue depth grid");
    let mut grid: Vec<RawPoint> = Vec::new();
    let mut engines: Vec<(usize, Arc<dyn IoEngine>)> = Vec::new();
    for depth in RAW_GRID_DEPTHS {
        let engine: Arc<dyn IoEngine> = match UringEngine::new(depth) {
            Ok(e) => Arc::new(e),
            Err(_) => Arc::new(oversub_io::PsyncEngine::new(depth)?),
        };
        for block in RAW_GRID_BLOCKS {
            let mut point = RawPoint {
                block_bytes: block as u64,
                queue_depth: depth,
                read_bytes_per_s: 0.0,
                write_bytes_per_s: 0.0,
            };
            for direction in [Direction::Write, Direction::Read] {
                cache.apply(rw_fd.0)?;
                let t = Instant::now();
                raw_transfer_blocks(engine.as_ref(), rw_fd.0, &mut raw_buf, direction, block)?;
                let rate = io_len as f64 / t.elapsed().as_secs_f64().max(1e-9);
                match direction {
                    Direction::Read => point.read_bytes_per_s = rate,
                    _ => point.write_bytes_per_s = rate,
                }
            }
            grid.push(point);
        }
        engines.push((depth, engine));
    }
    let best = |key: fn(&RawPoint) -> f64| {
        grid.iter()
            .copied()
            .max_by(|a, b| key(a).total_cmp(&key(b)))
            .unwrap_or(RawPoint {
                block_bytes: MIB,
                queue_depth: 32,
                read_bytes_per_s: 0.0,
                write_bytes_per_s: 0.0,
            })
    };
    let best_read = best(|p| p.read_bytes_per_s);
    let best_write = best(|p| p.write_bytes_per_s);
    let engine_for = |depth: usize| {
        engines
            .iter()
            .find(|(d, _)| *d == depth)
            .map(|(_, e)| Arc::clone(e))
            .unwrap_or_else(|| Arc::clone(&raw_engine))
    };
    let (read_engine, write_engine) = (
        engine_for(best_read.queue_depth),
        engine_for(best_write.queue_depth),
    );
    eprintln!(
        "raw limit: reads best at {} x {} in flight, writes at {} x {} (grid of {} points)",
        format_bytes(best_read.block_bytes),
        best_read.queue_depth,
        format_bytes(best_write.block_bytes),
        best_write.queue_depth,
        grid.len()
    );

    for i in 0..args.samples {
        // The page cache is emptied before every timed operation, writes included, so no sample inherits another's.
        // The pager with and without checksums take turns at going first: on this kind of machine the first
        // round trip of a sample was measured up to 2x slower than the second with checksums off in both, so a
        // fixed order would be charged to the checksums.
        let mut pairs: Vec<(&AddressSpace, Buffer, [&'static str; 2])> =
            vec![(&space, buffer, ["oversub_page_out", "oversub_page_in"])];
        if let Some((_, space, buffer)) = &unchecked {
            let pair = (space, *buffer, ["unchecked_page_out", "unchecked_page_in"]);
            if i % 2 == 0 {
                pairs.push(pair);
            } else {
                pairs.insert(0, pair);
            }
        }
        for (space, buffer, [out_name, in_name]) in pairs {
            bar.set_message(format!("sample {}/{}: {out_name}", i + 1, args.samples));
            cache.apply_all(&store_fds)?;
            let c = process_cpu_s();
            let t = Instant::now();
            space.page_out(buffer)?;
            push(out_name, t.elapsed());
            cpu.entry(out_name).or_default().push(process_cpu_s() - c);
            bar.inc(1);
            cache.apply_all(&store_fds)?;
            let c = process_cpu_s();
            let t = Instant::now();
            space.page_in(buffer)?;
            push(in_name, t.elapsed());
            cpu.entry(in_name).or_default().push(process_cpu_s() - c);
            bar.inc(1);
        }

        bar.set_message(format!("sample {}/{}: oversub async", i + 1, args.samples));
        cache.apply_all(&store_fds)?;
        let t = Instant::now();
        let ticket = space.page_out_async(buffer)?;
        push("async_page_out_start", t.elapsed());
        wait_complete(|| ticket.is_complete());
        let t = Instant::now();
        ticket.finish()?;
        push("async_page_out_finish", t.elapsed());
        bar.inc(1);
        cache.apply_all(&store_fds)?;
        let t = Instant::now();
        let ticket = space.page_in_async(buffer)?;
        push("async_page_in_start", t.elapsed());
        wait_complete(|| ticket.is_complete());
        let t = Instant::now();
        ticket.finish()?;
        push("async_page_in_finish", t.elapsed());
        bar.inc(1);

        bar.set_message(format!("sample {}/{}: direct I/O", i + 1, args.samples));
        {
            let fd = Fd::open(&path, libc::O_WRONLY | libc::O_SYNC | direct_flag)?;
            cache.apply(fd.0)?;
            let t = Instant::now();
            rw_all(fd.0, raw_buf.as_ptr(), io_len, true)?;
            push("direct_write", t.elapsed());
        }
        bar.inc(1);
        {
            let fd = Fd::open(&path, libc::O_RDONLY | direct_flag)?;
            cache.apply(fd.0)?;
            let t = Instant::now();
            let fresh = Mapping::anonymous(io_len)?;
            rw_all(fd.0, fresh.as_ptr(), io_len, false)?;
            push("direct_read", t.elapsed());
            drop(fresh);
        }
        bar.inc(1);

        bar.set_message(format!("sample {}/{}: demand paging", i + 1, args.samples));
        {
            let fd = Fd::open(&path, libc::O_RDONLY)?;
            cache.apply(fd.0)?;
            let t = Instant::now();
            let map = Mapping::file(fd.0, size)?;
            std::hint::black_box(map.walk_4k());
            let faulting = t.elapsed();
            drop(map);
            // Footnote 12: subtract the same walk over memory that is already resident.
            let t = Instant::now();
            std::hint::black_box(raw_buf.walk_4k());
            let walk = t.elapsed();
            push("demand_paging_read", faulting.saturating_sub(walk));
        }
        bar.inc(1);

        bar.set_message(format!("sample {}/{}: raw limit", i + 1, args.samples));
        cache.apply(rw_fd.0)?;
        let t = Instant::now();
        raw_transfer_blocks(
            write_engine.as_ref(),
            rw_fd.0,
            &mut raw_buf,
            Direction::Write,
            best_write.block_bytes as usize,
        )?;
        push("raw_limit_write", t.elapsed());
        bar.inc(1);
        cache.apply(rw_fd.0)?;
        let t = Instant::now();
        raw_transfer_blocks(
            read_engine.as_ref(),
            rw_fd.0,
            &mut raw_buf,
            Direction::Read,
            best_read.block_bytes as usize,
        )?;
        push("raw_limit_read", t.elapsed());
        bar.inc(1);
    }
    bar.finish_and_clear();
    let pager_io = PagerIo::from(store.engine().counters());
    space.free(buffer)?;
    if let Some((_, space, buffer)) = &unchecked {
        space.free(*buffer)?;
    }
    // Closes the store, so the sweep can open its members again.
    drop(unchecked);
    drop(space);
    drop(pool);
    drop(store);
    let stripe_sweep = if members > 1 {
        stripe_sweep(&args, &builder, &paths, capacity, cache)?
    } else {
        Vec::new()
    };

    let results: BTreeMap<&'static str, Summary> = samples
        .iter()
        .filter_map(|(name, v)| Summary::from_samples(v).map(|s| (*name, s)))
        .collect();
    let ratios = ratios(&results);
    print_tables(args.size, &results, &ratios);
    println!("pager I/O: {pager_io}");
    if !stripe_sweep.is_empty() {
        println!("{}", sweep_table(&stripe_sweep));
    }
    let gib = args.size as f64 / (1u64 << 30) as f64;
    let cpu_s_per_gib: BTreeMap<&'static str, f64> = cpu
        .iter()
        .filter_map(|(name, v)| Summary::from_samples(v).map(|s| (*name, s.median_s / gib)))
        .collect();
    println!(
        "CPU per GiB paged (median, process user + system, host release {:?}): {}",
        args.release,
        cpu_s_per_gib
            .iter()
            .map(|(n, v)| format!("{n} {v:.3} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let report = Report {
        size_bytes: args.size,
        samples: args.samples,
        cache_drop: cache.name(),
        engine: engine_name,
        raw_engine: raw_engine.name(),
        direct_io: direct,
        store: store_names,
        max_io_bytes: args.max_io,
        queue_depth: args.queue_depth,
        results,
        samples_s: samples.clone(),
        ratios,
        pager_io,
        release: format!("{:?}", args.release).to_lowercase(),
        io_point: io_source.clone(),
        cpu_s_per_gib,
        raw_grid: grid,
        raw_best_read: best_read,
        raw_best_write: best_write,
        members,
        stripe_bytes,
        stripe_sweep,
    };
    if let Some(json) = &args.json {
        std::fs::write(json, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("writing {}: {e}", json.display()))?;
        eprintln!("wrote {}", json.display());
    }
    if let Some(plot) = &args.plot {
        write_plots(plot, args.size, &samples)?;
    }
    Ok(())
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// The store over `paths` (see `StoreBuilder::build`): block devices whole, files and new files sized to hold
/// `capacity` in all.
fn open_striped(
    builder: &oversub_io::StoreBuilder,
    paths: &[PathBuf],
    capacity: u64,
) -> Result<SwapStore, BoxError> {
    let builder = if paths.iter().all(|p| is_block_device(p)) {
        // Use the whole devices; the size check says when they are too small.
        builder.clone()
    } else {
        builder.clone().capacity_bytes(capacity)
    };
    Ok(builder.build(paths)?)
}

/// Page-out and page-in over the first 1, 2, ..., N members (each its own store and pool), median of
/// `--samples` round trips each.
fn stripe_sweep(
    args: &PagingArgs,
    builder: &oversub_io::StoreBuilder,
    paths: &[PathBuf],
    capacity: u64,
    cache: CacheDrop,
) -> Result<Vec<SweepRow>, BoxError> {
    let size = usize::try_from(args.size).map_err(|_| "--size too large for this machine")?;
    let bar = ProgressBar::new((paths.len() * args.samples) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows: Vec<SweepRow> = Vec::new();
    for k in 1..=paths.len() {
        bar.set_message(format!("stripe sweep: {k} of {} members", paths.len()));
        // The members are this run's own files (or ones --force-store allowed), and the baselines wrote over the
        // first one's header: open them whatever they hold.
        let store = open_striped(&builder.clone().force(true), &paths[..k], capacity)?;
        if store.capacity_bytes() < args.size {
            eprintln!(
                "stripe sweep: the first {k} members hold {}, less than --size; row left out",
                format_bytes(store.capacity_bytes())
            );
            bar.inc(args.samples as u64);
            continue;
        }
        let fds = store.member_fds();
        let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::new(HostMemoryConfig {
            release: args.release.into(),
            ..HostMemoryConfig::default()
        }));
        let pool = Pool::new(
            PoolConfig::new(capacity.next_multiple_of(2 * MIB))
                .verify_checksums(!args.no_checksums),
            device,
            Arc::new(store),
        )?;
        let space = pool.address_space();
        let buffer = space.alloc(args.size, BufferFlags::DEFAULT)?;
        {
            let ptr = space.host_ptr(buffer)?;
            // SAFETY: the buffer is resident and `size` bytes long; nothing else accesses it now.
            fill_random(
                unsafe { std::slice::from_raw_parts_mut(ptr, size) },
                0x5717_1BE5 + k as u64,
            );
        }
        let (mut outs, mut ins) = (Vec::new(), Vec::new());
        for _ in 0..args.samples {
            cache.apply_all(&fds)?;
            let t = Instant::now();
            space.page_out(buffer)?;
            outs.push(t.elapsed().as_secs_f64());
            cache.apply_all(&fds)?;
            let t = Instant::now();
            space.page_in(buffer)?;
            ins.push(t.elapsed().as_secs_f64());
            bar.inc(1);
        }
        space.free(buffer)?;
        let med = |v: &[f64]| Summary::from_samples(v).map_or(f64::NAN, |s| s.median_s);
        let (out_s, in_s) = (med(&outs), med(&ins));
        let gib = args.size as f64 / (1u64 << 30) as f64;
        let (out_bw, in_bw) = (gib / out_s, gib / in_s);
        let (base_out, base_in) = rows
            .first()
            .map_or((out_bw, in_bw), |r| (r.page_out_gib_s, r.page_in_gib_s));
        rows.push(SweepRow {
            members: k,
            page_out_s: out_s,
            page_in_s: in_s,
            page_out_gib_s: out_bw,
            page_in_gib_s: in_bw,
            page_out_ratio: out_bw / base_out,
            page_in_ratio: in_bw / base_in,
        });
    }
    bar.finish_and_clear();
    Ok(rows)
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

/// Polls until the I/O side reports completion, then waits a little more so `finish` measures only its own work.
pub(super) fn wait_complete(done: impl Fn() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
}

/// The best the store gives: 1 MiB requests, all submitted at once to a queue-depth-32 engine, into memory that is
/// already faulted in.
pub(super) fn raw_transfer(
    engine: &dyn IoEngine,
    fd: libc::c_int,
    buf: &mut Mapping,
    direction: Direction,
) -> Result<(), BoxError> {
    raw_transfer_blocks(engine, fd, buf, direction, MIB as usize)
}

/// One pass over `buf` in requests of `block` bytes, all submitted to `engine` (whose queue depth bounds the
/// requests in flight).
pub(super) fn raw_transfer_blocks(
    engine: &dyn IoEngine,
    fd: libc::c_int,
    buf: &mut Mapping,
    direction: Direction,
    block: usize,
) -> Result<(), BoxError> {
    let len = buf.len();
    let block = block.max(4096);
    let requests: Vec<IoRequest> = (0..len)
        .step_by(block)
        .map(|off| IoRequest {
            fd,
            direction,
            offset: off as u64,
            iovecs: vec![IoVec {
                // SAFETY (pointer arithmetic only): off < len, inside the mapping.
                ptr: buf.as_ptr().wrapping_add(off),
                len: block.min(len - off),
            }],
        })
        .collect();
    // SAFETY: buf is borrowed mutably for the whole call and submit_wait returns only after every request finished.
    unsafe { oversub_io::submit_wait(engine, requests) }?;
    Ok(())
}

pub(super) fn resolve_store(
    store: Option<&Path>,
    force: bool,
) -> Result<(PathBuf, bool), BoxError> {
    let fresh_name = || format!("oversub-bench-{}.swap", std::process::id());
    let Some(p) = store else {
        return Ok((std::env::temp_dir().join(fresh_name()), true));
    };
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((p.to_path_buf(), true)),
        Err(e) => Err(format!("--store {}: {e}", p.display()).into()),
        Ok(m) if m.is_dir() => Ok((p.join(fresh_name()), true)),
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            let kind = if m.file_type().is_block_device() {
                "block device"
            } else {
                "file"
            };
            if !force {
                return Err(format!(
                    "--store {} is an existing {kind}; the benchmark overwrites its contents. Add --force-store to allow it",
                    p.display()
                )
                .into());
            }
            Ok((p.to_path_buf(), false))
        }
    }
}

fn median(results: &BTreeMap<&'static str, Summary>, name: &str) -> f64 {
    results.get(name).map_or(f64::NAN, |s| s.median_s)
}

fn mean(results: &BTreeMap<&'static str, Summary>, name: &str) -> f64 {
    results.get(name).map_or(f64::NAN, |s| s.mean_s)
}

fn ratios(r: &BTreeMap<&'static str, Summary>) -> Vec<Ratio> {
    let page_in = median(r, "oversub_page_in");
    let page_out = median(r, "oversub_page_out");
    let at_least = |name, value: f64, min: f64, paper| Ratio {
        name,
        value,
        target: format!(">= {min}"),
        met: value >= min,
        paper,
    };
    let at_most = |name, value: f64, max: f64, paper| Ratio {
        name,
        value,
        target: format!("<= {max}"),
        met: value <= max,
        paper,
    };
    let mut ratios = vec![
        at_least(
            "direct_read / oversub_page_in (median)",
            median(r, "direct_read") / page_in,
            1.0,
            Some(1.19),
        ),
        at_least(
            "demand_paging_read / oversub_page_in (median)",
            median(r, "demand_paging_read") / page_in,
            3.0,
            Some(3.8),
        ),
        at_least(
            "raw_limit_read / oversub_page_in (median)",
            median(r, "raw_limit_read") / page_in,
            0.9,
            None,
        ),
        at_least(
            "direct_write / oversub_page_out (median)",
            median(r, "direct_write") / page_out,
            1.0,
            Some(1.02),
        ),
        at_least(
            "raw_limit_write / oversub_page_out (median)",
            median(r, "raw_limit_write") / page_out,
            0.9,
            None,
        ),
        at_most(
            "async page-in (start + finish) / oversub_page_in (mean)",
            (mean(r, "async_page_in_start") + mean(r, "async_page_in_finish"))
                / mean(r, "oversub_page_in"),
            0.10,
            Some(0.70),
        ),
        at_most(
            "async page-out (start + finish) / oversub_page_out (mean)",
            (mean(r, "async_page_out_start") + mean(r, "async_page_out_finish"))
                / mean(r, "oversub_page_out"),
            0.05,
            Some(0.20),
        ),
    ];
    if r.contains_key("unchecked_page_in") {
        // Issue 17's target: checksums cost at most 3% of paging time.
        ratios.push(at_most(
            "checksum cost: oversub_page_in / unchecked_page_in - 1 (median)",
            page_in / median(r, "unchecked_page_in") - 1.0,
            0.03,
            None,
        ));
        ratios.push(at_most(
            "checksum cost: oversub_page_out / unchecked_page_out - 1 (median)",
            page_out / median(r, "unchecked_page_out") - 1.0,
            0.03,
            None,
        ));
    }
    ratios
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
        series: series(&NAMES[..7]),
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
        series: series(&NAMES[7..]),
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
