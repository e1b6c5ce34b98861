/// Everything the arbiter can refuse or fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArbiterError {
    /// A phase name that is none of `CPU_MEM`, `CPU_COM`, `NO_OPER`.
    #[error("unknown phase {0:?}: expected CPU_MEM, CPU_COM or NO_OPER")]
    UnknownPhase(String),
    /// A duration that is negative, zero where a phase needs time, too long, or not a number with a unit.
    #[error("invalid duration {value:?}: {reason}")]
    InvalidDuration {
        /// The text or value given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A name for the shared-memory arbiter that cannot be a file name under /dev/shm.
    #[error("invalid arbiter name {0:?}: use 1-64 letters, digits, '-', '_' or '.'")]
    InvalidName(String),
    /// Every task slot is taken by a live task.
    #[error("all {0} task slots of the arbiter are taken")]
    NoFreeSlot(usize),
    /// The shared-memory file is not an arbiter of this version.
    #[error("{path} is not an oversub arbiter of version {expected}: {reason}")]
    Incompatible {
        /// The file.
        path: String,
        /// Layout version this build understands.
        expected: u32,
        /// What did not match.
        reason: String,
    },
    /// The shared-memory file is not one this process may trust: not a regular file (a symbolic link, a FIFO),
    /// owned by another user, readable or writable by others, or not of the layout's size. Whoever can write the
    /// file steers the transfers, so it is refused before it is mapped.
    #[error("refusing {path}: {reason}")]
    Untrusted {
        /// The file.
        path: String,
        /// What failed the check.
        reason: String,
    },
    /// The shared-memory file is served by a live process (its server lock is held), so it is not taken over.
    #[error("{path} is in use by a running arbiter server{}", if *pid == 0 { String::new() } else { format!(" (pid {pid})") })]
    InUse {
        /// The file.
        path: String,
        /// The server's pid as its header records it; 0 when it records none yet.
        pid: u32,
    },
    /// A configuration value that cannot work (a zero chunk size or chunk time).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A system call failed.
    #[error("{op} {path}: {source}")]
    Os {
        /// The call (`open`, `mmap`, ...).
        op: &'static str,
        /// The file it was about.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
