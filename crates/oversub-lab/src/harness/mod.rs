//! What the experiments share, one file per concern: [`cache`] (emptying the page cache), [`direct`] (`O_DIRECT`
//! descriptors, whole-buffer `read()`/`write()`, the store files a run makes), [`raw_io`] (the store's raw limit
//! through io_uring) and [`memory`] (page-aligned mappings, the random fill). The leaf helpers (one median, one
//! RNG, one `pin_to_cpu`) come from `oversub-base` and are re-exported here so that an experiment imports its tools
//! from one place.

pub mod cache;
pub mod direct;
pub mod memory;
pub mod raw_io;

pub mod cpu;

mod steps;

pub use memory::fill_random;
pub use oversub_base::cpu::{pin_thread_to_cpu, pin_to_cpu};
pub use oversub_base::rng::Rng;
pub use oversub_base::stats::{median, median_u64};
pub use steps::Steps;

/// Called by long experiments between their steps, with a short description of the step that starts, so a front
/// end can draw a progress bar or log; the same shape as `oversub_probe::Tick`.
pub type Progress<'a> = &'a (dyn Fn(&str) + Sync);

/// A [`Progress`] that ignores progress.
pub fn no_progress(_: &str) {}
