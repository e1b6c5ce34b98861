//! The schedule runtime as a library: a configuration, the caller's own work per component, and a run.
//!
//! ```no_run
//! use oversub_sched::{load_system, Mode, Runtime};
//!
//! let system = load_system(std::path::Path::new("examples/pipeline.toml"))?;
//! let result = Runtime::new(system)
//!     .mode(Mode::Async)
//!     .work("blur", |slot| {
//!         let ([frame], [out]) = slot.access(["frame"], ["out"])?;
//!         out.copy_from_slice(frame);
//!         Ok(())
//!     })
//!     .run()?;
//! println!("{} deadline misses", result.deadline_misses);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use oversub_core::demand::Readahead;

use super::{execute, Prime, RunError, RunOptions, RunResult, SlotContext, WorkResult};
use crate::model::System;
use crate::plan::{self, Bandwidths, Mode, Plan};
use crate::setup::{self, StoreSpeed};

/// A component's own work: called on its lane's thread once per slot, after the slot's page-ins completed.
pub type WorkFn<'w> = dyn FnMut(&mut SlotContext<'_>) -> WorkResult + Send + 'w;

/// A schedule ready to run: the configuration, the registered works and the run's settings.
///
/// Closures may borrow from the caller (`'w`): the run's threads end before [`Runtime::run`] returns.
pub struct Runtime<'w> {
    system: System,
    mode: Mode,
    hyperperiods: usize,
    warmup: usize,
    bandwidths: Option<Bandwidths>,
    profile: Option<PathBuf>,
    inflate: f64,
    at_min_period: bool,
    options: RunOptions,
    works: HashMap<String, Box<WorkFn<'w>>>,
    inits: HashMap<String, Box<WorkFn<'w>>>,
    last_speed: Option<StoreSpeed>,
}

impl std::fmt::Debug for Runtime<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("mode", &self.mode)
            .field("hyperperiods", &self.hyperperiods)
            .field("warmup", &self.warmup)
            .field("works", &self.works.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'w> Runtime<'w> {
    /// A runtime for `system`: async paging, 3 counted repetitions after 1 of warm-up, threads pinned, bandwidths
    /// measured on the configuration's store unless given.
    pub fn new(system: System) -> Runtime<'w> {
        Runtime {
            system,
            mode: Mode::Async,
            hyperperiods: 3,
            warmup: 1,
            bandwidths: None,
            profile: None,
            inflate: 1.0,
            at_min_period: false,
            options: RunOptions {
                pin_threads: true,
                warmup_hyperperiods: 1,
                settle_s: 0.5,
                ..RunOptions::default()
            },
            works: HashMap::new(),
            inits: HashMap::new(),
            last_speed: None,
        }
    }

    /// Registers the work of `component`, called in each of its slots with the slot's [`SlotContext`]. It
    /// replaces a built-in work the configuration gives. Work that returns after its window is a deadline miss
    /// (it is never cut); an error or a panic stops the run with [`RunError::Work`].
    pub fn work<F>(mut self, component: impl Into<String>, f: F) -> Runtime<'w>
    where
        F: FnMut(&mut SlotContext<'_>) -> WorkResult + Send + 'w,
    {
        self.works.insert(component.into(), Box::new(f));
        self
    }

    /// Registers code that fills `component`'s buffers once before the run (inputs, weights); buffers start
    /// zeroed otherwise. It gets the same context as a slot, with no deadline.
    pub fn init<F>(mut self, component: impl Into<String>, f: F) -> Runtime<'w>
    where
        F: FnMut(&mut SlotContext<'_>) -> WorkResult + Send + 'w,
    {
        self.inits.insert(component.into(), Box::new(f));
        self
    }

    /// The paging mode (default [`Mode::Async`]).
    pub fn mode(mut self, mode: Mode) -> Runtime<'w> {
        self.mode = mode;
        self
    }

    /// Repetitions of the table counted (default 3; at least 1).
    pub fn hyperperiods(mut self, n: usize) -> Runtime<'w> {
        self.hyperperiods = n;
        self
    }

    /// Repetitions run first and not counted (default 1).
    pub fn warmup(mut self, n: usize) -> Runtime<'w> {
        self.warmup = n;
        self
    }

    /// The store's page-in and page-out speeds the plan assumes, instead of measuring them.
    pub fn bandwidths(mut self, bw: Bandwidths) -> Runtime<'w> {
        self.bandwidths = Some(bw);
        self
    }

    /// A platform profile whose `[storage]` table gives the store's speeds.
    pub fn profile(mut self, path: impl Into<PathBuf>) -> Runtime<'w> {
        self.profile = Some(path.into());
        self
    }

    /// Plans the works as taking `factor` times as long (interference, Sec. III-D); default 1.
    pub fn inflate(mut self, factor: f64) -> Runtime<'w> {
        self.inflate = factor;
        self
    }

    /// Runs at the shortest period the planner finds feasible for the mode instead of the table's own.
    pub fn at_min_period(mut self, yes: bool) -> Runtime<'w> {
        self.at_min_period = yes;
        self
    }

    /// Pins each lane's thread to its CPU (default on).
    pub fn pin_threads(mut self, yes: bool) -> Runtime<'w> {
        self.options.pin_threads = yes;
        self
    }

    /// Pause between the set-up and the table's start, seconds (default 0.5).
    pub fn settle_s(mut self, seconds: f64) -> Runtime<'w> {
        self.options.settle_s = seconds;
        self
    }

    /// How the store is primed between set-up and the table's start (default: read back until it reads at the
    /// plan's page-in speed, at most 30 s; [`Prime::off`] for none).
    pub fn prime(mut self, prime: Prime) -> Runtime<'w> {
        self.options.prime = prime;
        self
    }

    /// Demand mode: the kernel's readahead on the store mapping (default [`Readahead::Kernel`], Linux's demand
    /// paging as the paper measured it; [`Readahead::Off`]: one fault per touched 4 KiB page).
    pub fn demand_readahead(mut self, readahead: Readahead) -> Runtime<'w> {
        self.options.demand_readahead = readahead;
        self
    }

    /// Called after each slot instance with (done, total).
    pub fn progress(mut self, f: Arc<dyn Fn(usize, usize) + Send + Sync>) -> Runtime<'w> {
        self.options.progress = Some(f);
        self
    }

    /// The configuration.
    pub fn system(&self) -> &System {
        &self.system
    }

    /// The store speeds the last run planned with, and where they came from.
    pub fn last_speed(&self) -> Option<StoreSpeed> {
        self.last_speed
    }

    /// The system the run executes (the table stretched to the minimum period when asked) and its plan, at the
    /// given speeds.
    pub fn plan_with(&self, bw: Bandwidths) -> Result<(System, Plan), RunError> {
        if !(self.inflate.is_finite() && self.inflate > 0.0) {
            return Err(RunError::Config(format!(
                "the work inflation factor must be a positive number, not {}",
                self.inflate
            )));
        }
        let planning = if self.inflate != 1.0 {
            self.system.with_work_inflation(self.inflate)
        } else {
            self.system.clone()
        };
        let mut exec = self.system.clone();
        let planning = if self.at_min_period {
            let t = plan::feasible_table(&planning, self.mode, bw).ok_or_else(|| {
                RunError::Infeasible(format!("{}: no feasible period found", self.mode))
            })?;
            exec.table = t.table.clone();
            t
        } else {
            planning
        };
        let p = plan::plan(&planning, self.mode, self.hyperperiods + self.warmup, bw);
        Ok((exec, p))
    }

    /// Like [`Runtime::run`], on the caller's address space (its pool must have room for the capacity, plus a
    /// page per buffer); every buffer the run allocates there is freed when it ends, whatever happened. Demand mode
    /// does not use it (its buffers are a demand-paged file on the configuration's store).
    pub fn run_on(&mut self, space: &oversub_core::AddressSpace) -> Result<RunResult, RunError> {
        self.run_inner(Some(space))
    }

    /// Plans and runs the schedule: set-up (buffers allocated, initialised and paged out), then the table for
    /// `warmup + hyperperiods` repetitions with real timers, threads and paging. Blocks until done.
    pub fn run(&mut self) -> Result<RunResult, RunError> {
        self.run_inner(None)
    }

    fn run_inner(
        &mut self,
        space: Option<&oversub_core::AddressSpace>,
    ) -> Result<RunResult, RunError> {
        if self.hyperperiods == 0 {
            return Err(RunError::Config("hyperperiods must be at least 1".into()));
        }
        super::check_works(&self.system, &self.works, &self.inits)?;
        let mut speed = setup::store_speed(self.bandwidths, self.profile.as_deref(), &self.system)?;
        // Demand mode is planned at demand-paging speeds: measured here unless the caller gave speeds.
        if self.mode == Mode::Demand && self.bandwidths.is_none() && !speed.bw.demand_measured() {
            let d = setup::measure_demand(
                self.system.platform.stores.first().map(PathBuf::as_path),
                self.options.demand_readahead,
            )?;
            speed.bw = speed
                .bw
                .with_demand(d.read_bytes_per_s, d.write_bytes_per_s);
        }
        self.last_speed = Some(speed);
        let (exec, p) = self.plan_with(speed.bw)?;
        let mut options = RunOptions {
            warmup_hyperperiods: self.warmup,
            ..self.options.clone()
        };
        // Priming without a target reads the store back until it runs at the speed this run is planned at
        // (demand mode's faults are priced at another speed: one round).
        if options.prime.target_read_bytes_per_s.is_none() && self.mode != Mode::Demand {
            options.prime.target_read_bytes_per_s = Some(speed.bw.read_bytes_per_s);
        }
        let pool = if self.mode == Mode::Demand || space.is_some() {
            None
        } else {
            Some(setup::pool_for(&exec)?)
        };
        let own = pool.as_ref().map(|p| p.address_space());
        execute(
            &exec,
            space.or(own.as_ref()),
            &p,
            &options,
            &mut self.works,
            &mut self.inits,
        )
    }
}
