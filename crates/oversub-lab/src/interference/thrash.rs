//! Part 1 of `oversub bench interference`: paging against DRAM-thrashing CPU tasks (the paper's Sec. V-C, Figs.
//! 14-15).
//!
//! A thrasher is a thread, pinned to its own CPU, that walks a working set several times larger than the last-level
//! cache one 64-byte line at a time, every line once per pass, so (nearly) every access goes to DRAM. Two kinds,
//! after IsolBench:
//!
//! * sequential (IsolBench `bandwidth`): one 8-byte read of every line in address order, whole buffer per pass;
//! * random-dependent (IsolBench `latency`): the lines form a linked list in a random order that is one cycle through
//!   all of them (Sattolo's shuffle), walked by dependent loads, so each load waits for the previous one and the
//!   prefetchers cannot help.
//!
//! Bandwidth is lines touched × 64 B over the thread's measurement window, in MB/s (10^6 bytes per second).
//!
//! The paging loop is a thread pinned to the last CPU that pages one buffer of the host backend out to a swap store
//! and back in, again and again; its figure is the mean out+in cycle time.
//!
//! For each thrasher kind the benchmark measures the paging loop alone, then for 1..=`max_tasks` thrashers (on CPUs
//! 0, 1, …): the thrashers alone and the thrashers with the paging loop. Every window starts all of its threads
//! together once each has built its working set (outside the timed window) and runs for `measure`; the row reports
//! the lowest thrasher bandwidth of each window (the paper plots the minimum of the task set).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::harness::Steps;
use oversub_base::rng::Rng;
use oversub_base::sync::{lock, wait};
use oversub_core::{AddressSpace, Buffer, BufferFlags, Pool, PoolSpec};
use serde::Serialize;

use crate::harness::cpu;
use crate::harness::fill_random;
use crate::LabError;

/// Bytes of a cache line: the unit thrashers touch and count.
const LINE_BYTES: u64 = 64;
/// 8-byte words per line.
const WORDS_PER_LINE: usize = (LINE_BYTES / 8) as usize;
/// Lines a thrasher touches between looks at the stop flag.
const CHECK_EVERY_LINES: usize = 4096;
const MIB: u64 = 1 << 20;
/// Fixed seed of the random-dependent chains (varied per thrasher so they do not walk in lockstep).
const CHAIN_SEED: u64 = 0x0BAD_5EED_D1CE_F00D;

/// The order in which a thrasher walks its working set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ThrashKind {
    /// Every line in address order (IsolBench `bandwidth`, read mode).
    #[serde(rename = "sequential")]
    Sequential,
    /// A random cyclic linked list of the lines, walked by dependent loads (IsolBench `latency`).
    #[serde(rename = "random")]
    RandomDependent,
}

impl ThrashKind {
    /// The kind's short name: `sequential` or `random`.
    pub fn name(self) -> &'static str {
        match self {
            ThrashKind::Sequential => "sequential",
            ThrashKind::RandomDependent => "random",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct ThrashOptions {
    /// Thrasher kinds, measured in this order.
    pub kinds: Vec<ThrashKind>,
    /// Thrasher counts 1..=max_tasks (the paper: cores minus one).
    pub max_tasks: usize,
    /// Working set of each thrasher, several times the last-level cache.
    pub working_set_bytes: u64,
    /// Length of each measurement window.
    pub measure: Duration,
    /// Size of the buffer the paging loop pages out and in.
    pub paging_buffer_bytes: u64,
    /// Directories for the swap store's temporary files (several: one store striped over them).
    pub store_dirs: Vec<PathBuf>,
}

/// One thrasher count of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct ThrashRow {
    /// [`ThrashKind::name`].
    pub kind: &'static str,
    /// Thrashers running.
    pub tasks: usize,
    /// Lowest thrasher bandwidth without paging, MB/s (10^6 bytes per second).
    pub bw_alone_mbs: f64,
    /// Lowest thrasher bandwidth with the paging loop running, MB/s.
    pub bw_with_paging_mbs: f64,
    /// Mean page-out + page-in cycle time of the paging loop with no thrashers, seconds.
    pub paging_mean_s_alone: f64,
    /// The same with `tasks` thrashers running, seconds.
    pub paging_mean_s_with: f64,
}

/// Measurement windows [`run`] takes (one progress step each): per kind, the paging loop alone and, per thrasher
/// count, the thrashers alone and with paging.
pub fn windows(opts: &ThrashOptions) -> u64 {
    let per_kind = 1 + 2 * opts.max_tasks as u64;
    opts.kinds.len() as u64 * per_kind
}

/// Runs the experiment: one row per kind and thrasher count, in `opts.kinds` order then by count. Advances
/// `progress` by one per window.
pub fn run(opts: &ThrashOptions, progress: &Steps<'_>) -> Result<Vec<ThrashRow>, LabError> {
    if opts.max_tasks == 0 {
        return Err("the thrasher count must be at least 1".into());
    }
    if opts.working_set_bytes < LINE_BYTES {
        return Err(format!(
            "a thrasher's working set must hold at least one {LINE_BYTES}-byte line"
        )
        .into());
    }
    if opts.paging_buffer_bytes == 0 {
        return Err("the paging buffer must not be empty".into());
    }
    let lines = usize::try_from(opts.working_set_bytes / LINE_BYTES)?;
    let cpus = cpu::online_cpus();
    let paging_cpu = cpus - 1;
    if opts.max_tasks >= cpus {
        tracing::warn!(
            "{} thrashers on {cpus} CPUs: some share a CPU with each other or with the paging loop (CPU {paging_cpu})",
            opts.max_tasks
        );
    }
    if let Some(llc) = cpu::last_level_cache_bytes() {
        if opts.working_set_bytes < 2 * llc {
            tracing::warn!(
                "working set {} B is under twice the last-level cache ({llc} B): thrashers partly hit in cache",
                opts.working_set_bytes
            );
        }
    }
    tracing::info!(
        "thrashers: {} lines of {LINE_BYTES} B each on CPUs 0..{}; paging loop: {} B on CPU {paging_cpu}; {:?} \
         windows",
        lines,
        opts.max_tasks,
        opts.paging_buffer_bytes,
        opts.measure
    );

    let pager = Pager::new(opts.paging_buffer_bytes, &opts.store_dirs)?;
    let ctx = Ctx {
        lines,
        measure: opts.measure,
        cpus,
        warned_pin: AtomicBool::new(false),
    };
    let mut rows = Vec::new();
    for &kind in &opts.kinds {
        let name = kind.name();
        progress.set_message(format!("{name}: paging alone"));
        let alone = ctx.window(kind, 0, Some(&pager))?;
        let paging_mean_s_alone = alone.paging_mean_s()?;
        progress.inc(1);
        tracing::info!(
            kind = name,
            "paging loop alone: mean cycle {:.4} s over {} cycles",
            paging_mean_s_alone,
            alone.paging_cycles_s.len()
        );
        for tasks in 1..=opts.max_tasks {
            progress.set_message(format!("{name}: {tasks} thrashers alone"));
            let without = ctx.window(kind, tasks, None)?;
            progress.inc(1);
            progress.set_message(format!("{name}: {tasks} thrashers with paging"));
            let with = ctx.window(kind, tasks, Some(&pager))?;
            progress.inc(1);
            let row = ThrashRow {
                kind: name,
                tasks,
                bw_alone_mbs: without.min_bw_mbs()?,
                bw_with_paging_mbs: with.min_bw_mbs()?,
                paging_mean_s_alone,
                paging_mean_s_with: with.paging_mean_s()?,
            };
            tracing::info!(
                kind = name,
                tasks,
                "lowest thrasher bandwidth {:.0} MB/s alone, {:.0} MB/s with paging; paging cycle {:.4} s alone, \
                 {:.4} s with thrashers ({} cycles)",
                row.bw_alone_mbs,
                row.bw_with_paging_mbs,
                row.paging_mean_s_alone,
                row.paging_mean_s_with,
                with.paging_cycles_s.len()
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Settings shared by the windows of a run.
struct Ctx {
    lines: usize,
    measure: Duration,
    cpus: usize,
    /// Set once a pinning failure has been logged, so it is logged once per run.
    warned_pin: AtomicBool,
}

/// What one window measured.
#[derive(Debug, Default)]
struct WindowResult {
    /// Each thrasher's bandwidth, MB/s.
    thrasher_bw_mbs: Vec<f64>,
    /// The paging loop's cycle times, seconds (empty without paging).
    paging_cycles_s: Vec<f64>,
}

impl WindowResult {
    fn min_bw_mbs(&self) -> Result<f64, LabError> {
        self.thrasher_bw_mbs
            .iter()
            .copied()
            .reduce(f64::min)
            .ok_or_else(|| "the window ran no thrasher".into())
    }

    fn paging_mean_s(&self) -> Result<f64, LabError> {
        if self.paging_cycles_s.is_empty() {
            return Err("the paging loop completed no cycle in the window".into());
        }
        Ok(self.paging_cycles_s.iter().sum::<f64>() / self.paging_cycles_s.len() as f64)
    }
}

impl Ctx {
    fn pin(&self, cpu: usize) {
        if let Err(e) = cpu::pin_to_cpu(cpu) {
            if !self.warned_pin.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "cannot pin a benchmark thread to CPU {cpu} ({e}); running unpinned"
                );
            }
        }
    }

    /// One measurement window: `tasks` thrashers of `kind` (CPUs 0..tasks) and, with `pager`, the paging loop on
    /// the last CPU, all started together; the window lasts `measure` and, with paging, at least one whole cycle.
    fn window(
        &self,
        kind: ThrashKind,
        tasks: usize,
        pager: Option<&Pager>,
    ) -> Result<WindowResult, LabError> {
        let parties = tasks + usize::from(pager.is_some()) + 1;
        let gate = StartGate::new(parties);
        let stop = AtomicBool::new(false);
        let cycles_done = AtomicU64::new(0);
        let pager_exited = AtomicBool::new(false);

        std::thread::scope(|s| {
            let mut errors: Vec<LabError> = Vec::new();
            let mut thrashers = Vec::with_capacity(tasks);
            for i in 0..tasks {
                let (gate, stop) = (&gate, &stop);
                let spawned = std::thread::Builder::new()
                    .name(format!("thrash-{i}"))
                    .spawn_scoped(s, move || {
                        self.pin(i % self.cpus);
                        let seed = CHAIN_SEED ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        let words = match build_working_set(kind, self.lines, seed) {
                            Ok(w) => w,
                            Err(e) => {
                                gate.cancel();
                                return Err(e);
                            }
                        };
                        if !gate.arrive() {
                            return Ok(None);
                        }
                        let start = Instant::now();
                        let lines = thrash(kind, &words, stop);
                        Ok(Some(bandwidth_mbs(lines, start.elapsed())))
                    });
                match spawned {
                    Ok(h) => thrashers.push(h),
                    Err(e) => {
                        gate.cancel();
                        errors.push(format!("cannot start a thrasher thread: {e}").into());
                        break;
                    }
                }
            }
            let mut paging = None;
            if let Some(pager) = pager.filter(|_| errors.is_empty()) {
                let (gate, stop, cycles_done, pager_exited) =
                    (&gate, &stop, &cycles_done, &pager_exited);
                let paging_cpu = self.cpus - 1;
                let spawned = std::thread::Builder::new()
                    .name("paging-loop".into())
                    .spawn_scoped(s, move || {
                        let _exited = SetOnDrop(pager_exited);
                        self.pin(paging_cpu);
                        if !gate.arrive() {
                            return Ok(None);
                        }
                        let r = pager.cycle_until(stop, cycles_done);
                        if r.is_err() {
                            stop.store(true, Ordering::Release);
                        }
                        r.map(Some)
                    });
                match spawned {
                    Ok(h) => paging = Some(h),
                    Err(e) => {
                        gate.cancel();
                        errors.push(format!("cannot start the paging thread: {e}").into());
                    }
                }
            }

            if errors.is_empty() && gate.arrive() {
                std::thread::sleep(self.measure);
                if paging.is_some() {
                    // The window covers at least one whole paging cycle.
                    while cycles_done.load(Ordering::Acquire) == 0
                        && !pager_exited.load(Ordering::Acquire)
                        && !stop.load(Ordering::Acquire)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            stop.store(true, Ordering::Release);

            let mut result = WindowResult::default();
            let mut cancelled = false;
            for h in thrashers {
                match h.join() {
                    Ok(Ok(Some(bw))) => result.thrasher_bw_mbs.push(bw),
                    Ok(Ok(None)) => cancelled = true,
                    Ok(Err(e)) => errors.push(e),
                    Err(_) => errors.push("a thrasher thread panicked".into()),
                }
            }
            if let Some(h) = paging {
                match h.join() {
                    Ok(Ok(Some(cycles))) => result.paging_cycles_s = cycles,
                    Ok(Ok(None)) => cancelled = true,
                    Ok(Err(e)) => errors.push(e),
                    Err(_) => errors.push("the paging thread panicked".into()),
                }
            }
            if let Some(e) = errors.into_iter().next() {
                return Err(e);
            }
            if cancelled {
                return Err("the measurement window was cancelled".into());
            }
            Ok(result)
        })
    }
}

fn bandwidth_mbs(lines: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64().max(1e-9);
    lines as f64 * LINE_BYTES as f64 / secs / 1e6
}

/// A thrasher's working set, `lines` lines of 8 words, every page touched. Sequential: all words non-zero.
/// Random-dependent: word 0 of each line holds the word index of the next line of the chain.
fn build_working_set(kind: ThrashKind, lines: usize, seed: u64) -> Result<Vec<u64>, LabError> {
    match kind {
        ThrashKind::Sequential => alloc_lines(lines),
        ThrashKind::RandomDependent => build_chain(lines, seed),
    }
}

/// `lines` lines of words set to 1 (written, so every page is faulted in); an error rather than an abort when the
/// memory is not there.
fn alloc_lines(lines: usize) -> Result<Vec<u64>, LabError> {
    let len = lines
        .checked_mul(WORDS_PER_LINE)
        .ok_or("the working set is too large")?;
    let mut words = Vec::new();
    words.try_reserve_exact(len)?;
    words.resize(len, 1);
    Ok(words)
}

/// The random-dependent working set: a cyclic linked list through all `lines` lines in a random order, built with
/// Sattolo's shuffle (which yields a single cycle) from the house's deterministic generator seeded with `seed`.
fn build_chain(lines: usize, seed: u64) -> Result<Vec<u64>, LabError> {
    let mut words = alloc_lines(lines)?;
    // Identity first (line i -> i), then Sattolo: swapping only with earlier positions gives one n-cycle.
    for (i, line) in words.chunks_exact_mut(WORDS_PER_LINE).enumerate() {
        line[0] = i as u64;
    }
    let mut rng = Rng::new(seed);
    for i in (1..lines).rev() {
        // `below(i) < i`, and `i` came from a usize, so the cast back is lossless.
        let j = rng.below(i as u64) as usize;
        words.swap(i * WORDS_PER_LINE, j * WORDS_PER_LINE);
    }
    // Store word indices so the walk needs no multiply.
    for line in words.chunks_exact_mut(WORDS_PER_LINE) {
        line[0] *= WORDS_PER_LINE as u64;
    }
    Ok(words)
}

/// Walks `words` the way `kind` does until `stop` is set; returns the lines touched.
fn thrash(kind: ThrashKind, words: &[u64], stop: &AtomicBool) -> u64 {
    let mut lines = 0u64;
    match kind {
        ThrashKind::Sequential => {
            // One 8-byte read per line, in order; the sum goes to black_box and each chunk is passed through it, so
            // the reads can be neither dropped nor reused from an earlier pass.
            let mut sum = 0u64;
            'passes: loop {
                for chunk in words.chunks(CHECK_EVERY_LINES * WORDS_PER_LINE) {
                    let chunk = black_box(chunk);
                    for w in chunk.iter().step_by(WORDS_PER_LINE) {
                        sum = sum.wrapping_add(*w);
                    }
                    lines += chunk.len().div_ceil(WORDS_PER_LINE) as u64;
                    if stop.load(Ordering::Relaxed) {
                        break 'passes;
                    }
                }
            }
            black_box(sum);
        }
        ThrashKind::RandomDependent => {
            // Each load's address is the previous load's value.
            let mut at = 0usize;
            loop {
                let chain = black_box(words);
                for _ in 0..CHECK_EVERY_LINES {
                    at = chain.get(at).map_or(0, |&next| next as usize);
                }
                lines += CHECK_EVERY_LINES as u64;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            black_box(at);
        }
    }
    lines
}

/// The paging loop's buffer: one buffer of the host backend in a pool with a temporary swap store.
struct Pager {
    space: AddressSpace,
    buffer: Buffer,
    _pool: Pool,
}

impl Pager {
    fn new(bytes: u64, store_dirs: &[PathBuf]) -> Result<Pager, LabError> {
        let cap = bytes.next_multiple_of(2 * MIB) + 2 * MIB;
        let pool = PoolSpec::new(cap)
            .stores(store_dirs.iter())
            .store_capacity(cap)
            .open()?;
        let space = pool.address_space();
        let buffer = space.alloc(bytes, BufferFlags::DEFAULT)?;
        let mut piece = vec![0u8; usize::try_from(bytes.min(MIB))?];
        fill_random(&mut piece, 0x7A5B_1E55);
        let mut off = 0u64;
        while off < bytes {
            let n = usize::try_from((bytes - off).min(piece.len() as u64))?;
            space.write(buffer, off, &piece[..n])?;
            off += n as u64;
        }
        Ok(Pager {
            space,
            buffer,
            _pool: pool,
        })
    }

    /// Pages the buffer out and in until `stop` is set, counting finished cycles in `done`; returns the time of
    /// every cycle that ended before `stop` was seen (the one that overlaps the stop is dropped, as its end may have
    /// run without the window's thrashers).
    fn cycle_until(&self, stop: &AtomicBool, done: &AtomicU64) -> Result<Vec<f64>, LabError> {
        let mut cycles = Vec::new();
        loop {
            let t = Instant::now();
            self.space.page_out(self.buffer)?;
            self.space.page_in(self.buffer)?;
            let took = t.elapsed();
            if stop.load(Ordering::Acquire) {
                break;
            }
            cycles.push(took.as_secs_f64());
            done.fetch_add(1, Ordering::Release);
        }
        Ok(cycles)
    }
}

/// Sets its flag when dropped (also when the thread unwinds), so the coordinator stops waiting for it.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A start barrier that can be cancelled: `arrive` waits until all parties have arrived (true) or until one cancels
/// (false), so a thread that fails before the start never leaves the others waiting.
#[derive(Debug)]
struct StartGate {
    parties: usize,
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    arrived: usize,
    cancelled: bool,
}

impl StartGate {
    fn new(parties: usize) -> Self {
        StartGate {
            parties,
            state: Mutex::new(GateState::default()),
            cv: Condvar::new(),
        }
    }

    fn arrive(&self) -> bool {
        let mut st = lock(&self.state);
        st.arrived += 1;
        if st.arrived >= self.parties {
            self.cv.notify_all();
        }
        while st.arrived < self.parties && !st.cancelled {
            st = wait(&self.cv, st);
        }
        !st.cancelled
    }

    fn cancel(&self) {
        lock(&self.state).cancelled = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn random_chain_is_one_cycle_through_every_line() {
        for lines in [1usize, 2, 3, 17, 1000] {
            let words = build_chain(lines, CHAIN_SEED).unwrap();
            assert_eq!(words.len(), lines * WORDS_PER_LINE);
            let mut seen = vec![false; lines];
            let mut at = 0usize;
            for _ in 0..lines {
                assert_eq!(at % WORDS_PER_LINE, 0);
                let line = at / WORDS_PER_LINE;
                assert!(!seen[line], "line {line} visited twice ({lines} lines)");
                seen[line] = true;
                at = words[at] as usize;
            }
            assert_eq!(at, 0, "the walk returns to the start after {lines} steps");
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn random_chain_is_shuffled() {
        let words = build_chain(1000, CHAIN_SEED).unwrap();
        let in_order = (0..999)
            .filter(|&i| words[i * WORDS_PER_LINE] == ((i + 1) * WORDS_PER_LINE) as u64)
            .count();
        assert!(
            in_order < 50,
            "{in_order} of 999 lines point to their neighbour"
        );
    }

    #[test]
    fn thrashers_count_lines() {
        let stop = AtomicBool::new(true);
        for kind in [ThrashKind::Sequential, ThrashKind::RandomDependent] {
            let words = build_working_set(kind, 100, 7).unwrap();
            assert!(thrash(kind, &words, &stop) >= 100);
        }
    }

    #[test]
    fn windows_counts_every_measurement() {
        let opts = ThrashOptions {
            kinds: vec![ThrashKind::Sequential, ThrashKind::RandomDependent],
            max_tasks: 3,
            working_set_bytes: MIB,
            measure: Duration::from_millis(1),
            paging_buffer_bytes: MIB,
            store_dirs: vec![std::env::temp_dir()],
        };
        assert_eq!(windows(&opts), 14);
    }

    #[test]
    fn kind_names_match_serialization() {
        for kind in [ThrashKind::Sequential, ThrashKind::RandomDependent] {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.name())
            );
        }
    }

    #[test]
    fn smoke_run_gives_positive_finite_numbers() {
        let opts = ThrashOptions {
            kinds: vec![ThrashKind::Sequential, ThrashKind::RandomDependent],
            max_tasks: 1,
            working_set_bytes: MIB,
            measure: Duration::from_millis(50),
            paging_buffer_bytes: 2 * MIB,
            store_dirs: vec![std::env::temp_dir()],
        };
        let calls = std::sync::atomic::AtomicU64::new(0);
        let count = |_: &str| {
            calls.fetch_add(1, Ordering::Relaxed);
        };
        let rows = run(&opts, &Steps::new(&count)).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), windows(&opts));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].kind, "sequential");
        assert_eq!(rows[1].kind, "random");
        for row in &rows {
            assert_eq!(row.tasks, 1);
            for v in [
                row.bw_alone_mbs,
                row.bw_with_paging_mbs,
                row.paging_mean_s_alone,
                row.paging_mean_s_with,
            ] {
                assert!(v.is_finite() && v > 0.0, "{row:?}");
            }
        }
    }

    #[test]
    fn rejects_empty_settings() {
        let opts = ThrashOptions {
            kinds: vec![ThrashKind::Sequential],
            max_tasks: 0,
            working_set_bytes: MIB,
            measure: Duration::from_millis(1),
            paging_buffer_bytes: MIB,
            store_dirs: vec![std::env::temp_dir()],
        };
        assert!(run(&opts, &Steps::hidden()).is_err());
    }
}
