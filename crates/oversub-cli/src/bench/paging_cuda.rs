//! `oversub bench paging --device cuda`: the paging experiment on a discrete GPU.
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
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    result as cu, sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use oversub_accel::cuda::loading::{detect_nvrtc, load_module};
use oversub_accel::cuda::{
    AddressRange, CudaDriver, CudaMemory, CudaMemoryConfig, CudarcDriver, Mapping as VmmMapping,
    PhysicalMemory, StreamHandle,
};
use oversub_accel::{DeviceMemory, DevicePtr};
use oversub_core::{
    AddressSpace, Buffer, BufferFlags, HostTierConfig, Pool, PoolConfig, StagingConfig,
};
use oversub_io::{Direction, IoEngine, SwapStore, UringEngine};
use oversub_report::{format_bytes, text_table, BoxPlot, BoxSeries, Summary};
use serde::Serialize;

use oversub_lab::harness::cache::CacheDrop;
use oversub_lab::harness::direct::{resolve_store, rw_all, Fd, RemoveOnDrop};
use oversub_lab::harness::memory::{fill_random, Mapping};
use oversub_lab::harness::raw_io::raw_transfer;
use oversub_lab::paging::PagerIo;

use super::paging::{pager_io_line, PagingArgs};
use super::BoxError;

const MIB: u64 = 1 << 20;
/// Seed of the random fill of the paged buffers.
const SEED: u64 = 0x00DD_BA11;
/// Bytes compared at each of the start, middle and end of a buffer after a page-in.
const CHECK_BYTES: usize = 4096;
/// One thread of the unified-memory kernel per this many bytes (a host page).
const TOUCH_STRIDE_BYTES: u64 = 4096;
/// Threads per block of the unified-memory kernel.
const TOUCH_BLOCK_THREADS: u32 = 256;
/// Managed memory is allocated only when the size is at most this fraction of the device's free memory.
const UNIFIED_FREE_FRACTION: f64 = 0.8;
/// Free device memory the run wants beyond one buffer of the size (contexts, kernels, the driver's own).
const DEVICE_MARGIN_BYTES: u64 = 512 * MIB;
/// Host memory the run wants beyond its buffers.
const HOST_MARGIN_BYTES: u64 = 1024 * MIB;
/// `cuMemPrefetchAsync`'s destination for host memory (`CU_DEVICE_CPU` in cuda.h).
const CU_DEVICE_CPU: sys::CUdevice = -1;

/// The measurement names, in report order (also the JSON keys). The first [`MAIN_PLOT`] go to the main box plot,
/// the async calls to the second.
const NAMES: [&str; 16] = [
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
const MAIN_PLOT: usize = 12;

/// The unified-memory kernel, compiled at run time with NVRTC: thread i reads one byte of page i (volatile, and
/// stored only when `flag` is set, which it never is, so the read cannot be dropped).
const TOUCH_SRC: &str = r#"
extern "C" __global__ void oversub_um_touch(const unsigned char* base, unsigned long long pages,
                                            unsigned long long stride, unsigned char* sink,
                                            unsigned long long flag) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pages) {
        unsigned char v = *(const volatile unsigned char*)(base + i * stride);
        if (flag) sink[0] = v;
    }
}
"#;

#[derive(Debug, Serialize)]
struct CudaRatio {
    name: &'static str,
    value: f64,
    /// `None` for ratios shown for information.
    target: Option<&'static str>,
    met: Option<bool>,
}

#[derive(Debug, Serialize)]
struct StagingReport {
    /// The ring's chunk as the pager uses it (rounded to the store's alignment); `None` when it does not stage.
    chunk_bytes: Option<u64>,
    chunks: usize,
    pinned: bool,
}

#[derive(Debug, Serialize)]
struct UnifiedReport {
    measured: bool,
    /// Why it was not measured (or stopped early).
    skipped: Option<String>,
    touch_stride_bytes: u64,
    concurrent_managed_access: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Report {
    device: &'static str,
    device_name: String,
    gpu_ordinal: i32,
    driver_version: i32,
    driver_version_text: String,
    device_total_bytes: u64,
    device_free_bytes: u64,
    vmm_granularity_bytes: usize,
    size_bytes: u64,
    samples: usize,
    cache_drop: &'static str,
    engine: &'static str,
    raw_engine: &'static str,
    direct_io: bool,
    store: String,
    max_io_bytes: u64,
    queue_depth: usize,
    /// How the store pool moves buffers: "staging" or "cufile".
    transfer_path: &'static str,
    staging: StagingReport,
    host_tier_bytes: u64,
    unified_memory: UnifiedReport,
    results: BTreeMap<&'static str, Summary>,
    /// size / median, in GB/s (10^9 bytes), for every measurement that moves the whole buffer.
    rates_gb_per_s: BTreeMap<&'static str, f64>,
    ratios: Vec<CudaRatio>,
    pager_io: PagerIo,
}

/// Runs the experiment. The caller checked `--samples` and `--size`.
pub(super) fn run(args: PagingArgs) -> Result<(), BoxError> {
    if args.staging_chunks == 0 {
        return Err("--staging-chunks must be at least 1".into());
    }
    if args.staging_chunk == 0 {
        return Err("--staging-chunk must be at least one byte".into());
    }
    let size = usize::try_from(args.size).map_err(|_| "--size too large for this machine")?;
    let max_io = usize::try_from(args.max_io).map_err(|_| "--max-io too large")?;

    // The GPU first: without a driver this is where the run ends, before any file is made.
    let memory = Arc::new(CudaMemory::new(CudaMemoryConfig {
        ordinal: args.gpu,
        cufile: !args.no_cufile,
    })?);
    let info = memory.info().clone();
    let granularity = memory.granularity();
    let size_g = args.size.next_multiple_of(granularity as u64);
    let (free0, total) = memory
        .memory_info()?
        .unwrap_or((info.total_bytes, info.total_bytes));
    if free0 < size_g + DEVICE_MARGIN_BYTES {
        return Err(format!(
            "--size {} needs about {} of free device memory (one buffer of the size at a time, plus a margin), but \
             device {} ({}) has {} free of {}",
            format_bytes(args.size),
            format_bytes(size_g + DEVICE_MARGIN_BYTES),
            info.ordinal,
            info.name,
            format_bytes(free0),
            format_bytes(total)
        )
        .into());
    }
    let staging_chunk = args.staging_chunk.next_multiple_of(4096);
    let staging_bytes = staging_chunk * (args.staging_chunks as u64 + 1);
    let host_need = 3 * size_g + staging_bytes + HOST_MARGIN_BYTES;
    let mut unified_skip = args.skip_unified.then(|| "--skip-unified".to_string());
    match mem_available() {
        Some(avail) if avail < host_need => {
            return Err(format!(
                "--size {} needs about {} of host memory (a pinned host tier of the size, a pinned copy buffer of the \
                 size, a plain buffer of the size for the store baselines, the staging ring and a margin), but \
                 MemAvailable is {}",
                format_bytes(args.size),
                format_bytes(host_need),
                format_bytes(avail)
            )
            .into());
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

    // The store, as on the host backend.
    let location = match args.store.as_slice() {
        [] => None,
        [one] => Some(one.as_path()),
        _ => return Err(
            "--device cuda takes one --store location (striping is measured with --device host)"
                .into(),
        ),
    };
    let (path, created) = resolve_store(location, args.force)?;
    let _cleanup = RemoveOnDrop(created.then(|| path.clone()).into_iter().collect());
    let capacity = args.size.next_multiple_of(2 * MIB);
    let store = Arc::new(open_store(&args, &path, created, capacity, max_io)?);
    let direct = store.is_direct();
    let engine_name = store.engine().name();
    let align = store.alignment();
    let io_len = size.next_multiple_of(align);
    let direct_flag = if direct { libc::O_DIRECT } else { 0 };
    if !direct {
        tracing::warn!("the store refuses O_DIRECT: the store baselines run buffered too");
    }
    let cache = CacheDrop::choose(args.cache_drop.into())?;

    // Two pools on the same device and store: one pages to the store, the other to its host tier.
    let device: Arc<dyn DeviceMemory> = Arc::clone(&memory) as Arc<dyn DeviceMemory>;
    let pool_capacity = (io_len as u64).next_multiple_of(granularity as u64);
    let staging = StagingConfig {
        chunk_bytes: args.staging_chunk,
        chunks: args.staging_chunks,
        pinned: !args.pageable_staging,
        direct_storage: true,
    };
    let pool = Pool::new(
        PoolConfig::new(pool_capacity)
            .verify_checksums(!args.no_checksums)
            .staging(staging),
        Arc::clone(&device),
        Arc::clone(&store),
    )?;
    let tier_pool = Pool::new(
        PoolConfig::new(pool_capacity)
            .staging(StagingConfig {
                chunks: 1,
                direct_storage: false,
                ..staging
            })
            .host_tier(HostTierConfig {
                capacity_bytes: pool_capacity,
                pinned: true,
            }),
        Arc::clone(&device),
        Arc::clone(&store),
    )?;
    let transfer_path = pool.transfer_path();

    eprintln!(
        "oversub bench paging --device cuda: {} on {} ({}, driver {}), store {} ({}, {}), engine {engine_name}, \
         max I/O {}, queue depth {}, cache drop {}",
        format_bytes(args.size),
        info.name,
        format_bytes(total),
        driver_version_text(info.driver_version),
        path.display(),
        if store.is_block_device() { "block device" } else { "file" },
        if direct { "O_DIRECT" } else { "buffered" },
        format_bytes(args.max_io),
        args.queue_depth,
        cache.name()
    );
    let ring = format!(
        "{} × {} {}",
        args.staging_chunks,
        format_bytes(pool.staging_chunk_bytes().unwrap_or(staging_chunk)),
        if args.pageable_staging {
            "pageable"
        } else {
            "pinned"
        }
    );
    eprintln!(
        "transfer path: {transfer_path} ({}); host tier: {} pinned",
        if transfer_path == "cufile" {
            "GPUDirect Storage".to_string()
        } else {
            format!("staging ring of {ring} buffers")
        },
        format_bytes(pool_capacity)
    );

    // The data: a random fill, written into both pools' buffers and a pinned copy; spot checks remember pieces.
    let mut raw_buf = Mapping::anonymous(io_len)?;
    fill_random(raw_buf.as_mut_slice(), SEED);
    let fill: &[u8] = &raw_buf.as_mut_slice()[..size];
    let checks = SpotChecks::new(fill);
    let store_fd = store.fd();
    let space = pool.address_space();
    let buffer = space.alloc(args.size, BufferFlags::DEFAULT)?;
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
    let tier_space = tier_pool.address_space();
    let tier_buffer = tier_space.alloc(args.size, BufferFlags::DEFAULT)?;
    tier_space.write(tier_buffer, 0, fill)?;
    let tier_addr = tier_space.info(tier_buffer)?.addr;
    tier_space.page_out(tier_buffer)?;
    check_in_tier(&tier_space, tier_buffer)?;
    let mut pinned = memory.alloc_host(size, true)?;
    pinned.as_mut_slice().copy_from_slice(fill);
    let mut baselines = DeviceBaselines::new(memory.driver(), size_g as usize, granularity)?;

    // Unified memory, set up while nothing else of ours is on the device.
    let mut unified_report = UnifiedReport {
        measured: false,
        skipped: None,
        touch_stride_bytes: TOUCH_STRIDE_BYTES,
        concurrent_managed_access: None,
    };
    let mut unified = match unified_skip {
        Some(why) => {
            unified_report.skipped = Some(why);
            None
        }
        None => match guarded(|| Unified::new(args.gpu, size)) {
            Ok(u) => {
                unified_report.concurrent_managed_access = Some(u.concurrent);
                Some(u)
            }
            Err(why) => {
                unified_report.skipped = Some(why);
                None
            }
        },
    };
    if let Some(why) = &unified_report.skipped {
        eprintln!("unified_memory skipped: {why}");
    }

    let raw_engine: Arc<dyn IoEngine> = match UringEngine::new(32) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            tracing::warn!("io_uring unavailable for the raw limit ({e}); using psync");
            Arc::new(oversub_io::PsyncEngine::new(32)?)
        }
    };
    let rw_fd = Fd::open(&path, libc::O_RDWR | direct_flag)?;

    let bar = crate::progress_bar(args.samples as u64 * 14, "paging cuda", "", false);
    let mut samples: BTreeMap<&'static str, Vec<f64>> =
        NAMES.iter().map(|n| (*n, Vec::new())).collect();
    let mut push = |name: &'static str, d: Duration| {
        if let Some(v) = samples.get_mut(name) {
            v.push(d.as_secs_f64());
        }
    };
    let step = |what: &str, i: usize| {
        bar.set_message(format!("sample {}/{}: {what}", i + 1, args.samples));
    };

    for i in 0..args.samples {
        // The pager through the store (the buffer starts and ends each sample paged out).
        step("oversub store", i);
        cache.apply(store_fd)?;
        let t = Instant::now();
        space.page_in(buffer)?;
        push("oversub_page_in", t.elapsed());
        checks.verify_space(&space, buffer, addr, "after oversub_page_in")?;
        bar.inc(1);
        cache.apply(store_fd)?;
        let t = Instant::now();
        space.page_out(buffer)?;
        push("oversub_page_out", t.elapsed());
        bar.inc(1);

        step("oversub async", i);
        cache.apply(store_fd)?;
        let t = Instant::now();
        let ticket = space.page_in_async(buffer)?;
        push("async_page_in_start", t.elapsed());
        wait_complete(|| ticket.is_complete());
        let t = Instant::now();
        ticket.finish()?;
        push("async_page_in_finish", t.elapsed());
        checks.verify_space(&space, buffer, addr, "after the async page-in")?;
        bar.inc(1);
        cache.apply(store_fd)?;
        let t = Instant::now();
        let ticket = space.page_out_async(buffer)?;
        push("async_page_out_start", t.elapsed());
        wait_complete(|| ticket.is_complete());
        let t = Instant::now();
        ticket.finish()?;
        push("async_page_out_finish", t.elapsed());
        bar.inc(1);

        // The pager through the host tier.
        step("oversub host tier", i);
        let t = Instant::now();
        tier_space.page_in(tier_buffer)?;
        push("oversub_host_tier_page_in", t.elapsed());
        checks.verify_space(
            &tier_space,
            tier_buffer,
            tier_addr,
            "after oversub_host_tier_page_in",
        )?;
        bar.inc(1);
        let t = Instant::now();
        tier_space.page_out(tier_buffer)?;
        push("oversub_host_tier_page_out", t.elapsed());
        check_in_tier(&tier_space, tier_buffer)?;
        bar.inc(1);

        // The store's raw limit: read, then write the same bytes back (the pager's copy lives in this file).
        step("raw limit", i);
        cache.apply(rw_fd.0)?;
        let t = Instant::now();
        raw_transfer(raw_engine.as_ref(), rw_fd.0, &mut raw_buf, Direction::Read)?;
        push("raw_limit_read", t.elapsed());
        bar.inc(1);
        cache.apply(rw_fd.0)?;
        let t = Instant::now();
        raw_transfer(raw_engine.as_ref(), rw_fd.0, &mut raw_buf, Direction::Write)?;
        push("raw_limit_write", t.elapsed());
        bar.inc(1);

        // Keep the address by hand, with the bus and naive baselines in between on the same device memory.
        step("keep address, bus, naive", i);
        let t = Instant::now();
        baselines.map()?;
        baselines.htod(pinned.as_slice())?;
        push("keep_address_page_in", t.elapsed());
        baselines.verify(&checks)?;
        bar.inc(1);
        {
            let fd = Fd::open(&path, libc::O_RDONLY | direct_flag)?;
            cache.apply(fd.0)?;
            let t = Instant::now();
            // SAFETY: raw_buf is io_len bytes long and borrowed for the call.
            unsafe { rw_all(fd.0, raw_buf.as_ptr(), io_len, false) }?;
            baselines.htod(&raw_buf.as_mut_slice()[..size])?;
            push("naive_read_copy", t.elapsed());
        }
        bar.inc(1);
        let t = Instant::now();
        baselines.htod(pinned.as_slice())?;
        push("h2d_pinned", t.elapsed());
        bar.inc(1);
        let t = Instant::now();
        baselines.dtoh(pinned.as_mut_slice())?;
        push("d2h_pinned", t.elapsed());
        bar.inc(1);
        let t = Instant::now();
        baselines.dtoh(pinned.as_mut_slice())?;
        baselines.unmap()?;
        push("keep_address_page_out", t.elapsed());
        bar.inc(1);

        // Unified memory, alone on the device.
        step("unified memory", i);
        if let Some(u) = &unified {
            match guarded(|| u.sample()) {
                Ok(d) => push("unified_memory", d),
                Err(why) => {
                    eprintln!("unified_memory stopped: {why}");
                    unified_report.skipped = Some(why);
                    unified = None;
                }
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    unified_report.measured = samples.get("unified_memory").is_some_and(|v| !v.is_empty());
    drop(unified);

    let results: BTreeMap<&'static str, Summary> = samples
        .iter()
        .filter_map(|(name, v)| Summary::from_samples(v).map(|s| (*name, s)))
        .collect();
    let rates: BTreeMap<&'static str, f64> = results
        .iter()
        .filter(|(name, _)| !name.starts_with("async"))
        .map(|(name, s)| (*name, rate_gb_s(args.size, s.median_s)))
        .collect();
    let ratios = ratios(&rates, &results);
    println!(
        "{} on {} (device {}, driver {}); transfer path: {transfer_path}",
        format_bytes(args.size),
        info.name,
        info.ordinal,
        driver_version_text(info.driver_version)
    );
    print_tables(&results, &rates, &ratios);
    if let Some(why) = &unified_report.skipped {
        println!("unified_memory: not measured ({why})");
    }
    let pager_io = PagerIo::from(store.engine().counters());
    println!("pager I/O: {}", pager_io_line(&pager_io));

    let report = Report {
        device: "cuda",
        device_name: info.name.clone(),
        gpu_ordinal: info.ordinal,
        driver_version: info.driver_version,
        driver_version_text: driver_version_text(info.driver_version),
        device_total_bytes: total,
        device_free_bytes: free0,
        vmm_granularity_bytes: granularity,
        size_bytes: args.size,
        samples: args.samples,
        cache_drop: cache.name(),
        engine: engine_name,
        raw_engine: raw_engine.name(),
        direct_io: direct,
        store: path.display().to_string(),
        max_io_bytes: args.max_io,
        queue_depth: args.queue_depth,
        transfer_path,
        staging: StagingReport {
            chunk_bytes: pool.staging_chunk_bytes(),
            chunks: args.staging_chunks,
            pinned: !args.pageable_staging,
        },
        host_tier_bytes: pool_capacity,
        unified_memory: unified_report,
        results,
        rates_gb_per_s: rates,
        ratios,
        pager_io,
    };
    if let Some(json) = &args.json {
        std::fs::write(json, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("writing {}: {e}", json.display()))?;
        eprintln!("wrote {}", json.display());
    }
    if let Some(plot) = &args.plot {
        write_plots(plot, args.size, &samples)?;
    }
    drop(baselines);
    drop(pinned);
    space.free(buffer)?;
    tier_space.free(tier_buffer)?;
    Ok(())
}

/// Polls until the I/O side reports completion, then waits a little more so `finish` measures only its own work.
fn wait_complete(done: impl Fn() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
}

/// Opens or creates the store as the host backend does.
fn open_store(
    args: &PagingArgs,
    path: &Path,
    created: bool,
    capacity: u64,
    max_io: usize,
) -> Result<SwapStore, BoxError> {
    let builder = SwapStore::builder()
        .max_io_bytes(max_io)
        .queue_depth(args.queue_depth)
        .engine_choice(args.engine.into())
        .keep(true)
        // --force-store already said the benchmark may overwrite an existing store's contents.
        .force(args.force);
    let is_block_device = {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
    };
    let store = if created {
        builder.capacity_bytes(capacity).create(path)?
    } else if is_block_device {
        builder.open(path)?
    } else {
        builder.capacity_bytes(capacity).open(path)?
    };
    if store.capacity_bytes() < args.size {
        return Err(format!(
            "store {} holds {} but the benchmark needs {}",
            path.display(),
            format_bytes(store.capacity_bytes()),
            format_bytes(args.size)
        )
        .into());
    }
    Ok(store)
}

/// Fails loudly when the host-tier pool's buffer did not go to its tier (it would be measuring the store).
fn check_in_tier(space: &AddressSpace, buffer: Buffer) -> Result<(), BoxError> {
    if space.info(buffer)?.in_host_tier {
        Ok(())
    } else {
        Err("the host-tier pool paged its buffer out to the store instead of its host tier".into())
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
struct SpotChecks {
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
        mut read: impl FnMut(usize, &mut [u8]) -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        for (off, want) in &self.spots {
            let mut got = vec![0u8; want.len()];
            read(*off, &mut got)?;
            if &got != want {
                let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
                return Err(format!(
                    "{what}: {differ} of the {} bytes at offset {off} differ from the data written",
                    want.len()
                )
                .into());
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
    ) -> Result<(), BoxError> {
        let now = space.info(buffer)?.addr;
        if now != addr {
            return Err(
                format!("{what}: the buffer's device address moved from {addr} to {now}").into(),
            );
        }
        self.compare(what, |off, out| Ok(space.read(buffer, off as u64, out)?))
    }
}

/// The device memory of the bus, naive and keep-the-address baselines: one address range, mapped and unmapped
/// through the driver, and a stream for its copies (each waited for before the call returns).
#[derive(Debug)]
struct DeviceBaselines {
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
    ) -> Result<DeviceBaselines, BoxError> {
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
    fn map(&mut self) -> Result<(), BoxError> {
        if self.mapping.is_some() {
            return Err("the baselines' device memory is already mapped".into());
        }
        let memory = PhysicalMemory::create(&self.driver, self.len)?;
        // SAFETY: the range is ours, reserved with this length, and nothing is mapped in it (no mapping is held).
        let mapping = unsafe { VmmMapping::map(&self.driver, self.range.addr(), memory) }?;
        if mapping.addr() != self.range.addr() {
            return Err(format!(
                "the keep-address baseline mapped at {:#x} instead of {:#x}",
                mapping.addr(),
                self.range.addr()
            )
            .into());
        }
        self.mapping = Some(mapping);
        Ok(())
    }

    /// `cuMemUnmap` + `cuMemRelease`.
    fn unmap(&mut self) -> Result<(), BoxError> {
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

    fn check(&self, len: usize) -> Result<(), BoxError> {
        if self.mapping.is_none() {
            return Err("the baselines' device memory is not mapped".into());
        }
        if len > self.len {
            return Err(format!(
                "a copy of {len} bytes does not fit the baselines' {} bytes",
                self.len
            )
            .into());
        }
        Ok(())
    }

    /// One host-to-device copy of `src` to the start of the range, waited for.
    fn htod(&self, src: &[u8]) -> Result<(), BoxError> {
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
    fn dtoh(&self, dst: &mut [u8]) -> Result<(), BoxError> {
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
    fn verify(&self, checks: &SpotChecks) -> Result<(), BoxError> {
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

/// Runs code that calls cudarc's bindings directly, turning their panics (a library or symbol that cannot be
/// loaded) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        Err(format!("the CUDA bindings failed: {msg}"))
    })
}

fn cu_err(what: &str, e: cu::DriverError) -> String {
    format!("{what}: {:?}", e.0)
}

/// Managed memory (`cuMemAllocManaged`), freed on drop after the device has finished with it.
#[derive(Debug)]
struct Managed {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Drop for Managed {
    fn drop(&mut self) {
        let freed = catch_unwind(AssertUnwindSafe(|| {
            let _ = self.ctx.bind_to_thread();
            // Nothing may still use the memory when it is freed (an error path may leave a kernel running).
            let _ = cu::ctx::synchronize();
            // SAFETY: `ptr` came from cuMemAllocManaged and is freed once, after the device finished with it.
            unsafe { cu::memory_free(self.ptr) }
        }));
        if !matches!(freed, Ok(Ok(()))) {
            tracing::warn!("freeing the managed buffer failed");
        }
    }
}

/// The unified-memory baseline: a managed buffer of the size, its data on the host, and the kernel that touches
/// every page of it from the device.
#[derive(Debug)]
struct Unified {
    // Dropped first: the memory, while the context is alive.
    managed: Managed,
    kernel: CudaFunction,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    driver_version: i32,
    pages: u64,
    concurrent: bool,
}

impl Unified {
    /// Everything the measurement needs, or why it cannot run. Allocates the managed buffer only when the size is
    /// at most [`UNIFIED_FREE_FRACTION`] of the device's free memory.
    fn new(ordinal: i32, size: usize) -> Result<Unified, String> {
        detect_nvrtc("the unified-memory kernel needs it").map_err(|e| e.to_string())?;
        let driver = CudarcDriver::new(ordinal).map_err(|e| e.to_string())?;
        let ctx = Arc::clone(driver.context());
        let driver_version = driver.info().driver_version;
        ctx.bind_to_thread()
            .map_err(|e| cu_err("binding the context", e))?;
        let attr = |a, what: &str| ctx.attribute(a).map_err(|e| cu_err(what, e));
        if attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
            "querying managed-memory support",
        )? == 0
        {
            return Err("the device has no managed memory".into());
        }
        let concurrent = attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            "querying concurrent managed access",
        )? != 0;
        if !concurrent {
            tracing::warn!(
                "the device lacks concurrent managed access: a launch migrates the managed buffer whole instead of \
                 page by page"
            );
        }
        let kernel = load_touch_kernel(&ctx)?;
        let stream = ctx.new_stream().map_err(|e| cu_err("cuStreamCreate", e))?;
        let (free, _) = driver
            .mem_get_info()
            .map_err(|e| format!("cuMemGetInfo: {e}"))?;
        if size as f64 > UNIFIED_FREE_FRACTION * free as f64 {
            return Err(format!(
                "a managed buffer of {} is more than {:.0}% of the {} free on the device; managed memory is never \
                 allocated past free device memory here (oversubscribing it can hang the GPU)",
                format_bytes(size as u64),
                UNIFIED_FREE_FRACTION * 100.0,
                format_bytes(free)
            ));
        }
        ctx.bind_to_thread()
            .map_err(|e| cu_err("binding the context", e))?;
        // SAFETY: a fresh allocation; its bytes are written from the host below before anything reads them.
        let ptr = unsafe { cu::malloc_managed(size, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .map_err(|e| cu_err("cuMemAllocManaged", e))?;
        let managed = Managed {
            ctx: Arc::clone(&ctx),
            ptr,
            bytes: size,
        };
        // SAFETY: managed memory is addressable from the host at the same address for its whole length; no
        // kernel has used it yet.
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, size) };
        fill_random(bytes, SEED); // written by the CPU: the pages live in host memory
        let pages = (size as u64).div_ceil(TOUCH_STRIDE_BYTES);
        let unified = Unified {
            managed,
            kernel,
            stream,
            ctx,
            driver_version,
            pages,
            concurrent,
        };
        // Warm-up: loads the function, touches nothing.
        unified.launch(0)?;
        unified
            .stream
            .synchronize()
            .map_err(|e| cu_err("the warm-up launch", e))?;
        Ok(unified)
    }

    /// One timed sample: the buffer's pages on the host, then the kernel from launch to synchronisation; the pages
    /// go back to the host afterwards so the device memory is free for the next phase.
    fn sample(&self) -> Result<Duration, String> {
        self.place_on_host()?;
        let t = Instant::now();
        self.launch(self.pages)?;
        self.stream
            .synchronize()
            .map_err(|e| cu_err("the unified-memory kernel", e))?;
        let elapsed = t.elapsed();
        self.place_on_host()?;
        Ok(elapsed)
    }

    fn launch(&self, pages: u64) -> Result<(), String> {
        let blocks = u32::try_from(pages.div_ceil(u64::from(TOUCH_BLOCK_THREADS)).max(1))
            .map_err(|_| format!("{pages} pages are too many blocks for one launch"))?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (TOUCH_BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let base: u64 = self.managed.ptr;
        let stride: u64 = TOUCH_STRIDE_BYTES;
        let sink: u64 = 0;
        let flag: u64 = 0;
        let mut b = self.stream.launch_builder(&self.kernel);
        b.arg(&base).arg(&pages).arg(&stride).arg(&sink).arg(&flag);
        // SAFETY: oversub_um_touch(const unsigned char*, unsigned long long, unsigned long long, unsigned char*,
        // unsigned long long) gets five 64-bit values in that order. Thread i < pages reads base + i × stride, inside
        // the managed buffer since pages = ceil(bytes / stride) (0 for the warm-up); `flag` is 0, so the null sink is
        // never written. The buffer outlives the launch: it is freed only after a context synchronisation.
        unsafe { b.launch(cfg) }.map_err(|e| cu_err("launching the unified-memory kernel", e))?;
        Ok(())
    }

    /// Moves the managed buffer to host memory (`cuMemPrefetchAsync` to the CPU, or touching every page from the
    /// host when that fails) and waits for it.
    fn place_on_host(&self) -> Result<(), String> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cu_err("binding the context", e))?;
        let (ptr, bytes) = (self.managed.ptr, self.managed.bytes);
        let prefetched = if self.driver_version >= 12_020 {
            let location = sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            };
            // SAFETY: the range is exactly the managed allocation; the stream belongs to the current context; the
            // driver is 12.2 or newer, so the symbol exists.
            unsafe { sys::cuMemPrefetchAsync_v2(ptr, bytes, location, 0, self.stream.cu_stream()) }
                .result()
        } else {
            // SAFETY: as above; every CUDA 12 driver has the original form.
            unsafe { sys::cuMemPrefetchAsync(ptr, bytes, CU_DEVICE_CPU, self.stream.cu_stream()) }
                .result()
        };
        self.stream
            .synchronize()
            .map_err(|e| cu_err("waiting for the prefetch to the host", e))?;
        if let Err(e) = prefetched {
            tracing::debug!(
                "prefetch to the host failed ({:?}); touching the pages instead",
                e.0
            );
            let base = ptr as *mut u8;
            for off in (0..bytes).step_by(TOUCH_STRIDE_BYTES as usize) {
                // SAFETY: `off` is inside the managed allocation, addressable from the host; no kernel uses it (the
                // stream was synchronised). Reading and writing back the same byte keeps the data.
                unsafe {
                    let p = base.add(off);
                    p.write_volatile(p.read_volatile());
                }
            }
        }
        Ok(())
    }
}

/// Compiles [`TOUCH_SRC`] (a cubin for the device, else PTX) and finds its kernel.
fn load_touch_kernel(ctx: &Arc<CudaContext>) -> Result<CudaFunction, String> {
    load_module(ctx, TOUCH_SRC)?
        .load_function("oversub_um_touch")
        .map_err(|e| cu_err("finding oversub_um_touch", e))
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

fn print_tables(
    results: &BTreeMap<&'static str, Summary>,
    rates: &BTreeMap<&'static str, f64>,
    ratios: &[CudaRatio],
) {
    let table = super::paging::summary_table(&NAMES, results, |name, _| {
        rates
            .get(name)
            .filter(|r| r.is_finite())
            .map_or_else(|| "-".to_string(), |r| format!("{r:.2} GB/s"))
    });
    println!("{table}");
    let rows: Vec<Vec<String>> = ratios
        .iter()
        .map(|r| {
            vec![
                r.name.to_string(),
                format!("{:.3}", r.value),
                r.target.unwrap_or("-").to_string(),
                match r.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "-",
                }
                .to_string(),
            ]
        })
        .collect();
    println!("{}", text_table(&["ratio", "value", "target", ""], &rows));
}

fn write_plots(
    path: &Path,
    size: u64,
    samples: &BTreeMap<&'static str, Vec<f64>>,
) -> Result<(), BoxError> {
    let series = |names: &[&str]| -> Vec<BoxSeries> {
        names
            .iter()
            .filter_map(|n| {
                samples
                    .get(n)
                    .filter(|v| !v.is_empty())
                    .map(|v| BoxSeries::new(*n, v.clone()))
            })
            .collect()
    };
    let main = BoxPlot {
        title: format!("Time to page {} in or out of a GPU", format_bytes(size)),
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
        title: format!("Time inside the async calls, {} (GPU)", format_bytes(size)),
        y_label: "time".into(),
        series: series(&NAMES[MAIN_PLOT..]),
    };
    asyncs
        .write_svg(&async_path)
        .map_err(|e| format!("writing {}: {e}", async_path.display()))?;
    eprintln!("wrote {} and {}", path.display(), async_path.display());
    Ok(())
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
