use std::io;

/// Why a probe could not run or measure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The storage probe's I/O failed.
    #[error(transparent)]
    Io(#[from] oversub_io::IoError),
    /// An option or input that cannot be measured with.
    #[error("invalid probe input: {0}")]
    InvalidInput(String),
    /// The facility a probe needs is missing here (no userfaultfd, no CUDA driver, ...).
    #[error("{what} is not available here: {why}")]
    Unavailable {
        /// The facility.
        what: &'static str,
        /// Why, in words a user can act on.
        why: String,
    },
}

impl ProbeError {
    /// The last OS error, with what was being done.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        ProbeError::Os {
            what: what.into(),
            source: io::Error::last_os_error(),
        }
    }
}
