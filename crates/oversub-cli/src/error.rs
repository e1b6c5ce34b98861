//! The error every command returns: any library error or a message, printed by `main` with its chain of causes.

/// Any error of the libraries below, or a message of the CLI's own (`"...".into()`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
