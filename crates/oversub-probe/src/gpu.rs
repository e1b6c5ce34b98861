//! The GPU's costs, measured through the CUDA driver API when a driver is present (loaded at run time, so
//! nothing here needs CUDA to build): the paper's GPU-side numbers (Vesely et al., ISPASS 2016: GPU faults of
//! 5 to 140 µs against concurrency, Fig. 6) and the costs an oversubscription runtime pays on a discrete GPU.
//!
//! - Copies: host → device and device → host bandwidth of one `copy_bytes` copy from pinned (`cuMemHostAlloc`)
//!   and from pageable (a `Vec`) memory, timed on the host around the copy and a stream synchronisation; the best
//!   of `repeats` after one warm-up copy.
//! - Managed-memory faults: a managed buffer (`cuMemAllocManaged`) first touched on the host, so that it lives in
//!   host memory, is read by a kernel of `c` blocks of one thread each (one block per faulting thread, so that
//!   the threads' faults are not merged by a warp executing in lockstep). Each thread reads one byte per 64 KiB
//!   of its own contiguous share of the buffer, sequentially: each read's address depends on the byte the
//!   previous read returned, so a thread has one fault in flight at a time and `c` threads have `c`. The 64 KiB
//!   stride puts each read in its own 64 KiB region (the driver migrates at least 4 KiB and often 64 KiB per
//!   fault), so each read is one fault group; the driver's prefetcher may still move more, so `faults` counts
//!   touches, an upper bound on faults serviced. Kernel time by CUDA events; the latency a thread sees is kernel
//!   time / reads per thread, the throughput all reads / kernel time. Between runs the buffer goes back to the
//!   host (`cuMemPrefetchAsync` to the CPU). Needs a device with concurrent managed access (otherwise a launch
//!   migrates the whole buffer up front and nothing faults) and NVRTC to compile the kernel.
//! - Prefetch: `cuMemPrefetchAsync` of a `copy_bytes` managed buffer from the host to the device, host-timed
//!   around it and a stream synchronisation; best of `repeats`. (The `_v2` form, with a `CUmemLocation`, on
//!   drivers from 12.2, the only form CUDA 13 keeps; the original before.)
//! - VMM: the virtual-memory API's minimum granularity for device memory (`cuMemGetAllocationGranularity`), and
//!   per chunk of that size the time of `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` (map) and of `cuMemUnmap` +
//!   `cuMemRelease` (unmap) inside one `cuMemAddressReserve`d range; means over all chunks.
//! - The UVM simulator's machine (`[uvm]`, issue 37), with the same touch kernel: (a) a zero-copy line's
//!   latency, one thread reading a dependent chain of 128 B lines of pinned, device-mapped host memory; (b) the
//!   saturated rate, [`REMOTE_BLOCKS`] one-thread blocks each reading its own run of lines (sequential per thread,
//!   where the issue's measurement read random lines); (c) demand migration: a managed buffer of
//!   `uvm_demand_bytes` living on the host, first touched by one thread per 4 KiB page, then (again from the host)
//!   one per 64 KiB; time per touch. Kernel time by CUDA events, median of `repeats`. Untested on hardware: this
//!   repository's machines have no GPU.
//! - Preemption: a one-thread kernel launched on the highest-priority stream, host-timed from launch to the end
//!   of a stream synchronisation, on an idle device and while spinning kernels fill every SM (one full wave of
//!   blocks, as many per SM as fit) from a lowest-priority stream for about 100 ms; medians of `repeats`. When
//!   the hardware does not preempt, the busy figure is the spinners' remaining time. Needs NVRTC.
//!
//! Kernels are compiled with NVRTC to a cubin for the device's exact architecture (which a driver of the same
//! major version loads whatever the minor versions) and, failing that, to PTX for the driver to compile. Only
//! device 0 is measured. [`detect`] says whether a driver and a device are there before anything touches the
//! bindings (whose loader aborts the process with a panic when the library is missing); [`detect_nvrtc`] does
//! the same for NVRTC, which only the kernel-based probes need: without it they are listed in
//! [`GpuResults::skipped`] and the others still run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;
use cudarc::driver::{
    result, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use oversub_accel::cuda::cudarc;
use oversub_accel::cuda::loading::{
    catch_bindings_panic, driver_library_found, load_module, DRIVER_SONAME,
};
use oversub_accel::cuda::managed::{ManagedBuffer, PrefetchDest};
use oversub_accel::cuda::{AddressRange, CudaDriver, CudarcDriver, Mapping, PhysicalMemory};
use serde::Serialize;

use crate::derive::{mean, median, per_event_s, rate_per_s};
use crate::{ProbeError, Tick};

/// The oldest driver (`cuDriverGetVersion`) the probe runs on: the bindings are CUDA 12's.
const MIN_DRIVER_VERSION: i32 = 12_000;
/// Distance between two reads of the managed-fault kernel: one read per 64 KiB region.
pub const FAULT_STRIDE_BYTES: usize = 64 << 10;
/// The most faulting threads a point may have (the paper's Fig. 6 goes to 64).
pub const MAX_FAULT_CONCURRENCY: usize = 64;
/// The host page, for touching a managed buffer from the host.
const HOST_PAGE_BYTES: usize = 4 << 10;
/// How long the preemption probe's spinners keep the device busy.
const SPIN_NS: u64 = 100_000_000;
/// Bound on a spinner's cycles, in case the global timer does not advance: 4 per nanosecond is more than any
/// GPU clock, so the timer normally ends the spin first.
const SPIN_MAX_CYCLES: i64 = 4 * SPIN_NS as i64;
/// Threads per spinner block.
const SPIN_BLOCK_THREADS: u32 = 256;
/// The GPU cache line, the unit of a zero-copy read.
const LINE_BYTES: usize = 128;
/// Lines in the zero-copy latency chain.
const REMOTE_CHAIN_LINES: usize = 4096;
/// One-thread blocks reading host memory at once for the saturated rate: about the 33,792 warps in flight of the
/// issue's measurement (a 132-SM H200 holds 64 warps an SM at most, 8,448 at once; more blocks queue behind).
pub const REMOTE_BLOCKS: usize = 32_768;

/// The kernels, compiled at run time with NVRTC.
const KERNELS_SRC: &str = r#"
// One faulting thread per block: block b reads one byte every `stride` bytes of its share
// [b * per_thread * stride, (b + 1) * per_thread * stride) of `base`. The buffer holds zeros, so `v` is 0, but
// the next address depends on it: each read waits for the previous one, one fault in flight per thread.
extern "C" __global__ void oversub_touch(const unsigned char* base, unsigned long long stride,
                                         unsigned long long per_thread, unsigned long long* sink) {
    const unsigned char* p = base + (unsigned long long)blockIdx.x * per_thread * stride;
    unsigned long long off = 0;
    for (unsigned long long i = 0; i < per_thread; ++i) {
        unsigned char v = *(const volatile unsigned char*)(p + off);
        off += stride + v;
    }
    sink[blockIdx.x] = off;
}

// Spins for `spin_ns` of the global timer (bounded by `max_cycles` of the SM clock as well), after marking its
// block as started in host-mapped memory.
extern "C" __global__ void oversub_spin(unsigned long long spin_ns, long long max_cycles,
                                        unsigned int* started) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    if (threadIdx.x == 0) {
        ((volatile unsigned int*)started)[blockIdx.x] = 1u;
        __threadfence_system();
    }
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < spin_ns && clock64() - c0 < max_cycles);
}

// The smallest kernel: one store.
extern "C" __global__ void oversub_tiny(unsigned int* out) {
    *out = 1u;
}
"#;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct GpuOptions {
    /// Bytes per copy, and the size of the prefetched managed buffer.
    pub copy_bytes: usize,
    /// Reads (one per 64 KiB, [`FAULT_STRIDE_BYTES`]) over all threads of one managed-fault point; the managed
    /// buffer is this many × 64 KiB. Each of `c` threads gets `fault_pages_total / c`.
    pub fault_pages_total: usize,
    /// Faulting threads of each managed-fault point, 1 to [`MAX_FAULT_CONCURRENCY`].
    pub fault_concurrency: Vec<usize>,
    /// Chunks of the VMM granularity mapped and unmapped per repeat.
    pub vmm_chunks: usize,
    /// Timed runs per measurement.
    pub repeats: usize,
    /// Managed buffer of the demand-migration probe (`[uvm]`), and the pinned buffer of the zero-copy one.
    pub uvm_demand_bytes: usize,
}

impl GpuOptions {
    /// The full probe.
    pub fn full() -> Self {
        GpuOptions {
            copy_bytes: 256 << 20,
            fault_pages_total: 4_096,
            fault_concurrency: vec![1, 2, 4, 8, 16, 32, 64],
            vmm_chunks: 64,
            repeats: 5,
            uvm_demand_bytes: 1 << 30,
        }
    }

    /// `--quick`.
    pub fn quick() -> Self {
        GpuOptions {
            copy_bytes: 64 << 20,
            fault_pages_total: 1_024,
            fault_concurrency: vec![1, 4, 16, 64],
            vmm_chunks: 16,
            repeats: 3,
            uvm_demand_bytes: 256 << 20,
        }
    }

    /// The smallest sizes that still run every probe (for tests on a GPU machine).
    pub fn tiny() -> Self {
        GpuOptions {
            copy_bytes: 4 << 20,
            fault_pages_total: 64,
            fault_concurrency: vec![1, 4],
            vmm_chunks: 2,
            repeats: 2,
            uvm_demand_bytes: 8 << 20,
        }
    }

    fn check(&self) -> Result<(), ProbeError> {
        if self.copy_bytes == 0 || self.repeats == 0 || self.vmm_chunks == 0 {
            return Err(ProbeError::InvalidInput(
                "the GPU probe needs a copy size, at least one VMM chunk and at least one repeat"
                    .into(),
            ));
        }
        if self.uvm_demand_bytes < FAULT_STRIDE_BYTES
            || self.uvm_demand_bytes < REMOTE_CHAIN_LINES * LINE_BYTES
        {
            return Err(ProbeError::InvalidInput(format!(
                "the UVM probe's buffer of {} bytes is smaller than one 64 KiB touch or the latency chain",
                self.uvm_demand_bytes
            )));
        }
        if self.fault_pages_total == 0 {
            return Err(ProbeError::InvalidInput(
                "the GPU managed-fault probe needs at least one page".into(),
            ));
        }
        if self
            .fault_pages_total
            .checked_mul(FAULT_STRIDE_BYTES)
            .is_none()
        {
            return Err(ProbeError::InvalidInput(format!(
                "{} managed-fault pages of 64 KiB overflow the address space",
                self.fault_pages_total
            )));
        }
        if let Some(&c) = self
            .fault_concurrency
            .iter()
            .find(|&&c| c == 0 || c > MAX_FAULT_CONCURRENCY || c > self.fault_pages_total)
        {
            return Err(ProbeError::InvalidInput(format!(
                "GPU fault concurrency {c}: it must be 1 to {MAX_FAULT_CONCURRENCY} and at most the {} pages",
                self.fault_pages_total
            )));
        }
        Ok(())
    }
}

/// One managed-fault point: `concurrency` threads faulting at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ManagedFaultPoint {
    /// Faulting threads (one block of one thread each).
    pub concurrency: usize,
    /// Reads of distinct 64 KiB regions over all threads (an upper bound on the faults serviced).
    pub faults: u64,
    /// Kernel time by CUDA events, median run.
    pub kernel_s: f64,
    /// Time per fault as one thread sees it: kernel time / its reads.
    pub latency_s: f64,
    /// Faults per second: all reads / kernel time.
    pub throughput_per_s: f64,
}

/// What the GPU probe measured on device 0.
#[derive(Debug, Clone, Serialize)]
pub struct GpuResults {
    /// Device name as the driver reports it.
    pub name: String,
    /// Host → device copy from pinned memory.
    pub h2d_pinned_bytes_per_s: f64,
    /// Device → host copy to pinned memory.
    pub d2h_pinned_bytes_per_s: f64,
    /// Host → device copy from pageable memory.
    pub h2d_pageable_bytes_per_s: f64,
    /// Device → host copy to pageable memory.
    pub d2h_pageable_bytes_per_s: f64,
    /// One point per fault concurrency; empty when skipped.
    pub managed_faults: Vec<ManagedFaultPoint>,
    /// Managed-memory prefetch (host → device) bandwidth; `None` when skipped.
    pub prefetch_bytes_per_s: Option<f64>,
    /// The VMM chunk (minimum allocation granularity of device memory); 0 when skipped.
    pub vmm_granularity_bytes: u64,
    /// Create + map + set access of one chunk, mean; 0 when skipped.
    pub vmm_map_s: f64,
    /// Unmap + release of one chunk, mean; 0 when skipped.
    pub vmm_unmap_s: f64,
    /// Launch to completion of a one-thread kernel on the highest-priority stream, idle device; `None` when
    /// skipped.
    pub preempt_idle_s: Option<f64>,
    /// The same while lowest-priority kernels fill every SM; `None` when skipped.
    pub preempt_busy_s: Option<f64>,
    /// The UVM simulator's machine; `None` when skipped.
    pub uvm: Option<UvmMachine>,
    /// The probes that could not run, each with why (`"managed-memory faults: ..."`).
    pub skipped: Vec<String>,
}

/// What `oversub sim uvm` needs of the machine (the `[uvm]` keys of the same names).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UvmMachine {
    /// One zero-copy 128 B read of pinned host memory, dependent chain.
    pub remote_line_s: f64,
    /// Zero-copy line reads per second, [`REMOTE_BLOCKS`] threads at once.
    pub remote_lines_per_s: f64,
    /// Demand migration, one touch per 4 KiB page: time per touch.
    pub migrate_4k_stride_page_s: f64,
    /// Demand migration, one touch per 64 KiB: time per touch.
    pub migrate_64k_stride_touch_s: f64,
}

impl GpuResults {
    /// The profile's `[gpu]` table. A figure that was not measured (zero, absent, not finite) is left out.
    pub fn to_profile(&self) -> oversub_profile::Gpu {
        oversub_profile::Gpu {
            name: self.name.clone(),
            h2d_pinned_bytes_per_s: positive(self.h2d_pinned_bytes_per_s),
            d2h_pinned_bytes_per_s: positive(self.d2h_pinned_bytes_per_s),
            h2d_pageable_bytes_per_s: positive(self.h2d_pageable_bytes_per_s),
            d2h_pageable_bytes_per_s: positive(self.d2h_pageable_bytes_per_s),
            managed_fault_s: self
                .managed_faults
                .iter()
                .find(|p| p.concurrency == 1)
                .and_then(|p| positive(p.latency_s)),
            prefetch_bytes_per_s: self.prefetch_bytes_per_s.and_then(positive),
            vmm_map_s: positive(self.vmm_map_s),
            vmm_unmap_s: positive(self.vmm_unmap_s),
            vmm_granularity_bytes: (self.vmm_granularity_bytes > 0)
                .then_some(self.vmm_granularity_bytes),
            preempt_s: self.preempt_busy_s.and_then(positive),
        }
    }
}

fn positive(v: f64) -> Option<f64> {
    (v.is_finite() && v > 0.0).then_some(v)
}

/// Whether a CUDA driver and at least one device are there. Loads nothing of the bindings until `dlopen` has
/// found the driver library, so it is safe to call anywhere.
pub fn detect() -> Result<(), ProbeError> {
    driver_library()?;
    guarded(|| init_driver().map(|_| ()))
}

/// Whether NVRTC (the run-time compiler the kernel-based probes need) can be loaded, under the names cudarc's
/// loader tries.
pub fn detect_nvrtc() -> Result<(), ProbeError> {
    oversub_accel::cuda::loading::detect_nvrtc(
        "the kernel-based GPU probes (managed faults, preemption) are skipped",
    )
    .map_err(|e| ProbeError::Unavailable {
        what: "NVRTC",
        why: match e {
            oversub_accel::AccelError::Unsupported(why) => why,
            other => other.to_string(),
        },
    })
}

/// The driver library, under its soname or any name cudarc's loader tries (so that when this finds one, the
/// loader finds one too, instead of panicking).
fn driver_library() -> Result<(), ProbeError> {
    if driver_library_found() {
        return Ok(());
    }
    Err(ProbeError::Unavailable {
        what: "CUDA",
        why: format!(
            "no CUDA driver found ({DRIVER_SONAME} could not be loaded): GPU probes skipped"
        ),
    })
}

/// `cuInit` and the device count; errors when there is no device or the driver is too old. Returns the driver's
/// version (`12040` for 12.4).
fn init_driver() -> Result<i32, ProbeError> {
    result::init().map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => ProbeError::Unavailable {
            what: "CUDA",
            why: "the CUDA driver is loaded but finds no device (cuInit: CUDA_ERROR_NO_DEVICE): GPU probes \
                  skipped"
                .into(),
        },
        _ => cuda_err("cuInit", e),
    })?;
    let mut version: std::ffi::c_int = 0;
    // SAFETY: `version` is a valid out-pointer for the call's duration.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| cuda_err("cuDriverGetVersion", e))?;
    if version < MIN_DRIVER_VERSION {
        return Err(ProbeError::Unavailable {
            what: "CUDA",
            why: format!(
                "the CUDA driver supports CUDA {}.{}; the GPU probes need 12.0 or newer",
                version / 1000,
                version % 1000 / 10
            ),
        });
    }
    let devices = result::device::get_count().map_err(|e| cuda_err("cuDeviceGetCount", e))?;
    if devices < 1 {
        return Err(ProbeError::Unavailable {
            what: "CUDA",
            why: "the CUDA driver is loaded but sees no device: GPU probes skipped".into(),
        });
    }
    Ok(version)
}

/// A driver error as a probe error: a missing or unusable driver or device is `Unavailable`, a device too small
/// for the sizes asked is `InvalidInput`, anything else is reported like a failed system call.
fn cuda_err(what: &str, e: DriverError) -> ProbeError {
    use sys::CUresult as R;
    // The enum's name (CUDA_ERROR_...), not cuGetErrorString: that would need the library loaded.
    let code = format!("{:?}", e.0);
    match e.0 {
        R::CUDA_ERROR_NO_DEVICE
        | R::CUDA_ERROR_INVALID_DEVICE
        | R::CUDA_ERROR_NOT_INITIALIZED
        | R::CUDA_ERROR_DEINITIALIZED
        | R::CUDA_ERROR_STUB_LIBRARY
        | R::CUDA_ERROR_DEVICE_UNAVAILABLE
        | R::CUDA_ERROR_SYSTEM_NOT_READY
        | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | R::CUDA_ERROR_NOT_SUPPORTED
        | R::CUDA_ERROR_NOT_PERMITTED => ProbeError::Unavailable {
            what: "CUDA",
            why: format!("{what}: {code}"),
        },
        R::CUDA_ERROR_OUT_OF_MEMORY => ProbeError::InvalidInput(format!(
            "{what}: {code}: the GPU has too little memory for these probe sizes"
        )),
        _ => ProbeError::Os {
            what: format!("{what} (CUDA driver)"),
            source: std::io::Error::other(code),
        },
    }
}

/// Runs `f`, turning a panic of the bindings (their loader panics on a missing library or symbol) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, ProbeError>) -> Result<T, ProbeError> {
    catch_bindings_panic(f, |msg| ProbeError::Unavailable {
        what: "CUDA",
        why: format!("the CUDA bindings failed: {msg}"),
    })
}

/// Measures device 0. Errors when there is no driver or device ([`detect`]) or the copies fail; a later probe
/// that cannot run is listed in [`GpuResults::skipped`] instead.
pub fn measure(opts: &GpuOptions, tick: Tick<'_>) -> Result<GpuResults, ProbeError> {
    opts.check()?;
    tick("gpu: looking for a CUDA driver");
    driver_library()?;
    guarded(|| measure_device(opts, tick))
}

fn measure_device(opts: &GpuOptions, tick: Tick<'_>) -> Result<GpuResults, ProbeError> {
    let driver = init_driver()?;
    let ctx = CudaContext::new(0).map_err(|e| cuda_err("creating a context on device 0", e))?;
    let name = ctx
        .name()
        .map_err(|e| cuda_err("cuDeviceGetName", e))?
        .trim()
        .to_owned();
    let stream = ctx
        .new_stream()
        .map_err(|e| cuda_err("cuStreamCreate", e))?;
    let mut skipped = Vec::new();

    tick("gpu: host-device copies");
    let copies = copies(&ctx, &stream, opts)?;

    let kernels = match detect_nvrtc() {
        Ok(()) => {
            tick("gpu: compiling kernels (NVRTC)");
            Kernels::load(&ctx).map_err(|why| format!("the kernels could not be built: {why}"))
        }
        Err(e) => Err(e.to_string()),
    };
    let managed = managed_support(&ctx);

    tick("gpu: managed-memory faults");
    let managed_faults = match (&kernels, &managed) {
        (Err(why), _) | (_, Err(why)) => {
            skipped.push(format!("managed-memory faults: {why}"));
            Vec::new()
        }
        (Ok(k), Ok(())) => guarded(|| managed_faults(&ctx, &stream, k, driver, opts, tick))
            .unwrap_or_else(|e| {
                skipped.push(format!("managed-memory faults: {e}"));
                Vec::new()
            }),
    };

    tick("gpu: managed-memory prefetch");
    let prefetch_bytes_per_s = match &managed {
        Err(why) => {
            skipped.push(format!("managed-memory prefetch: {why}"));
            None
        }
        Ok(()) => guarded(|| prefetch(&ctx, &stream, driver, opts))
            .map_err(|e| skipped.push(format!("managed-memory prefetch: {e}")))
            .ok(),
    };

    tick("gpu: the UVM simulator's machine (zero-copy lines, demand migration)");
    let uvm = match (&kernels, &managed) {
        (Err(why), _) | (_, Err(why)) => {
            skipped.push(format!("uvm machine: {why}"));
            None
        }
        (Ok(k), Ok(())) => guarded(|| uvm_machine(&ctx, &stream, k, driver, opts))
            .map_err(|e| skipped.push(format!("uvm machine: {e}")))
            .ok(),
    };

    tick("gpu: virtual-memory map and unmap");
    let (vmm_granularity_bytes, vmm_map_s, vmm_unmap_s) = guarded(|| vmm(&ctx, opts))
        .unwrap_or_else(|e| {
            skipped.push(format!("virtual-memory map/unmap: {e}"));
            (0, 0.0, 0.0)
        });

    tick("gpu: high-priority kernel latency, idle and busy");
    let (preempt_idle_s, preempt_busy_s) = match &kernels {
        Err(why) => {
            skipped.push(format!("preemption: {why}"));
            (None, None)
        }
        Ok(k) => match guarded(|| preemption(&ctx, k, opts)) {
            Ok((idle, busy)) => (Some(idle), Some(busy)),
            Err(e) => {
                skipped.push(format!("preemption: {e}"));
                (None, None)
            }
        },
    };

    for s in &skipped {
        tracing::debug!("gpu probe skipped: {s}");
    }
    Ok(GpuResults {
        name,
        h2d_pinned_bytes_per_s: copies.h2d_pinned,
        d2h_pinned_bytes_per_s: copies.d2h_pinned,
        h2d_pageable_bytes_per_s: copies.h2d_pageable,
        d2h_pageable_bytes_per_s: copies.d2h_pageable,
        managed_faults,
        prefetch_bytes_per_s,
        vmm_granularity_bytes,
        vmm_map_s,
        vmm_unmap_s,
        preempt_idle_s,
        preempt_busy_s,
        uvm,
        skipped,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Copies

struct Copies {
    h2d_pinned: f64,
    d2h_pinned: f64,
    h2d_pageable: f64,
    d2h_pageable: f64,
}

fn copies(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    opts: &GpuOptions,
) -> Result<Copies, ProbeError> {
    let n = opts.copy_bytes;
    // SAFETY: bytes are valid whatever they hold; the first copy writes the buffer before anything reads it.
    let mut dev = unsafe { stream.alloc::<u8>(n) }
        .map_err(|e| cuda_err("allocating the device copy buffer", e))?;
    // SAFETY: as above; it is filled on the next line. Flags 0: ordinary pinned memory (not write-combined, which
    // the host reads slowly).
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(n, 0) }
        .map_err(|e| cuda_err("cuMemHostAlloc of the pinned buffer", e))?;
    pinned
        .as_mut_slice()
        .map_err(|e| cuda_err("filling the pinned buffer", e))?
        .fill(0x5a);
    // Not zero, so every page is written (and present) before the first copy.
    let mut pageable = vec![0x5a_u8; n];

    let h2d_pinned = best_rate(n, opts.repeats, || {
        stream.memcpy_htod(&pinned, &mut dev)?;
        stream.synchronize()
    })
    .map_err(|e| cuda_err("host-to-device copy from pinned memory", e))?;
    let d2h_pinned = best_rate(n, opts.repeats, || {
        stream.memcpy_dtoh(&dev, &mut pinned)?;
        stream.synchronize()
    })
    .map_err(|e| cuda_err("device-to-host copy to pinned memory", e))?;
    let h2d_pageable = best_rate(n, opts.repeats, || {
        stream.memcpy_htod(&pageable, &mut dev)?;
        stream.synchronize()
    })
    .map_err(|e| cuda_err("host-to-device copy from pageable memory", e))?;
    let d2h_pageable = best_rate(n, opts.repeats, || {
        stream.memcpy_dtoh(&dev, &mut pageable)?;
        stream.synchronize()
    })
    .map_err(|e| cuda_err("device-to-host copy to pageable memory", e))?;
    Ok(Copies {
        h2d_pinned,
        d2h_pinned,
        h2d_pageable,
        d2h_pageable,
    })
}

/// The best bytes per second of `repeats` timed runs of `op`, after one untimed run (first-use costs).
fn best_rate(
    bytes: usize,
    repeats: usize,
    mut op: impl FnMut() -> Result<(), DriverError>,
) -> Result<f64, DriverError> {
    op()?;
    let mut best: f64 = 0.0;
    for _ in 0..repeats {
        let t = Instant::now();
        op()?;
        let s = t.elapsed().as_secs_f64().max(1e-9);
        best = best.max(bytes as f64 / s);
    }
    Ok(best)
}

// ---------------------------------------------------------------------------------------------------------------
// Managed memory

/// Whether the device pages managed memory on demand; why not, when it does not.
fn managed_support(ctx: &CudaContext) -> Result<(), String> {
    let attr = |a, what: &str| {
        ctx.attribute(a)
            .map_err(|e| format!("querying {what}: {:?}", e.0))
    };
    if attr(
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
        "managed-memory support",
    )? == 0
    {
        return Err("the device has no managed memory".into());
    }
    if attr(
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
        "concurrent managed access",
    )? == 0
    {
        return Err(
            "the device lacks concurrent managed access (a launch migrates managed memory whole; nothing faults \
             or prefetches)"
                .into(),
        );
    }
    Ok(())
}

/// Moves a managed buffer to host memory (so that the device's next touches fault) and waits for it.
fn place_on_host(driver: i32, stream: &CudaStream, buf: &ManagedBuffer) -> Result<(), ProbeError> {
    let prefetched = buf.prefetch_async(driver, PrefetchDest::Host, stream);
    stream
        .synchronize()
        .map_err(|e| cuda_err("waiting for the prefetch to the host", e))?;
    if let Err(e) = prefetched {
        // Touching each page from the host migrates it back as well, only slower.
        tracing::debug!(
            "prefetch to the host failed ({:?}); touching the pages instead",
            e.0
        );
        // SAFETY: the stream was synchronised just above; no kernel uses the buffer.
        unsafe { buf.touch_on_host(HOST_PAGE_BYTES, Some(0)) };
    }
    Ok(())
}

fn managed_faults(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    driver: i32,
    opts: &GpuOptions,
    tick: Tick<'_>,
) -> Result<Vec<ManagedFaultPoint>, ProbeError> {
    let pages = opts.fault_pages_total;
    let bytes = pages
        .checked_mul(FAULT_STRIDE_BYTES)
        .ok_or_else(|| ProbeError::InvalidInput(format!("{pages} managed-fault pages overflow")))?;
    let max_c = opts.fault_concurrency.iter().copied().max().unwrap_or(1);
    let sink = stream
        .alloc_zeros::<u64>(max_c)
        .map_err(|e| cuda_err("allocating the fault kernel's output", e))?;
    let sink_ptr = raw_ptr(&sink, stream);
    // Declared after `sink` so that it is freed first: both outlive every kernel (ManagedBuffer's drop synchronises).
    let buf = ManagedBuffer::new(bytes, None).map_err(|e| cuda_err("cuMemAllocManaged", e))?;
    // First touch on the host: the pages live in host memory, and hold the zeros the kernel relies on.
    fill_after_sync(ctx, &buf, 0)?;

    // Warm-up: the first launch loads the function (lazy loading) and reads nothing; then one untimed faulting
    // pass with the most threads, so that the driver's first-use costs for the range stay out of the first point.
    launch_touch(stream, k, buf.ptr(), 0, 1, sink_ptr)?;
    place_on_host(driver, stream, &buf)?;
    launch_touch(stream, k, buf.ptr(), pages / max_c, max_c, sink_ptr)?;
    stream
        .synchronize()
        .map_err(|e| cuda_err("the fault kernel's warm-up", e))?;

    let mut points = Vec::with_capacity(opts.fault_concurrency.len());
    for &c in &opts.fault_concurrency {
        tick(&format!("gpu: managed-memory faults, {c} faulting threads"));
        let per_thread = pages / c;
        let mut times = Vec::with_capacity(opts.repeats);
        for _ in 0..opts.repeats {
            place_on_host(driver, stream, &buf)?;
            let start = timing_event(stream)?;
            launch_touch(stream, k, buf.ptr(), per_thread, c, sink_ptr)?;
            let end = timing_event(stream)?;
            let ms = start
                .elapsed_ms(&end)
                .map_err(|e| cuda_err("timing the fault kernel", e))?;
            times.push(f64::from(ms) * 1e-3);
        }
        let kernel_s = median(&times).ok_or_else(|| {
            ProbeError::InvalidInput("the fault kernel's times are not numbers".into())
        })?;
        let faults = (per_thread * c) as u64;
        points.push(ManagedFaultPoint {
            concurrency: c,
            faults,
            kernel_s,
            latency_s: per_event_s(kernel_s, per_thread as f64)?,
            throughput_per_s: rate_per_s(faults as f64, kernel_s)?,
        });
    }
    Ok(points)
}

/// Synchronises the context, then fills a managed buffer from the host.
fn fill_after_sync(ctx: &CudaContext, buf: &ManagedBuffer, byte: u8) -> Result<(), ProbeError> {
    ctx.synchronize()
        .map_err(|e| cuda_err("cuCtxSynchronize", e))?;
    // SAFETY: the context was synchronised just above; no kernel uses the buffer.
    unsafe { buf.fill_on_host(byte) };
    Ok(())
}

/// An event that records time (cudarc's default events do not).
fn timing_event(stream: &CudaStream) -> Result<cudarc::driver::CudaEvent, ProbeError> {
    stream
        .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("cuEventRecord", e))
}

/// A slice's device address, to pass to kernels as a plain value: cudarc's own argument passing would add event
/// waits and records around the launch, inside the timed window. The slice stays on `stream`.
fn raw_ptr<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (ptr, _record) = slice.device_ptr(stream);
    ptr
}

fn launch_touch(
    stream: &CudaStream,
    k: &Kernels,
    base: sys::CUdeviceptr,
    per_thread: usize,
    threads: usize,
    sink: u64,
) -> Result<(), ProbeError> {
    launch_touch_strided(
        stream,
        k,
        base,
        FAULT_STRIDE_BYTES,
        per_thread,
        threads,
        sink,
    )
}

/// [`launch_touch`] at any stride. The caller's buffer must hold `threads × per_thread × stride` bytes and the
/// sink `threads` values.
fn launch_touch_strided(
    stream: &CudaStream,
    k: &Kernels,
    base: sys::CUdeviceptr,
    stride: usize,
    per_thread: usize,
    threads: usize,
    sink: u64,
) -> Result<(), ProbeError> {
    let stride = stride as u64;
    let per_thread = per_thread as u64;
    let cfg = LaunchConfig {
        grid_dim: (u32::try_from(threads).unwrap_or(u32::MAX), 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(&k.touch);
    b.arg(&base).arg(&stride).arg(&per_thread).arg(&sink);
    // SAFETY: oversub_touch(const unsigned char*, unsigned long long, unsigned long long, unsigned long long*)
    // gets four 64-bit values in that order. Block b reads below base + (b + 1) * per_thread * stride, within the
    // managed buffer of `pages` × stride bytes since threads × per_thread <= pages; it writes sink[b], and the
    // sink holds the largest thread count. Both outlive the launch (the caller synchronises before freeing).
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("launching the fault kernel", e))?;
    Ok(())
}

/// Times one launch of the touch kernel by CUDA events, after `before` (untimed) has run.
#[allow(clippy::too_many_arguments)]
fn timed_touch(
    stream: &CudaStream,
    k: &Kernels,
    base: sys::CUdeviceptr,
    stride: usize,
    per_thread: usize,
    threads: usize,
    sink: u64,
    repeats: usize,
    mut before: impl FnMut() -> Result<(), ProbeError>,
) -> Result<f64, ProbeError> {
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        before()?;
        let start = timing_event(stream)?;
        launch_touch_strided(stream, k, base, stride, per_thread, threads, sink)?;
        let end = timing_event(stream)?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| cuda_err("timing the touch kernel", e))?;
        times.push(f64::from(ms) * 1e-3);
    }
    median(&times)
        .ok_or_else(|| ProbeError::InvalidInput("the touch kernel's times are not numbers".into()))
}

/// The `[uvm]` figures (see the module doc).
fn uvm_machine(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    driver: i32,
    opts: &GpuOptions,
) -> Result<UvmMachine, ProbeError> {
    let bytes = opts.uvm_demand_bytes;
    let sink = stream
        .alloc_zeros::<u64>(REMOTE_BLOCKS.max(bytes / 4096))
        .map_err(|e| cuda_err("allocating the touch kernel's output", e))?;
    let sink_ptr = raw_ptr(&sink, stream);

    // Zero-copy: pinned, device-mapped host memory of zeros (the kernel's chain relies on them).
    // SAFETY: u8 is valid whatever the bytes; the buffer is zeroed before any kernel reads it.
    let mut host =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(|e| cuda_err("cuMemHostAlloc of the zero-copy buffer", e))?;
    let host_ptr = host
        .as_mut_ptr()
        .map_err(|e| cuda_err("the zero-copy buffer", e))?;
    // SAFETY: `host_ptr` points at `bytes` bytes of this allocation, which no kernel uses yet.
    unsafe { std::ptr::write_bytes(host_ptr, 0, bytes) };
    let mut host_dev: sys::CUdeviceptr = 0;
    // SAFETY: `host_ptr` is a mapped pinned allocation of this context; valid out-pointer.
    let mapped =
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut host_dev, host_ptr.cast(), 0) }.result();
    if mapped.is_err() {
        // With unified addressing the host address is the device's.
        host_dev = host_ptr as u64;
    }
    let chain = REMOTE_CHAIN_LINES;
    let none = || Ok(());
    // Warm-up (function load), then the chain: one thread, `chain` dependent lines.
    launch_touch_strided(stream, k, host_dev, LINE_BYTES, 1, 1, sink_ptr)?;
    let chain_s = timed_touch(
        stream,
        k,
        host_dev,
        LINE_BYTES,
        chain,
        1,
        sink_ptr,
        opts.repeats,
        none,
    )?;
    let remote_line_s = per_event_s(chain_s, chain as f64)?;
    let per_block = (bytes / LINE_BYTES / REMOTE_BLOCKS).max(1);
    let blocks = (bytes / LINE_BYTES / per_block).min(REMOTE_BLOCKS);
    let all_s = timed_touch(
        stream,
        k,
        host_dev,
        LINE_BYTES,
        per_block,
        blocks,
        sink_ptr,
        opts.repeats,
        none,
    )?;
    let remote_lines_per_s = rate_per_s((per_block * blocks) as f64, all_s)?;
    stream
        .synchronize()
        .map_err(|e| cuda_err("the zero-copy kernels", e))?;

    // Demand migration: a managed buffer on the host, one thread a touch.
    let buf = ManagedBuffer::new(bytes, None).map_err(|e| cuda_err("cuMemAllocManaged", e))?;
    fill_after_sync(ctx, &buf, 0)?;
    let mut per_touch = [0.0; 2];
    for (slot, stride) in per_touch.iter_mut().zip([4096usize, FAULT_STRIDE_BYTES]) {
        let touches = bytes / stride;
        let s = timed_touch(
            stream,
            k,
            buf.ptr(),
            stride,
            1,
            touches,
            sink_ptr,
            opts.repeats,
            || place_on_host(driver, stream, &buf),
        )?;
        *slot = per_event_s(s, touches as f64)?;
    }
    Ok(UvmMachine {
        remote_line_s,
        remote_lines_per_s,
        migrate_4k_stride_page_s: per_touch[0],
        migrate_64k_stride_touch_s: per_touch[1],
    })
}

fn prefetch(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    driver: i32,
    opts: &GpuOptions,
) -> Result<f64, ProbeError> {
    let buf =
        ManagedBuffer::new(opts.copy_bytes, None).map_err(|e| cuda_err("cuMemAllocManaged", e))?;
    fill_after_sync(ctx, &buf, 0x5a)?;
    // Prefetching to a device needs concurrent managed access, which the caller checked.
    let dest = PrefetchDest::Device(i32::try_from(ctx.ordinal()).unwrap_or(0), ctx.cu_device());
    let rate = best_rate_probe(opts.copy_bytes, opts.repeats, || {
        place_on_host(driver, stream, &buf)?;
        let t = Instant::now();
        buf.prefetch_async(driver, dest, stream)
            .map_err(|e| cuda_err("cuMemPrefetchAsync to the device", e))?;
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the prefetch", e))?;
        Ok(t.elapsed())
    })?;
    Ok(rate)
}

/// Like [`best_rate`] for an operation that times itself (to leave its set-up out).
fn best_rate_probe(
    bytes: usize,
    repeats: usize,
    mut op: impl FnMut() -> Result<Duration, ProbeError>,
) -> Result<f64, ProbeError> {
    op()?;
    let mut best: f64 = 0.0;
    for _ in 0..repeats {
        let s = op()?.as_secs_f64().max(1e-9);
        best = best.max(rate_per_s(bytes as f64, s)?);
    }
    Ok(best)
}

// ---------------------------------------------------------------------------------------------------------------
// Virtual-memory management

/// (granularity, mean map time, mean unmap time), through the cuda backend's VMM wrappers: one map is
/// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`, one unmap `cuMemUnmap` + `cuMemRelease`.
fn vmm(ctx: &CudaContext, opts: &GpuOptions) -> Result<(u64, f64, f64), ProbeError> {
    let ordinal = i32::try_from(ctx.ordinal()).unwrap_or(0);
    let driver: Arc<dyn CudaDriver> =
        Arc::new(
            CudarcDriver::new(ordinal).map_err(|e| ProbeError::Unavailable {
                what: "CUDA virtual-memory management",
                why: e.to_string(),
            })?,
        );
    if !driver.info().vmm_supported {
        return Err(ProbeError::Unavailable {
            what: "CUDA virtual-memory management",
            why: "the device does not support it".into(),
        });
    }
    let granularity = driver.info().granularity_bytes;
    if granularity == 0 {
        return Err(ProbeError::InvalidInput(
            "the driver reported a VMM granularity of 0 bytes".into(),
        ));
    }
    let range = opts.vmm_chunks.checked_mul(granularity).ok_or_else(|| {
        ProbeError::InvalidInput(format!("{} VMM chunks overflow", opts.vmm_chunks))
    })?;
    let vmm_err = |what: &str, e: oversub_accel::cuda::DriverError| ProbeError::Os {
        what: format!("{what} (CUDA driver)"),
        source: std::io::Error::other(e.to_string()),
    };
    let reservation = AddressRange::reserve(&driver, range, granularity)
        .map_err(|e| vmm_err("cuMemAddressReserve", e))?;

    // One untimed chunk first (first-use costs), then `repeats` rounds of all chunks.
    let mut map_s = Vec::with_capacity(opts.repeats * opts.vmm_chunks);
    let mut unmap_s = Vec::with_capacity(opts.repeats * opts.vmm_chunks);
    for round in 0..=opts.repeats {
        let count = if round == 0 { 1 } else { opts.vmm_chunks };
        let mut chunks: Vec<Mapping> = Vec::with_capacity(count);
        for i in 0..count {
            let at = reservation.addr() + (i * granularity) as u64;
            let t = Instant::now();
            let memory = PhysicalMemory::create(&driver, granularity)
                .map_err(|e| vmm_err("cuMemCreate", e))?;
            // SAFETY: `at..at + granularity` is chunk i of the reserved range, where nothing is mapped (each
            // round unmaps all its chunks before the next).
            let chunk =
                unsafe { Mapping::map(&driver, at, memory) }.map_err(|e| vmm_err("cuMemMap", e))?;
            let s = t.elapsed().as_secs_f64();
            chunks.push(chunk);
            if round > 0 {
                map_s.push(s);
            }
        }
        for chunk in chunks {
            let t = Instant::now();
            // SAFETY: nothing ever used the chunk's memory.
            unsafe { chunk.unmap() }.map_err(|(_, e)| vmm_err("cuMemUnmap", e))?;
            let s = t.elapsed().as_secs_f64();
            if round > 0 {
                unmap_s.push(s);
            }
        }
    }
    drop(reservation);
    let (Some(map), Some(unmap)) = (mean(&map_s), mean(&unmap_s)) else {
        return Err(ProbeError::InvalidInput("no VMM chunk was timed".into()));
    };
    Ok((granularity as u64, map, unmap))
}

// ---------------------------------------------------------------------------------------------------------------
// Kernels and preemption

/// The compiled kernels.
#[derive(Debug)]
struct Kernels {
    touch: CudaFunction,
    spin: CudaFunction,
    tiny: CudaFunction,
}

impl Kernels {
    /// Compiles [`KERNELS_SRC`] (a cubin for the device, PTX as the fallback) and finds the kernels. Errors say
    /// why, in words.
    fn load(ctx: &Arc<CudaContext>) -> Result<Self, String> {
        Self::from_module(&load_module(ctx, KERNELS_SRC)?)
    }

    fn from_module(m: &Arc<cudarc::driver::CudaModule>) -> Result<Self, String> {
        let f = |name: &str| {
            m.load_function(name)
                .map_err(|e| format!("finding {name}: {:?}", e.0))
        };
        Ok(Kernels {
            touch: f("oversub_touch")?,
            spin: f("oversub_spin")?,
            tiny: f("oversub_tiny")?,
        })
    }
}

/// Synchronises a stream on drop: spinners launched on it have ended before anything they use is freed.
struct Drain<'a>(&'a CudaStream);

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        // The raw call: cudarc's would return early, without waiting, once the context has recorded an error.
        // SAFETY: the stream is borrowed, so still alive, and belongs to the current context.
        let _ = unsafe { result::stream::synchronize(self.0.cu_stream()) };
    }
}

/// (idle, busy) latency of a one-thread kernel on the highest-priority stream.
fn preemption(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    opts: &GpuOptions,
) -> Result<(f64, f64), ProbeError> {
    ctx.bind_to_thread()
        .map_err(|e| cuda_err("binding the context", e))?;
    // (least, greatest): numerically smaller is higher priority.
    let (least, greatest) = result::stream::get_priority_range()
        .map_err(|e| cuda_err("cuCtxGetStreamPriorityRange", e))?;
    if least == greatest {
        tracing::info!(
            "the device has one stream priority: the busy latency shows no priority effect"
        );
    }
    let high = ctx
        .new_stream_with_priority(greatest)
        .map_err(|e| cuda_err("creating the high-priority stream", e))?;
    let low = ctx
        .new_stream_with_priority(least)
        .map_err(|e| cuda_err("creating the low-priority stream", e))?;
    let out = high
        .alloc_zeros::<u32>(1)
        .map_err(|e| cuda_err("allocating the tiny kernel's output", e))?;
    let out_ptr = raw_ptr(&out, &high);

    run_tiny(&high, k, out_ptr)?; // warm-up: loads the function
    let mut idle = Vec::with_capacity(opts.repeats);
    for _ in 0..opts.repeats {
        idle.push(run_tiny(&high, k, out_ptr)?);
    }

    // One full wave of spinners: every SM holds as many blocks as fit, so the tiny kernel finds no room.
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| cuda_err("querying the SM count", e))?;
    let per_sm = k
        .spin
        .occupancy_max_active_blocks_per_multiprocessor(SPIN_BLOCK_THREADS, 0, None)
        .map_err(|e| cuda_err("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?
        .max(1);
    let grid = u32::try_from(sms.max(1))
        .unwrap_or(1)
        .saturating_mul(per_sm);
    let blocks = grid as usize;
    // Host-mapped flags, one per spinner block, set when the block starts.
    // SAFETY: u32 is valid whatever the bytes; the flags are zeroed before every launch.
    let mut started =
        unsafe { ctx.alloc_pinned_with_flags::<u32>(blocks, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(|e| cuda_err("cuMemHostAlloc of the start flags", e))?;
    let flags = started
        .as_mut_ptr()
        .map_err(|e| cuda_err("the start flags", e))?;
    let mut flags_dev: sys::CUdeviceptr = 0;
    // SAFETY: `flags` is a mapped pinned allocation of this context; valid out-pointer.
    let mapped =
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut flags_dev, flags.cast(), 0) }.result();
    if mapped.is_err() {
        // With unified addressing (every 64-bit platform CUDA 12 runs on), the host address is the device's.
        flags_dev = flags as u64;
    }
    // Declared after `started` and `out`: dropped (the spinners waited for) before they are freed.
    let _drain = Drain(&low);

    launch_spin(&low, k, 0, 1, flags_dev)?; // warm-up: loads the function
    low.synchronize()
        .map_err(|e| cuda_err("the spinner's warm-up", e))?;

    let mut busy = Vec::with_capacity(opts.repeats);
    for _ in 0..opts.repeats {
        // SAFETY: `flags` holds `blocks` u32; no spinner runs (the low stream was synchronised).
        unsafe { std::ptr::write_bytes(flags, 0, blocks) };
        launch_spin(&low, k, SPIN_NS, grid, flags_dev)?;
        let spun = low
            .record_event(None)
            .map_err(|e| cuda_err("cuEventRecord", e))?;
        let running = wait_started(flags, blocks, Duration::from_nanos(SPIN_NS / 2));
        if running < blocks {
            tracing::info!("only {running} of {blocks} spinner blocks had started");
        }
        busy.push(run_tiny(&high, k, out_ptr)?);
        if spun.try_is_complete().unwrap_or(false) {
            tracing::info!(
                "the spinners ended before the high-priority kernel did: it waited for them (no preemption)"
            );
        }
        low.synchronize()
            .map_err(|e| cuda_err("waiting for the spinners", e))?;
    }
    let (Some(idle), Some(busy)) = (median(&idle), median(&busy)) else {
        return Err(ProbeError::InvalidInput(
            "the preemption times are not numbers".into(),
        ));
    };
    Ok((idle, busy))
}

/// Waits until `blocks` start flags are set or `limit` passes; how many were set.
fn wait_started(flags: *const u32, blocks: usize, limit: Duration) -> usize {
    let t = Instant::now();
    loop {
        // SAFETY: `flags` points to `blocks` u32 of pinned memory that lives as long as the caller's allocation;
        // the device writes them concurrently, hence volatile reads of whole words.
        let set = (0..blocks)
            .filter(|&i| unsafe { flags.add(i).read_volatile() } != 0)
            .count();
        if set == blocks || t.elapsed() >= limit {
            return set;
        }
        std::hint::spin_loop();
    }
}

fn launch_spin(
    stream: &CudaStream,
    k: &Kernels,
    spin_ns: u64,
    grid: u32,
    flags: sys::CUdeviceptr,
) -> Result<(), ProbeError> {
    let max_cycles: i64 = if spin_ns == 0 { 0 } else { SPIN_MAX_CYCLES };
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (SPIN_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(&k.spin);
    b.arg(&spin_ns).arg(&max_cycles).arg(&flags);
    // SAFETY: oversub_spin(unsigned long long, long long, unsigned int*) gets three 64-bit values in that order;
    // block b writes flags[b] only, and the flags hold `grid` words (the warm-up launches one block). The spin is
    // bounded by time and by cycles, and the caller synchronises the stream before the flags are freed.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("launching the spinners", e))?;
    Ok(())
}

/// Host time from launching the tiny kernel to the end of its stream's synchronisation.
fn run_tiny(stream: &CudaStream, k: &Kernels, out: u64) -> Result<f64, ProbeError> {
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let t = Instant::now();
    let mut b = stream.launch_builder(&k.tiny);
    b.arg(&out);
    // SAFETY: oversub_tiny(unsigned int*) gets one pointer, to a live u32 of device memory on this stream.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err("launching the tiny kernel", e))?;
    stream
        .synchronize()
        .map_err(|e| cuda_err("waiting for the tiny kernel", e))?;
    Ok(t.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use oversub_accel::cuda::loading::can_dlopen;

    #[test]
    fn detect_says_ok_or_unavailable() {
        match detect() {
            Ok(()) => {}
            Err(ProbeError::Unavailable { what, why }) => {
                assert_eq!(what, "CUDA");
                assert!(!why.is_empty());
                // This repository's CI machines have no driver at all.
                if !can_dlopen(DRIVER_SONAME) && !can_dlopen("libcuda.so") {
                    assert!(why.contains("no CUDA driver found"), "{why}");
                    assert!(why.contains("libcuda.so.1"), "{why}");
                }
            }
            Err(e) => panic!("detect gave neither Ok nor Unavailable: {e}"),
        }
        match detect_nvrtc() {
            Ok(()) => {}
            Err(ProbeError::Unavailable { what, why }) => {
                assert_eq!(what, "NVRTC");
                assert!(why.contains("libnvrtc.so"), "{why}");
            }
            Err(e) => panic!("detect_nvrtc gave neither Ok nor Unavailable: {e}"),
        }
    }

    #[test]
    fn measure_without_a_driver_is_unavailable() {
        if can_dlopen(DRIVER_SONAME) {
            return;
        }
        let ticks = std::sync::Mutex::new(Vec::new());
        let tick = |s: &str| ticks.lock().unwrap().push(s.to_owned());
        match measure(&GpuOptions::tiny(), &tick) {
            Err(ProbeError::Unavailable { why, .. }) => {
                assert!(why.contains("no CUDA driver found"), "{why}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert_eq!(ticks.lock().unwrap().len(), 1);
    }

    #[test]
    fn options_are_sane() {
        for o in [GpuOptions::full(), GpuOptions::quick(), GpuOptions::tiny()] {
            o.check().unwrap();
            assert!(
                o.fault_concurrency.contains(&1),
                "managed_fault_s needs a point at 1"
            );
            assert!(o.fault_concurrency.windows(2).all(|w| w[0] < w[1]));
            assert!(o.fault_pages_total / o.fault_concurrency.iter().max().unwrap() >= 1);
        }
        let q = GpuOptions::quick();
        let f = GpuOptions::full();
        assert!(q.copy_bytes <= f.copy_bytes && q.fault_pages_total <= f.fault_pages_total);
        assert!(GpuOptions::tiny().copy_bytes <= q.copy_bytes);

        let bad = |edit: fn(&mut GpuOptions)| {
            let mut o = GpuOptions::tiny();
            edit(&mut o);
            matches!(o.check(), Err(ProbeError::InvalidInput(_)))
        };
        assert!(bad(|o| o.copy_bytes = 0));
        assert!(bad(|o| o.repeats = 0));
        assert!(bad(|o| o.vmm_chunks = 0));
        assert!(bad(|o| o.fault_pages_total = 0));
        assert!(bad(|o| o.fault_concurrency = vec![0]));
        assert!(bad(|o| o.fault_concurrency = vec![65]));
        assert!(bad(|o| o.fault_concurrency = vec![128]));
        assert!(bad(|o| {
            o.fault_pages_total = 2;
            o.fault_concurrency = vec![4];
        }));
        assert!(bad(|o| o.fault_pages_total = usize::MAX));
    }

    #[test]
    fn invalid_options_are_refused_before_looking_for_cuda() {
        let mut o = GpuOptions::tiny();
        o.repeats = 0;
        assert!(matches!(
            measure(&o, &crate::no_tick),
            Err(ProbeError::InvalidInput(_))
        ));
    }

    fn hand_made() -> GpuResults {
        GpuResults {
            name: "NVIDIA H100 80GB HBM3".into(),
            h2d_pinned_bytes_per_s: 50e9,
            d2h_pinned_bytes_per_s: 48e9,
            h2d_pageable_bytes_per_s: 20e9,
            d2h_pageable_bytes_per_s: 15e9,
            managed_faults: vec![
                ManagedFaultPoint {
                    concurrency: 1,
                    faults: 1024,
                    kernel_s: 0.03,
                    latency_s: 30e-6,
                    throughput_per_s: 34_000.0,
                },
                ManagedFaultPoint {
                    concurrency: 64,
                    faults: 1024,
                    kernel_s: 0.009,
                    latency_s: 140e-6,
                    throughput_per_s: 114_000.0,
                },
            ],
            prefetch_bytes_per_s: Some(25e9),
            vmm_granularity_bytes: 2 << 20,
            vmm_map_s: 20e-6,
            vmm_unmap_s: 15e-6,
            preempt_idle_s: Some(8e-6),
            preempt_busy_s: Some(60e-6),
            uvm: Some(UvmMachine {
                remote_line_s: 1.27e-6,
                remote_lines_per_s: 392e6,
                migrate_4k_stride_page_s: 1.04e-6,
                migrate_64k_stride_touch_s: 3.8e-6,
            }),
            skipped: vec![],
        }
    }

    #[test]
    fn to_profile_maps_every_figure() {
        let g = hand_made().to_profile();
        assert_eq!(g.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(g.h2d_pinned_bytes_per_s, Some(50e9));
        assert_eq!(g.d2h_pinned_bytes_per_s, Some(48e9));
        assert_eq!(g.h2d_pageable_bytes_per_s, Some(20e9));
        assert_eq!(g.d2h_pageable_bytes_per_s, Some(15e9));
        assert_eq!(g.managed_fault_s, Some(30e-6), "the point at concurrency 1");
        assert_eq!(g.prefetch_bytes_per_s, Some(25e9));
        assert_eq!(g.vmm_granularity_bytes, Some(2 << 20));
        assert_eq!(g.vmm_map_s, Some(20e-6));
        assert_eq!(g.vmm_unmap_s, Some(15e-6));
        assert_eq!(g.preempt_s, Some(60e-6), "the busy latency");
    }

    #[test]
    fn to_profile_leaves_out_what_was_skipped() {
        let mut r = hand_made();
        r.managed_faults.retain(|p| p.concurrency != 1);
        r.prefetch_bytes_per_s = None;
        r.vmm_granularity_bytes = 0;
        r.vmm_map_s = 0.0;
        r.vmm_unmap_s = 0.0;
        r.preempt_busy_s = None;
        r.d2h_pageable_bytes_per_s = f64::NAN;
        r.skipped = vec!["virtual-memory map/unmap: not supported".into()];
        let g = r.to_profile();
        assert_eq!(g.managed_fault_s, None);
        assert_eq!(g.prefetch_bytes_per_s, None);
        assert_eq!(g.vmm_granularity_bytes, None);
        assert_eq!(g.vmm_map_s, None);
        assert_eq!(g.vmm_unmap_s, None);
        assert_eq!(g.preempt_s, None);
        assert_eq!(g.d2h_pageable_bytes_per_s, None);
        assert_eq!(g.h2d_pinned_bytes_per_s, Some(50e9));
    }

    #[test]
    fn driver_errors_map_to_probe_errors() {
        use sys::CUresult as R;
        assert!(matches!(
            cuda_err("cuInit", DriverError(R::CUDA_ERROR_NO_DEVICE)),
            ProbeError::Unavailable { what: "CUDA", ref why } if why.contains("CUDA_ERROR_NO_DEVICE")
        ));
        assert!(matches!(
            cuda_err("cuInit", DriverError(R::CUDA_ERROR_STUB_LIBRARY)),
            ProbeError::Unavailable { .. }
        ));
        assert!(matches!(
            cuda_err("cuMemAlloc", DriverError(R::CUDA_ERROR_OUT_OF_MEMORY)),
            ProbeError::InvalidInput(ref m) if m.contains("cuMemAlloc")
        ));
        let e = cuda_err("launching", DriverError(R::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(matches!(e, ProbeError::Os { .. }));
        assert!(e.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{e}");
    }

    #[test]
    fn a_panic_in_the_bindings_becomes_an_error() {
        let r: Result<(), ProbeError> = guarded(|| {
            std::panic::panic_any(String::from(
                "Unable to dynamically load the \"cuda\" library",
            ))
        });
        assert!(
            matches!(r, Err(ProbeError::Unavailable { ref why, .. }) if why.contains("dynamically load"))
        );
    }

    /// Runs every probe on a real GPU; only with `OVERSUB_TEST_CUDA=1` (CI has no GPU).
    #[test]
    fn measures_a_real_gpu() {
        if std::env::var("OVERSUB_TEST_CUDA").as_deref() != Ok("1") {
            return;
        }
        detect().unwrap();
        let r = measure(&GpuOptions::tiny(), &crate::no_tick).unwrap();
        eprintln!("{r:#?}");
        let ok = |what: &str, v: f64| assert!(v.is_finite() && v > 0.0, "{what} = {v}");
        assert!(!r.name.is_empty());
        ok("h2d pinned", r.h2d_pinned_bytes_per_s);
        ok("d2h pinned", r.d2h_pinned_bytes_per_s);
        ok("h2d pageable", r.h2d_pageable_bytes_per_s);
        ok("d2h pageable", r.d2h_pageable_bytes_per_s);
        let skipped = |what: &str| r.skipped.iter().any(|s| s.starts_with(what));
        if r.managed_faults.is_empty() {
            assert!(skipped("managed-memory faults"), "{:?}", r.skipped);
        } else {
            assert_eq!(
                r.managed_faults.len(),
                GpuOptions::tiny().fault_concurrency.len()
            );
        }
        for p in &r.managed_faults {
            assert!(p.faults > 0);
            ok("fault kernel", p.kernel_s);
            ok("fault latency", p.latency_s);
            ok("fault throughput", p.throughput_per_s);
        }
        match r.prefetch_bytes_per_s {
            Some(v) => ok("prefetch", v),
            None => assert!(skipped("managed-memory prefetch"), "{:?}", r.skipped),
        }
        if r.vmm_granularity_bytes == 0 {
            assert!(skipped("virtual-memory"), "{:?}", r.skipped);
        } else {
            ok("vmm map", r.vmm_map_s);
            ok("vmm unmap", r.vmm_unmap_s);
        }
        match (r.preempt_idle_s, r.preempt_busy_s) {
            (Some(i), Some(b)) => {
                ok("preempt idle", i);
                ok("preempt busy", b);
            }
            _ => assert!(skipped("preemption"), "{:?}", r.skipped),
        }
        let p = r.to_profile();
        assert_eq!(p.h2d_pinned_bytes_per_s, Some(r.h2d_pinned_bytes_per_s));
    }
}
