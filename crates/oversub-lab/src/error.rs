//! The one error type of the experiments: the lower crates' errors pass through unchanged (`From`), the lab's own
//! refusals and failed checks say what is wrong in words a user can act on.

use std::path::PathBuf;

/// Why an experiment could not run or its measurement failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// An option the experiment cannot run with; the message names the option as the CLI spells it.
    #[error("{0}")]
    InvalidOption(String),
    /// The run could not finish: a measuring thread panicked, a child process misbehaved, a window measured
    /// nothing.
    #[error("{0}")]
    Failed(String),
    /// The machine cannot run the experiment as asked (too little memory, a store too small, a busy device).
    #[error("{0}")]
    Unfit(String),
    /// A system call failed; `what` says what was being done.
    #[error("{what}: {source}")]
    Os {
        /// What was being done ("open /tmp/x", "read").
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Writing a file the caller asked for failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A measurement's own check failed (bytes that differ after a page-in, an address that moved).
    #[error("{0}")]
    CheckFailed(String),
    /// The store or the raw I/O failed.
    #[error(transparent)]
    Io(#[from] oversub_io::IoError),
    /// The device-memory backend or the CUDA driver failed.
    #[error(transparent)]
    Accel(#[from] oversub_accel::AccelError),
    /// The pager failed.
    #[error(transparent)]
    Pager(#[from] oversub_core::PagerError),
    /// A system call failed where the experiment has nothing to add to the OS error.
    #[error(transparent)]
    System(#[from] std::io::Error),
    /// The SiΓ arbiter failed.
    #[error(transparent)]
    Arbiter(#[from] oversub_arbiter::ArbiterError),
    /// The tenants' planner refused.
    #[error(transparent)]
    Tenants(#[from] oversub_tenants::TenantError),
    /// A memory cgroup of the case study could not be made or driven.
    #[error(transparent)]
    Cgroup(#[from] crate::tasks::cgroup::CgroupError),
    /// A message to or from a child process, or a file the experiment writes, did not (de)serialize.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A working set could not be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] std::collections::TryReserveError),
    /// A size does not fit the machine's address space.
    #[error(transparent)]
    SizeOverflow(#[from] std::num::TryFromIntError),
    /// A probe failed.
    #[error(transparent)]
    Probe(#[from] oversub_probe::ProbeError),
    /// A platform profile could not be read or written.
    #[error(transparent)]
    Profile(#[from] oversub_profile::ProfileError),
}

impl LabError {
    /// The last OS error, with what was being done.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        LabError::Os {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// `source`, with what was being done.
    pub(crate) fn os(what: impl Into<String>, source: std::io::Error) -> Self {
        LabError::Os {
            what: what.into(),
            source,
        }
    }
}

impl From<oversub_accel::cuda::DriverError> for LabError {
    fn from(e: oversub_accel::cuda::DriverError) -> Self {
        LabError::Accel(e.into())
    }
}

impl From<&str> for LabError {
    fn from(message: &str) -> LabError {
        LabError::Failed(message.to_string())
    }
}

impl From<String> for LabError {
    fn from(message: String) -> LabError {
        LabError::Failed(message)
    }
}
