//! The arbiter's preemption hook on a CUDA GPU (SiΓ Sec. 4.3): when a CPU task announces a memory phase, the spin
//! kernel is launched on the device's highest-priority stream for the phase's length, so the GPU's own kernels
//! stay off the memory bus until it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use oversub_accel::cuda::spin::SpinKernel;
use oversub_arbiter::{MonotonicClock, PreemptionHook};

/// A [`PreemptionHook`] that launches the spin kernel. Register it with
/// [`Arbiter::add_preemption_hook`](oversub_arbiter::Arbiter::add_preemption_hook).
#[derive(Debug)]
pub struct SpinPreemption {
    kernel: SpinKernel,
    failures: AtomicU64,
}

impl SpinPreemption {
    /// A hook launching `kernel` (from [`CudaMemory::spin_kernel`](oversub_accel::cuda::CudaMemory::spin_kernel)).
    pub fn new(kernel: SpinKernel) -> SpinPreemption {
        SpinPreemption {
            kernel,
            failures: AtomicU64::new(0),
        }
    }

    /// Spin kernels launched so far.
    pub fn launches(&self) -> u64 {
        self.kernel.launches()
    }

    /// Launches that failed (logged as warnings).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

impl PreemptionHook for SpinPreemption {
    fn preempt(&self, end_ns: u64) {
        // Deadlines are on the arbiter's system-wide monotonic clock.
        let left = end_ns.saturating_sub(MonotonicClock::now());
        if left == 0 {
            return;
        }
        if let Err(e) = self.kernel.launch(Duration::from_nanos(left)) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("launching the spin kernel for a memory phase: {e}");
        }
    }
}
