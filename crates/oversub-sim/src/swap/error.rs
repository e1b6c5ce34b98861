//! What the swap simulator can refuse or fail with: impossible scenarios, unknown names, unreadable files, a
//! simulation that cannot make progress, and a broken conservation check.

use std::path::PathBuf;

use oversub_tenants::TenantError;

/// Everything that can go wrong in `oversub sim swap`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwapSimError {
    /// A scenario that cannot be simulated (no tasks, a zero size or bandwidth, a negative time).
    #[error("invalid scenario {scenario:?}: {reason}")]
    InvalidScenario {
        /// The scenario's name.
        scenario: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A task whose working set alone does not fit in memory: it could never be resident, so it could not run alone
    /// (the reference every lengthened latency is measured from) nor be swapped in as a whole.
    #[error(
        "task {task:?} of scenario {scenario:?} needs {bytes} bytes, more than the {capacity} bytes of memory: \
         a task is swapped as a whole, so its working set must fit"
    )]
    TaskTooLarge {
        /// The scenario's name.
        scenario: String,
        /// The task's name.
        task: String,
        /// Its working set.
        bytes: u64,
        /// The memory capacity.
        capacity: u64,
    },
    /// The resident quotas of the proposed policy add up to more than memory (Alg. 2 should never do that).
    #[error(
        "the resident quotas add up to {resident} bytes, more than the {capacity} bytes of memory"
    )]
    QuotaExceedsCapacity {
        /// Σ resident parts.
        resident: u64,
        /// The memory capacity.
        capacity: u64,
    },
    /// A scenario name nobody knows.
    #[error("unknown scenario `{name}` (known: {known})")]
    UnknownScenario {
        /// The name given.
        name: String,
        /// The names accepted, comma separated.
        known: String,
    },
    /// A policy name nobody knows.
    #[error("unknown policy `{name}` (known: {known})")]
    UnknownPolicy {
        /// The name given.
        name: String,
        /// The names accepted, comma separated.
        known: String,
    },
    /// A scenario file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A scenario file that is not valid TOML of the expected shape.
    #[error("{path}: {location}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Where in it (`line 12`, `task "a"`).
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// The simulation stopped making progress (a bug, or an input the model cannot serve).
    #[error("{policy} simulation stuck at t = {time_s} s: {detail}")]
    Stuck {
        /// The policy simulated.
        policy: String,
        /// Simulated time when it stopped.
        time_s: f64,
        /// What was still waiting.
        detail: String,
    },
    /// A conservation check failed on a simulation's outcome.
    #[error("conservation check failed: {0}")]
    Conservation(String),
    /// A platform profile's `[swap]` value the simulated machine cannot take.
    #[error("profile key {key} {reason}")]
    BadProfile {
        /// Dotted key: `swap.ssd_read_bytes_per_s`.
        key: String,
        /// What is wrong, with the value.
        reason: String,
    },
    /// The planner (Alg. 1 or Alg. 2) refused its input.
    /// Seeds that name none, or not as a count or range.
    #[error("--seeds {text:?}: {reason} (give a count such as 20, or a range such as 5-24)")]
    BadSeeds {
        /// What was given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// One seed's study of one scenario failed.
    #[error("{scenario}, seed {seed}: {source}")]
    AtSeed {
        /// The scenario.
        scenario: String,
        /// The seed whose draw failed.
        seed: u64,
        /// What went wrong.
        source: Box<SwapSimError>,
    },
    #[error("planner: {0}")]
    Plan(#[from] TenantError),
}

impl SwapSimError {
    pub(crate) fn invalid(scenario: &str, reason: impl Into<String>) -> Self {
        Self::InvalidScenario {
            scenario: scenario.to_string(),
            reason: reason.into(),
        }
    }
}
