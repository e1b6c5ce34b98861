//! The table-driven schedule runtime (TimeWall model, Bakita & Anderson RTSS'22 Secs. II-C and III-B).
//!
//! Components run in time slices from a fixed cyclic table. Because the table says what runs next, the planner
//! pages the next component's buffers in, and a victim's out, while the current component runs ([`plan`]); the
//! executor ([`run`]) replays the table with real timers, threads and paging, in the three modes of Figs. 6-8.

pub mod config;
pub mod demo;
pub mod inflation;
pub mod model;
pub mod plan;
pub mod report;
pub mod run;
pub mod setup;

pub use config::{load_system, parse_system, ConfigError};
pub use model::{
    BufferId, BufferSpec, Component, ComponentId, DeviceKind, Platform, Slot, System, Table, Work,
};
pub use oversub_core::demand::Readahead;
pub use plan::{Bandwidths, Mode, PageKind, PageOp, Plan, SlotPlan};
pub use report::{ModeAnalysis, PlanDoc, SlotPaging};
pub use run::{
    miss_profile, run, work_mismatch, Element, Lease, MissOrigin, MissProfile, OpRecord, Prime,
    PrimeReport, RawBuffer, Repetition, RunError, RunOptions, RunResult, Runtime, SlotContext,
    SlotError, SlotRecord, WorkFn, WorkMismatch, WorkResult,
};
pub use setup::{BandwidthSource, SetupError, StoreSpeed};
