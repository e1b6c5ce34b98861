//! Page-fault latency and throughput against concurrency, after the paper's Fig. 6: a fixed number of first
//! touches of fresh 4 KiB pages, spread over 1..N threads that start together, so that N faults are in flight
//! at once.
//!
//! - [`soft_faults`]: ordinary anonymous faults, serviced synchronously by the kernel in the faulting thread
//!   (the paper's CPU baseline, ~1.7 µs there).
//! - [`uffd_faults`]: faults serviced asynchronously in user space through userfaultfd by one handler thread that
//!   drains the queued events in batches, like the IOMMU driver drains its PPR queue; the time of each fault is
//!   split into queueing, servicing and resumption ([`FaultSplit`]), the paper's schedule / processing split.
//!
//! Each point touches `faults × 4 KiB` of memory (the paper's 512,000 faults are 2 GiB).

use oversub_base::sync::{lock, wait};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::derive::{mean, median, rate_per_s, FaultSplit};
use crate::mem::{Mapping, PAGE_BYTES};
use crate::uffd::{Resolved, StopSignal, UffdMsg, Userfaultfd};
use crate::{ProbeError, Tick};

pub use crate::uffd::userfaultfd_available;

/// Stack of each faulting thread: they only loop; a small stack keeps 64 of them cheap.
const WORKER_STACK_BYTES: usize = 256 << 10;
/// Events the handler takes in one read(2); more than the 64 faults the paper has in flight at most.
const HANDLER_BATCH: usize = 256;
/// Marks a timestamp slot not written yet.
const UNSET_NS: u64 = u64::MAX;

/// One point of Fig. 6: `faults` first touches by `threads` concurrent threads.
#[derive(Debug, Clone, Serialize)]
pub struct FaultPoint {
    /// Concurrent faulting threads.
    pub threads: usize,
    /// Faults taken (one per page).
    pub faults: u64,
    /// From the threads' common start to the last one finishing.
    pub wall_s: f64,
    /// Mean time of one faulting access.
    pub mean_latency_s: f64,
    /// Median time of one faulting access.
    pub median_latency_s: f64,
    /// Faults serviced per second over the wall time.
    pub throughput_per_s: f64,
    /// Where the time of a fault went, on average (userfaultfd only).
    pub split: Option<FaultSplit>,
}

/// Fig. 6 for several concurrencies.
#[derive(Debug, Clone, Serialize)]
pub struct FaultResults {
    /// Ordinary faults, one point per thread count.
    pub soft: Vec<FaultPoint>,
    /// userfaultfd faults, one point per thread count (empty when unavailable).
    pub uffd: Vec<FaultPoint>,
    /// Why userfaultfd could not be used, when it could not.
    pub uffd_unavailable: Option<String>,
}

/// Nanoseconds since `base`, on the monotonic clock that `Instant` reads (CLOCK_MONOTONIC).
fn now_ns(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
}

/// Checks the sizes and returns the mapping's length in bytes.
fn region_bytes(faults: usize, threads: usize) -> Result<usize, ProbeError> {
    if faults == 0 {
        return Err(ProbeError::InvalidInput(
            "a page-fault run needs at least one fault".into(),
        ));
    }
    if threads == 0 {
        return Err(ProbeError::InvalidInput(
            "a page-fault run needs at least one thread".into(),
        ));
    }
    if threads > faults {
        return Err(ProbeError::InvalidInput(format!(
            "{threads} threads cannot share {faults} faults: each thread needs at least one"
        )));
    }
    faults
        .checked_mul(PAGE_BYTES)
        .ok_or_else(|| ProbeError::InvalidInput(format!("{faults} pages do not fit in memory")))
}

/// Thread `i`'s contiguous share of `pages` pages.
fn share(pages: usize, threads: usize, i: usize) -> Range<usize> {
    (i * pages / threads)..((i + 1) * pages / threads)
}

/// A start line: threads wait at it until it opens (to go) or is called off (to return at once). Unlike
/// `std::sync::Barrier` it can be called off, so a failed spawn never leaves the spawned threads waiting.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    arrived: usize,
    /// `Some(true)`: go; `Some(false)`: called off.
    open: Option<bool>,
}

impl Gate {
    /// Announces a thread and waits for the gate; true to go.
    fn arrive_and_wait(&self) -> bool {
        let mut st = lock(&self.state);
        st.arrived += 1;
        self.cv.notify_all();
        loop {
            if let Some(go) = st.open {
                return go;
            }
            st = wait(&self.cv, st);
        }
    }

    /// Waits until `n` threads have arrived.
    fn wait_for(&self, n: usize) {
        let mut st = lock(&self.state);
        while st.arrived < n {
            st = wait(&self.cv, st);
        }
    }

    /// Opens (`go`) or calls off the gate; only the first call counts.
    fn open(&self, go: bool) {
        let mut st = lock(&self.state);
        if st.open.is_none() {
            st.open = Some(go);
        }
        self.cv.notify_all();
    }
}

/// Calls the gate off when dropped before it opened: on every early return.
struct CallOffOnDrop<'a>(&'a Gate);

impl Drop for CallOffOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open(false);
    }
}

/// Runs `work(pages, state)` on one thread per element of `shares`, all released together; returns the release
/// time (ns since `base`) and each thread's result, in order. Every spawned thread is joined before returning.
fn run_together<S, T>(
    shares: Vec<(Range<usize>, S)>,
    base: Instant,
    work: impl Fn(Range<usize>, S) -> T + Sync,
) -> Result<(u64, Vec<T>), ProbeError>
where
    S: Send,
    T: Send,
{
    let gate = Gate::default();
    let threads = shares.len();
    std::thread::scope(|s| {
        let _call_off = CallOffOnDrop(&gate);
        let mut handles = Vec::with_capacity(threads);
        for (i, (pages, state)) in shares.into_iter().enumerate() {
            let (gate, work) = (&gate, &work);
            let handle = std::thread::Builder::new()
                .name(format!("fault-{i}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn_scoped(s, move || {
                    gate.arrive_and_wait().then(|| work(pages, state))
                })
                .map_err(|source| ProbeError::Os {
                    what: format!("spawning faulting thread {i}"),
                    source,
                })?;
            handles.push(handle);
        }
        gate.wait_for(threads);
        let start_ns = now_ns(base);
        gate.open(true);
        let mut results = Vec::with_capacity(threads);
        let mut lost = 0;
        for h in handles {
            match h.join() {
                Ok(Some(r)) => results.push(r),
                Ok(None) | Err(_) => lost += 1,
            }
        }
        if lost > 0 {
            return Err(ProbeError::Os {
                what: "page-fault run".into(),
                source: std::io::Error::other(format!("{lost} faulting threads failed")),
            });
        }
        Ok((start_ns, results))
    })
}

/// The point's figures from latency samples (ns) and the run's span.
fn point(
    threads: usize,
    latencies_ns: &[u64],
    start_ns: u64,
    end_ns: u64,
    split: Option<FaultSplit>,
) -> Result<FaultPoint, ProbeError> {
    let samples: Vec<f64> = latencies_ns.iter().map(|&ns| ns as f64 * 1e-9).collect();
    let empty = || ProbeError::InvalidInput("a page-fault run took no samples".into());
    let wall_s = end_ns.saturating_sub(start_ns) as f64 * 1e-9;
    Ok(FaultPoint {
        threads,
        faults: samples.len() as u64,
        wall_s,
        mean_latency_s: mean(&samples).ok_or_else(empty)?,
        median_latency_s: median(&samples).ok_or_else(empty)?,
        throughput_per_s: rate_per_s(samples.len() as f64, wall_s)?,
        split,
    })
}

/// Touches (writes one byte of) page `page` of `mapping`; an index past the mapping (a caller's bug) touches
/// nothing.
pub(crate) fn touch(mapping: &Mapping, page: usize) {
    if page >= mapping.len() / PAGE_BYTES {
        return;
    }
    // SAFETY: `page` is inside the mapping, which is read-write and borrowed for the call; a byte is always
    // aligned; no Rust reference views the mapping's memory (that needs `&mut Mapping`), and this atomic store is
    // the only other access to it, so concurrent touches of one page do not race.
    let byte = unsafe { AtomicU8::from_ptr(mapping.ptr().add(page * PAGE_BYTES)) };
    byte.store(1, Ordering::Relaxed);
}

/// Ordinary (soft) page faults: `faults` first touches of fresh pages by `threads` threads started together,
/// each timing every touch. The mean and median are over all touches; the throughput is faults over the time
/// from the start to the last thread finishing.
pub fn soft_faults(faults: usize, threads: usize) -> Result<FaultPoint, ProbeError> {
    let bytes = region_bytes(faults, threads)?;
    let mapping = Mapping::new(bytes, false)?;
    let base = Instant::now();
    // Sample buffers written before the start, so that storing a sample never faults inside the timed loop.
    let shares = (0..threads)
        .map(|i| {
            let pages = share(faults, threads, i);
            let buf = vec![UNSET_NS; pages.len()];
            (pages, buf)
        })
        .collect();
    let (start_ns, per_thread) = run_together(shares, base, |pages, mut lat_ns: Vec<u64>| {
        for (slot, page) in lat_ns.iter_mut().zip(pages) {
            let t0 = Instant::now();
            touch(&mapping, page);
            *slot = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        }
        (lat_ns, now_ns(base))
    })?;
    let end_ns = per_thread
        .iter()
        .map(|(_, end)| *end)
        .max()
        .unwrap_or(start_ns);
    let lat_ns: Vec<u64> = per_thread.into_iter().flat_map(|(l, _)| l).collect();
    let p = point(threads, &lat_ns, start_ns, end_ns, None)?;
    tracing::debug!(?p, "soft faults");
    Ok(p)
}

/// Per-page timestamps (ns since the run's base) of a userfaultfd run; `UNSET_NS` where not written.
struct Stamps {
    fault: Vec<AtomicU64>,
    pick: Vec<AtomicU64>,
    done: Vec<AtomicU64>,
    resume: Vec<AtomicU64>,
}

impl Stamps {
    fn new(pages: usize) -> Self {
        // Built element by element (not zero-allocated), so their pages are resident before the run.
        let v = || (0..pages).map(|_| AtomicU64::new(UNSET_NS)).collect();
        Stamps {
            fault: v(),
            pick: v(),
            done: v(),
            resume: v(),
        }
    }
}

/// What the handler did.
#[derive(Debug, Default)]
struct HandlerStats {
    reads: u64,
    events: u64,
    duplicates: u64,
}

/// The fault handler's loop: waits for events or stop, reads every queued event in one read, resolves each with
/// a copy of `src`, and stamps when it turned to each page and when the page was installed.
fn handle_faults(
    uffd: &Userfaultfd<'_>,
    stop: &StopSignal,
    mapping: &Mapping,
    src: &[u8],
    stamps: &Stamps,
    base: Instant,
) -> Result<HandlerStats, ProbeError> {
    let start = mapping.ptr() as u64;
    let mut buf = vec![UffdMsg::default(); HANDLER_BATCH];
    let mut stats = HandlerStats::default();
    loop {
        let ready = uffd.wait(stop)?;
        if ready.events {
            let n = uffd.read_events(&mut buf)?;
            stats.reads += u64::from(n > 0);
            for msg in &buf[..n] {
                let Some(addr) = msg.pagefault_address() else {
                    continue;
                };
                stats.events += 1;
                let page = usize::try_from(addr.wrapping_sub(start) / PAGE_BYTES as u64)
                    .unwrap_or(usize::MAX);
                // Picked up when the handler turns to this fault, not when the batch was read: waiting behind the
                // batch's earlier faults is queueing (the paper's "schedule"), not servicing.
                let pick_ns = now_ns(base);
                let resolved = uffd.copy_page(addr, src)?;
                let done_ns = now_ns(base);
                if resolved == Resolved::AlreadyMapped {
                    stats.duplicates += 1;
                }
                // The first event of a page is its fault; a duplicate keeps those stamps.
                if let (Some(pick), Some(done)) = (stamps.pick.get(page), stamps.done.get(page)) {
                    if pick
                        .compare_exchange(UNSET_NS, pick_ns, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        done.store(done_ns, Ordering::Relaxed);
                    }
                }
                // Woken only now, after `done_ns`, so that resumption is timed apart from servicing.
                uffd.wake(addr, PAGE_BYTES as u64)?;
            }
        }
        if ready.stop {
            return Ok(stats);
        }
    }
}

/// Page faults serviced in user space: as [`soft_faults`], but the region is registered with userfaultfd in
/// MISSING mode and one handler thread resolves every fault with `UFFDIO_COPY` of a prepared page, taking as many
/// queued events per read as there are. Latencies are from just before the faulting access to just after it;
/// [`FaultPoint::split`] divides them into queueing (fault to pick-up), servicing (pick-up to page installed) and
/// resumption (installed to the access completing, the wake-up included).
///
/// [`ProbeError::Unavailable`] when userfaultfd cannot be opened here.
pub fn uffd_faults(faults: usize, threads: usize) -> Result<FaultPoint, ProbeError> {
    let bytes = region_bytes(faults, threads)?;
    let mapping = Mapping::new(bytes, false)?;
    let uffd = Userfaultfd::register(&mapping)?;
    let stop = StopSignal::new()?;
    // A recognisable source page (the content is what a page-in would bring).
    let src: Vec<u8> = (0..PAGE_BYTES).map(|i| (i % 251) as u8 + 1).collect();
    let stamps = Stamps::new(faults);
    let base = Instant::now();

    let (run, handled) = std::thread::scope(|s| {
        let handler = std::thread::Builder::new()
            .name("uffd-handler".into())
            .spawn_scoped(s, || {
                let r = handle_faults(&uffd, &stop, &mapping, &src, &stamps, base);
                // Never leave a faulting thread blocked: unregistering wakes them, and their accesses complete as
                // ordinary faults. Needed only when the loop failed; harmless otherwise.
                if let Err(e) = uffd.unregister() {
                    tracing::debug!("userfaultfd unregister after the handler: {e}");
                }
                r
            })
            .map_err(|source| ProbeError::Os {
                what: "spawning the userfaultfd handler".into(),
                source,
            })?;
        let shares = (0..threads)
            .map(|i| (share(faults, threads, i), ()))
            .collect();
        let run = run_together(shares, base, |pages, ()| {
            for page in pages {
                // Indices come from the shares of `0..faults`, the stamps' length.
                stamps.fault[page].store(now_ns(base), Ordering::Relaxed);
                touch(&mapping, page);
                stamps.resume[page].store(now_ns(base), Ordering::Relaxed);
            }
            now_ns(base)
        });
        // Stop and join the handler on every path; the stop flag ends it even if the eventfd write failed.
        let stopped = stop.signal();
        let handled = handler.join().map_err(|_| ProbeError::Os {
            what: "userfaultfd handler".into(),
            source: std::io::Error::other("the handler thread panicked"),
        });
        stopped?;
        Ok::<_, ProbeError>((run, handled?))
    })?;
    let stats = handled?;
    let (start_ns, ends) = run?;
    let end_ns = ends.iter().copied().max().unwrap_or(start_ns);

    let mut splits = Vec::with_capacity(faults);
    let mut totals_ns = Vec::with_capacity(faults);
    let mut clamped = 0u64;
    for page in 0..faults {
        let get = |v: &[AtomicU64]| v[page].load(Ordering::Relaxed);
        let (fault, pick, done, resume) = (
            get(&stamps.fault),
            get(&stamps.pick),
            get(&stamps.done),
            get(&stamps.resume),
        );
        if [fault, pick, done, resume].contains(&UNSET_NS) {
            return Err(ProbeError::Os {
                what: "userfaultfd run".into(),
                source: std::io::Error::other(format!(
                    "page {page} completed without a userfaultfd event"
                )),
            });
        }
        // The handler may read an event before the faulting thread has gone to sleep, and on another CPU the
        // thread can then resume before the handler stamps; such overlaps count as zero-length phases.
        let p = pick.max(fault).min(resume);
        let d = done.max(p).min(resume);
        clamped += u64::from(p != pick || d != done);
        splits.push(FaultSplit::from_timestamps(fault, p, d, resume)?);
        totals_ns.push(resume.saturating_sub(fault));
    }
    let split = FaultSplit::mean(&splits);
    let p = point(threads, &totals_ns, start_ns, end_ns, split)?;
    tracing::debug!(
        ?p,
        reads = stats.reads,
        events = stats.events,
        duplicates = stats.duplicates,
        clamped,
        "userfaultfd faults"
    );
    Ok(p)
}

fn threads_label(n: usize) -> String {
    if n == 1 {
        "1 thread".into()
    } else {
        format!("{n} threads")
    }
}

/// Fig. 6: for each thread count, `faults` soft faults and `faults` userfaultfd faults. When userfaultfd is
/// unavailable at the first attempt, [`FaultResults::uffd_unavailable`] says why and only soft faults are
/// measured.
pub fn measure(
    faults: usize,
    threads: &[usize],
    tick: Tick<'_>,
) -> Result<FaultResults, ProbeError> {
    if threads.is_empty() {
        return Err(ProbeError::InvalidInput(
            "the page-fault probe needs at least one thread count".into(),
        ));
    }
    let mut results = FaultResults {
        soft: Vec::with_capacity(threads.len()),
        uffd: Vec::with_capacity(threads.len()),
        uffd_unavailable: None,
    };
    for &n in threads {
        tick(&format!("page faults: soft, {}", threads_label(n)));
        results.soft.push(soft_faults(faults, n)?);
        if results.uffd_unavailable.is_some() {
            continue;
        }
        tick(&format!("page faults: userfaultfd, {}", threads_label(n)));
        match uffd_faults(faults, n) {
            Ok(p) => results.uffd.push(p),
            Err(ProbeError::Unavailable { why, .. }) if results.uffd.is_empty() => {
                tracing::debug!("userfaultfd unavailable: {why}");
                results.uffd_unavailable = Some(why);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_partition_the_pages() {
        for (pages, threads) in [(10, 3), (256, 4), (7, 7), (1000, 64)] {
            let mut next = 0;
            for i in 0..threads {
                let r = share(pages, threads, i);
                assert_eq!(r.start, next);
                assert!(!r.is_empty());
                next = r.end;
            }
            assert_eq!(next, pages);
        }
    }

    #[test]
    fn a_called_off_gate_releases_its_threads() {
        let gate = Gate::default();
        let went = std::thread::scope(|s| {
            let h = s.spawn(|| gate.arrive_and_wait());
            gate.wait_for(1);
            gate.open(false);
            gate.open(true); // too late: the first call counts
            h.join()
        });
        assert!(matches!(went, Ok(false)));
    }
}
