//! Contention-aware swap space management for several tenants (Yang & Chen, "Memory Contention Aware Swap Space
//! Management"), as a library.
//!
//! When applications that share one memory need more than it holds, [`priority`] ranks them by how much they
//! suffer from running together (Alg. 1: the contention degree W_i), and [`swap`] picks the lowest-ranked ones as
//! victims and decides what fraction α_i of each victim's memory stays on storage, accessed there directly instead
//! of being swapped in and out (Alg. 2). The result is a resident quota per tenant; the pager
//! (`oversub-core`), the simulator (`oversub sim swap`) and the cgroup case study (`oversub_lab::tasks`, `oversub
//! tasks`) apply it. Pure planning: no process control, no unsafe code, nothing printed.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use oversub_tenants::{priority, swap};
//!
//! // Response times alone and together, and subtask counts, of three applications.
//! let ranked = priority::assign(&[
//!     priority::Contention::new("a", 10.0, 15.0, 5)?, // W = 0.5 / 5 = 0.1
//!     priority::Contention::new("b", 10.0, 30.0, 4)?, // W = 2.0 / 4 = 0.5 (most hurt: highest priority)
//!     priority::Contention::new("c", 10.0, 12.0, 1)?, // W = 0.2 / 1 = 0.2
//! ])?;
//! assert_eq!(ranked.order, vec![1, 2, 0]);
//!
//! // 3 GiB of demand in order of priority, 2.5 GiB of memory: the lowest-priority tenant keeps 0.5 of its 1 GiB.
//! let gib = 1u64 << 30;
//! let demands: Vec<_> = ranked.order.iter().map(|_| gib).collect();
//! let plan = swap::plan(&demands, 5 * gib / 2, &swap::Options::default())?;
//! assert_eq!(plan.tenants[2].resident_limit_bytes, gib / 2);
//! assert!(plan.tenants[..2].iter().all(|t| t.alpha == 0.0));
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod error;
pub mod priority;
pub mod swap;

pub use error::TenantError;
