/// Everything the planner and the cgroup runner can refuse or fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TenantError {
    /// An input that cannot be planned with (a zero capacity, a negative or non-finite time, no subtasks).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A tenant whose demand alone exceeds what the system can hold at all (memory plus store).
    #[error("tenant {tenant:?} needs {demand_bytes} bytes, more than the {limit_bytes} bytes {what} holds")]
    TooLarge {
        /// The tenant's name.
        tenant: String,
        /// Its demand.
        demand_bytes: u64,
        /// The limit it exceeds.
        limit_bytes: u64,
        /// What has that limit ("the store", "memory and store together").
        what: &'static str,
    },
    /// The machine has no usable memory cgroup controller.
    #[error("no memory cgroup controller: {0}")]
    NoCgroup(String),
    /// The memory cgroup controller is there but we may not use it.
    #[error("no permission to manage memory cgroups under {path}: {source} (run as root, or delegate a cgroup to this user)")]
    Permission {
        /// The cgroup directory or file.
        path: String,
        /// The refusal.
        #[source]
        source: std::io::Error,
    },
    /// A system call or file operation failed.
    #[error("{op} {path}: {source}")]
    Os {
        /// What was being done.
        op: &'static str,
        /// The file or command it was about.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
