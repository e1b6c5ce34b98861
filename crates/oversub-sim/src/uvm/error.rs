use std::path::PathBuf;

/// Everything that can go wrong in a simulation: reading a trace or profile, or a bad name or parameter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A trace, graph or profile file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A trace or graph file is not in the format it claims.
    #[error("{path}: {location}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Where in it (`line 12`, `byte 4096`).
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// A workload name nobody knows.
    #[error("unknown workload `{name}` (known: {known})")]
    UnknownWorkload {
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
    /// A parameter out of its range (an empty trace, a zero-sized cache).
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// An oversubscription ratio that is not one: not a number, negative, or a bare number so small that it is
    /// almost certainly a fraction (`2` for 200%) although ratios are percent.
    #[error("bad ratio `{text}`: {reason}")]
    BadRatio {
        /// The ratio as given.
        text: String,
        /// Why it is refused, with what was probably meant.
        reason: String,
    },
    /// The platform profile could not be read, or is not a valid profile.
    #[error(transparent)]
    Profile(#[from] oversub_profile::ProfileError),
}

impl SimError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn bad_file(
        path: impl Into<PathBuf>,
        location: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::BadFile {
            path: path.into(),
            location: location.into(),
            reason: reason.into(),
        }
    }
}
