//! oversub's experiments as library functions, with the probe crate's contract: options in, progress through a
//! callback ([`Progress`]), a `Serialize` report out, nothing printed. The `oversub` binary parses flags into the
//! options and renders the reports; the Python package binds the same functions, so every headline benchmark runs
//! from either front.
//!
//! - [`harness`]: what measurements share (cache drop, `O_DIRECT` files, the raw io_uring limit, CPU pinning,
//!   aligned and anonymous memory, the RNG, the median).
//! - [`paging`]: `oversub bench paging`, on host memory and on a CUDA GPU.
//! - [`profile`]: `oversub probe`'s probes and the platform profile assembled from their results.
//!
//! A new experiment goes here as a module of its own: an options struct (deriving `clap::Args` behind the `clap`
//! feature), one `run(&Options, Progress) -> Result<Report, LabError>` and a report that serializes.

#![deny(unsafe_op_in_unsafe_fn)]

mod error;
pub mod harness;
pub mod paging;
pub mod profile;

pub use error::LabError;
pub use harness::{no_progress, Progress};
