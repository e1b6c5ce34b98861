//! Platform microbenchmarks: what virtual memory, copies and storage cost on this machine, measured with the
//! methods of Vesely et al. (ISPASS 2016, Secs. IV-VI), and turned into the platform profile
//! ([`oversub_profile::Profile`]) that the planner and the simulators read.
//!
//! - [`tlb`]: TLB-miss latency (64 B vs 4 KiB stride, Table 3), with transparent huge pages, and its concurrency
//!   (Fig. 2); misses counted with `perf_event_open` ([`perf`]) or derived from the access pattern.
//! - [`fault`]: page-fault latency and throughput against concurrency (Fig. 6): soft faults, and faults serviced
//!   in user space through userfaultfd with the time split into queueing and servicing.
//! - [`shootdown`]: TLB shootdowns by `mprotect`/`munmap` of one page and of a range (Table 4).
//! - [`btree`]: sorted vs unsorted lookups in a B+-tree with 4 KiB and 2 MiB pages (Fig. 4).
//! - [`copy`] and [`storage`]: memcpy bandwidth; direct read and write bandwidth of a store by block size and
//!   queue depth.
//! - [`gpu`]: the GPU's costs when a CUDA driver is present.
//! - [`derive`]: the arithmetic that turns timings and counts into latencies and throughputs, kept apart so that
//!   it is tested on fixed inputs; [`paper`]: the paper's figures to print beside ours.
//!
//! Every probe takes its sizes as arguments (tests run them tiny) and returns plain data; nothing here prints.

pub mod btree;
pub mod copy;
pub mod derive;
mod error;
pub mod fault;
pub mod gpu;
pub mod mem;
pub mod paper;
pub mod perf;
pub mod shootdown;
pub mod storage;
pub mod system;
pub mod tlb;
mod uffd;

pub use error::ProbeError;

/// Called by long probes between their steps, with a short description of the step that starts, so a front end
/// can show progress.
pub type Tick<'a> = &'a (dyn Fn(&str) + Sync);

/// A [`Tick`] that ignores progress.
pub fn no_tick(_: &str) {}
