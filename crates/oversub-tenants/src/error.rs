/// Everything the planner can refuse.
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
}
