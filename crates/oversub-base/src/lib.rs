//! Leaf utilities every oversub crate may use, each defined once (redb's `sync.rs` pattern for locks):
//! [`sync`] (poison-tolerant lock, condition-variable waits), [`size`] (user-typed sizes such as `"256MiB"`),
//! [`format`] (durations, byte counts, rates for people), [`name`] (names that become a path component), [`mem`]
//! (the one aligned heap buffer), [`rng`] (one deterministic generator), [`stats`] (one median), [`cpu`] (pinning a
//! thread to a CPU) and [`process`] (which process made an object: a forked child's drops must leave its parent's
//! threads, files and locks alone).
//!
//! This crate depends on no other oversub crate and prints nothing.

pub mod cpu;
pub mod format;
pub mod mem;
pub mod name;
pub mod process;
pub mod rng;
pub mod size;
pub mod stats;
pub mod sync;

pub use format::{format_bytes, format_rate_mbs, format_seconds};
pub use size::{parse_size, SizeParseError};
