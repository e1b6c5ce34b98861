//! The PREM task (SiΓ Sec. 5): walks the paper's 256 MB of RGB pixels in iterations whose working set (input and
//! output) is 85% of the last-level cache: load (copy the slice into a local buffer), compute (RGB to Y, repeated
//! so that compute is to load as in the paper's Table 2), unload (copy the Y values out). It runs the same in a
//! thread of the benchmark and in a process of its own (`child.rs`).

use std::time::Duration;

use oversub_arbiter::{MonotonicClock, Task};
use serde::{Deserialize, Serialize};

use super::counters::{Counters, Delta};
use crate::LabError;

/// Table 2 of the SiΓ paper, TX1 averages (µs): the proportions the PREM task is tuned to.
pub const PAPER_TX1_US: (f64, f64, f64) = (444.0, 8784.0, 716.0);

/// What the PREM task announces to the arbiter, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    pub load_ns: u64,
    pub compute_ns: u64,
    pub unload_ns: u64,
}

/// One phase of one iteration: its interval on `CLOCK_MONOTONIC` (which every process reads alike, so it can be
/// set beside the transfer side's events) and what the kernel counted on the task's CPU meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub start_ns: u64,
    pub end_ns: u64,
    pub counters: Delta,
}

impl PhaseRecord {
    pub fn secs(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 * 1e-9
    }
}

/// One PREM iteration: load, compute, unload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub phases: [PhaseRecord; 3],
}

/// The PREM task's buffers and kernels.
pub struct PremTask {
    input: Vec<u8>,
    output: Vec<u8>,
    local_in: Vec<u8>,
    local_out: Vec<u8>,
    pub compute_reps: usize,
    /// Idle time after each iteration, as a fraction of the iteration, so that a SCHED_FIFO task stays under the
    /// kernel's real-time throttling budget (95% of each second by default) instead of being stopped for 50 ms.
    pub rest_fraction: f64,
    /// The position in the data, kept between runs so that every condition walks fresh slices.
    next: usize,
    counters: Counters,
}

impl std::fmt::Debug for PremTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PremTask")
            .field("data_bytes", &self.input.len())
            .field("compute_reps", &self.compute_reps)
            .field("rest_fraction", &self.rest_fraction)
            .finish_non_exhaustive()
    }
}

impl PremTask {
    pub fn new(llc_bytes: u64, data_bytes: u64, cpu: usize) -> PremTask {
        // 85% of the LLC holds one iteration's input (3 bytes a pixel) and output (1 byte a pixel).
        let ws = llc_bytes * 85 / 100;
        let pixels = (ws / 4).max(4096) as usize / 64 * 64;
        let total_pixels = (data_bytes / 3) as usize / pixels * pixels;
        let total_pixels = total_pixels.max(pixels);
        let mut input = vec![0u8; total_pixels * 3];
        crate::harness::fill_random(&mut input, 0x2545_F491_4F6C_DD1D);
        // Every buffer is written once here, so no phase pays for first-touch page faults.
        PremTask {
            input,
            output: vec![1u8; total_pixels],
            local_in: vec![1u8; pixels * 3],
            local_out: vec![1u8; pixels],
            compute_reps: 1,
            rest_fraction: 0.0,
            next: 0,
            counters: Counters::new(cpu),
        }
    }

    pub fn working_set(&self) -> u64 {
        (self.local_in.len() + self.local_out.len()) as u64
    }

    pub fn data_bytes(&self) -> u64 {
        self.input.len() as u64
    }

    pub fn iterations_per_pass(&self) -> usize {
        self.output.len() / self.local_out.len()
    }

    fn load(&mut self, i: usize) {
        let n = self.local_in.len();
        self.local_in
            .copy_from_slice(&self.input[i * n..(i + 1) * n]);
    }

    fn compute_once(&mut self) {
        for (y, px) in self
            .local_out
            .iter_mut()
            .zip(std::hint::black_box(&self.local_in).chunks_exact(3))
        {
            let v = 77 * px[0] as u32 + 150 * px[1] as u32 + 29 * px[2] as u32;
            *y = (v >> 8) as u8;
        }
        std::hint::black_box(&mut self.local_out);
    }

    fn unload(&mut self, i: usize) {
        let m = self.local_out.len();
        self.output[i * m..(i + 1) * m].copy_from_slice(&self.local_out);
    }

    /// Runs `iterations` PREM iterations (continuing over the data where the last run stopped), announcing phases
    /// when a task is given. The kernel's counters are read between phases, outside the timed intervals.
    ///
    /// A task that was idle (`NO_OPER`) left memory unrestricted, and a transfer side may have admitted a long
    /// batch then; so before its first memory phase the task announces a compute phase of `lead` and waits it
    /// out (the arbiter cannot foresee a jump from `NO_OPER` straight into a memory phase). `lead` must cover the
    /// longest batch a transfer side admits while memory is unrestricted.
    pub fn run(
        &mut self,
        iterations: usize,
        task: Option<(&Task, Announce)>,
        lead: Duration,
        mut tick: impl FnMut(),
    ) -> Result<Vec<IterationRecord>, LabError> {
        let per_pass = self.iterations_per_pass();
        let mut records = Vec::with_capacity(iterations);
        if let Some((t, _)) = task {
            if !lead.is_zero() {
                t.com(lead)?;
                std::thread::sleep(lead);
            }
        }
        for _ in 0..iterations {
            let i = self.next % per_pass;
            self.next += 1;
            let s0 = self.counters.sample();
            if let Some((t, a)) = task {
                t.mem(Duration::from_nanos(a.load_ns))?;
            }
            let t0 = MonotonicClock::now();
            self.load(i);
            let t1 = MonotonicClock::now();
            let s1 = self.counters.sample();
            let t2 = MonotonicClock::now();
            match task {
                // A long compute phase is re-announced as it progresses: before each repetition, the shortest time
                // the rest can take. The window then never ends long before the real phase does, even when the
                // phase runs slow.
                Some((t, a)) => {
                    let reps = self.compute_reps.max(1) as u64;
                    let per_rep = a.compute_ns / reps;
                    for r in 0..reps {
                        t.com(Duration::from_nanos((per_rep * (reps - r)).max(1_000)))?;
                        self.compute_once();
                    }
                }
                None => {
                    for _ in 0..self.compute_reps {
                        self.compute_once();
                    }
                }
            }
            let t3 = MonotonicClock::now();
            let s2 = self.counters.sample();
            if let Some((t, a)) = task {
                t.mem(Duration::from_nanos(a.unload_ns))?;
            }
            let t4 = MonotonicClock::now();
            self.unload(i);
            let t5 = MonotonicClock::now();
            let s3 = self.counters.sample();
            records.push(IterationRecord {
                phases: [
                    PhaseRecord {
                        start_ns: t0,
                        end_ns: t1,
                        counters: s1.since(&s0),
                    },
                    PhaseRecord {
                        start_ns: t2,
                        end_ns: t3,
                        counters: s2.since(&s1),
                    },
                    PhaseRecord {
                        start_ns: t4,
                        end_ns: t5,
                        counters: s3.since(&s2),
                    },
                ],
            });
            if self.rest_fraction > 0.0 {
                let rest = Duration::from_nanos(t5.saturating_sub(t0)).mul_f64(self.rest_fraction);
                if let Some((t, _)) = task {
                    // Idle time touches no memory: transfers may use it.
                    t.com(rest.max(Duration::from_micros(1)))?;
                }
                std::thread::sleep(rest);
            }
            tick();
        }
        if let Some((t, _)) = task {
            t.no_oper()?;
        }
        Ok(records)
    }
}
