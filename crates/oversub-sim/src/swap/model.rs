//! The system and the tasks simulated: memory, bandwidths, SMs and the CPU tick; each task's working set and
//! subtask compute times. Times are integer nanoseconds so that every run is exactly reproducible.

use oversub_profile::SwapMachine;
use serde::Serialize;

use super::SwapSimError;

/// Nanoseconds in a second.
pub const NS_PER_S: u64 = 1_000_000_000;
/// A decimal megabyte, the unit of the paper's bandwidths.
pub const MB: u64 = 1_000_000;
/// A decimal gigabyte, the unit of the paper's synthetic working sets.
pub const GB: u64 = 1_000_000_000;
/// A mebibyte, the unit of the Polybench arrays (4096² floats are 64 MiB).
pub const MIB: u64 = 1 << 20;

/// Seconds as integer nanoseconds, rounded to the nearest; negative and non-finite inputs give `None`.
pub fn seconds_to_ns(s: f64) -> Option<u64> {
    let ns = (s * NS_PER_S as f64).round();
    (s.is_finite() && s >= 0.0 && ns < u64::MAX as f64).then_some(ns as u64)
}

/// Integer nanoseconds as seconds.
pub fn ns_to_seconds(ns: u64) -> f64 {
    ns as f64 / NS_PER_S as f64
}

/// Nanoseconds to move `bytes` at `bytes_per_s`, rounded up: a server never moves more than bandwidth × time.
pub fn transfer_ns(bytes: u64, bytes_per_s: u64) -> u64 {
    let bw = u128::from(bytes_per_s.max(1));
    let ns = (u128::from(bytes) * u128::from(NS_PER_S)).div_ceil(bw);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The machine: one memory, one memory controller, one SSD, a GPU with `sms` streaming multiprocessors, and the
/// CPU's tick (the allocate step of every subtask).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct System {
    /// Memory capacity, MEM_sys.
    pub capacity_bytes: u64,
    /// Memory controller bandwidth (reads and writes alike): 20000 MB/s in the paper (Jetson TX2).
    pub memory_bytes_per_s: u64,
    /// SSD read bandwidth: 492 MB/s in the paper.
    pub ssd_read_bytes_per_s: u64,
    /// SSD write bandwidth: 445 MB/s in the paper.
    pub ssd_write_bytes_per_s: u64,
    /// Streaming multiprocessors; each executes one subtask at a time.
    pub sms: u32,
    /// The CPU tick, the time of the allocate step: 1 ms.
    pub tick_ns: u64,
    /// Which resident tasks Baseline and MaT may swap out (see [`Evictable`]).
    pub evictable: Evictable,
    /// How the proposed policy's direct storage accesses are timed (see [`DirectAccess`]).
    pub direct_access: DirectAccess,
}

/// When a victim's share on the SSD is read and written under the proposed policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirectAccess {
    /// While the subtask executes: the SSD traffic overlaps the computation and the subtask holds its SM until
    /// both are done. Only the resident share goes through the read and write-back steps. An alternative reading,
    /// reported beside the default.
    Overlapped,
    /// In the read and write-back steps, beside the resident share, before and after the computation: the
    /// default, because the paper's Sec. III puts the SSD inside those steps ("reads data to memory (SSD) ...
    /// writes data back to memory (SSD)"), see docs/sim-swap.md.
    #[default]
    Serial,
}

impl DirectAccess {
    /// Both timings, the default first: what a run over seeds reports when none is named.
    pub fn both() -> [DirectAccess; 2] {
        match DirectAccess::default() {
            DirectAccess::Serial => [DirectAccess::Serial, DirectAccess::Overlapped],
            DirectAccess::Overlapped => [DirectAccess::Overlapped, DirectAccess::Serial],
        }
    }
}

impl std::str::FromStr for DirectAccess {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "overlapped" => Ok(DirectAccess::Overlapped),
            "serial" => Ok(DirectAccess::Serial),
            other => Err(format!(
                "unknown direct-access timing {other:?}: expected overlapped or serial"
            )),
        }
    }
}

/// Which resident tasks the swap manager of Baseline and MaT may choose as victims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evictable {
    /// Any task that is not moving data: between subtasks, waiting for an SM, or executing. In the paper's
    /// subtask model only the read and the write-back touch memory, and its victim is "not a currently executing
    /// task" in the sense of the task whose request is being served (Fig. 3: T2 is swapped out for T1, then its
    /// own next request swaps T1 out). A task swapped out while executing swaps back in before its write-back.
    #[default]
    NotTransferring,
    /// Only tasks between two subtasks (in their allocate step): a narrower reading, kept for comparison.
    BetweenSubtasks,
}

impl std::str::FromStr for Evictable {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "not-transferring" => Ok(Evictable::NotTransferring),
            "between-subtasks" => Ok(Evictable::BetweenSubtasks),
            other => Err(format!(
                "unknown eviction rule {other:?}: expected not-transferring or between-subtasks"
            )),
        }
    }
}

impl System {
    /// The paper's machine with `capacity_bytes` of memory and `sms` SMs.
    pub fn paper(capacity_bytes: u64, sms: u32) -> Self {
        System {
            capacity_bytes,
            memory_bytes_per_s: 20_000 * MB,
            ssd_read_bytes_per_s: 492 * MB,
            ssd_write_bytes_per_s: 445 * MB,
            sms,
            tick_ns: 1_000_000,
            evictable: Evictable::NotTransferring,
            direct_access: DirectAccess::default(),
        }
    }

    /// Takes the bandwidths a platform profile's `[swap]` table has (rounded to whole bytes per second) and keeps
    /// the others; returns the keys it took, in the table's order. A value that does not round to 1 ..= u64::MAX
    /// bytes/s is refused and nothing is changed.
    pub fn apply_profile(&mut self, swap: &SwapMachine) -> Result<Vec<&'static str>, SwapSimError> {
        let SwapMachine {
            memory_bytes_per_s,
            ssd_read_bytes_per_s,
            ssd_write_bytes_per_s,
        } = *swap;
        // Destructured without `..` so that a key added to the schema cannot be silently ignored here.
        let mut taken = Vec::new();
        let mut out = [
            self.memory_bytes_per_s,
            self.ssd_read_bytes_per_s,
            self.ssd_write_bytes_per_s,
        ];
        for ((key, value), slot) in [
            ("memory_bytes_per_s", memory_bytes_per_s),
            ("ssd_read_bytes_per_s", ssd_read_bytes_per_s),
            ("ssd_write_bytes_per_s", ssd_write_bytes_per_s),
        ]
        .into_iter()
        .zip(&mut out)
        {
            let Some(v) = value else { continue };
            let rounded = v.round();
            // u64::MAX as f64 is 2^64, itself out of range.
            if !(v.is_finite() && rounded >= 1.0 && rounded < u64::MAX as f64) {
                return Err(SwapSimError::BadProfile {
                    key: format!("swap.{key}"),
                    reason: format!(
                        "must round to at least 1 byte/s (and fit in 64 bits), not {v}"
                    ),
                });
            }
            *slot = rounded as u64;
            taken.push(key);
        }
        [
            self.memory_bytes_per_s,
            self.ssd_read_bytes_per_s,
            self.ssd_write_bytes_per_s,
        ] = out;
        Ok(taken)
    }

    /// The thrashing time of `bytes`, θ = bytes / SSD read bandwidth: what swapping them in costs.
    pub fn thrashing_ns(&self, bytes: u64) -> u64 {
        transfer_ns(bytes, self.ssd_read_bytes_per_s)
    }
}

/// One task: a working set and a sequence of subtasks, each with its compute time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    /// Name in tables and figures.
    pub name: String,
    /// Working set, MEM(i).
    pub memory_bytes: u64,
    /// Compute time of each subtask on one SM, c_ij; the number of subtasks n_i is its length.
    pub compute_ns: Vec<u64>,
    /// A priority given by hand (larger is higher), for `--priorities given`.
    pub weight: Option<f64>,
}

impl Task {
    /// n_i.
    pub fn subtasks(&self) -> usize {
        self.compute_ns.len()
    }

    /// Bytes of subtask `j`'s data slice: MEM(i)/n_i, the remainder spread so that the slices add up to MEM(i).
    pub fn slice_bytes(&self, j: usize) -> u64 {
        let n = self.subtasks() as u128;
        if n == 0 {
            return 0;
        }
        let m = u128::from(self.memory_bytes);
        let j = j as u128;
        let bytes = m * (j + 1) / n - m * j / n;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// The paper's result for a scenario: how much the proposed policy cut the lowest-priority task's lengthened
/// latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperFigure {
    /// The figure (`"Fig. 4(a)"`).
    pub figure: &'static str,
    /// Reduction against Baseline, percent.
    pub vs_baseline_pct: f64,
    /// Reduction against MaT, percent.
    pub vs_mat_pct: f64,
}

/// A system and the tasks that run on it together, all starting at t = 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// Short name (`fig4a`).
    pub name: String,
    /// One line on what it is.
    pub description: String,
    /// The machine.
    pub system: System,
    /// The tasks.
    pub tasks: Vec<Task>,
    /// The paper's numbers for it, when it is one of the paper's.
    pub paper: Option<PaperFigure>,
}

impl Scenario {
    /// Multiplies every subtask's compute time by `factor` (compute per byte: a sweep of how long the kernels run
    /// against how much data they move). `InvalidScenario` unless `factor` is finite and positive.
    pub fn scale_compute(&mut self, factor: f64) -> Result<(), SwapSimError> {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(SwapSimError::invalid(
                &self.name,
                format!("the compute scale must be a positive number, not {factor}"),
            ));
        }
        for t in &mut self.tasks {
            for c in &mut t.compute_ns {
                *c = (*c as f64 * factor).round() as u64;
            }
        }
        if factor != 1.0 {
            self.description = format!("{} (compute × {factor})", self.description);
        }
        Ok(())
    }

    /// Σ MEM(i).
    pub fn total_demand_bytes(&self) -> u64 {
        self.tasks.iter().map(|t| t.memory_bytes).sum()
    }

    /// Refuses what the model cannot simulate: no tasks, zero sizes, bandwidths or SMs, a task without subtasks
    /// or larger than memory, a zero tick.
    pub fn validate(&self) -> Result<(), SwapSimError> {
        let name = self.name.as_str();
        let bad = |reason: String| Err(SwapSimError::invalid(name, reason));
        let s = &self.system;
        if self.tasks.is_empty() {
            return bad("it has no tasks".into());
        }
        if s.capacity_bytes == 0 {
            return bad("the memory capacity must be at least one byte".into());
        }
        for (what, v) in [
            ("memory bandwidth", s.memory_bytes_per_s),
            ("SSD read bandwidth", s.ssd_read_bytes_per_s),
            ("SSD write bandwidth", s.ssd_write_bytes_per_s),
        ] {
            if v == 0 {
                return bad(format!("the {what} must be positive"));
            }
        }
        if s.sms == 0 {
            return bad("the GPU needs at least one SM".into());
        }
        if s.tick_ns == 0 {
            return bad("the tick must be positive".into());
        }
        let mut total = 0u64;
        for t in &self.tasks {
            if t.memory_bytes == 0 {
                return bad(format!("task {:?} has a working set of zero bytes", t.name));
            }
            if t.compute_ns.is_empty() {
                return bad(format!("task {:?} has no subtasks", t.name));
            }
            if let Some(w) = t.weight.filter(|w| !w.is_finite()) {
                return bad(format!("task {:?} has a priority of {w}", t.name));
            }
            if t.memory_bytes > s.capacity_bytes {
                return Err(SwapSimError::TaskTooLarge {
                    scenario: self.name.clone(),
                    task: t.name.clone(),
                    bytes: t.memory_bytes,
                    capacity: s.capacity_bytes,
                });
            }
            total = match total.checked_add(t.memory_bytes) {
                Some(v) => v,
                None => return bad("the working sets add up to more than 2^64 bytes".into()),
            };
        }
        let mut names: Vec<&str> = self.tasks.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!("two tasks are named {:?}", w[0]));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slices_add_up() {
        let t = Task {
            name: "t".into(),
            memory_bytes: 10,
            compute_ns: vec![1; 3],
            weight: None,
        };
        let s: Vec<u64> = (0..3).map(|j| t.slice_bytes(j)).collect();
        assert_eq!(s.iter().sum::<u64>(), 10);
        assert!(s.iter().all(|&b| b == 3 || b == 4));
    }

    #[test]
    fn transfer_rounds_up() {
        assert_eq!(transfer_ns(20_000 * MB, 20_000 * MB), NS_PER_S);
        assert_eq!(transfer_ns(1, 3 * NS_PER_S), 1);
        assert_eq!(transfer_ns(0, 1), 0);
        // 6 GB at 492 MB/s: the synthetic tasks' thrashing time, 12.195 s.
        let theta = System::paper(18 * GB, 4).thrashing_ns(6 * GB);
        assert_eq!(theta, 12_195_121_952);
    }

    #[test]
    fn a_profile_overrides_the_bandwidths_it_has() {
        let paper = System::paper(18 * GB, 4);
        let mut s = paper.clone();
        assert!(s.apply_profile(&SwapMachine::default()).unwrap().is_empty());
        assert_eq!(s, paper);
        let taken = s
            .apply_profile(&SwapMachine {
                memory_bytes_per_s: Some(2.5e10),
                ssd_read_bytes_per_s: None,
                ssd_write_bytes_per_s: Some(1_000_000.6),
            })
            .unwrap();
        assert_eq!(taken, vec!["memory_bytes_per_s", "ssd_write_bytes_per_s"]);
        assert_eq!(s.memory_bytes_per_s, 25_000 * MB);
        assert_eq!(s.ssd_read_bytes_per_s, paper.ssd_read_bytes_per_s);
        assert_eq!(s.ssd_write_bytes_per_s, 1_000_001);
        for bad in [0.4, -1.0, f64::NAN, f64::INFINITY, 1.9e19] {
            let mut t = paper.clone();
            let e = t
                .apply_profile(&SwapMachine {
                    memory_bytes_per_s: Some(3e10),
                    ssd_read_bytes_per_s: Some(bad),
                    ssd_write_bytes_per_s: None,
                })
                .unwrap_err();
            assert!(e.to_string().contains("swap.ssd_read_bytes_per_s"), "{e}");
            assert_eq!(t, paper, "nothing changes on a refusal");
        }
    }

    #[test]
    fn seconds_convert() {
        assert_eq!(seconds_to_ns(1.5), Some(1_500_000_000));
        assert_eq!(seconds_to_ns(-1.0), None);
        assert_eq!(seconds_to_ns(f64::NAN), None);
        assert_eq!(ns_to_seconds(2_500_000_000), 2.5);
    }
}
