//! The memory arbiter of oversub: SiΓ (Capodieci et al., RTNS 2017) as a library.
//!
//! CPU tasks that follow the PREM model tell the server, before each phase, whether they are about to load or
//! unload memory (`CPU_MEM(d)`), compute on cached data (`CPU_COM(d)`) or are done (`NO_OPER`). The transfer side
//! (the pager's I/O and copies) asks before every chunk of work: during a memory phase it is told how long to
//! wait; during a compute phase it gets a grant until the phase ends and the number of chunks that fit (Eq. 1).
//! The state is a block of atomics, private to a process or shared through a 0600 file under /dev/shm (checked on
//! its open descriptor before it is mapped: see [`SharedOptions`]); phases carry deadlines, so a crashed task
//! cannot block transfers for longer than its phase plus a stale time.
//! [`analysis`] bounds how long transfers and kernels take under arbitration (Sec. 6.3).
//!
//! A [`Gate`] admits chunks of T(Q) ([`Gate::admit_up_to`]) or work of a measured cost, such as a memory-map
//! operation ([`Gate::admit_for`]), only when it can end inside the current grant; its event log
//! ([`Gate::set_recording`], [`GateEvent`]) records admissions, waits and the work its user reports, for
//! attributing interference afterwards.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use oversub_arbiter::{Arbiter, ArbiterConfig, Decision, Gate};
//!
//! let arbiter = Arbiter::in_process(ArbiterConfig {
//!     chunk_time: Some(Duration::from_micros(100)),
//!     ..ArbiterConfig::default()
//! })?;
//! let task = arbiter.register_task()?;
//! task.com(Duration::from_millis(5))?; // the CPU computes for up to 5 ms
//! match arbiter.request(Duration::from_micros(100)) {
//!     Decision::Grant { chunks, .. } => assert!(chunks >= 1 && chunks <= 50),
//!     other => panic!("{other:?}"),
//! }
//! let gate = Gate::new(arbiter.clone());
//! gate.run_chunked(3 << 20, |_offset, _len| Ok::<(), std::io::Error>(()))?; // three 1 MiB chunks, each admitted
//! task.no_oper()?;
//! # Ok(())
//! # }
//! ```

pub mod analysis;
mod arbiter;
mod clock;
mod error;
mod events;
mod gate;
mod phase;
mod region;

pub use arbiter::{
    measure_copy_time, Arbiter, ArbiterConfig, ArbiterStats, Decision, PreemptionHook, Task,
    TaskStatus, WaitReason, DEFAULT_CHUNK_BYTES,
};
pub use clock::{Clock, FakeClock, MonotonicClock};
pub use error::ArbiterError;
pub use events::{GateEvent, GateEventKind, WorkKind, DEFAULT_EVENT_CAPACITY};
pub use gate::{Admission, Gate, GateStats};
pub use phase::{duration_from_secs, parse_duration, Phase, PhaseKind, MAX_PHASE};
pub use region::{SharedOptions, LAYOUT_VERSION, MAX_TASKS};
