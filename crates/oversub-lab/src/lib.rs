//! oversub's experiments as library functions, with the probe crate's contract: options in, progress through a
//! callback ([`Progress`]), a `Serialize` report out, nothing printed. The `oversub` binary parses flags into the
//! options and renders the reports; the Python package binds the same functions, so every headline benchmark runs
//! from either front.
//!
//! - [`harness`]: what measurements share (cache drop, `O_DIRECT` files, the raw io_uring limit, CPU pinning,
//!   aligned and anonymous memory, the RNG, the median).
//! - [`interference`]: DRAM thrashers against paging (Figs. 14-15) and a PREM task against transfers under the SiΓ
//!   arbiter; its PREM task runs in a process of its own started from a command the front end gives.
//! - [`tenants`]: several tenants oversubscribing one pool, alone, under LRU swapping (the baseline, here) and under
//!   the contention-aware plan; the cold-start FIFO vs priority-I/O experiment.
//! - [`tasks`]: the cgroup case study (real commands under memory cgroup limits planned by Alg. 1 and 2), with
//!   [`tasks::cgroup`], the process control it runs on, and the built-in tasks' worker.
//! - [`paging`]: `oversub bench paging`, on host memory and on a CUDA GPU.
//! - [`profile`]: `oversub probe`'s probes and the platform profile assembled from their results.
//! - [`args`]: the value parsers the options' flags use (sizes, counts, factors, durations), plain functions so the
//!   library builds without clap.
//!
//! A new experiment goes here as a module of its own: an options struct (deriving `clap::Args` behind the `clap`
//! feature), one `run(&Options, Progress) -> Result<Report, LabError>` and a report that serializes.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod args;
mod error;
pub mod harness;
pub mod interference;
pub mod paging;
pub mod profile;
pub mod tasks;
pub mod tenants;

pub use error::LabError;
pub use harness::{no_progress, Progress};
