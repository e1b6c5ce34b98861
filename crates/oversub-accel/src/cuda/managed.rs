//! Managed (unified) memory, straight through cudarc's bindings: the allocation the probe's fault measurements and
//! the paging benchmark's unified-memory baseline share, its prefetch to host or device, and that baseline's touch
//! kernel. Outside the [`CudaDriver`](super::CudaDriver) trait because the pager never uses managed memory; the
//! callers run it under [`catch_bindings_panic`](super::loading::catch_bindings_panic).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::result::{self, DriverError as CuError};
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::loading::{detect_nvrtc, load_module};
use super::CudarcDriver;

/// `cuMemPrefetchAsync`'s destination for host memory (`CU_DEVICE_CPU` in cuda.h).
const CU_DEVICE_CPU: sys::CUdevice = -1;

/// A driver error's code as text (the enum's name, `CUDA_ERROR_...`: `cuGetErrorString` would need the library).
pub fn code_name(e: &CuError) -> String {
    format!("{:?}", e.0)
}

/// Whether the device has managed memory at all, and whether it pages it on demand (concurrent managed access).
pub fn managed_attributes(ctx: &CudaContext) -> Result<(bool, bool), (&'static str, CuError)> {
    let managed = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)
        .map_err(|e| ("managed-memory support", e))?
        != 0;
    let concurrent = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)
        .map_err(|e| ("concurrent managed access", e))?
        != 0;
    Ok((managed, concurrent))
}

/// A managed allocation (`cuMemAllocManaged`, attached globally), freed on drop after the device has finished with
/// it.
#[derive(Debug)]
pub struct ManagedBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    /// The context to make current before freeing, when the owner does not keep one current.
    ctx: Option<Arc<CudaContext>>,
}

impl ManagedBuffer {
    /// Allocates `bytes` in the current context; `ctx`, when given, is made current again before the free.
    pub fn new(bytes: usize, ctx: Option<Arc<CudaContext>>) -> Result<ManagedBuffer, CuError> {
        // SAFETY: a fresh allocation; its bytes are only read through this type, after the owner wrote them
        // (`fill_on_host`, `host_bytes_mut`).
        let ptr =
            unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }?;
        Ok(ManagedBuffer { ptr, bytes, ctx })
    }

    /// The address, the same on host and device.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the allocation is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Writes every byte from the host: the pages come to exist in host memory.
    ///
    /// # Safety
    ///
    /// No kernel may use the buffer meanwhile (synchronise first).
    pub unsafe fn fill_on_host(&self, byte: u8) {
        // SAFETY: managed memory is addressable from the host at the same address; the range is the allocation;
        // the caller promises no kernel uses it.
        unsafe { std::ptr::write_bytes(self.ptr as *mut u8, byte, self.bytes) };
    }

    /// The bytes, seen from the host.
    ///
    /// # Safety
    ///
    /// No kernel may use the buffer while the slice lives (synchronise first).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn host_bytes_mut(&self) -> &mut [u8] {
        // SAFETY: managed memory is addressable from the host at the same address for its whole length; the caller
        // promises no kernel uses it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes) }
    }

    /// Touches one byte of every `stride` bytes from the host, so the pages migrate back: writes `Some(byte)`, or
    /// with `None` reads each byte and writes it back (the data stays).
    ///
    /// # Safety
    ///
    /// No kernel may use the buffer meanwhile (synchronise first).
    pub unsafe fn touch_on_host(&self, stride: usize, byte: Option<u8>) {
        let base = self.ptr as *mut u8;
        for off in (0..self.bytes).step_by(stride.max(1)) {
            // SAFETY: `off` is inside the allocation, addressable from the host; the caller promises no kernel
            // uses it.
            unsafe {
                let p = base.add(off);
                p.write_volatile(byte.unwrap_or_else(|| p.read_volatile()));
            }
        }
    }

    /// `cuMemPrefetchAsync` of the whole buffer on `stream`: the `_v2` form (a `CUmemLocation`; driver 12.2 and
    /// later, the only form CUDA 13 keeps) when `driver_version` has it, the original (a device, or
    /// `CU_DEVICE_CPU`) before.
    pub fn prefetch_async(
        &self,
        driver_version: i32,
        dest: PrefetchDest,
        stream: &CudaStream,
    ) -> Result<(), CuError> {
        if driver_version >= 12_020 {
            let location = match dest {
                PrefetchDest::Host => sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                    id: 0, // ignored for the host
                },
                PrefetchDest::Device(ordinal, _) => sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: ordinal,
                },
            };
            // SAFETY: the range is exactly the managed allocation; the stream belongs to the current context; the
            // driver is 12.2 or newer, so the symbol exists (cudarc's loader would panic otherwise).
            unsafe {
                sys::cuMemPrefetchAsync_v2(self.ptr, self.bytes, location, 0, stream.cu_stream())
            }
            .result()
        } else {
            let device = match dest {
                PrefetchDest::Host => CU_DEVICE_CPU,
                PrefetchDest::Device(_, device) => device,
            };
            // SAFETY: as above; every CUDA 12 driver has the original form.
            unsafe { sys::cuMemPrefetchAsync(self.ptr, self.bytes, device, stream.cu_stream()) }
                .result()
        }
    }
}

impl Drop for ManagedBuffer {
    fn drop(&mut self) {
        let freed = super::loading::catch_bindings_panic(
            || {
                if let Some(ctx) = &self.ctx {
                    let _ = ctx.bind_to_thread();
                }
                // Nothing may still use the memory when it is freed (an error path may leave a kernel running).
                let _ = result::ctx::synchronize();
                // SAFETY: `ptr` came from cuMemAllocManaged and is freed once, after the device finished with it.
                unsafe { result::memory_free(self.ptr) }.map_err(|e| code_name(&e))
            },
            |msg| msg,
        );
        if let Err(why) = freed {
            tracing::warn!("freeing the managed buffer failed: {why}");
        }
    }
}

/// Where a prefetch moves managed memory.
#[derive(Debug, Clone, Copy)]
pub enum PrefetchDest {
    /// Host memory.
    Host,
    /// The device's ordinal and handle.
    Device(i32, sys::CUdevice),
}

/// One thread of the touch kernel per this many bytes (a host page).
pub const TOUCH_STRIDE_BYTES: u64 = 4096;
/// Threads per block of the touch kernel.
const TOUCH_BLOCK_THREADS: u32 = 256;
/// Managed memory is allocated only when the size is at most this fraction of the device's free memory.
pub const UNIFIED_FREE_FRACTION: f64 = 0.8;

/// The touch kernel, compiled at run time with NVRTC: thread i reads one byte of page i (volatile, and stored only
/// when `flag` is set, which it never is, so the read cannot be dropped).
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

fn cu_err(what: &str, e: CuError) -> String {
    format!("{what}: {:?}", e.0)
}

/// The unified-memory baseline of the paging benchmark: a managed buffer, its data on the host, and a kernel with
/// one thread per 4 KiB page that reads a byte of its page, so the driver migrates every page on demand. Errors
/// are why it cannot run, in words (the benchmark reports them as the reason it skipped the baseline).
#[derive(Debug)]
pub struct UnifiedTouch {
    // Dropped first: the memory, while the context is alive.
    managed: ManagedBuffer,
    kernel: CudaFunction,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    driver_version: i32,
    pages: u64,
    concurrent: bool,
}

impl UnifiedTouch {
    /// Everything the measurement needs on device `ordinal`, the buffer of `size` bytes written by `fill` from the
    /// host. Allocates it only when the size is at most [`UNIFIED_FREE_FRACTION`] of the device's free memory
    /// (oversubscribing managed memory can hang a GPU). Call under
    /// [`catch_bindings_panic`](super::loading::catch_bindings_panic).
    pub fn new(
        ordinal: i32,
        size: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<UnifiedTouch, String> {
        detect_nvrtc("the unified-memory kernel needs it").map_err(|e| e.to_string())?;
        let driver = CudarcDriver::new(ordinal).map_err(|e| e.to_string())?;
        let ctx = Arc::clone(driver.context());
        let driver_version = super::CudaDriver::info(&driver).driver_version;
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
        let kernel = load_module(&ctx, TOUCH_SRC)?
            .load_function("oversub_um_touch")
            .map_err(|e| cu_err("finding oversub_um_touch", e))?;
        let stream = ctx.new_stream().map_err(|e| cu_err("cuStreamCreate", e))?;
        let (free, _) =
            super::CudaDriver::mem_get_info(&driver).map_err(|e| format!("cuMemGetInfo: {e}"))?;
        if size as f64 > UNIFIED_FREE_FRACTION * free as f64 {
            return Err(format!(
                "a managed buffer of {} is more than {:.0}% of the {} free on the device; managed memory is never \
                 allocated past free device memory here (oversubscribing it can hang the GPU)",
                oversub_base::format_bytes(size as u64),
                UNIFIED_FREE_FRACTION * 100.0,
                oversub_base::format_bytes(free)
            ));
        }
        ctx.bind_to_thread()
            .map_err(|e| cu_err("binding the context", e))?;
        let managed = ManagedBuffer::new(size, Some(Arc::clone(&ctx)))
            .map_err(|e| cu_err("cuMemAllocManaged", e))?;
        // SAFETY: no kernel has used the fresh buffer yet.
        fill(unsafe { managed.host_bytes_mut() }); // written by the CPU: the pages live in host memory
        let pages = (size as u64).div_ceil(TOUCH_STRIDE_BYTES);
        let unified = UnifiedTouch {
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

    /// Whether the device has concurrent managed access (pages migrate one by one on demand).
    pub fn concurrent(&self) -> bool {
        self.concurrent
    }

    /// One timed sample: the buffer's pages on the host, then the kernel from launch to synchronisation; the pages
    /// go back to the host afterwards so the device memory is free for the next phase.
    pub fn sample(&self) -> Result<Duration, String> {
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
        let base: u64 = self.managed.ptr();
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
        let prefetched =
            self.managed
                .prefetch_async(self.driver_version, PrefetchDest::Host, &self.stream);
        self.stream
            .synchronize()
            .map_err(|e| cu_err("waiting for the prefetch to the host", e))?;
        if let Err(e) = prefetched {
            tracing::debug!(
                "prefetch to the host failed ({:?}); touching the pages instead",
                e.0
            );
            // SAFETY: the stream was synchronised, so no kernel uses the buffer. Reading and writing back the same
            // byte keeps the data.
            unsafe {
                self.managed
                    .touch_on_host(TOUCH_STRIDE_BYTES as usize, None)
            };
        }
        Ok(())
    }
}
