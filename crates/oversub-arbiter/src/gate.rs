//! The transfer side: asks the arbiter before every chunk and never starts one that would run past its grant.

use oversub_base::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::arbiter::{duration_ns, Arbiter, Decision};
use crate::events::{GateEvent, GateEventKind, WorkKind, DEFAULT_EVENT_CAPACITY};
use crate::ArbiterError;

/// What the transfer side did, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateStats {
    /// Chunks admitted.
    pub chunks: u64,
    /// Operations of a given cost admitted ([`Gate::admit_for`]).
    pub operations: u64,
    /// Grants received (answers that let work start).
    pub grants: u64,
    /// Times the gate had to wait.
    pub waits: u64,
    /// Total time spent waiting, in nanoseconds of the arbiter's clock.
    pub wait_ns: u64,
    /// Grants cut short by an announcement before their end that left the transfer side waiting (work stopped at
    /// a chunk boundary).
    pub preemptions: u64,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    /// `None`: unrestricted.
    until_ns: Option<u64>,
    generation: u64,
}

/// The default quantile of overruns a gate keeps free, in millionths (99.9%).
pub const DEFAULT_OVERRUN_QUANTILE_PPM: u64 = 999_000;

/// Admitted chunks, or an admitted operation of a given cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// How many chunks may start now (at least 1): run one after the other, or together when that is no slower.
    /// 0 for an admission by [`Gate::admit_for`], which admits one operation of its cost.
    pub chunks: u64,
    /// When they were admitted (clock nanoseconds).
    pub start_ns: u64,
    /// End of the grant it runs under; `None` when no task restricts memory.
    pub grant_until_ns: Option<u64>,
    /// When the admitted work promised to end (start + n·T(Q), or start + the cost), before the learned overrun
    /// guard; see [`Gate::finished`].
    pub promised_end_ns: u64,
}

/// A transfer side of an arbiter, with its own chunk time T(Q) (Eq. 1). Safe to share between threads; each
/// admission is checked against the current grant.
#[derive(Debug)]
pub struct Gate {
    arbiter: Arbiter,
    chunk_bytes: u64,
    chunk_time_ns: AtomicU64,
    held: Mutex<Option<Held>>,
    chunks: AtomicU64,
    grants: AtomicU64,
    waits: AtomicU64,
    wait_ns: AtomicU64,
    preemptions: AtomicU64,
    /// How far admitted work ran past its promised end: `overruns[0]` counts work that ended in time, `overruns[b]`
    /// work that overran by (2^(b-1), 2^b] ns.
    overruns: [AtomicU64; 64],
    /// The quantile of `overruns` kept free at the end of every grant, in millionths.
    overrun_quantile_ppm: AtomicU64,
    /// That quantile's bucket bound, ns (recomputed by `finished`).
    overrun_guard_ns: AtomicU64,
    operations: AtomicU64,
    /// The event log: checked with one relaxed load on every admission, so it costs nothing when off.
    recording: AtomicBool,
    events: Mutex<Vec<GateEvent>>,
    event_capacity: AtomicUsize,
    events_dropped: AtomicU64,
}

/// What an admission asks for.
#[derive(Debug, Clone, Copy)]
enum Need {
    /// Up to this many chunks of T(Q) each (at least one).
    Chunks(u64),
    /// One operation of this many nanoseconds (at least one).
    Cost(u64),
}

impl Gate {
    /// A gate using the arbiter's chunk size and chunk time.
    pub fn new(arbiter: Arbiter) -> Gate {
        Gate {
            chunk_bytes: arbiter.chunk_bytes(),
            chunk_time_ns: AtomicU64::new(duration_ns(arbiter.chunk_time()).max(1)),
            arbiter,
            held: Mutex::new(None),
            chunks: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            overruns: std::array::from_fn(|_| AtomicU64::new(0)),
            overrun_quantile_ppm: AtomicU64::new(DEFAULT_OVERRUN_QUANTILE_PPM),
            overrun_guard_ns: AtomicU64::new(0),
            operations: AtomicU64::new(0),
            recording: AtomicBool::new(false),
            events: Mutex::new(Vec::new()),
            event_capacity: AtomicUsize::new(DEFAULT_EVENT_CAPACITY),
            events_dropped: AtomicU64::new(0),
        }
    }

    /// The arbiter asked.
    pub fn arbiter(&self) -> &Arbiter {
        &self.arbiter
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// T(Q): the time one chunk of this transfer side takes.
    pub fn chunk_time(&self) -> Duration {
        Duration::from_nanos(self.chunk_time_ns.load(Ordering::Relaxed))
    }

    /// Sets T(Q) (for example from a measurement of the storage path). Zero is refused.
    pub fn set_chunk_time(&self, t: Duration) -> Result<(), ArbiterError> {
        if t.is_zero() {
            return Err(ArbiterError::InvalidConfig(
                "the chunk time must be longer than zero".into(),
            ));
        }
        self.chunk_time_ns.store(duration_ns(t), Ordering::Relaxed);
        Ok(())
    }

    /// Measures T(Q) as the slowest of `samples` runs of `op` (one chunk's work each, after one warm-up run) on
    /// the arbiter's clock, and uses it from now on. The worst case, not the mean: a chunk started at the last
    /// admissible moment must still end inside the window.
    pub fn calibrate<E>(
        &self,
        samples: usize,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Duration, E> {
        let clock = self.arbiter.clock();
        op()?;
        let mut worst = 1;
        for _ in 0..samples.max(1) {
            let t = clock.now_ns();
            op()?;
            worst = worst.max(clock.now_ns().saturating_sub(t));
        }
        self.chunk_time_ns.store(worst, Ordering::Relaxed);
        Ok(Duration::from_nanos(worst))
    }

    /// Reports that the work of `admission` ended at `end_ns` (the arbiter's clock). T(Q) and memory-map costs
    /// are measured worst cases, but a storage device's tail (a virtual disk's, above all) and a transfer thread
    /// that waited for its CPU can exceed any finite sample, and work that runs past its promised end overlaps the
    /// next memory phase. The gate keeps a histogram of how far admitted work overran (zero for work in time) and
    /// from then on keeps the [`overrun_quantile`](Self::set_overrun_quantile) of it free at the end of every
    /// grant (rounded up to a power of two nanoseconds). The first overrun is thus covered at once, and an
    /// overrun rarer than the quantile (a host stall of 35 ms once in 30 000 admissions, in this project's
    /// benchmark) stops counting once enough work has ended in time: covering it would leave no room in a 36 ms
    /// window. Work admitted while memory was unrestricted promised nothing and is not counted. Admissions ask
    /// the server for the work's time plus the guard, so work that does not fit what the guard leaves of a window
    /// waits for the next one (and, while the guard leaves no window room for it, until memory is unrestricted).
    pub fn finished(&self, admission: &Admission, end_ns: u64) {
        if admission.grant_until_ns.is_none() {
            return;
        }
        let over = end_ns.saturating_sub(admission.promised_end_ns);
        let bucket = if over == 0 {
            0
        } else {
            (64 - over.leading_zeros() as usize).min(63)
        };
        self.overruns[bucket].fetch_add(1, Ordering::Relaxed);
        // A snapshot on the stack: this runs after every admitted chunk, so no allocation.
        let counts: [u64; 64] = std::array::from_fn(|b| self.overruns[b].load(Ordering::Relaxed));
        let total: u64 = counts.iter().sum();
        let q = self.overrun_quantile_ppm.load(Ordering::Relaxed);
        // The smallest bucket whose cumulative count reaches the quantile.
        let need = (u128::from(total) * u128::from(q))
            .div_ceil(1_000_000)
            .max(1);
        let mut seen = 0u128;
        let mut guard = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += u128::from(c);
            if seen >= need {
                guard = if b == 0 { 0 } else { 1u64 << b };
                break;
            }
        }
        let before = self.overrun_guard_ns.swap(guard, Ordering::Relaxed);
        if guard > before {
            tracing::debug!(
                overrun_us = over / 1000,
                guard_us = guard / 1000,
                "admitted work overran; guard raised"
            );
        }
    }

    /// Sets the quantile of overruns kept free at the end of every grant (see [`finished`](Self::finished)):
    /// 1.0 keeps the longest ever seen, 0.999 (the default) the 99.9th percentile. Clamped to [0, 1].
    pub fn set_overrun_quantile(&self, q: f64) {
        let ppm = (q.clamp(0.0, 1.0) * 1e6).round() as u64;
        self.overrun_quantile_ppm.store(ppm, Ordering::Relaxed);
    }

    /// The guard kept free at the end of every grant, from [`finished`](Self::finished).
    pub fn overrun_guard(&self) -> Duration {
        Duration::from_nanos(self.overrun_guard_ns.load(Ordering::Relaxed))
    }

    /// Blocks until one chunk may start now and end within the grant, asking the server as often as needed.
    pub fn admit(&self) -> Admission {
        self.admit_up_to(1)
    }

    /// Blocks until at least one chunk may start, and admits as many as `max_chunks` whose total time
    /// (n × T(Q)) still ends within the grant: a transfer side that submits them as one batch keeps the promise
    /// as long as a batch is no slower than the same chunks one after another.
    pub fn admit_up_to(&self, max_chunks: u64) -> Admission {
        self.admit_need(Need::Chunks(max_chunks.max(1)))
    }

    /// Blocks until work that takes `cost` (a measured worst case, not a multiple of T(Q): a memory-map
    /// operation, say) may start now and end within the grant, asking the server as often as needed, with the
    /// same rules as [`admit_up_to`](Self::admit_up_to): a grant taken before the latest announcement is asked
    /// again, a window too short for the cost is waited out, and an overdue phase is polled. The admission's
    /// `chunks` is 0.
    ///
    /// Work longer than any compute window never fits one: it waits until no task restricts memory (every task
    /// `NO_OPER` or gone), and then runs unrestricted.
    pub fn admit_for(&self, cost: Duration) -> Admission {
        self.admit_need(Need::Cost(duration_ns(cost).max(1)))
    }

    /// The admission loop of [`admit_up_to`](Self::admit_up_to) and [`admit_for`](Self::admit_for).
    fn admit_need(&self, need: Need) -> Admission {
        let clock = self.arbiter.clock();
        let chunk_ns = self.chunk_time_ns.load(Ordering::Relaxed);
        // What has to fit: one chunk, or the whole operation.
        let need_ns = match need {
            Need::Chunks(_) => chunk_ns,
            Need::Cost(cost_ns) => cost_ns,
        };
        let mut held = lock(&self.held);
        let mut cut_short = false;
        loop {
            let now = clock.now_ns();
            let generation = self.arbiter.generation();
            // The learned overrun guard is kept free at the end of every grant (see `finished`). Read once per
            // round, for both the check of the held grant and the question to the server below.
            let guard = self.overrun_guard_ns.load(Ordering::Relaxed);
            if let Some(h) = *held {
                let left = h
                    .until_ns
                    .map(|until| until.saturating_sub(now).saturating_sub(guard));
                // Chunks that fit (or 1 when the operation fits, 0 when it does not).
                let fit = match need {
                    Need::Chunks(max) => left.map_or(max, |left| (left / chunk_ns).min(max)),
                    Need::Cost(cost_ns) => u64::from(left.is_none_or(|left| left >= cost_ns)),
                };
                if h.generation == generation && fit >= 1 {
                    let (chunks, end_ns) = match need {
                        Need::Chunks(_) => {
                            self.chunks.fetch_add(fit, Ordering::Relaxed);
                            (fit, now.saturating_add(fit.saturating_mul(chunk_ns)))
                        }
                        Need::Cost(cost_ns) => {
                            self.operations.fetch_add(1, Ordering::Relaxed);
                            (0, now.saturating_add(cost_ns))
                        }
                    };
                    if self.is_recording() {
                        self.push_event(GateEvent {
                            start_ns: now,
                            end_ns,
                            kind: GateEventKind::Admitted {
                                chunks,
                                grant_until_ns: h.until_ns,
                            },
                        });
                    }
                    return Admission {
                        chunks,
                        start_ns: now,
                        grant_until_ns: h.until_ns,
                        promised_end_ns: end_ns,
                    };
                }
                cut_short =
                    h.generation != generation && h.until_ns.is_none_or(|until| until > now);
                *held = None;
            }
            // The server is asked to fit the work and the guard: asked for the work alone, it grants a window
            // that the guard leaves too short, and the gate would ask again and again without waiting (spinning
            // until the window closed on a real clock; for ever on a fake one that only the waiting side moves).
            // Asked for both, it answers "wait until the window ends" (`WindowTooShort`) instead.
            let ask_ns = need_ns.saturating_add(guard);
            let decision = self.arbiter.request(Duration::from_nanos(ask_ns));
            if cut_short && matches!(decision, Decision::Wait { .. }) {
                // An announcement ended the grant early (a re-announced compute phase that extends it is not).
                self.preemptions.fetch_add(1, Ordering::Relaxed);
            }
            cut_short = false;
            match decision {
                Decision::Grant { until_ns, .. } => {
                    self.grants.fetch_add(1, Ordering::Relaxed);
                    *held = Some(Held {
                        until_ns: Some(until_ns),
                        generation,
                    });
                }
                Decision::Unrestricted => {
                    self.grants.fetch_add(1, Ordering::Relaxed);
                    *held = Some(Held {
                        until_ns: None,
                        generation,
                    });
                }
                Decision::Wait { until_ns, reason } => {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    tracing::trace!(
                        ?reason,
                        wait_ns = until_ns.saturating_sub(now),
                        "gate waits"
                    );
                    clock.sleep_until(until_ns);
                    let woke = clock.now_ns();
                    self.wait_ns
                        .fetch_add(woke.saturating_sub(now), Ordering::Relaxed);
                    if self.is_recording() {
                        self.push_event(GateEvent {
                            start_ns: now,
                            end_ns: woke,
                            kind: GateEventKind::Waited,
                        });
                    }
                }
            }
        }
    }

    /// Runs `work(offset, len)` over `total_bytes` in chunks of [`chunk_bytes`](Self::chunk_bytes), admitting
    /// each before it starts; stops at the first error.
    pub fn run_chunked<E>(
        &self,
        total_bytes: u64,
        mut work: impl FnMut(u64, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut offset = 0;
        while offset < total_bytes {
            let len = self.chunk_bytes.min(total_bytes - offset);
            self.admit();
            work(offset, len)?;
            offset += len;
        }
        Ok(())
    }

    /// The gate's counters.
    pub fn stats(&self) -> GateStats {
        GateStats {
            chunks: self.chunks.load(Ordering::Relaxed),
            grants: self.grants.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            preemptions: self.preemptions.load(Ordering::Relaxed),
            operations: self.operations.load(Ordering::Relaxed),
        }
    }

    /// Switches the event log on or off (off by default). While on, every admission and wait is logged, and
    /// [`record`](Self::record) and [`record_run`](Self::record_run) log what their callers report; while off,
    /// each of them costs one relaxed atomic load. Switching off keeps what was logged until
    /// [`take_events`](Self::take_events).
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::Relaxed);
    }

    /// Whether the event log is on.
    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// Logs an event the user of the gate reports (typically [`GateEventKind::Ran`]); nothing when the log is off.
    pub fn record(&self, event: GateEvent) {
        if self.is_recording() {
            self.push_event(event);
        }
    }

    /// Runs `work` and, when the log is on, logs it as `Ran { what, bytes }` from just before it started to just
    /// after it ended, on the arbiter's clock. When the log is off this is `work()` and one relaxed load.
    pub fn record_run<T>(&self, what: WorkKind, bytes: u64, work: impl FnOnce() -> T) -> T {
        if !self.is_recording() {
            return work();
        }
        let clock = self.arbiter.clock();
        let start_ns = clock.now_ns();
        let out = work();
        let end_ns = clock.now_ns();
        self.record(GateEvent {
            start_ns,
            end_ns,
            kind: GateEventKind::Ran { what, bytes },
        });
        out
    }

    /// Takes the events logged so far (in the order they were logged), leaving the log empty.
    pub fn take_events(&self) -> Vec<GateEvent> {
        std::mem::take(&mut *lock(&self.events))
    }

    /// Events not logged because the log was full (since the gate was made).
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped.load(Ordering::Relaxed)
    }

    /// The most events the log holds before it drops new ones ([`DEFAULT_EVENT_CAPACITY`] unless set);
    /// [`take_events`](Self::take_events) makes room again.
    pub fn set_event_capacity(&self, events: usize) {
        self.event_capacity.store(events, Ordering::Relaxed);
    }

    fn push_event(&self, event: GateEvent) {
        let mut events = lock(&self.events);
        if events.len() < self.event_capacity.load(Ordering::Relaxed) {
            events.push(event);
        } else {
            self.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
