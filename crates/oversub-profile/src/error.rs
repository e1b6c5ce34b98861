//! What reading, checking and writing a profile can fail with. Every message starts with the file, so the
//! consumers (`plan`, `run`, `sim uvm`, `sim swap`) can print it as it is.

use std::path::PathBuf;

/// Everything that can go wrong with a profile file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or not the profile's shape: a syntax error, an unknown or missing key, a value of the wrong type.
    #[error("{}{}: {message}", path.display(), line_suffix(*line))]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line the problem is on, where the parser could tell.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A schema version this build does not read.
    #[error(
        "{}: schema version {found} is not supported; this oversub reads version {supported} \
         (re-run `oversub probe`)",
        path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// `profile.version` in the file.
        found: u32,
        /// The version this build reads ([`crate::VERSION`]).
        supported: u32,
    },
    /// A value of the right type but out of range (a negative bandwidth, a zero block size).
    #[error("{}: {key} {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted path of the key: `storage.read_bytes_per_s`, `storage.points[2].block_bytes`.
        key: String,
        /// What is wrong, with the value: `must be a positive finite number, not -5`.
        message: String,
    },
    /// The profile could not be written as TOML (a number TOML cannot hold).
    #[error("writing the profile as TOML: {message}")]
    Serialize {
        /// What the serializer said.
        message: String,
    },
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|l| format!(": line {l}")).unwrap_or_default()
}
