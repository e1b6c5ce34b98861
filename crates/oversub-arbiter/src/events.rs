//! The gate's event log: what was admitted, when it waited, and what work the transfer side reports having run,
//! on the arbiter's clock, so that interference can be attributed afterwards (a benchmark writes it as a Chrome
//! trace beside the CPU task's phases). Off by default; see [`Gate::set_recording`](crate::Gate::set_recording).

/// Events a gate keeps at most by default (40 bytes each); later ones are counted as dropped.
pub const DEFAULT_EVENT_CAPACITY: usize = 2_000_000;

/// What an event stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum GateEventKind {
    /// Admitted: `chunks` chunks (or a cost given to [`Gate::admit_for`](crate::Gate::admit_for): `chunks` = 0),
    /// promised to end by `end_ns` (start + n·T(Q), or start + cost), inside the grant that ends at
    /// `grant_until_ns` (`None`: no task restricted memory).
    Admitted {
        /// Chunks admitted; 0 for an admission of a cost.
        chunks: u64,
        /// End of the grant it runs under.
        grant_until_ns: Option<u64>,
    },
    /// The gate waited for a grant from `start_ns` to `end_ns`.
    Waited,
    /// Work the transfer side reports having run in `[start_ns, end_ns]` (recorded by the user of the gate).
    Ran {
        /// What kind of work.
        what: WorkKind,
        /// Bytes it moved, mapped or unmapped.
        bytes: u64,
    },
}

/// Kinds of work a transfer side reports with [`GateEventKind::Ran`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum WorkKind {
    /// Storage I/O (a batch of admitted chunks).
    Transfer,
    /// A memory copy (a chunk of a copy between host and device memory).
    Copy,
    /// Mapping memory in (a page-in's commit: `mprotect` on the host backend).
    Commit,
    /// Unmapping memory (a page-out's decommit: `madvise(MADV_DONTNEED)` and `mprotect(PROT_NONE)` on the host
    /// backend, which zap pages and send TLB-shootdown IPIs).
    Decommit,
}

/// One event, on the arbiter's clock (`CLOCK_MONOTONIC` nanoseconds for the real clock, which other processes
/// read alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GateEvent {
    /// Start, clock nanoseconds.
    pub start_ns: u64,
    /// End, clock nanoseconds (for an admission: the promised end).
    pub end_ns: u64,
    /// What happened.
    pub kind: GateEventKind,
}
