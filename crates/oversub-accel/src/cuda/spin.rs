//! The spin kernel of the SiΓ arbiter (the SiGAMMA paper, Sec. 4.3): during a CPU memory phase the GPU must stay
//! off the memory bus, so the arbiter launches a kernel that only spins, with no memory traffic, for the length of
//! the phase.
//!
//! The kernel reads nothing but the `%globaltimer` and `clock64` registers, so its threads make no memory accesses.
//! It is launched on a stream of the device's greatest (highest) priority, in the context the other kernels use
//! (the paper's point: one context, so that stream priorities order everyone's kernels). By default it has one
//! full wave of blocks, as many per SM as fit on every SM ([`SpinKernel::blocks`]), so that once it runs no
//! other kernel's block finds room beside it.
//!
//! What priority buys, honestly: NVIDIA documents stream priority as an ordering of *pending* work (pending blocks
//! of higher-priority streams are scheduled first); the block scheduler does not stop blocks that are already
//! running to make room (compute preemption serves time slices between contexts, not stream priorities). The paper
//! saw a high-priority kernel take over from a running one on a Tegra X1 within 120 to 170 µs. On a discrete GPU
//! such as Hopper the spin kernel's blocks take each SM as the lower-priority kernels' running blocks there
//! retire, and from then on those kernels get no new block scheduled until the spin ends. So the GPU goes quiet
//! after the longest running block of the other kernels (what the probe's "preemption" figure measures), not at
//! once: the arbiter has to start the spin that much before the memory phase, or accept that much overlap.
//!
//! The kernel is compiled at run time with NVRTC, to a cubin for the device's exact architecture and, failing
//! that, to PTX for the driver to compile. Without NVRTC [`SpinKernel::new`] says so
//! ([`AccelError::Unsupported`]); nothing here needs CUDA to build.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::cudarc_driver::{bind_context, cu, driver_error, panic_message};
use super::driver::CudaDriver;
use super::loading::{detect_nvrtc, load_module};
use super::CudarcDriver;
use crate::AccelError;

/// Threads per block of the spin kernel: the most a block may have, so that few blocks fill an SM.
const SPIN_BLOCK_THREADS: u32 = 1024;

/// The kernel. It spins for `spin_ns` of the global timer, bounded as well by 4 SM cycles per nanosecond (more than
/// any GPU clock, so the timer normally ends it first) in case the timer does not advance.
const SPIN_SRC: &str = r#"
extern "C" __global__ void oversub_spin(unsigned long long spin_ns) {
    const unsigned long long cap = 1ULL << 60;
    const long long max_cycles = (long long)((spin_ns < cap ? spin_ns : cap) * 4ULL);
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < spin_ns && clock64() - c0 < max_cycles);
}
"#;

/// The compiled spin kernel and its highest-priority stream.
#[derive(Debug)]
pub struct SpinKernel {
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    /// A cudarc view of our own stream (created with the raw call, destroyed in `drop`), for `launch_builder`.
    /// Raw, because cudarc's stream constructor synchronises the whole context when it makes its first stream.
    stream: Arc<CudaStream>,
    sms: u32,
    blocks: u32,
    threads: u32,
    priority: i32,
    launches: AtomicU64,
}

impl SpinKernel {
    /// Compiles the kernel for `driver`'s device and creates its stream at the device's greatest priority.
    ///
    /// Errors: [`AccelError::Unsupported`] without NVRTC, or when the kernel cannot be compiled or loaded;
    /// [`AccelError::Driver`] when a driver call fails.
    pub fn new(driver: &CudarcDriver) -> Result<SpinKernel, AccelError> {
        detect_nvrtc("the spin kernel needs it")?;
        catch_unwind(AssertUnwindSafe(|| Self::build(driver))).unwrap_or_else(|payload| {
            Err(AccelError::Unsupported(format!(
                "the spin kernel could not be built: panic in the CUDA bindings: {}",
                panic_message(payload.as_ref())
            )))
        })
    }

    fn build(driver: &CudarcDriver) -> Result<SpinKernel, AccelError> {
        let ctx = driver.context().clone();
        bind_context(&ctx)?;
        let module = load_module(&ctx, SPIN_SRC).map_err(|why| {
            AccelError::Unsupported(format!("the spin kernel could not be built: {why}"))
        })?;
        let func = module
            .load_function("oversub_spin")
            .map_err(|e| driver_error("cuModuleGetFunction", e))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
        let sms = u32::try_from(sms).unwrap_or(1).max(1);
        let per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(SPIN_BLOCK_THREADS, 0, None)
            .map_err(|e| driver_error("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?
            .max(1);
        let priority = driver.info().greatest_stream_priority;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current (bound above). Non-blocking: the spin must not wait
        // for the legacy default stream.
        cu("cuStreamCreateWithPriority", unsafe {
            sys::cuStreamCreateWithPriority(
                &mut raw,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                priority,
            )
        })?;
        // SAFETY: `raw` is a live stream of this context; the wrapper does not destroy it, our `drop` does, after
        // synchronising, and nothing uses the wrapper after that.
        let stream = unsafe { ctx.wrap_borrowed_stream(raw) };
        Ok(SpinKernel {
            ctx,
            func,
            stream,
            sms,
            blocks: sms.saturating_mul(per_sm),
            threads: SPIN_BLOCK_THREADS,
            priority,
            launches: AtomicU64::new(0),
        })
    }

    /// Blocks per launch. By default one full wave: every SM holds as many spin blocks as fit.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Sets the blocks per launch (at least 1; the number of SMs leaves one block on each).
    pub fn set_blocks(&mut self, blocks: u32) {
        self.blocks = blocks.max(1);
    }

    /// The device's streaming multiprocessors.
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u32 {
        self.threads
    }

    /// The priority of the kernel's stream (the device's greatest).
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Enqueues a spin of `duration` on the highest-priority stream and returns; [`SpinKernel::synchronize`]
    /// waits for it. A zero duration enqueues nothing.
    pub fn launch(&self, duration: Duration) -> Result<(), AccelError> {
        if duration.is_zero() {
            return Ok(());
        }
        let spin_ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let cfg = LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (self.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let launched = catch_unwind(AssertUnwindSafe(|| {
            bind_context(&self.ctx)?;
            let mut b = self.stream.launch_builder(&self.func);
            b.arg(&spin_ns);
            // SAFETY: oversub_spin(unsigned long long) gets one 64-bit value; it touches no memory and its spin is
            // bounded by time and cycles. The stream lives until `drop`, which waits for it.
            unsafe { b.launch(cfg) }
                .map_err(|e| AccelError::from(driver_error("cuLaunchKernel", e)))?;
            Ok(())
        }))
        .unwrap_or_else(|payload| Err(panicked("cuLaunchKernel", payload.as_ref())));
        launched?;
        self.launches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until every spin launched so far has ended.
    pub fn synchronize(&self) -> Result<(), AccelError> {
        catch_unwind(AssertUnwindSafe(|| {
            bind_context(&self.ctx)?;
            // SAFETY: our stream, alive until `drop`.
            cu("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(self.stream.cu_stream())
            })?;
            Ok(())
        }))
        .unwrap_or_else(|payload| Err(panicked("cuStreamSynchronize", payload.as_ref())))
    }

    /// Spins launched so far.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }
}

impl Drop for SpinKernel {
    fn drop(&mut self) {
        let stream = self.stream.cu_stream();
        let ctx = &self.ctx;
        let done = catch_unwind(AssertUnwindSafe(|| {
            bind_context(ctx)?;
            // Wait first: the module (unloaded after this) must not be in use by a running spin.
            // SAFETY: our stream, created in `build` and destroyed only here.
            let synced = cu("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(stream)
            });
            // SAFETY: as above; destroyed once, and the wrapper that still holds the pointer does not use it.
            let destroyed = cu("cuStreamDestroy", unsafe {
                sys::cuStreamDestroy_v2(stream)
            });
            synced.and(destroyed)
        }));
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("dropping the spin kernel: {e}"),
            Err(payload) => tracing::warn!(
                "dropping the spin kernel: panic in the CUDA bindings: {}",
                panic_message(payload.as_ref())
            ),
        }
    }
}

fn panicked(call: &'static str, payload: &(dyn std::any::Any + Send)) -> AccelError {
    AccelError::Driver(super::DriverError {
        call,
        code: -1,
        name: format!("panic in the CUDA bindings: {}", panic_message(payload)),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn detect_nvrtc_says_ok_or_unsupported() {
        match detect_nvrtc("the spin kernel needs it") {
            Ok(()) => {}
            Err(AccelError::Unsupported(why)) => {
                assert!(why.starts_with("no NVRTC library found"), "{why}");
                assert!(why.contains("libnvrtc.so"), "{why}");
                assert!(why.contains("spin kernel"), "{why}");
            }
            Err(e) => panic!("neither Ok nor Unsupported: {e:?}"),
        }
    }

    /// Spins 5 ms on a real GPU; only with `OVERSUB_TEST_CUDA=1`.
    #[test]
    fn spins_on_a_real_gpu() {
        if std::env::var("OVERSUB_TEST_CUDA").as_deref() != Ok("1") {
            return;
        }
        let driver = CudarcDriver::new(0).unwrap();
        let spin = SpinKernel::new(&driver).unwrap();
        assert!(spin.blocks() >= spin.sms());
        assert_eq!(spin.priority(), driver.info().greatest_stream_priority);
        let t = std::time::Instant::now();
        spin.launch(Duration::from_millis(5)).unwrap();
        spin.synchronize().unwrap();
        let took = t.elapsed();
        assert_eq!(spin.launches(), 1);
        assert!(took >= Duration::from_millis(4), "the spin took {took:?}");
        spin.launch(Duration::ZERO).unwrap();
        assert_eq!(spin.launches(), 1, "a zero spin launches nothing");
    }
}
