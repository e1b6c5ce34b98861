//! The paging experiment on a discrete GPU (`oversub bench paging --device cuda`).
//!
//! Each sample times, in one run so that every ratio compares like with like:
//!
//! - `oversub_page_in` / `oversub_page_out`: the pager with the cuda backend paging one buffer to and from the store
//!   through its staging ring (or cuFile, where GPUDirect Storage works), synchronous calls, the page cache dropped
//!   before each;
//! - `oversub_host_tier_page_in` / `oversub_host_tier_page_out`: a second pool whose pinned host tier holds the
//!   buffer, so the pager moves it between device and host RAM only;
//! - `async_page_{in,out}_{start,finish}`: the async calls on the store path, start and finish timed apart with the
//!   I/O left to complete in between, as on the host backend;
//! - `raw_limit_read` / `raw_limit_write`: the store's raw limit (io_uring, queue depth 32, 1 MiB requests into
//!   prefaulted memory); the write puts back the bytes the read got, so the pager's copy on the store survives;
//! - `h2d_pinned` / `d2h_pinned`: one `cuMemcpyHtoD` / `cuMemcpyDtoH` of the whole size between pinned host memory
//!   and VMM-mapped device memory, synchronised: the bus limit;
//! - `naive_read_copy`: one `read()` of the store file (`O_DIRECT` when the store is direct) into pageable memory,
//!   then a host-to-device copy from it, timed together;
//! - `unified_memory`: managed memory holding the data on the host, then a kernel with one thread per 4 KiB page that
//!   reads a byte of its page, so the driver migrates every page on demand; launch to synchronisation. It is never
//!   allocated past 80% of the device's free memory (oversubscribing managed memory can hang a GPU), so there is no
//!   oversubscription here: a larger size skips it with a reason;
//! - `keep_address_page_out` / `keep_address_page_in`: what inference servers do by hand with the driver: device to
//!   pinned host with one copy, then `cuMemUnmap` + `cuMemRelease`; and back: `cuMemCreate` + `cuMemMap` +
//!   `cuMemSetAccess` at the same address and one copy.
//!
//! After every page-in the pager's buffers are checked: bytes at the start, middle and end against the random fill,
//! and the device address against the one the buffer was given. One buffer of the size is on the device at a time
//! (the pager's, the baselines' or the managed one), so the run needs the size plus a margin of free device memory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use oversub_accel::cuda::loading::catch_bindings_panic;
use oversub_accel::cuda::managed::{UnifiedTouch, TOUCH_STRIDE_BYTES};
use oversub_accel::cuda::{
    AddressRange, CudaDriver, CudaMemory, CudaMemoryConfig, Mapping as VmmMapping, PhysicalMemory,
    StreamHandle,
};
use oversub_accel::{DeviceMemory, DevicePtr};
use oversub_base::format_bytes;
use oversub_core::{
    AddressSpace, Buffer, BufferFlags, HostTierConfig, IoPointChoice, Pool, PoolSpec, StagingConfig,
};
use oversub_io::tuning::IoPoint;
use oversub_io::{Direction, IoEngine, SwapStore};
use oversub_report::Summary;
use serde::Serialize;

use super::sampler::Sampler;
use super::{summarize, to_usize, PagerIo, PagingEvent, PagingOptions, PagingProgress, MIB};
use crate::harness::cache::CacheDrop;
use crate::harness::direct::{is_block_device, resolve_store, rw_all, Fd, RemoveOnDrop};
use crate::harness::memory::{fill_random, Mapping};
use crate::harness::raw_io::{raw_engine, raw_transfer};
use crate::LabError;

/// Seed of the random fill of the paged buffers.
const SEED: u64 = 0x00DD_BA11;
/// Bytes compared at each of the start, middle and end of a buffer after a page-in.
const CHECK_BYTES: usize = 4096;
/// Free device memory the run wants beyond one buffer of the size (contexts, kernels, the driver's own).
const DEVICE_MARGIN_BYTES: u64 = 512 * MIB;
/// Host memory the run wants beyond its buffers.
const HOST_MARGIN_BYTES: u64 = 1024 * MIB;

/// The measurement names, in report order (also the JSON keys). The first [`MAIN_PLOT`] go to the main box plot,
/// the async calls to the second.
pub const NAMES: [&str; 16] = [
    "oversub_page_in",
    "oversub_page_out",
    "oversub_host_tier_page_in",
    "oversub_host_tier_page_out",
    "raw_limit_read",
    "raw_limit_write",
    "h2d_pinned",
    "d2h_pinned",
    "naive_read_copy",
    "unified_memory",
    "keep_address_page_in",
    "keep_address_page_out",
    "async_page_in_start",
    "async_page_in_finish",
    "async_page_out_start",
    "async_page_out_finish",
];
/// How many of [`NAMES`] the main plot shows.
pub const MAIN_PLOT: usize = 12;

/// A ratio of rates, against its target where it has one.
#[derive(Debug, Serialize)]
pub struct CudaRatio {
    pub name: &'static str,
    pub value: f64,
    /// `None` for ratios shown for information.
    pub target: Option<&'static str>,
    pub met: Option<bool>,
}

/// The staging ring the store pool used.
#[derive(Debug, Serialize)]
pub struct StagingReport {
    /// The ring's chunk as the pager uses it (rounded to the store's alignment); `None` when it does not stage.
    pub chunk_bytes: Option<u64>,
    pub chunks: usize,
    pub pinned: bool,
}

/// Whether and how the unified-memory baseline ran.
#[derive(Debug, Serialize)]
pub struct UnifiedReport {
    pub measured: bool,
    /// Why it was not measured (or stopped early).
    pub skipped: Option<String>,
    pub touch_stride_bytes: u64,
    pub concurrent_managed_access: Option<bool>,
}

/// The report of a GPU run (the JSON of `--json`).
#[derive(Debug, Serialize)]
pub struct CudaPagingReport {
    pub device: &'static str,
    pub device_name: String,
    pub gpu_ordinal: i32,
    pub driver_version: i32,
    pub driver_version_text: String,
    pub device_total_bytes: u64,
    pub device_free_bytes: u64,
    pub vmm_granularity_bytes: usize,
    pub size_bytes: u64,
    pub samples: usize,
    pub cache_drop: &'static str,
    pub engine: &'static str,
    pub raw_engine: &'static str,
    pub direct_io: bool,
    pub store: String,
    pub max_io_bytes: u64,
    pub queue_depth: usize,
    /// How the store pool moves buffers: "staging" or "cufile".
    pub transfer_path: &'static str,
    pub staging: StagingReport,
    pub host_tier_bytes: u64,
    pub unified_memory: UnifiedReport,
    pub results: BTreeMap<&'static str, Summary>,
    /// size / median, in GB/s (10^9 bytes), for every measurement that moves the whole buffer.
    pub rates_gb_per_s: BTreeMap<&'static str, f64>,
    pub ratios: Vec<CudaRatio>,
    pub pager_io: PagerIo,
    /// Every sample in seconds, for the plots (not in the JSON, as before).
    #[serde(skip)]
    pub samples_s: BTreeMap<&'static str, Vec<f64>>,
}

/// Runs the experiment on a GPU (the caller checked `samples` and `size`).
pub fn run(
    opts: &PagingOptions,
    progress: PagingProgress<'_>,
) -> Result<CudaPagingReport, LabError> {
    let (size, max_io) = check_options(opts)?;
    // The GPU first: without a driver this is where the run ends, before any file is made.
    let gpu = Gpu::open(opts)?;
    let unified_skip = check_host_memory(opts, gpu.size_g)?;

    // The store, as on the host backend.
    let (path, created) = resolve_store(store_location(opts)?, opts.force_store)?;
    let _cleanup = RemoveOnDrop(created.then(|| path.clone()).into_iter().collect());
    let capacity = opts.size.next_multiple_of(2 * MIB);
    let store = Arc::new(open_store(opts, &path, capacity, max_io)?);
    let direct = store.is_direct();
    let engine_name = store.engine().name();
    let io_len = size.next_multiple_of(store.alignment());
    let direct_flag = if direct { libc::O_DIRECT } else { 0 };
    if !direct {
        tracing::warn!("the store refuses O_DIRECT: the store baselines run buffered too");
    }
    let cache = CacheDrop::choose(opts.cache_drop)?;
    let pools = Pools::open(opts, &gpu, &store, io_len)?;
    pools.describe(opts, progress, &gpu, &store, &path, cache);

    // The data: a random fill, written into both pools' buffers and a pinned copy; spot checks remember pieces.
    let mut raw_buf = Mapping::anonymous(io_len)?;
    fill_random(raw_buf.as_mut_slice(), SEED);
    let fill: &[u8] = &raw_buf.as_mut_slice()[..size];
    let checks = SpotChecks::new(fill);
    let store_fd = store.fd();
    let space = pools.pool.address_space();
    let buffer = space.alloc(opts.size, BufferFlags::DEFAULT)?;
    space.write(buffer, 0, fill)?;
    let addr = space.info(buffer)?.addr;
    checks.verify_space(
        &space,
        buffer,
        addr,
        "the store pool's buffer after writing it",
    )?;
    cache.apply(store_fd)?;
    space.page_out(buffer)?;
    let tier_space = pools.tier_pool.address_space();
    let tier_buffer = tier_space.alloc(opts.size, BufferFlags::DEFAULT)?;
    tier_space.write(tier_buffer, 0, fill)?;
    let tier_addr = tier_space.info(tier_buffer)?.addr;
    tier_space.page_out(tier_buffer)?;
    check_in_tier(&tier_space, tier_buffer)?;
    let mut pinned = gpu.memory.alloc_host(size, true)?;
    pinned.as_mut_slice().copy_from_slice(fill);
    let mut baselines =
        DeviceBaselines::new(gpu.memory.driver(), gpu.size_g as usize, gpu.granularity)?;

    // Unified memory, set up while nothing else of ours is on the device.
    let (unified_report, unified) = unified_setup(opts.gpu, size, unified_skip);
    if let Some(why) = &unified_report.skipped {
        note!(progress, "unified_memory skipped: {why}");
    }

    let raw_engine = raw_engine(32)?;
    let rw_fd = Fd::open(&path, libc::O_RDWR | direct_flag)?;

    progress(PagingEvent::Stage {
        name: "paging cuda",
        steps: opts.samples as u64 * 14,
    });
    let mut bench = Bench {
        sampler: Sampler::new(progress, cache, &NAMES),
        checks: &checks,
        store_fd,
        store_pager: (&space, buffer, addr),
        tier_pager: (&tier_space, tier_buffer, tier_addr),
        path: &path,
        direct_flag,
        rw_fd: &rw_fd,
        raw_engine: raw_engine.as_ref(),
        raw_buf: &mut raw_buf,
        io_len,
        size,
        pinned: pinned.as_mut_slice(),
        baselines: &mut baselines,
        unified,
        unified_report,
    };
    for i in 0..opts.samples {
        bench.sample(i, opts.samples)?;
    }
    progress(PagingEvent::Finished);
    let Bench {
        sampler,
        mut unified_report,
        unified,
        ..
    } = bench;
    let samples = sampler.samples;
    unified_report.measured = samples.get("unified_memory").is_some_and(|v| !v.is_empty());
    drop(unified);

    let results = summarize(&samples);
    let rates: BTreeMap<&'static str, f64> = results
        .iter()
        .filter(|(name, _)| !name.starts_with("async"))
        .map(|(name, s)| (*name, rate_gb_s(opts.size, s.median_s)))
        .collect();
    let ratios = ratios(&rates, &results);
    let pager_io = PagerIo::from(store.engine().counters());
    let info = gpu.memory.info();
    let report = CudaPagingReport {
        device: "cuda",
        device_name: info.name.clone(),
        gpu_ordinal: info.ordinal,
        driver_version: info.driver_version,
        driver_version_text: driver_version_text(info.driver_version),
        device_total_bytes: gpu.total,
        device_free_bytes: gpu.free,
        vmm_granularity_bytes: gpu.granularity,
        size_bytes: opts.size,
        samples: opts.samples,
        cache_drop: cache.name(),
        engine: engine_name,
        raw_engine: raw_engine.name(),
        direct_io: direct,
        store: path.display().to_string(),
        max_io_bytes: opts.max_io,
        queue_depth: opts.queue_depth,
        transfer_path: pools.pool.transfer_path(),
        staging: StagingReport {
            chunk_bytes: pools.pool.staging_chunk_bytes(),
            chunks: opts.staging_chunks,
            pinned: !opts.pageable_staging,
        },
        host_tier_bytes: pools.capacity,
        unified_memory: unified_report,
        results,
        rates_gb_per_s: rates,
        ratios,
        pager_io,
        samples_s: samples,
    };
    drop(baselines);
    drop(pinned);
    space.free(buffer)?;
    tier_space.free(tier_buffer)?;
    Ok(report)
}

/// Refuses staging options the pager cannot use; the size and the largest request as `usize`.
fn check_options(opts: &PagingOptions) -> Result<(usize, usize), LabError> {
    if opts.staging_chunks == 0 {
        return Err(LabError::InvalidOption(
            "--staging-chunks must be at least 1".into(),
        ));
    }
    if opts.staging_chunk == 0 {
        return Err(LabError::InvalidOption(
            "--staging-chunk must be at least one byte".into(),
        ));
    }
    let size = to_usize(opts.size, "--size too large for this machine")?;
    let max_io = to_usize(opts.max_io, "--max-io too large")?;
    Ok((size, max_io))
}

/// The GPU of the run and what it had free when the run began.
struct Gpu {
    memory: Arc<CudaMemory>,
    granularity: usize,
    /// The size rounded up to the device's granularity: what one buffer of the size takes there.
    size_g: u64,
    free: u64,
    total: u64,
}

impl Gpu {
    /// Opens device `--gpu` and refuses a size that does not fit its free memory.
    fn open(opts: &PagingOptions) -> Result<Gpu, LabError> {
        let memory = Arc::new(CudaMemory::new(CudaMemoryConfig {
            ordinal: opts.gpu,
            cufile: !opts.no_cufile,
        })?);
        let info = memory.info().clone();
        let granularity = memory.granularity();
        let size_g = opts.size.next_multiple_of(granularity as u64);
        let (free, total) = memory
            .memory_info()?
            .unwrap_or((info.total_bytes, info.total_bytes));
        if free < size_g + DEVICE_MARGIN_BYTES {
            return Err(LabError::Unfit(format!(
                "--size {} needs about {} of free device memory (one buffer of the size at a time, plus a margin), \
                 but device {} ({}) has {} free of {}",
                format_bytes(opts.size),
                format_bytes(size_g + DEVICE_MARGIN_BYTES),
                info.ordinal,
                info.name,
                format_bytes(free),
                format_bytes(total)
            )));
        }
        Ok(Gpu {
            memory,
            granularity,
            size_g,
            free,
            total,
        })
    }
}

/// Refuses a size the host memory cannot hold; why the unified-memory baseline is skipped, if it is.
fn check_host_memory(opts: &PagingOptions, size_g: u64) -> Result<Option<String>, LabError> {
    let staging_chunk = opts.staging_chunk.next_multiple_of(4096);
    let staging_bytes = staging_chunk * (opts.staging_chunks as u64 + 1);
    let host_need = 3 * size_g + staging_bytes + HOST_MARGIN_BYTES;
    let mut unified_skip = opts.skip_unified.then(|| "--skip-unified".to_string());
    match mem_available() {
        Some(avail) if avail < host_need => {
            return Err(LabError::Unfit(format!(
                "--size {} needs about {} of host memory (a pinned host tier of the size, a pinned copy buffer of the \
                 size, a plain buffer of the size for the store baselines, the staging ring and a margin), but \
                 MemAvailable is {}",
                format_bytes(opts.size),
                format_bytes(host_need),
                format_bytes(avail)
            )));
        }
        Some(avail) if unified_skip.is_none() && avail < host_need + size_g => {
            unified_skip = Some(format!(
                "the managed buffer would need {} more host memory than the {} available",
                format_bytes(host_need + size_g - avail),
                format_bytes(avail)
            ));
        }
        Some(_) => {}
        None => {
            tracing::warn!("cannot read MemAvailable from /proc/meminfo; host memory not checked")
        }
    }
    Ok(unified_skip)
}

/// The one `--store` location the run takes, if any.
fn store_location(opts: &PagingOptions) -> Result<Option<&Path>, LabError> {
    match opts.store.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.as_path())),
        _ => Err(LabError::InvalidOption(
            "--device cuda takes one --store location (striping is measured with --device host)"
                .into(),
        )),
    }
}

/// Two pools on the same device and store: one pages to the store, the other to its host tier.
struct Pools {
    pool: Pool,
    tier_pool: Pool,
    /// Each pool's capacity, and the host tier's.
    capacity: u64,
}

impl Pools {
    fn open(
        opts: &PagingOptions,
        gpu: &Gpu,
        store: &Arc<SwapStore>,
        io_len: usize,
    ) -> Result<Pools, LabError> {
        let device: Arc<dyn DeviceMemory> = Arc::clone(&gpu.memory) as Arc<dyn DeviceMemory>;
        let capacity = (io_len as u64).next_multiple_of(gpu.granularity as u64);
        let staging = StagingConfig {
            chunk_bytes: opts.staging_chunk,
            chunks: opts.staging_chunks,
            pinned: !opts.pageable_staging,
            direct_storage: true,
        };
        let pool = PoolSpec::new(capacity)
            .checksums(!opts.no_checksums)
            .staging(staging)
            .open_on(Arc::clone(&device), Arc::clone(store))?;
        let tier_pool = PoolSpec::new(capacity)
            .staging(StagingConfig {
                chunks: 1,
                direct_storage: false,
                ..staging
            })
            .host_tier(HostTierConfig {
                capacity_bytes: capacity,
                pinned: true,
            })
            .open_on(Arc::clone(&device), Arc::clone(store))?;
        Ok(Pools {
            pool,
            tier_pool,
            capacity,
        })
    }

    /// Says the set-up: device, store, engine, cache drop, and how the pools move their buffers.
    fn describe(
        &self,
        opts: &PagingOptions,
        progress: PagingProgress<'_>,
        gpu: &Gpu,
        store: &SwapStore,
        path: &Path,
        cache: CacheDrop,
    ) {
        let info = gpu.memory.info();
        note!(progress,
            "oversub bench paging --device cuda: {} on {} ({}, driver {}), store {} ({}, {}), engine {}, \
             max I/O {}, queue depth {}, cache drop {}",
            format_bytes(opts.size),
            info.name,
            format_bytes(gpu.total),
            driver_version_text(info.driver_version),
            path.display(),
            if store.is_block_device() { "block device" } else { "file" },
            if store.is_direct() { "O_DIRECT" } else { "buffered" },
            store.engine().name(),
            format_bytes(opts.max_io),
            opts.queue_depth,
            cache.name()
        );
        let staging_chunk = opts.staging_chunk.next_multiple_of(4096);
        let ring = format!(
            "{} × {} {}",
            opts.staging_chunks,
            format_bytes(self.pool.staging_chunk_bytes().unwrap_or(staging_chunk)),
            if opts.pageable_staging {
                "pageable"
            } else {
                "pinned"
            }
        );
        let transfer_path = self.pool.transfer_path();
        note!(
            progress,
            "transfer path: {transfer_path} ({}); host tier: {} pinned",
            if transfer_path == "cufile" {
                "GPUDirect Storage".to_string()
            } else {
                format!("staging ring of {ring} buffers")
            },
            format_bytes(self.capacity)
        );
    }
}

/// The unified-memory baseline's report so far, and the baseline unless it is skipped.
fn unified_setup(
    ordinal: i32,
    size: usize,
    skip: Option<String>,
) -> (UnifiedReport, Option<UnifiedTouch>) {
    let mut report = UnifiedReport {
        measured: false,
        skipped: None,
        touch_stride_bytes: TOUCH_STRIDE_BYTES,
        concurrent_managed_access: None,
    };
    let unified = match skip {
        Some(why) => {
            report.skipped = Some(why);
            None
        }
        None => match unified_touch(ordinal, size) {
            Ok(u) => {
                report.concurrent_managed_access = Some(u.concurrent());
                Some(u)
            }
            Err(why) => {
                report.skipped = Some(why);
                None
            }
        },
    };
    (report, unified)
}

/// Everything one sample of the run measures, and the sampler that keeps the times.
struct Bench<'a, 'p> {
    sampler: Sampler<'p>,
    checks: &'a SpotChecks,
    /// The store pool's file, whose page cache is dropped before each of its steps.
    store_fd: libc::c_int,
    /// Each pool's buffer and the device address it must keep.
    store_pager: (&'a AddressSpace, Buffer, DevicePtr),
    tier_pager: (&'a AddressSpace, Buffer, DevicePtr),
    path: &'a Path,
    direct_flag: libc::c_int,
    rw_fd: &'a Fd,
    raw_engine: &'a dyn IoEngine,
    /// The store baselines' buffer (the random fill, `io_len` bytes).
    raw_buf: &'a mut Mapping,
    io_len: usize,
    size: usize,
    /// The pinned copy of the fill.
    pinned: &'a mut [u8],
    baselines: &'a mut DeviceBaselines,
    unified: Option<UnifiedTouch>,
    unified_report: UnifiedReport,
}

impl Bench<'_, '_> {
    /// Sample `i` of `of`: 14 steps.
    fn sample(&mut self, i: usize, of: usize) -> Result<(), LabError> {
        self.sampler.phase(i, of, "oversub store");
        self.store_round_trip()?;
        self.sampler.phase(i, of, "oversub async");
        self.async_round_trip()?;
        self.sampler.phase(i, of, "oversub host tier");
        self.host_tier_round_trip()?;
        self.sampler.phase(i, of, "raw limit");
        self.raw_limit()?;
        self.sampler.phase(i, of, "keep address, bus, naive");
        self.keep_address_and_bus()?;
        self.sampler.phase(i, of, "unified memory");
        self.unified_memory();
        Ok(())
    }

    /// The pager through the store (the buffer starts and ends each sample paged out).
    fn store_round_trip(&mut self) -> Result<(), LabError> {
        let (space, buffer, addr) = self.store_pager;
        let fds = [self.store_fd];
        self.sampler.measure(
            "oversub_page_in",
            &fds,
            false,
            || Ok(space.page_in(buffer)?),
        )?;
        self.checks
            .verify_space(space, buffer, addr, "after oversub_page_in")?;
        self.sampler.measure("oversub_page_out", &fds, false, || {
            Ok(space.page_out(buffer)?)
        })
    }

    /// The async calls on the store path, start and finish timed apart.
    fn async_round_trip(&mut self) -> Result<(), LabError> {
        let (space, buffer, addr) = self.store_pager;
        let fds = [self.store_fd];
        self.sampler.measure_async(
            ["async_page_in_start", "async_page_in_finish"],
            &fds,
            || space.page_in_async(buffer),
        )?;
        self.checks
            .verify_space(space, buffer, addr, "after the async page-in")?;
        self.sampler.measure_async(
            ["async_page_out_start", "async_page_out_finish"],
            &fds,
            || space.page_out_async(buffer),
        )
    }

    /// The pager through the host tier.
    fn host_tier_round_trip(&mut self) -> Result<(), LabError> {
        let (space, buffer, addr) = self.tier_pager;
        self.sampler
            .time("oversub_host_tier_page_in", || Ok(space.page_in(buffer)?))?;
        self.checks
            .verify_space(space, buffer, addr, "after oversub_host_tier_page_in")?;
        self.sampler
            .time("oversub_host_tier_page_out", || Ok(space.page_out(buffer)?))?;
        check_in_tier(space, buffer)
    }

    /// The store's raw limit: read, then write the same bytes back (the pager's copy lives in this file).
    fn raw_limit(&mut self) -> Result<(), LabError> {
        let (fd, engine, buf) = (self.rw_fd.0, self.raw_engine, &mut *self.raw_buf);
        self.sampler.measure("raw_limit_read", &[fd], false, || {
            raw_transfer(engine, fd, buf, Direction::Read)
        })?;
        self.sampler.measure("raw_limit_write", &[fd], false, || {
            raw_transfer(engine, fd, buf, Direction::Write)
        })
    }

    /// Keep the address by hand, with the bus and naive baselines in between on the same device memory.
    fn keep_address_and_bus(&mut self) -> Result<(), LabError> {
        let baselines = &mut *self.baselines;
        let pinned = &mut *self.pinned;
        self.sampler.time("keep_address_page_in", || {
            baselines.map()?;
            baselines.htod(pinned)
        })?;
        baselines.verify(self.checks)?;
        let fd = Fd::open(self.path, libc::O_RDONLY | self.direct_flag)?;
        let (io_len, size, raw) = (self.io_len, self.size, &mut *self.raw_buf);
        self.sampler
            .measure("naive_read_copy", &[fd.0], false, || {
                // SAFETY: raw_buf is io_len bytes long and borrowed for the call.
                unsafe { rw_all(fd.0, raw.as_ptr(), io_len, false) }?;
                baselines.htod(&raw.as_mut_slice()[..size])
            })?;
        drop(fd);
        self.sampler.time("h2d_pinned", || baselines.htod(pinned))?;
        self.sampler.time("d2h_pinned", || baselines.dtoh(pinned))?;
        self.sampler.time("keep_address_page_out", || {
            baselines.dtoh(pinned)?;
            baselines.unmap()
        })
    }

    /// Unified memory, alone on the device; a failure of the bindings stops this baseline only.
    fn unified_memory(&mut self) {
        if let Some(u) = &self.unified {
            match catch_bindings_panic(|| u.sample(), bindings_failed) {
                Ok(d) => self.sampler.push("unified_memory", d),
                Err(why) => {
                    (self.sampler.progress)(PagingEvent::Note(&format!(
                        "unified_memory stopped: {why}"
                    )));
                    self.unified_report.skipped = Some(why);
                    self.unified = None;
                }
            }
        }
        self.sampler.step_done();
    }
}

/// The unified-memory baseline, or why it cannot run.
fn unified_touch(ordinal: i32, size: usize) -> Result<UnifiedTouch, String> {
    catch_bindings_panic(
        || UnifiedTouch::new(ordinal, size, |bytes| fill_random(bytes, SEED)),
        bindings_failed,
    )
}

/// Why a run of cudarc's bindings panicked.
fn bindings_failed(msg: String) -> String {
    format!("the CUDA bindings failed: {msg}")
}

/// Opens or creates the store as the host backend does.
fn open_store(
    opts: &PagingOptions,
    path: &Path,
    capacity: u64,
    max_io: usize,
) -> Result<SwapStore, LabError> {
    let point = IoPoint {
        block_bytes: max_io,
        queue_depth: opts.queue_depth,
    };
    // A new path is created, an existing file opened (both sized to `capacity`), a block device used whole.
    let spec = PoolSpec::new(capacity)
        .stores([path])
        .io_point(IoPointChoice::Given {
            read: point,
            write: point,
        })
        .engine(opts.engine)
        .keep(true)
        // --force-store already said the benchmark may overwrite an existing store's contents.
        .force(opts.force_store);
    let spec = if is_block_device(path) {
        spec
    } else {
        spec.store_capacity(capacity)
    };
    let store = spec.build_store()?.0;
    if store.capacity_bytes() < opts.size {
        return Err(LabError::Unfit(format!(
            "store {} holds {} but the benchmark needs {}",
            path.display(),
            format_bytes(store.capacity_bytes()),
            format_bytes(opts.size)
        )));
    }
    Ok(store)
}

/// Fails loudly when the host-tier pool's buffer did not go to its tier (it would be measuring the store).
fn check_in_tier(space: &AddressSpace, buffer: Buffer) -> Result<(), LabError> {
    if space.info(buffer)?.in_host_tier {
        Ok(())
    } else {
        Err(LabError::CheckFailed(
            "the host-tier pool paged its buffer out to the store instead of its host tier".into(),
        ))
    }
}

/// MemAvailable of /proc/meminfo in bytes.
fn mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let rest = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let mut words = rest.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    Some(match words.next() {
        Some("kB") | None => n.saturating_mul(1024),
        Some(_) => n,
    })
}

fn driver_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// GB/s (10^9 bytes per second) of `size` bytes in `s` seconds; NaN when `s` is not a positive time.
fn rate_gb_s(size: u64, s: f64) -> f64 {
    if s.is_finite() && s > 0.0 {
        size as f64 / s / 1e9
    } else {
        f64::NAN
    }
}

/// Where the spot checks look: `CHECK_BYTES` (or the whole buffer, if smaller) at the start, middle and end.
fn spot_ranges(len: usize) -> Vec<(usize, usize)> {
    let n = CHECK_BYTES.min(len);
    let mut ranges = vec![(0, n), ((len - n) / 2, n), (len - n, n)];
    ranges.dedup();
    ranges
}

/// Pieces of the random fill, to compare a buffer against after a page-in.
#[derive(Debug)]
pub struct SpotChecks {
    spots: Vec<(usize, Vec<u8>)>,
}

impl SpotChecks {
    fn new(fill: &[u8]) -> SpotChecks {
        SpotChecks {
            spots: spot_ranges(fill.len())
                .into_iter()
                .map(|(off, n)| (off, fill[off..off + n].to_vec()))
                .collect(),
        }
    }

    /// Compares `read(offset, bytes)` with the fill at every spot.
    fn compare(
        &self,
        what: &str,
        mut read: impl FnMut(usize, &mut [u8]) -> Result<(), LabError>,
    ) -> Result<(), LabError> {
        for (off, want) in &self.spots {
            let mut got = vec![0u8; want.len()];
            read(*off, &mut got)?;
            if &got != want {
                let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
                return Err(LabError::Unfit(format!(
                    "{what}: {differ} of the {} bytes at offset {off} differ from the data written",
                    want.len()
                )));
            }
        }
        Ok(())
    }

    /// Checks a pager buffer's bytes and that its device address is still `addr`.
    fn verify_space(
        &self,
        space: &AddressSpace,
        buffer: Buffer,
        addr: DevicePtr,
        what: &str,
    ) -> Result<(), LabError> {
        let now = space.info(buffer)?.addr;
        if now != addr {
            return Err(LabError::CheckFailed(format!(
                "{what}: the buffer's device address moved from {addr} to {now}"
            )));
        }
        self.compare(what, |off, out| Ok(space.read(buffer, off as u64, out)?))
    }
}

/// The device memory of the bus, naive and keep-the-address baselines: one address range, mapped and unmapped
/// through the driver, and a stream for its copies (each waited for before the call returns).
#[derive(Debug)]
pub struct DeviceBaselines {
    // Dropped in this order: the mapping (unmap, release), then the addresses.
    mapping: Option<VmmMapping>,
    range: AddressRange,
    driver: Arc<dyn CudaDriver>,
    stream: StreamHandle,
    len: usize,
}

impl DeviceBaselines {
    fn new(
        driver: &Arc<dyn CudaDriver>,
        len: usize,
        granularity: usize,
    ) -> Result<DeviceBaselines, LabError> {
        let range = AddressRange::reserve(driver, len, granularity)?;
        let stream = driver.stream_create(0)?;
        Ok(DeviceBaselines {
            mapping: None,
            range,
            driver: Arc::clone(driver),
            stream,
            len,
        })
    }

    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` at the range's address.
    fn map(&mut self) -> Result<(), LabError> {
        if self.mapping.is_some() {
            return Err(LabError::CheckFailed(
                "the baselines' device memory is already mapped".into(),
            ));
        }
        let memory = PhysicalMemory::create(&self.driver, self.len)?;
        // SAFETY: the range is ours, reserved with this length, and nothing is mapped in it (no mapping is held).
        let mapping = unsafe { VmmMapping::map(&self.driver, self.range.addr(), memory) }?;
        if mapping.addr() != self.range.addr() {
            return Err(LabError::Unfit(format!(
                "the keep-address baseline mapped at {:#x} instead of {:#x}",
                mapping.addr(),
                self.range.addr()
            )));
        }
        self.mapping = Some(mapping);
        Ok(())
    }

    /// `cuMemUnmap` + `cuMemRelease`.
    fn unmap(&mut self) -> Result<(), LabError> {
        let Some(mapping) = self.mapping.take() else {
            return Ok(());
        };
        // SAFETY: every copy into or out of the range was waited for before its call returned, and nothing else
        // uses the range.
        match unsafe { mapping.unmap() } {
            Ok(()) => Ok(()),
            Err((kept, e)) => {
                self.mapping = kept;
                Err(e.into())
            }
        }
    }

    fn check(&self, len: usize) -> Result<(), LabError> {
        if self.mapping.is_none() {
            return Err(LabError::CheckFailed(
                "the baselines' device memory is not mapped".into(),
            ));
        }
        if len > self.len {
            return Err(LabError::Unfit(format!(
                "a copy of {len} bytes does not fit the baselines' {} bytes",
                self.len
            )));
        }
        Ok(())
    }

    /// One host-to-device copy of `src` to the start of the range, waited for.
    fn htod(&self, src: &[u8]) -> Result<(), LabError> {
        self.check(src.len())?;
        // SAFETY: `src` is valid for its length and borrowed until the stream is synchronised below; the range is
        // mapped with access set (checked) and at least that long.
        let queued = unsafe {
            self.driver
                .memcpy_htod_async(self.range.addr(), src.as_ptr(), src.len(), self.stream)
        };
        let waited = self.driver.stream_synchronize(self.stream);
        queued?;
        Ok(waited?)
    }

    /// One device-to-host copy from the start of the range into `dst`, waited for.
    fn dtoh(&self, dst: &mut [u8]) -> Result<(), LabError> {
        self.check(dst.len())?;
        // SAFETY: `dst` is valid for its length and borrowed mutably until the stream is synchronised below; the
        // range is mapped (checked) and at least that long.
        let queued = unsafe {
            self.driver.memcpy_dtoh_async(
                dst.as_mut_ptr(),
                self.range.addr(),
                dst.len(),
                self.stream,
            )
        };
        let waited = self.driver.stream_synchronize(self.stream);
        queued?;
        Ok(waited?)
    }

    /// Checks the mapped memory against the fill, which the pinned copy holds before every keep-address page-in.
    fn verify(&self, checks: &SpotChecks) -> Result<(), LabError> {
        checks.compare("after keep_address_page_in", |off, out| {
            self.check(off + out.len())?;
            // SAFETY: as in `dtoh`, at offset `off` inside the mapped range (checked just above).
            let queued = unsafe {
                self.driver.memcpy_dtoh_async(
                    out.as_mut_ptr(),
                    self.range.addr() + off as u64,
                    out.len(),
                    self.stream,
                )
            };
            let waited = self.driver.stream_synchronize(self.stream);
            queued?;
            Ok(waited?)
        })
    }
}

impl Drop for DeviceBaselines {
    fn drop(&mut self) {
        if let Err(e) = self.driver.stream_synchronize(self.stream) {
            tracing::warn!("waiting for the baselines' copies: {e}");
        }
        // SAFETY: our own stream, destroyed once, its work waited for above.
        if let Err(e) = unsafe { self.driver.stream_destroy(self.stream) } {
            tracing::warn!("destroying the baselines' stream: {e}");
        }
        // The fields drop next: the mapping is unmapped and released, then the addresses freed.
    }
}

/// The ratios of rates (a ratio of GB/s is the inverse ratio of median times, all transfers being the same size).
fn ratios(
    rates: &BTreeMap<&'static str, f64>,
    results: &BTreeMap<&'static str, Summary>,
) -> Vec<CudaRatio> {
    let rate = |n: &str| rates.get(n).copied().unwrap_or(f64::NAN);
    let mean = |n: &str| results.get(n).map_or(f64::NAN, |s| s.mean_s);
    let at_least = |name, value: f64, min: f64, target| CudaRatio {
        name,
        value,
        target: Some(target),
        met: Some(value >= min),
    };
    let above = |name, value: f64, min: f64, target| CudaRatio {
        name,
        value,
        target: Some(target),
        met: Some(value > min),
    };
    let info = |name, value: f64| CudaRatio {
        name,
        value,
        target: None,
        met: None,
    };
    let page_in = rate("oversub_page_in");
    let tier_in = rate("oversub_host_tier_page_in");
    let mut out = vec![
        at_least(
            "oversub_page_in / min(raw_limit_read, h2d_pinned) (rate)",
            page_in / rate("raw_limit_read").min(rate("h2d_pinned")),
            0.9,
            ">= 0.9",
        ),
        at_least(
            "oversub_host_tier_page_in / h2d_pinned (rate)",
            tier_in / rate("h2d_pinned"),
            0.9,
            ">= 0.9",
        ),
        above(
            "oversub_page_in / naive_read_copy (rate)",
            page_in / rate("naive_read_copy"),
            1.0,
            "> 1",
        ),
    ];
    if rates.contains_key("unified_memory") {
        out.push(above(
            "oversub_page_in / unified_memory (rate)",
            page_in / rate("unified_memory"),
            1.0,
            "> 1",
        ));
        // Like for like: the managed buffer's data starts in host memory, as the host tier's does; the store
        // path above also pays the store, which unified memory never reads.
        out.push(info(
            "oversub_host_tier_page_in / unified_memory (rate)",
            tier_in / rate("unified_memory"),
        ));
    }
    out.extend([
        info(
            "oversub_host_tier_page_in / keep_address_page_in (rate)",
            tier_in / rate("keep_address_page_in"),
        ),
        info(
            "oversub_host_tier_page_out / keep_address_page_out (rate)",
            rate("oversub_host_tier_page_out") / rate("keep_address_page_out"),
        ),
        info(
            "oversub_page_out / min(raw_limit_write, d2h_pinned) (rate)",
            rate("oversub_page_out") / rate("raw_limit_write").min(rate("d2h_pinned")),
        ),
        info(
            "async page-in (start + finish) / oversub_page_in (mean)",
            (mean("async_page_in_start") + mean("async_page_in_finish")) / mean("oversub_page_in"),
        ),
        info(
            "async page-out (start + finish) / oversub_page_out (mean)",
            (mean("async_page_out_start") + mean("async_page_out_finish"))
                / mean("oversub_page_out"),
        ),
    ]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn summary(median_s: f64) -> Summary {
        Summary::from_samples(&[median_s]).unwrap()
    }

    #[test]
    fn mem_available_is_parsed_in_bytes() {
        let text = "MemTotal:       16318412 kB\nMemFree:  1000 kB\nMemAvailable:   12345 kB\n";
        assert_eq!(parse_mem_available(text), Some(12345 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn spot_ranges_cover_start_middle_and_end() {
        assert_eq!(
            spot_ranges(1 << 20),
            vec![
                (0, 4096),
                ((1 << 19) - 2048, 4096),
                ((1 << 20) - 4096, 4096)
            ]
        );
        assert_eq!(spot_ranges(100), vec![(0, 100)]);
        for len in [1, 4095, 4096, 4097, 3 << 20] {
            for (off, n) in spot_ranges(len) {
                assert!(off + n <= len && n > 0, "{len}: {off}+{n}");
            }
        }
    }

    #[test]
    fn spot_checks_find_a_changed_byte() {
        let mut fill = vec![0u8; 64 << 10];
        fill_random(&mut fill, SEED);
        let checks = SpotChecks::new(&fill);
        checks
            .compare("same", |off, out| {
                out.copy_from_slice(&fill[off..off + out.len()]);
                Ok(())
            })
            .unwrap();
        let mut bad = fill.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let e = checks
            .compare("changed", |off, out| {
                out.copy_from_slice(&bad[off..off + out.len()]);
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains("1 of the 4096 bytes"), "{e}");
    }

    #[test]
    fn ratios_compare_rates_against_the_targets() {
        let size = 1_000_000_000;
        let mut results = BTreeMap::new();
        for (name, s) in [
            ("oversub_page_in", 0.5), // 2 GB/s
            ("oversub_page_out", 0.5),
            ("oversub_host_tier_page_in", 0.05), // 20 GB/s
            ("oversub_host_tier_page_out", 0.05),
            ("raw_limit_read", 0.4), // 2.5 GB/s
            ("raw_limit_write", 0.5),
            ("h2d_pinned", 0.04), // 25 GB/s
            ("d2h_pinned", 0.04),
            ("naive_read_copy", 1.0),
            ("keep_address_page_in", 0.05),
            ("keep_address_page_out", 0.05),
            ("async_page_in_start", 0.001),
            ("async_page_in_finish", 0.001),
            ("async_page_out_start", 0.001),
            ("async_page_out_finish", 0.001),
        ] {
            results.insert(name, summary(s));
        }
        let rates: BTreeMap<&'static str, f64> = results
            .iter()
            .filter(|(n, _)| !n.starts_with("async"))
            .map(|(n, s)| (*n, rate_gb_s(size, s.median_s)))
            .collect();
        assert!((rates["h2d_pinned"] - 25.0).abs() < 1e-9);
        let r = ratios(&rates, &results);
        let get = |prefix: &str| r.iter().find(|x| x.name.starts_with(prefix)).unwrap();
        let store = get("oversub_page_in / min(");
        assert!((store.value - 0.8).abs() < 1e-9 && store.met == Some(false));
        let tier = get("oversub_host_tier_page_in / h2d");
        assert!((tier.value - 0.8).abs() < 1e-9 && tier.met == Some(false));
        let naive = get("oversub_page_in / naive");
        assert!((naive.value - 2.0).abs() < 1e-9);
        assert_eq!(get("oversub_page_in / naive").met, Some(true));
        assert!(
            !r.iter().any(|x| x.name.contains("unified")),
            "no unified ratio without a unified measurement"
        );
        assert_eq!(get("oversub_host_tier_page_in / keep").met, None);
        assert!((get("async page-in").value - 0.004).abs() < 1e-9);
    }

    #[test]
    fn every_name_is_unique_and_the_plots_split_sync_from_async() {
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert!(NAMES[..MAIN_PLOT].iter().all(|n| !n.starts_with("async")));
        assert!(NAMES[MAIN_PLOT..].iter().all(|n| n.starts_with("async")));
    }
}
