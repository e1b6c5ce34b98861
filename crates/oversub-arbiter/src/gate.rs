//! The transfer side: asks the arbiter before every chunk and never starts one that would run past its grant.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::arbiter::{duration_ns, Arbiter, Decision};
use crate::ArbiterError;

/// What the transfer side did, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateStats {
    /// Chunks admitted.
    pub chunks: u64,
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

/// Admitted chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// How many chunks may start now (at least 1): run one after the other, or together when that is no slower.
    pub chunks: u64,
    /// When they were admitted (clock nanoseconds).
    pub start_ns: u64,
    /// End of the grant it runs under; `None` when no task restricts memory.
    pub grant_until_ns: Option<u64>,
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

    /// Blocks until one chunk may start now and end within the grant, asking the server as often as needed.
    pub fn admit(&self) -> Admission {
        self.admit_up_to(1)
    }

    /// Blocks until at least one chunk may start, and admits as many as `max_chunks` whose total time
    /// (n × T(Q)) still ends within the grant: a transfer side that submits them as one batch keeps the promise
    /// as long as a batch is no slower than the same chunks one after another.
    pub fn admit_up_to(&self, max_chunks: u64) -> Admission {
        let max_chunks = max_chunks.max(1);
        let clock = self.arbiter.clock();
        let chunk_ns = self.chunk_time_ns.load(Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut cut_short = false;
        loop {
            let now = clock.now_ns();
            let generation = self.arbiter.generation();
            if let Some(h) = *held {
                let fit = h.until_ns.map_or(max_chunks, |until| {
                    (until.saturating_sub(now) / chunk_ns).min(max_chunks)
                });
                if h.generation == generation && fit >= 1 {
                    self.chunks.fetch_add(fit, Ordering::Relaxed);
                    return Admission {
                        chunks: fit,
                        start_ns: now,
                        grant_until_ns: h.until_ns,
                    };
                }
                cut_short =
                    h.generation != generation && h.until_ns.is_none_or(|until| until > now);
                *held = None;
            }
            let decision = self.arbiter.request(Duration::from_nanos(chunk_ns));
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
                    self.wait_ns
                        .fetch_add(clock.now_ns().saturating_sub(now), Ordering::Relaxed);
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
        }
    }
}
