/// Errors of device-memory backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccelError {
    /// A system call of the backend failed.
    #[error("{op} failed: {source}")]
    Os {
        /// The call that failed (`mmap`, `mprotect`, ...).
        op: &'static str,
        /// The error the OS returned.
        #[source]
        source: std::io::Error,
    },
    /// The request cannot be met (zero length, size overflow, a range that is not ours).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend or a feature of it is not available on this machine.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// No CUDA driver library could be loaded, or it finds no usable device.
    #[error("{0}")]
    NoDriver(String),
    /// A CUDA driver call failed.
    #[error(transparent)]
    Driver(#[from] crate::cuda::DriverError),
    /// The device ran out of memory.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
}

impl AccelError {
    pub(crate) fn last_os(op: &'static str) -> Self {
        AccelError::Os {
            op,
            source: std::io::Error::last_os_error(),
        }
    }
}
