//! The paging experiment on host memory (the integrated-GPU model).
//!
//! Each sample times, on the same store and the same bytes: oversub's synchronous page-out and page-in, its async
//! calls (start and finish separately, with the I/O left to complete in between), a single `O_DIRECT` `read()` /
//! `O_DIRECT|O_SYNC` `write()`, demand paging through `mmap` (minus the same walk over resident memory), and the raw
//! limit of the store (io_uring, the best point of a small grid of request sizes and queue depths, preallocated
//! memory). The page cache is dropped before every timed operation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use oversub_accel::{DeviceMemory, HostMemory, HostMemoryConfig};
use oversub_base::format_bytes;
use oversub_core::{AddressSpace, Buffer, BufferFlags, IoPointChoice, PoolSpec};
use oversub_io::tuning::{best_points, GridPoint, IoPoint};
use oversub_io::{Direction, IoEngine, SwapStore, UringEngine};
use oversub_report::Summary;
use serde::Serialize;

use super::sampler::Sampler;
use super::{summarize, to_usize, PagerIo, PagingEvent, PagingOptions, PagingProgress, MIB};
use crate::harness::cache::CacheDrop;
use crate::harness::direct::{is_block_device, resolve_store, rw_all, Fd, RemoveOnDrop};
use crate::harness::median;
use crate::harness::memory::{fill_random, Mapping};
use crate::harness::raw_io::{raw_engine, raw_transfer_blocks};
use crate::LabError;

/// The measurement names, in report order (also the JSON keys). The first [`MAIN_PLOT`] are the figure of the
/// synchronous calls and the baselines (Fig. 12), the rest the async calls (Fig. 13) and the unchecked pager.
pub const NAMES: [&str; 13] = [
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
/// How many of [`NAMES`] the main figure shows.
pub const MAIN_PLOT: usize = 7;

/// A ratio of two measurements against its target.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// What is divided by what.
    pub name: &'static str,
    /// The ratio.
    pub value: f64,
    /// The target (`>= 1`).
    pub target: String,
    /// Whether the value meets it.
    pub met: bool,
    /// The paper's figure, where it gives one.
    pub paper: Option<f64>,
}

/// The report of a host run (the JSON of `--json`).
#[derive(Debug, Serialize)]
pub struct HostPagingReport {
    /// Size of the paged buffer, bytes.
    pub size_bytes: u64,
    /// Samples per measurement.
    pub samples: usize,
    /// How the page cache was emptied.
    pub cache_drop: &'static str,
    /// The pager's I/O engine.
    pub engine: &'static str,
    /// The raw limit's engine.
    pub raw_engine: &'static str,
    /// Whether the store is opened with `O_DIRECT`.
    pub direct_io: bool,
    /// The store's locations, comma-separated.
    pub store: String,
    /// Largest request of the pager, bytes.
    pub max_io_bytes: u64,
    /// Requests the pager keeps in flight.
    pub queue_depth: usize,
    /// Each measurement's summary.
    pub results: BTreeMap<&'static str, Summary>,
    /// Every sample in seconds, in the order taken, so a figure can be decomposed (e.g. a bimodal page-in).
    pub samples_s: BTreeMap<&'static str, Vec<f64>>,
    /// The ratios against their targets.
    pub ratios: Vec<Ratio>,
    /// The pager's I/O engine counters over the whole run.
    pub pager_io: PagerIo,
    /// How the host backend released paged-out memory.
    pub release: String,
    /// Where the pager's request size and queue depth came from.
    pub io_point: String,
    /// Median CPU seconds (process, all threads) per GiB of each synchronous pager operation.
    pub cpu_s_per_gib: BTreeMap<&'static str, f64>,
    /// The raw limit's grid: one pass each way per block size and queue depth.
    pub raw_grid: Vec<RawPoint>,
    /// The grid point the raw-limit reads used.
    pub raw_best_read: RawPoint,
    /// The grid point the raw-limit writes used.
    pub raw_best_write: RawPoint,
    /// Files or devices the store is striped over (1: not striped).
    pub members: usize,
    /// Stripe unit of a striped store, bytes.
    pub stripe_bytes: u64,
    /// Page-out and page-in over the first 1, 2, ..., `members` members (empty with one member).
    pub stripe_sweep: Vec<SweepRow>,
}

/// One row of the stripe sweep: the pager over the first `members` members.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SweepRow {
    /// Members the store is striped over.
    pub members: usize,
    /// Median page-out time, seconds.
    pub page_out_s: f64,
    /// Median page-in time, seconds.
    pub page_in_s: f64,
    /// Page-out bandwidth, GiB/s.
    pub page_out_gib_s: f64,
    /// Page-in bandwidth, GiB/s.
    pub page_in_gib_s: f64,
    /// Page-out bandwidth over that of one member.
    pub page_out_ratio: f64,
    /// Page-in bandwidth over that of one member.
    pub page_in_ratio: f64,
}

/// Block sizes of the raw limit's grid.
const RAW_GRID_BLOCKS: [usize; 3] = [1 << 20, 4 << 20, 16 << 20];
/// Queue depths of the raw limit's grid.
const RAW_GRID_DEPTHS: [usize; 2] = [8, 32];

/// One point of the raw limit's grid.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RawPoint {
    /// Request size, bytes.
    pub block_bytes: u64,
    /// Requests in flight.
    pub queue_depth: usize,
    /// Read rate, bytes per second.
    pub read_bytes_per_s: f64,
    /// Write rate, bytes per second.
    pub write_bytes_per_s: f64,
}

/// Runs the host experiment (the caller checked `samples` and `size`).
pub fn run(
    opts: &PagingOptions,
    progress: PagingProgress<'_>,
) -> Result<HostPagingReport, LabError> {
    let max_io = to_usize(opts.max_io, "--max-io too large")?;
    let size = to_usize(opts.size, "--size too large for this machine")?;

    // The store paths: the first also takes the baselines.
    let (paths, _cleanup) = store_paths(opts)?;
    let path = paths[0].clone();
    let store_names = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let capacity = opts.size.next_multiple_of(2 * MIB);
    let defaults = IoPoint {
        block_bytes: max_io,
        queue_depth: opts.queue_depth,
    };
    let (io_point, mut io_source) = io_point_of(opts, defaults)?;
    let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::new(HostMemoryConfig {
        release: opts.release,
        ..HostMemoryConfig::default()
    }));
    let mut spec = PoolSpec::new(capacity.next_multiple_of(2 * MIB))
        .io_point(io_point)
        .engine(opts.engine)
        .keep(true)
        // --force-store already said the benchmark may overwrite an existing store's contents.
        .force(opts.force_store)
        .checksums(!opts.no_checksums)
        .memory(Arc::clone(&device));
    if let Some(stripe) = opts.stripe_bytes {
        spec = spec.stripe_bytes(stripe);
    }
    let mut store = open_striped(&spec, &paths, capacity)?;
    if opts.io_auto {
        if opts.io_profile.is_some() {
            return Err(LabError::InvalidOption(
                "give --io-auto or --io-profile, not both".into(),
            ));
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
    if store.capacity_bytes() < opts.size {
        return Err(LabError::Unfit(format!(
            "store {store_names} holds {} but the benchmark needs {}",
            format_bytes(store.capacity_bytes()),
            format_bytes(opts.size)
        )));
    }
    let members = store.member_count();
    let stripe_bytes = store.stripe_bytes();
    let store = Arc::new(store);
    note!(progress, "pager I/O point: {io_source}");
    let direct = store.is_direct();
    let engine_name = store.engine().name();
    let align = store.alignment();
    let io_len = size.next_multiple_of(align);

    let (pool, space, buffer) =
        filled_buffer(&spec, Arc::clone(&device), &store, opts.size, 0x00DD_BA11)?;
    // The same pager with checksums off, over the same store (one buffer is out at a time, so the slot is shared),
    // to put a figure on what the checksums cost.
    let unchecked = if opts.no_checksums {
        None
    } else {
        let unchecked = spec.clone().checksums(false);
        Some(filled_buffer(
            &unchecked,
            device,
            &store,
            opts.size,
            0x0BAD_5EED,
        )?)
    };

    // Baseline resources: raw engine and its preallocated, prefaulted buffer (random bytes, also the write source).
    let raw_engine = raw_engine(32)?;
    let mut raw_buf = Mapping::anonymous(io_len)?;
    fill_random(raw_buf.as_mut_slice(), 0x5EED);
    let direct_flag = if direct { libc::O_DIRECT } else { 0 };
    if !direct {
        tracing::warn!("the store refuses O_DIRECT: the direct-I/O baselines run buffered too");
    }
    let rw_fd = baseline_fd(&path, direct_flag, members, io_len, opts.size)?;
    let cache = CacheDrop::choose(opts.cache_drop)?;

    note!(progress,
        "oversub bench paging: {} on {} ({}, {}), engine {engine_name}, max I/O {}, queue depth {}, cache drop {}",
        format_bytes(opts.size),
        store_names,
        store_kind(store.is_block_device(), members, stripe_bytes),
        if direct { "O_DIRECT" } else { "buffered" },
        format_bytes(opts.max_io),
        opts.queue_depth,
        cache.name()
    );
    if members > 1 {
        note!(
            progress,
            "the direct-I/O, demand-paging and raw-limit baselines run on the first member, {}",
            path.display()
        );
    }

    let steps = opts.samples as u64 * if unchecked.is_some() { 11 } else { 9 };
    progress(PagingEvent::Stage {
        name: "paging",
        steps,
    });
    let limit = RawLimit::measure(cache, &rw_fd, &mut raw_buf, io_len, &raw_engine, progress)?;
    let sampler = Sampler::new(progress, cache, &NAMES);
    let mut bench = Bench {
        opts,
        sampler,
        checked: (&space, buffer),
        unchecked: unchecked
            .as_ref()
            .map(|(_, space, buffer)| (space, *buffer)),
        store_fds: store.member_fds(),
        path: &path,
        direct_flag,
        rw_fd: &rw_fd,
        raw_buf: &mut raw_buf,
        io_len,
        size,
        limit: &limit,
    };
    for i in 0..opts.samples {
        bench.sample(i)?;
    }
    let Sampler { samples, cpu, .. } = bench.sampler;
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
        stripe_sweep(opts, progress, &spec, &paths, capacity, cache)?
    } else {
        Vec::new()
    };
    progress(PagingEvent::Finished);

    let results = summarize(&samples);
    let ratios = ratios(&results);
    let gib = opts.size as f64 / (1u64 << 30) as f64;
    let cpu_s_per_gib: BTreeMap<&'static str, f64> = cpu
        .iter()
        .filter_map(|(name, v)| median(v).map(|m| (*name, m / gib)))
        .collect();

    Ok(HostPagingReport {
        size_bytes: opts.size,
        samples: opts.samples,
        cache_drop: cache.name(),
        engine: engine_name,
        raw_engine: raw_engine.name(),
        direct_io: direct,
        store: store_names,
        max_io_bytes: opts.max_io,
        queue_depth: opts.queue_depth,
        results,
        samples_s: samples,
        ratios,
        pager_io,
        release: format!("{:?}", opts.release).to_lowercase(),
        io_point: io_source,
        cpu_s_per_gib,
        raw_grid: limit.grid,
        raw_best_read: limit.best_read,
        raw_best_write: limit.best_write,
        members,
        stripe_bytes,
        stripe_sweep,
    })
}

/// The run's store locations (`--store`, else a file in the temporary directory), with the guard that removes those
/// the run created.
fn store_paths(opts: &PagingOptions) -> Result<(Vec<PathBuf>, RemoveOnDrop), LabError> {
    let resolved: Vec<(PathBuf, bool)> = if opts.store.is_empty() {
        vec![resolve_store(None, opts.force_store)?]
    } else {
        opts.store
            .iter()
            .map(|p| resolve_store(Some(p), opts.force_store))
            .collect::<Result<_, _>>()?
    };
    let cleanup = RemoveOnDrop(
        resolved
            .iter()
            .filter(|(_, created)| *created)
            .map(|(p, _)| p.clone())
            .collect(),
    );
    Ok((resolved.into_iter().map(|(p, _)| p).collect(), cleanup))
}

/// The baselines' file descriptor on the first store location; on a striped store of block devices the baselines
/// use that first member alone, over the whole size, so it must hold it.
fn baseline_fd(
    path: &std::path::Path,
    direct_flag: libc::c_int,
    members: usize,
    io_len: usize,
    size: u64,
) -> Result<Fd, LabError> {
    let rw_fd = Fd::open(path, libc::O_RDWR | direct_flag)?;
    if members > 1 && is_block_device(path) {
        // SAFETY: plain syscall on an open fd.
        let end = unsafe { libc::lseek(rw_fd.0, 0, libc::SEEK_END) };
        if end < 0 || (end as u64) < io_len as u64 {
            return Err(LabError::Unfit(format!(
                "the baselines run on the first --store location, {}, which holds less than --size {}",
                path.display(),
                format_bytes(size)
            )));
        }
    }
    Ok(rw_fd)
}

/// A pool of `spec` over `store` and a buffer of `size` bytes in it, filled with random bytes from `seed`.
fn filled_buffer(
    spec: &PoolSpec,
    device: Arc<dyn DeviceMemory>,
    store: &Arc<SwapStore>,
    size: u64,
    seed: u64,
) -> Result<(oversub_core::Pool, AddressSpace, Buffer), LabError> {
    let pool = spec.open_on(device, Arc::clone(store))?;
    let space = pool.address_space();
    let buffer = space.alloc(size, BufferFlags::DEFAULT)?;
    let len = to_usize(size, "--size too large for this machine")?;
    let ptr = space.host_ptr(buffer)?;
    // SAFETY: the buffer is resident and `len` bytes long; nothing else accesses it now.
    fill_random(unsafe { std::slice::from_raw_parts_mut(ptr, len) }, seed);
    Ok((pool, space, buffer))
}

/// What the store is, in words: "file", "block device", or how many members striped by how much.
fn store_kind(block_device: bool, members: usize, stripe_bytes: u64) -> String {
    match (block_device, members) {
        (true, 1) => "block device".to_string(),
        (false, 1) => "file".to_string(),
        (true, n) => format!(
            "{n} block devices, striped by {}",
            format_bytes(stripe_bytes)
        ),
        (false, n) => format!("{n} members, striped by {}", format_bytes(stripe_bytes)),
    }
}

/// The I/O point the pager runs at: `--io-profile`'s best points, else the defaults given; with the line that says
/// where it came from.
fn io_point_of(
    opts: &PagingOptions,
    defaults: IoPoint,
) -> Result<(IoPointChoice, String), LabError> {
    let Some(profile) = &opts.io_profile else {
        let given = IoPointChoice::Given {
            read: defaults,
            write: defaults,
        };
        return Ok((given, "defaults (--max-io, --queue-depth)".to_string()));
    };
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
    let (read, write) = best_points(&grid).map_err(|e| {
        LabError::InvalidOption(format!("{}: [storage] points: {e}", profile.display()))
    })?;
    let source = format!(
        "{}: reads {} x {}, writes {} x {}",
        profile.display(),
        format_bytes(read.block_bytes as u64),
        read.queue_depth,
        format_bytes(write.block_bytes as u64),
        write.queue_depth
    );
    Ok((IoPointChoice::Profile { read, write }, source))
}

/// The store's limit: the best block size and queue depth of a small grid, one pass each way per point (cache
/// dropped), so "raw limit" is the best this store does rather than one fixed point; with the engines that reach
/// the best read and write.
struct RawLimit {
    grid: Vec<RawPoint>,
    best_read: RawPoint,
    best_write: RawPoint,
    read_engine: Arc<dyn IoEngine>,
    write_engine: Arc<dyn IoEngine>,
}

impl RawLimit {
    fn measure(
        cache: CacheDrop,
        rw_fd: &Fd,
        raw_buf: &mut Mapping,
        io_len: usize,
        fallback: &Arc<dyn IoEngine>,
        progress: PagingProgress<'_>,
    ) -> Result<RawLimit, LabError> {
        progress(PagingEvent::Phase(
            "raw limit: block size x queue depth grid",
        ));
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
                    raw_transfer_blocks(engine.as_ref(), rw_fd.0, raw_buf, direction, block)?;
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
                .unwrap_or_else(|| Arc::clone(fallback))
        };
        note!(
            progress,
            "raw limit: reads best at {} x {} in flight, writes at {} x {} (grid of {} points)",
            format_bytes(best_read.block_bytes),
            best_read.queue_depth,
            format_bytes(best_write.block_bytes),
            best_write.queue_depth,
            grid.len()
        );
        Ok(RawLimit {
            read_engine: engine_for(best_read.queue_depth),
            write_engine: engine_for(best_write.queue_depth),
            grid,
            best_read,
            best_write,
        })
    }
}

/// Everything one sample of the run measures, and the sampler that keeps the times.
struct Bench<'a, 'p> {
    opts: &'a PagingOptions,
    sampler: Sampler<'p>,
    /// The pager with the run's checksums, and (when they are on) the same pager without them.
    checked: (&'a AddressSpace, Buffer),
    unchecked: Option<(&'a AddressSpace, Buffer)>,
    store_fds: Vec<libc::c_int>,
    path: &'a PathBuf,
    direct_flag: libc::c_int,
    rw_fd: &'a Fd,
    /// The baselines' preallocated, prefaulted buffer (random bytes, also the write source).
    raw_buf: &'a mut Mapping,
    io_len: usize,
    size: usize,
    limit: &'a RawLimit,
}

impl Bench<'_, '_> {
    /// Sample `i`: the pager (sync, both checksum settings; async), direct I/O, demand paging, the raw limit. The
    /// page cache is emptied before every timed operation, writes included, so no sample inherits another's.
    fn sample(&mut self, i: usize) -> Result<(), LabError> {
        let of = self.opts.samples;
        // The pager with and without checksums take turns at going first: on this kind of machine the first round
        // trip of a sample was measured up to 2x slower than the second with checksums off in both, so a fixed
        // order would be charged to the checksums.
        let mut pairs = vec![(self.checked, ["oversub_page_out", "oversub_page_in"])];
        if let Some(unchecked) = self.unchecked {
            let pair = (unchecked, ["unchecked_page_out", "unchecked_page_in"]);
            if i % 2 == 0 {
                pairs.push(pair);
            } else {
                pairs.insert(0, pair);
            }
        }
        let fds = self.store_fds.clone();
        for ((space, buffer), [out_name, in_name]) in pairs {
            self.sampler.phase(i, of, out_name);
            self.sampler
                .measure(out_name, &fds, true, || Ok(space.page_out(buffer)?))?;
            self.sampler
                .measure(in_name, &fds, true, || Ok(space.page_in(buffer)?))?;
        }
        self.sampler.phase(i, of, "oversub async");
        self.async_round_trip(&fds)?;
        self.sampler.phase(i, of, "direct I/O");
        self.direct_io()?;
        self.sampler.phase(i, of, "demand paging");
        self.demand_paging()?;
        self.sampler.phase(i, of, "raw limit");
        let (fd, buf, limit) = (self.rw_fd.0, &mut *self.raw_buf, self.limit);
        self.sampler.measure("raw_limit_write", &[fd], false, || {
            let block = limit.best_write.block_bytes as usize;
            raw_transfer_blocks(
                limit.write_engine.as_ref(),
                fd,
                buf,
                Direction::Write,
                block,
            )
        })?;
        self.sampler.measure("raw_limit_read", &[fd], false, || {
            let block = limit.best_read.block_bytes as usize;
            raw_transfer_blocks(limit.read_engine.as_ref(), fd, buf, Direction::Read, block)
        })
    }

    /// The async calls: how long starting takes, then finishing once the work is complete.
    fn async_round_trip(&mut self, fds: &[libc::c_int]) -> Result<(), LabError> {
        let (space, buffer) = self.checked;
        self.sampler.measure_async(
            ["async_page_out_start", "async_page_out_finish"],
            fds,
            || space.page_out_async(buffer),
        )?;
        self.sampler
            .measure_async(["async_page_in_start", "async_page_in_finish"], fds, || {
                space.page_in_async(buffer)
            })
    }

    /// One `O_SYNC` write and one read of the whole buffer with plain direct I/O.
    fn direct_io(&mut self) -> Result<(), LabError> {
        let (io_len, raw) = (self.io_len, self.raw_buf.as_ptr());
        let fd = Fd::open(self.path, libc::O_WRONLY | libc::O_SYNC | self.direct_flag)?;
        self.sampler.measure("direct_write", &[fd.0], false, || {
            // SAFETY: raw_buf is io_len bytes long and borrowed for the call.
            unsafe { rw_all(fd.0, raw, io_len, true) }
        })?;
        let fd = Fd::open(self.path, libc::O_RDONLY | self.direct_flag)?;
        self.sampler.measure("direct_read", &[fd.0], false, || {
            let fresh = Mapping::anonymous(io_len)?;
            // SAFETY: fresh is io_len bytes long and owned here.
            unsafe { rw_all(fd.0, fresh.as_ptr(), io_len, false) }
        })
    }

    /// Faulting the file in through a mapping, less the same walk over memory already resident (footnote 12).
    fn demand_paging(&mut self) -> Result<(), LabError> {
        let fd = Fd::open(self.path, libc::O_RDONLY)?;
        self.sampler.cache.apply(fd.0)?;
        let t = Instant::now();
        let map = Mapping::file(fd.0, self.size)?;
        std::hint::black_box(map.walk_4k());
        let faulting = t.elapsed();
        drop(map);
        let t = Instant::now();
        std::hint::black_box(self.raw_buf.walk_4k());
        let walk = t.elapsed();
        self.sampler
            .push("demand_paging_read", faulting.saturating_sub(walk));
        self.sampler.step_done();
        Ok(())
    }
}

/// The store of `spec` over `paths` (see `StoreBuilder::build`): block devices whole, files and new files sized to
/// hold `capacity` in all.
fn open_striped(spec: &PoolSpec, paths: &[PathBuf], capacity: u64) -> Result<SwapStore, LabError> {
    let spec = spec.clone().stores(paths.iter());
    let spec = if paths.iter().all(|p| is_block_device(p)) {
        // Use the whole devices (the default rule for devices); the size check says when they are too small.
        spec
    } else {
        spec.store_capacity(capacity)
    };
    Ok(spec.build_store()?.0)
}

/// Page-out and page-in over the first 1, 2, ..., N members (each its own store and pool), median of
/// `--samples` round trips each.
fn stripe_sweep(
    opts: &PagingOptions,
    progress: PagingProgress<'_>,
    spec: &PoolSpec,
    paths: &[PathBuf],
    capacity: u64,
    cache: CacheDrop,
) -> Result<Vec<SweepRow>, LabError> {
    let size = to_usize(opts.size, "--size too large for this machine")?;
    progress(PagingEvent::Stage {
        name: "stripe sweep",
        steps: (paths.len() * opts.samples) as u64,
    });
    let mut rows: Vec<SweepRow> = Vec::new();
    for k in 1..=paths.len() {
        progress(PagingEvent::Phase(&format!(
            "stripe sweep: {k} of {} members",
            paths.len()
        )));
        // The members are this run's own files (or ones --force-store allowed), and the baselines wrote over the
        // first one's header: open them whatever they hold.
        let store = open_striped(&spec.clone().force(true), &paths[..k], capacity)?;
        if store.capacity_bytes() < opts.size {
            note!(
                progress,
                "stripe sweep: the first {k} members hold {}, less than --size; row left out",
                format_bytes(store.capacity_bytes())
            );
            for _ in 0..opts.samples {
                progress(PagingEvent::StepDone);
            }
            continue;
        }
        let fds = store.member_fds();
        let device: Arc<dyn DeviceMemory> = Arc::new(HostMemory::new(HostMemoryConfig {
            release: opts.release,
            ..HostMemoryConfig::default()
        }));
        let pool = spec.open_on(device, Arc::new(store))?;
        let space = pool.address_space();
        let buffer = space.alloc(opts.size, BufferFlags::DEFAULT)?;
        {
            let ptr = space.host_ptr(buffer)?;
            // SAFETY: the buffer is resident and `size` bytes long; nothing else accesses it now.
            fill_random(
                unsafe { std::slice::from_raw_parts_mut(ptr, size) },
                0x5717_1BE5 + k as u64,
            );
        }
        let (mut outs, mut ins) = (Vec::new(), Vec::new());
        for _ in 0..opts.samples {
            cache.apply_all(&fds)?;
            let t = Instant::now();
            space.page_out(buffer)?;
            outs.push(t.elapsed().as_secs_f64());
            cache.apply_all(&fds)?;
            let t = Instant::now();
            space.page_in(buffer)?;
            ins.push(t.elapsed().as_secs_f64());
            progress(PagingEvent::StepDone);
        }
        space.free(buffer)?;
        let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
        let (out_s, in_s) = (med(&outs), med(&ins));
        let gib = opts.size as f64 / (1u64 << 30) as f64;
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
    Ok(rows)
}

fn median_of(results: &BTreeMap<&'static str, Summary>, name: &str) -> f64 {
    results.get(name).map_or(f64::NAN, |s| s.median_s)
}

fn mean(results: &BTreeMap<&'static str, Summary>, name: &str) -> f64 {
    results.get(name).map_or(f64::NAN, |s| s.mean_s)
}

fn ratios(r: &BTreeMap<&'static str, Summary>) -> Vec<Ratio> {
    let page_in = median_of(r, "oversub_page_in");
    let page_out = median_of(r, "oversub_page_out");
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
            median_of(r, "direct_read") / page_in,
            1.0,
            Some(1.19),
        ),
        at_least(
            "demand_paging_read / oversub_page_in (median)",
            median_of(r, "demand_paging_read") / page_in,
            3.0,
            Some(3.8),
        ),
        at_least(
            "raw_limit_read / oversub_page_in (median)",
            median_of(r, "raw_limit_read") / page_in,
            0.9,
            None,
        ),
        at_least(
            "direct_write / oversub_page_out (median)",
            median_of(r, "direct_write") / page_out,
            1.0,
            Some(1.02),
        ),
        at_least(
            "raw_limit_write / oversub_page_out (median)",
            median_of(r, "raw_limit_write") / page_out,
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
            page_in / median_of(r, "unchecked_page_in") - 1.0,
            0.03,
            None,
        ));
        ratios.push(at_most(
            "checksum cost: oversub_page_out / unchecked_page_out - 1 (median)",
            page_out / median_of(r, "unchecked_page_out") - 1.0,
            0.03,
            None,
        ));
    }
    ratios
}
