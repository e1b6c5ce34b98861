//! The experiments' error: bad options, a run that could not finish, or the failure of a layer below (the OS, the
//! pager, the store, the arbiter, the tenants' planner), kept as the source.

use std::num::TryFromIntError;

/// Why an experiment did not produce its report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// An option is out of range or contradicts another (the message names it).
    #[error("{0}")]
    InvalidOptions(String),
    /// The run could not finish: a measuring thread panicked, a child process misbehaved, a window measured
    /// nothing.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Pager(#[from] oversub_core::PagerError),
    #[error(transparent)]
    Store(#[from] oversub_io::IoError),
    #[error(transparent)]
    Accel(#[from] oversub_accel::AccelError),
    #[error(transparent)]
    Arbiter(#[from] oversub_arbiter::ArbiterError),
    #[error(transparent)]
    Tenants(#[from] oversub_tenants::TenantError),
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
    SizeOverflow(#[from] TryFromIntError),
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
