//! TLB shootdown latency, after the paper's Table 4: the time of an `mprotect` (permission downgrade) or `munmap`
//! of one page and of a range, with other threads of the process spinning on other CPUs, so that the kernel must
//! invalidate their TLBs too (inter-processor interrupts), and with none (local invalidation only). The
//! difference is the cross-CPU cost.
//!
//! Caveats in reading the figures:
//! - In a virtual machine a remote shootdown is the hypervisor's business: the IPI may exit to the host, or, with
//!   KVM's paravirtual TLB flush, a preempted vCPU is skipped and flushed on its next entry. The figures are the
//!   VM's, not the host's.
//! - On x86-64 Linux flushes a range of up to `tlb_single_page_flush_ceiling` pages (33 by default) entry by
//!   entry and a larger one with a whole-TLB flush, so a range above that is the paper's "all-entry" row.
//! - `munmap` also frees the pages and page tables; its time is more than the shootdown, in both columns.
//! - Each spinner is pinned to a CPU other than the one the measuring thread is on when the run starts (where the
//!   affinity calls work): left to the scheduler, a new spinner can share the measuring thread's CPU for the
//!   first milliseconds, and a short run then measures no remote invalidation at all. With more spinners than
//!   other CPUs they share CPUs. The measuring thread itself is left unpinned.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::derive::{mean, median};
use crate::fault::touch;
use crate::mem::{Mapping, PAGE_BYTES};
use crate::{ProbeError, Tick};

/// Stack of a spinning thread: it only loops.
const SPINNER_STACK_BYTES: usize = 64 << 10;
/// Words of the page each spinner reads.
const SPIN_WORDS: usize = PAGE_BYTES / std::mem::size_of::<u64>();
/// How long to wait for the spinners to be running before giving up.
const SPINNER_START_TIMEOUT: Duration = Duration::from_secs(10);

/// The operation whose TLB invalidation is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShootdownOp {
    /// `mprotect(range, PROT_READ)` of written pages: a downgrade, which must invalidate cached entries.
    Mprotect,
    /// `munmap(range)` of written pages.
    Munmap,
}

impl ShootdownOp {
    /// `"mprotect"` or `"munmap"`.
    pub fn name(self) -> &'static str {
        match self {
            ShootdownOp::Mprotect => "mprotect",
            ShootdownOp::Munmap => "munmap",
        }
    }
}

impl std::fmt::Display for ShootdownOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One row of Table 4: an operation on `pages` pages with `remote_threads` threads spinning elsewhere.
#[derive(Debug, Clone, Serialize)]
pub struct ShootdownPoint {
    /// `"mprotect"` or `"munmap"`.
    pub op: String,
    /// Pages in the range.
    pub pages: usize,
    /// Threads of the process spinning on other CPUs while the operation runs.
    pub remote_threads: usize,
    /// Mean time of one operation.
    pub mean_s: f64,
    /// Median time of one operation.
    pub median_s: f64,
    /// Operations timed.
    pub iterations: usize,
}

/// Sets the flag when dropped: stops the spinners on every path out of their scope.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The CPUs this thread may run on; empty when unknown.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is a plain bit array, for which all zeros is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size_of::<cpu_set_t>()` bytes into `set`.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, the number of bits in the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The CPU this thread runs on now, when the kernel says.
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and returns a CPU number or -1.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Pins the calling thread to `cpu`; false when that failed.
fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: all zeros is an empty `cpu_set_t`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE, the number of bits in the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the kernel reads `size_of::<cpu_set_t>()` bytes of `set`; pid 0 is the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// A remote thread: pins itself to `cpu` (when given) and reads its own page over and over until `stop`, so that
/// its CPU stays in the address space with live TLB entries. It never touches the range being changed.
fn spin(cpu: Option<usize>, stop: &AtomicBool, running: &AtomicUsize) {
    if let Some(cpu) = cpu {
        if !pin_current_thread(cpu) {
            tracing::debug!(
                cpu,
                "could not pin a spinner: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let page = vec![1u64; SPIN_WORDS];
    let mut sum = 0u64;
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        // One word per cache line.
        for w in page.iter().step_by(8) {
            sum = sum.wrapping_add(black_box(*w));
        }
        if first {
            running.fetch_add(1, Ordering::Release);
            first = false;
        }
    }
    black_box(sum);
}

/// `mprotect` of the whole mapping.
fn protect(region: &Mapping, prot: libc::c_int) -> Result<(), ProbeError> {
    // SAFETY: changes the protection of our own mapping, borrowed for the call; no Rust reference views its
    // memory (that needs `&mut Mapping`), and it is only written (by `touch`) while read-write.
    if unsafe { libc::mprotect(region.ptr().cast(), region.len(), prot) } != 0 {
        return Err(ProbeError::last_os(format!(
            "mprotect of {} bytes",
            region.len()
        )));
    }
    Ok(())
}

/// What an operation works on.
enum Target {
    /// mprotect: one long-lived range.
    Protect(Mapping),
    /// munmap: a fresh range of this many bytes per operation.
    Unmap(usize),
}

impl Target {
    /// Times one operation, after writing every page of the range so that its entries are cached and dirty.
    fn time_once(&self) -> Result<Duration, ProbeError> {
        match self {
            Target::Protect(region) => {
                (0..region.len() / PAGE_BYTES).for_each(|p| touch(region, p));
                let t0 = Instant::now();
                let downgraded = protect(region, libc::PROT_READ);
                let dt = t0.elapsed();
                // Restored even after a failure, though a failed mprotect changes nothing.
                protect(region, libc::PROT_READ | libc::PROT_WRITE)?;
                downgraded.map(|()| dt)
            }
            Target::Unmap(bytes) => {
                let fresh = Mapping::new(*bytes, false)?;
                (0..bytes / PAGE_BYTES).for_each(|p| touch(&fresh, p));
                let t0 = Instant::now();
                // Dropping a `Mapping` is exactly its munmap.
                drop(fresh);
                Ok(t0.elapsed())
            }
        }
    }
}

/// Times `iterations` operations `op` on a range of `pages` pages, with `remote_threads` threads of this process
/// spinning meanwhile (0: no other CPU is in the address space, so the invalidation is local). One untimed
/// operation first warms the page tables and caches. The spinners are stopped and joined on every path.
pub fn measure_one(
    op: ShootdownOp,
    pages: usize,
    remote_threads: usize,
    iterations: usize,
) -> Result<ShootdownPoint, ProbeError> {
    if pages == 0 || iterations == 0 {
        return Err(ProbeError::InvalidInput(format!(
            "a shootdown run needs at least one page and one iteration, not {pages} pages × {iterations}"
        )));
    }
    let bytes = pages
        .checked_mul(PAGE_BYTES)
        .ok_or_else(|| ProbeError::InvalidInput(format!("{pages} pages do not fit in memory")))?;
    let target = match op {
        ShootdownOp::Mprotect => Target::Protect(Mapping::new(bytes, false)?),
        ShootdownOp::Munmap => Target::Unmap(bytes),
    };
    // The CPUs other than this thread's, for the spinners, in turn.
    let here = current_cpu();
    let others: Vec<usize> = allowed_cpus()
        .into_iter()
        .filter(|&c| Some(c) != here)
        .collect();
    let stop = AtomicBool::new(false);
    let running = AtomicUsize::new(0);
    let samples = std::thread::scope(|s| -> Result<Vec<f64>, ProbeError> {
        let _stop_spinners = SetOnDrop(&stop);
        for i in 0..remote_threads {
            let (stop, running) = (&stop, &running);
            let cpu = others.iter().cycle().nth(i).copied();
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .stack_size(SPINNER_STACK_BYTES)
                .spawn_scoped(s, move || spin(cpu, stop, running))
                .map_err(|source| ProbeError::Os {
                    what: format!("spawning spinning thread {i}"),
                    source,
                })?;
        }
        let t0 = Instant::now();
        while running.load(Ordering::Acquire) < remote_threads {
            if t0.elapsed() > SPINNER_START_TIMEOUT {
                return Err(ProbeError::Unavailable {
                    what: "CPU time for the spinning threads",
                    why: format!(
                        "only {} of {remote_threads} started within {} s: is the machine overloaded?",
                        running.load(Ordering::Acquire),
                        SPINNER_START_TIMEOUT.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        target.time_once()?;
        let mut samples = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            samples.push(target.time_once()?.as_secs_f64());
        }
        Ok(samples)
    })?;
    let empty = || ProbeError::InvalidInput("a shootdown run took no samples".into());
    let p = ShootdownPoint {
        op: op.name().into(),
        pages,
        remote_threads,
        mean_s: mean(&samples).ok_or_else(empty)?,
        median_s: median(&samples).ok_or_else(empty)?,
        iterations: samples.len(),
    };
    tracing::debug!(?p, "shootdown");
    Ok(p)
}

/// Table 4: `mprotect` and `munmap` of 1 page and of `range_pages` pages, each with no remote thread and with
/// one spinning on every other CPU (at least one): 8 points (4 when `range_pages` is 1).
pub fn measure(
    iterations: usize,
    range_pages: usize,
    tick: Tick<'_>,
) -> Result<Vec<ShootdownPoint>, ProbeError> {
    if range_pages == 0 {
        return Err(ProbeError::InvalidInput(
            "the shootdown range needs at least one page".into(),
        ));
    }
    let remote = std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .max(1);
    let page_counts: &[usize] = if range_pages == 1 {
        &[1]
    } else {
        &[1, range_pages]
    };
    let mut points = Vec::with_capacity(2 * page_counts.len() * 2);
    for op in [ShootdownOp::Mprotect, ShootdownOp::Munmap] {
        for &pages in page_counts {
            for remote_threads in [0, remote] {
                tick(&format!(
                    "TLB shootdown: {op} of {pages} page{}, {remote_threads} remote thread{}",
                    if pages == 1 { "" } else { "s" },
                    if remote_threads == 1 { "" } else { "s" }
                ));
                points.push(measure_one(op, pages, remote_threads, iterations)?);
            }
        }
    }
    Ok(points)
}
