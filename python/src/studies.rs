//! The schedule runtime and the simulators from Python (results as plain dicts).
//!
//! Each function mirrors an `oversub` command and returns what its `--json` output holds, as dicts and lists:
//! `load_schedule` (the validated configuration), `plan_schedule` (`oversub plan`), `run_schedule` (`oversub run`),
//! `sim_uvm` (`oversub sim uvm`) and `sim_swap` (`oversub sim swap`). The glue they share with the command (the
//! store's bandwidths, the pool, the JSON documents) lives in the library crates (`oversub_sched::setup` and
//! `report`, `oversub_sim::uvm::report`, `oversub_sim::swap::report`); only the Python argument handling is here.
//! Long work runs with the GIL released, so other Python threads keep running.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use oversub_sched::plan::feasible_table;
use oversub_sched::setup::{self, BandwidthSource, StoreSpeed};
use oversub_sched::{
    Bandwidths, DeviceKind, Mode, PlanDoc, Readahead, RunResult, Runtime, System, Work,
};
use oversub_sim::swap::report::{self as swap_report, expand_policies, ProfileSwap, SwapDoc};
use oversub_sim::swap::scenarios as swap_scenarios;
use oversub_sim::swap::seeds::SeedsDoc;
use oversub_sim::swap::{
    parse_seeds, run_over_seeds, run_study, DirectAccess, Evictable, PrioritySource, Scenario,
    SeedSet, StudyOptions,
};
use oversub_sim::uvm::cost::CostModel;
use oversub_sim::uvm::policy::Policy as UvmPolicy;
use oversub_sim::uvm::report::{self as uvm_report, UvmDoc};
use oversub_sim::uvm::sim::{EvictionOrder, EvictionUnit, MachineScale, SimConfig, TimeModel};
use oversub_sim::uvm::suite::{self, run_suite, SuiteSpec, TraceSource};
use oversub_sim::uvm::workload::{WorkloadKind, WorkloadParams, WorkloadSize};
use oversub_sim::uvm::SimError;
use oversub_tenants::swap::AlphaRule;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use serde::Serialize;

use crate::errors::{Raised, ToRaised};
use crate::slots::{self, Failure, Stop, UserWorks};
use crate::util::{size_arg, to_python, Choice};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(plan_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(run_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(sim_uvm, m)?)?;
    m.add_function(wrap_pyfunction!(ratio_percent, m)?)?;
    m.add_function(wrap_pyfunction!(sim_swap, m)?)?;
    Ok(())
}

/// A Rust error as the exception to raise later (GIL-free, so it can leave a `py.detach` closure).
fn raised<E: ToRaised>(e: E) -> Raised {
    e.to_raised()
}

// ---------------------------------------------------------------------------------------------------------------
// Arguments shared by several functions.

/// Where a schedule configuration comes from.
#[derive(Debug)]
enum Source {
    Path(PathBuf),
    Text(String),
}

/// Names the configuration in error messages when it is given as text.
const TEXT_ORIGIN: &str = "<text>";

fn source(config: Option<PathBuf>, text: Option<String>) -> PyResult<Source> {
    match (config, text) {
        (Some(p), None) => Ok(Source::Path(p)),
        (None, Some(t)) => Ok(Source::Text(t)),
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "give the configuration either as a path or as text=..., not both",
        )),
        (None, None) => Err(PyTypeError::new_err(
            "give the configuration: the path of a TOML file, or its text as text=...",
        )),
    }
}

fn load(src: &Source) -> Result<System, Raised> {
    match src {
        Source::Path(p) => oversub_sched::load_system(p),
        Source::Text(t) => oversub_sched::parse_system(t, TEXT_ORIGIN),
    }
    .map_err(raised)
}

const MODE_NAMES: &str = "\"async\", \"sync\", \"demand\"";

/// The modes a `mode=` string stands for; `"all"` only where `allow_all`.
fn parse_modes(mode: &str, allow_all: bool) -> PyResult<Vec<Mode>> {
    let m = mode.trim().to_ascii_lowercase();
    if let Some(found) = Mode::ALL.iter().find(|x| x.name() == m) {
        return Ok(vec![*found]);
    }
    if allow_all && m == "all" {
        return Ok(Mode::ALL.to_vec());
    }
    let all = if allow_all { ", \"all\"" } else { "" };
    Err(PyValueError::new_err(format!(
        "mode must be one of {MODE_NAMES}{all}, not {mode:?}"
    )))
}

/// Either a string (comma separated, as on the command line) or an iterable of strings (each may hold commas too).
fn names_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<String>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    let mut items: Vec<String> = Vec::new();
    if let Ok(s) = obj.cast::<PyString>() {
        items.push(s.to_str()?.to_string());
    } else {
        let iter = obj.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a string or a sequence of strings, not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".to_string(), |n| n.to_string())
            ))
        })?;
        for item in iter {
            let item = item?;
            let s = item.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what} must hold strings, not {}",
                    item.repr()
                        .map_or_else(|_| "?".to_string(), |r| r.to_string())
                ))
            })?;
            items.push(s.to_str()?.to_string());
        }
    }
    Ok(items
        .iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// One path (str or os.PathLike) or an iterable of them.
fn paths_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<PathBuf>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    if obj.is_instance_of::<PyString>() || obj.hasattr("__fspath__")? {
        return Ok(vec![obj.extract::<PathBuf>()?]);
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a path (str or os.PathLike) or a sequence of paths"
        ))
    })?;
    iter.map(|item| item?.extract::<PathBuf>()).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// The schedule runtime: bandwidths, pools, analyses (as `oversub plan` and `oversub run` do them).

/// `bandwidths=(read, write)`, checked.
fn bandwidths_arg(given: Option<(f64, f64)>) -> PyResult<Option<Bandwidths>> {
    let Some((read, write)) = given else {
        return Ok(None);
    };
    for (what, v) in [("read", read), ("write", write)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(PyValueError::new_err(format!(
                "bandwidths: the {what} bandwidth must be a positive number of bytes per second, not {v}"
            )));
        }
    }
    Ok(Some(Bandwidths::direct(read, write)))
}

/// One run as `run_schedule` returns it: the run's record and the figures `oversub run --json` adds.
#[derive(Debug, Serialize)]
struct RunOut {
    #[serde(flatten)]
    result: RunResult,
    met_target: bool,
    counted_slots: usize,
    hyperperiods_counted: usize,
    min_feasible_period_s: Option<f64>,
    at_min_period: bool,
    read_bytes_per_s: f64,
    write_bytes_per_s: f64,
    bandwidth_source: BandwidthSource,
    /// Where the misses came from, repetition by repetition (`oversub_sched::miss_profile`).
    misses: oversub_sched::MissProfile,
}

#[derive(Debug, Clone, Copy)]
struct RunSettings {
    hyperperiods: usize,
    warmup: usize,
    pin_threads: bool,
    at_min_period: bool,
    settle_s: f64,
    inflate: f64,
}

/// Runs one mode with the `oversub_sched::Runtime`, the caller's Python works (or `oversub.NOOP`) registered.
fn run_one(
    system: &System,
    mode: Mode,
    speed: StoreSpeed,
    s: RunSettings,
    works: &UserWorks,
    stop: &Stop,
) -> Result<RunOut, Failure> {
    // The planner's searches are costly: find the feasible table once (for the works as planned, inflated), for the
    // result and for at_min_period, and give the runtime the table to run.
    let planning = if s.inflate != 1.0 {
        system.with_work_inflation(s.inflate)
    } else {
        system.clone()
    };
    let min_table = feasible_table(&planning, mode, speed.bw);
    let minp = min_table.as_ref().map(|t| t.table.hyperperiod_s);
    let mut exec = system.clone();
    if s.at_min_period {
        let t = min_table
            .ok_or_else(|| Raised::new("RunError", format!("{mode}: no feasible period found")))?;
        exec.table = t.table;
    }
    let rt = Runtime::new(exec)
        .mode(mode)
        .hyperperiods(s.hyperperiods)
        .warmup(s.warmup)
        .bandwidths(speed.bw)
        .inflate(s.inflate)
        .pin_threads(s.pin_threads)
        .settle_s(s.settle_s);
    let r = works.register(rt, stop).run().map_err(slots::run_failure)?;
    Ok(RunOut {
        met_target: r.met_target(),
        counted_slots: r.counted_slots(),
        hyperperiods_counted: r.hyperperiods.saturating_sub(r.warmup_hyperperiods),
        min_feasible_period_s: minp,
        at_min_period: s.at_min_period,
        read_bytes_per_s: speed.bw.read_bytes_per_s,
        write_bytes_per_s: speed.bw.write_bytes_per_s,
        bandwidth_source: speed.source,
        misses: oversub_sched::miss_profile(&r),
        result: r,
    })
}

// --- load_schedule's view of a configuration ---------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct PlatformOut {
    capacity_bytes: u64,
    store: Option<String>,
    device: &'static str,
    cpus: usize,
    gpus: usize,
}

#[derive(Debug, Serialize)]
struct WorkOut {
    kind: &'static str,
    compute_s: f64,
}

#[derive(Debug, Serialize)]
struct BufferOut {
    name: String,
    size_bytes: u64,
    read_only: bool,
}

#[derive(Debug, Serialize)]
struct ComponentOut {
    name: String,
    budget_s: f64,
    period_s: f64,
    cpus: Vec<usize>,
    gpus: Vec<usize>,
    work: WorkOut,
    buffers: Vec<BufferOut>,
}

#[derive(Debug, Serialize)]
struct SlotOut {
    component: String,
    start_s: f64,
    length_s: f64,
    cpu: usize,
    gpu: Option<usize>,
}

#[derive(Debug, Serialize)]
struct TableOut {
    hyperperiod_s: f64,
    slots: Vec<SlotOut>,
}

#[derive(Debug, Serialize)]
struct SystemOut {
    platform: PlatformOut,
    components: Vec<ComponentOut>,
    table: TableOut,
    demand_bytes: u64,
    oversubscription: f64,
}

fn describe(system: &System) -> SystemOut {
    let p = &system.platform;
    let demand = system.demand_bytes();
    SystemOut {
        platform: PlatformOut {
            capacity_bytes: p.capacity_bytes,
            // One location as it is; several (a striped store) comma-separated, as the CLI takes them.
            store: (!p.stores.is_empty()).then(|| {
                p.stores
                    .iter()
                    .map(|s| s.display().to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            device: match p.device {
                DeviceKind::Host => "host",
            },
            cpus: p.cpus,
            gpus: p.gpus,
        },
        components: system
            .components
            .iter()
            .map(|c| ComponentOut {
                name: c.name.clone(),
                budget_s: c.budget_s,
                period_s: c.period_s,
                cpus: c.cpus.clone(),
                gpus: c.gpus.clone(),
                work: match c.work {
                    Work::Spin { compute_s } => WorkOut {
                        kind: "spin",
                        compute_s,
                    },
                    Work::Sleep { compute_s } => WorkOut {
                        kind: "sleep",
                        compute_s,
                    },
                    // The caller's own code (`run_schedule(work={...})`); the planner budgets its worst case.
                    other => WorkOut {
                        kind: "user",
                        compute_s: other.compute_s(),
                    },
                },
                buffers: c
                    .buffers
                    .iter()
                    .map(|b| BufferOut {
                        name: b.name.clone(),
                        size_bytes: b.size_bytes,
                        read_only: b.read_only,
                    })
                    .collect(),
            })
            .collect(),
        table: TableOut {
            hyperperiod_s: system.table.hyperperiod_s,
            slots: system
                .table
                .slots
                .iter()
                .map(|s| SlotOut {
                    component: system
                        .components
                        .get(s.component)
                        .map_or_else(|| format!("component {}", s.component), |c| c.name.clone()),
                    start_s: s.start_s,
                    length_s: s.length_s,
                    cpu: s.cpu,
                    gpu: s.gpu,
                })
                .collect(),
        },
        demand_bytes: demand,
        oversubscription: (demand as f64 / p.capacity_bytes.max(1) as f64 - 1.0).max(0.0),
    }
}

/// Reads and validates a schedule configuration (TOML; see examples/paper.toml and the `oversub_sched::config`
/// documentation) without planning or running it.
///
/// Args:
///     config: path of the TOML file (str or os.PathLike).
///     text: the TOML text itself, instead of a path (error messages then name it ``<text>``).
///
/// Returns:
///     dict with ``platform`` (capacity_bytes, store, device, cpus, gpus), ``components`` (list: name, budget_s,
///     period_s, cpus, gpus, work {kind, compute_s}, buffers [{name, size_bytes, read_only}]), ``table``
///     (hyperperiod_s, slots [{component, start_s, length_s, cpu, gpu}]; a derived table when the file has none),
///     ``demand_bytes`` (all buffers) and ``oversubscription`` (demand / capacity - 1, at least 0). Times are
///     seconds.
///
/// Raises:
///     oversub.errors.ConfigError: the file cannot be read or is not a valid configuration; the message names
///         the file, line and column.
///     TypeError: neither or both of ``config`` and ``text`` given.
#[pyfunction]
#[pyo3(signature = (config=None, *, text=None))]
fn load_schedule<'py>(
    py: Python<'py>,
    config: Option<PathBuf>,
    text: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let src = source(config, text)?;
    let system = py.detach(|| load(&src)).map_err(|r| r.to_pyerr(py))?;
    to_python(py, &describe(&system))
}

/// Analyses a schedule configuration, as ``oversub plan --json`` does: per paging mode, whether the table runs
/// at its own period, the shortest period that works, the paging per hyperperiod, the smallest capacity and the
/// largest oversubscription that still work, and the steady-state paging per slot.
///
/// The store's bandwidths come from ``bandwidths``, else from the ``[storage]`` table of ``profile``, else they are
/// measured (three 256 MiB round trips through the pager on the configuration's store; a second or two). Those are
/// direct-I/O speeds (what ``async`` and ``sync`` pay); ``demand_bandwidths`` gives demand paging's own (slower)
/// speeds, without which ``demand`` is priced at the direct ones.
///
/// Args:
///     config: path of the TOML configuration (str or os.PathLike).
///     text: the TOML text itself, instead of a path.
///     mode: ``"all"`` (default), ``"async"``, ``"sync"`` or ``"demand"``.
///     profile: platform profile (``oversub probe --out FILE``) whose ``[storage]`` table gives the bandwidths.
///     bandwidths: ``(read_bytes_per_s, write_bytes_per_s)`` of the store (page-in, page-out), instead of a
///         profile or a measurement.
///     demand_bandwidths: ``(read_bytes_per_s, write_bytes_per_s)`` of demand paging (the paper's 1.33 GiB/s
///         against 4 GiB/s direct); None: not measured.
///     inflate: plan every work as taking this many times as long (the interference of paging with the CPU
///         tasks, Sec. III-D; ``oversub bench interference`` measures it); at least 1.0.
///
/// Returns:
///     dict with ``read_bytes_per_s``, ``write_bytes_per_s``, ``demand_read_bytes_per_s``,
///     ``demand_write_bytes_per_s`` (None: not measured), ``work_inflation``, ``bandwidth_source`` ("given",
///     "profile" or "measured"), ``demand_bytes``, ``capacity_bytes``, ``hyperperiod_s`` and ``modes``: {mode name:
///     analysis}, each analysis holding ``target_period_s``, ``read_bytes_per_s`` / ``write_bytes_per_s`` and
///     ``priced_at`` (the speeds the mode was priced at: "direct I/O", "measured demand paging" or "direct I/O
///     (demand not measured)"), ``feasible_at_target``, ``min_feasible_period_s`` (None: none found; both with the
///     works inflated) and beside them ``feasible_at_target_uninflated`` and ``min_feasible_period_uninflated_s``,
///     ``page_outs_per_hyperperiod``, ``bytes_paged_per_hyperperiod``, ``min_capacity_bytes``,
///     ``max_oversubscription`` (None when even the full demand does not work), ``problems`` (list of str) and
///     ``slots`` (steady state, one dict per slot: component, cpu, gpu, start_s, page_outs, page_ins, io_bytes,
///     paging_s, available_s, problem).
///
/// Raises:
///     oversub.errors.ConfigError: the configuration cannot be read or is not valid.
///     oversub.errors.ProfileError: the profile cannot be read, is not valid or has no ``[storage]`` table.
///     oversub.errors.IoError, oversub.errors.PagerError: measuring the store failed.
///     ValueError: an unknown mode, a bandwidth that is not a positive number, or an inflation under 1.0.
#[pyfunction]
#[pyo3(signature = (
    config=None, *, text=None, mode="all", profile=None, bandwidths=None, demand_bandwidths=None, inflate=1.0
))]
#[allow(clippy::too_many_arguments)]
fn plan_schedule<'py>(
    py: Python<'py>,
    config: Option<PathBuf>,
    text: Option<String>,
    mode: &str,
    profile: Option<PathBuf>,
    bandwidths: Option<(f64, f64)>,
    demand_bandwidths: Option<(f64, f64)>,
    inflate: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let src = source(config, text)?;
    let modes = parse_modes(mode, true)?;
    let given = bandwidths_arg(bandwidths)?;
    let demand = bandwidths_arg(demand_bandwidths)?;
    if !(inflate.is_finite() && inflate >= 1.0) {
        return Err(PyValueError::new_err(format!(
            "inflate must be a number at least 1.0 (works planned that many times as long), not {inflate}"
        )));
    }
    let out = py
        .detach(|| -> Result<PlanDoc, Raised> {
            let system = load(&src)?;
            let mut speed =
                setup::store_speed(given, profile.as_deref(), &system).map_err(raised)?;
            if let Some(d) = demand {
                speed.bw = speed
                    .bw
                    .with_demand(d.read_bytes_per_s, d.write_bytes_per_s);
            }
            Ok(PlanDoc::new_inflated(&system, speed, &modes, inflate))
        })
        .map_err(|r| r.to_pyerr(py))?;
    to_python(py, &out)
}

/// Runs a schedule configuration for real, as ``oversub run`` does: the planner's paging with real timers, one
/// thread per CPU lane and real page-outs and page-ins through the pager (host memory as device memory, a
/// temporary swap file on the configuration's store), and in each slot the component's work: a built-in one
/// (``work = { spin_ms = ... }`` or ``{ sleep_ms = ... }`` in the configuration) or your own Python function
/// (``work=``). The call blocks for the run's duration (about ``(warmup + hyperperiods) * period + settle_s`` per
/// mode, after the set-up) with the GIL released; Ctrl-C stops it at the next slot whose work is Python code (or
/// ``oversub.NOOP``), else at the end of the mode, and raises KeyboardInterrupt.
///
/// Your own work: ``work={"A": fn}`` calls ``fn(slot)`` in each of component A's slots, on A's lane thread, after
/// the slot's planned page-ins completed (with the GIL held for the call only). ``slot`` is an
/// :class:`oversub.Slot`: ``slot.buffers`` maps A's buffer names to zero-copy ``uint8`` NumPy arrays of its
/// resident memory (read-only arrays for read-only buffers), ``slot.array(name, dtype, shape)`` gives typed views,
/// ``slot.view(name)`` a DLPack / buffer-protocol exporter, and ``slot.deadline_s``, ``slot.remaining_s()`` and
/// ``slot.overrun()`` the time left. The slot and its views are valid only during the call: a view still alive
/// when ``fn`` returns stops the run with RunError ("still alive"); copy what must outlive the slot. A component
/// whose configuration has no ``work`` table (or ``work = { wcet_ms = ... }``, the worst case the planner budgets)
/// must be given code; a component with a built-in work may be given code too, which replaces it. ``init={"A":
/// fn}`` calls ``fn(slot)`` once before the run to fill A's buffers (they start zeroed; read-only buffers are
/// writable there). The same functions serve every mode of ``mode="all"``. ``oversub.NOOP`` in place of a function
/// registers a Rust closure that does nothing: a baseline for measuring what calling Python costs per slot (a few
/// microseconds; examples/bench_work_overhead.py). Works of different CPU lanes share the GIL: their Python code
/// does not run in parallel, calls that release the GIL (NumPy, PyTorch kernels, I/O) do. The slots' records give
/// each work's time (``work_s``), so works that run past their window show there and as deadline misses.
///
/// The store's bandwidths, which the plan assumes, come from ``bandwidths``, else from the ``[storage]`` table of
/// ``profile``, else they are measured first (three 256 MiB round trips through the pager).
///
/// Args:
///     config: path of the TOML configuration (str or os.PathLike).
///     text: the TOML text itself, instead of a path.
///     mode: ``"async"`` (default), ``"sync"``, ``"demand"``, or ``"all"`` for the three one after another.
///     hyperperiods: repetitions of the table counted (at least 1).
///     warmup: repetitions run first and not counted.
///     profile: platform profile whose ``[storage]`` table gives the store's bandwidths.
///     bandwidths: ``(read_bytes_per_s, write_bytes_per_s)`` of the store, instead of a profile or a measurement.
///     pin_threads: pin each lane's thread to its CPU.
///     at_min_period: run at the shortest period the planner finds feasible for the mode instead of the table's.
///     settle_s: pause between the set-up and the table's start, seconds.
///     work: ``{component name: fn(slot) or oversub.NOOP}``, the code run in each of the component's slots.
///     init: ``{component name: fn(slot) or oversub.NOOP}``, the code that fills its buffers before the run.
///     inflate: plan the works as taking this many times as long (interference); default 1.
///
/// Returns:
///     For one mode, a dict: the run's record (``mode``, ``hyperperiod_s``, ``hyperperiods``, ``slots`` (one dict
///     per slot instance: component, cpu, gpu, hyperperiod, planned_start_s, actual_start_s, lateness_s,
///     completion_s, deadline_s, met, paging_wait_s, work_s (seconds from the work's start to its return),
///     major_faults (page faults the work took that read the store: demand mode's page-ins), minor_faults),
///     ``ops`` (paging operations: kind
///     "in"/"out", buffer, io_bytes, start_s, end_s, for_component), ``resident_at_start``,
///     ``warmup_hyperperiods``, ``deadline_misses``, ``warmup_misses``, ``max_lateness_s``, ``bytes_paged``,
///     ``store_busy_s``, ``major_faults``, ``prime`` (how the store was read back before the table: rounds,
///     seconds, read_bytes_per_s per round), ``warmup_asked``) and ``met_target``, ``counted_slots``,
///     ``hyperperiods_counted``, ``min_feasible_period_s`` (the planner's, None when none found), ``at_min_period``,
///     ``read_bytes_per_s``, ``write_bytes_per_s``, ``bandwidth_source``, ``misses`` (each repetition's misses and
///     worst lateness, and ``origin``: where the misses came from, ``{"kind": "none" | "start_caught_up" |
///     "start_still_draining" | "steady_state", ...}``). Times are seconds from the table's start. For ``mode="all"``:
///     ``{"modes": {"async": run, "sync": run, "demand": run}}``.
///
/// Raises:
///     oversub.errors.ConfigError: the configuration cannot be read or is not valid; ``work`` or ``init`` names a
///         component the configuration does not have; a component has neither a built-in work nor code.
///     oversub.errors.RunError: the run failed (paging failed, data corrupted, a plan that cannot run, a view of a
///         buffer kept after its slot), or ``at_min_period`` and no feasible period exists. When a work function
///         raised, the RunError's message names the component and its slot, its ``__cause__`` is the function's
///         exception, and it has the attributes ``component``, ``instance`` (the component's slot, from 0),
///         ``hyperperiod`` and ``planned_start_s``. KeyboardInterrupt and SystemExit raised by a work function are
///         re-raised as they are, with a note naming the slot.
///     oversub.errors.ProfileError: the profile cannot be read, is not valid or has no ``[storage]`` table.
///     oversub.errors.IoError, oversub.errors.PagerError: creating the store or the pool failed.
///     TypeError: ``work`` or ``init`` is not a dict of names to callables (or ``oversub.NOOP``).
///     ValueError: an unknown mode, ``hyperperiods`` < 1, a negative ``settle_s``, a bad bandwidth or ``inflate``.
#[pyfunction]
#[pyo3(signature = (
    config=None,
    *,
    text=None,
    mode="async",
    hyperperiods=3,
    warmup=1,
    profile=None,
    bandwidths=None,
    pin_threads=false,
    at_min_period=false,
    settle_s=0.5,
    work=None,
    init=None,
    inflate=1.0,
))]
#[allow(clippy::too_many_arguments)]
fn run_schedule<'py>(
    py: Python<'py>,
    config: Option<PathBuf>,
    text: Option<String>,
    mode: &str,
    hyperperiods: usize,
    warmup: usize,
    profile: Option<PathBuf>,
    bandwidths: Option<(f64, f64)>,
    pin_threads: bool,
    at_min_period: bool,
    settle_s: f64,
    work: Option<&Bound<'py, PyAny>>,
    init: Option<&Bound<'py, PyAny>>,
    inflate: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let src = source(config, text)?;
    let modes = parse_modes(mode, true)?;
    let several = modes.len() > 1;
    let given = bandwidths_arg(bandwidths)?;
    if hyperperiods == 0 {
        return Err(PyValueError::new_err("hyperperiods must be at least 1"));
    }
    if !(settle_s.is_finite() && settle_s >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "settle_s must be a non-negative number of seconds, not {settle_s}"
        )));
    }
    if !(inflate.is_finite() && inflate > 0.0) {
        return Err(PyValueError::new_err(format!(
            "inflate must be a positive number, not {inflate}"
        )));
    }
    let works = UserWorks::from_args(work, init)?;
    let settings = RunSettings {
        hyperperiods,
        warmup,
        pin_threads,
        at_min_period,
        settle_s,
        inflate,
    };
    let stop = Stop::default();
    let run_all = || -> Result<Vec<(Mode, RunOut)>, Failure> {
        let system = load(&src)?;
        works.check(&system)?;
        let mut speed = setup::store_speed(given, profile.as_deref(), &system).map_err(raised)?;
        // Demand mode is planned at demand-paging speeds, measured on the store unless speeds were given.
        if modes.contains(&Mode::Demand) && given.is_none() && !speed.bw.demand_measured() {
            let d = setup::measure_demand(
                system
                    .platform
                    .stores
                    .first()
                    .map(std::path::PathBuf::as_path),
                Readahead::Kernel,
            )
            .map_err(raised)?;
            speed.bw = speed
                .bw
                .with_demand(d.read_bytes_per_s, d.write_bytes_per_s);
        }
        let mut runs = Vec::with_capacity(modes.len());
        for &m in &modes {
            if stop.is_set() {
                break;
            }
            runs.push((m, run_one(&system, m, speed, settings, &works, &stop)?));
        }
        Ok(runs)
    };
    let runs = slots::detach_interruptibly(py, &stop, run_all);
    // Ctrl-C during the run wins over what it made the run fail with.
    if let Some(e) = stop.take() {
        return Err(e);
    }
    let runs = runs.map_err(|f| f.into_pyerr(py))?;
    if several {
        let modes: BTreeMap<&str, RunOut> = runs.into_iter().map(|(m, r)| (m.name(), r)).collect();
        to_python(py, &serde_json::json!({ "modes": modes }))
    } else {
        match runs.first() {
            Some((_, r)) => to_python(py, r),
            None => Err(PyValueError::new_err("no mode to run")),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// `oversub sim uvm`.

/// A bad ratio is a `ValueError`, as every other bad argument of the simulators.
fn ratio_error(e: SimError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One ratio as a fraction (2.0 = 200%): a number in percent, or a string as on the command line (`"200"`,
/// `"200%"`, `"2x"`), with `oversub_sim`'s one rule for both (small bare numbers are refused as likely fractions).
fn ratio_value(item: &Bound<'_, PyAny>) -> PyResult<f64> {
    if let Ok(s) = item.cast::<PyString>() {
        return suite::parse_ratio(s.to_str()?).map_err(ratio_error);
    }
    match item.extract::<f64>() {
        Ok(v) => suite::ratio_from_percent(v).map_err(ratio_error),
        Err(_) => Err(PyTypeError::new_err(format!(
            "ratios must be numbers in percent (200) or strings such as \"200%\" or \"2x\", not {}",
            item.get_type()
                .name()
                .map_or_else(|_| "?".to_string(), |n| n.to_string())
        ))),
    }
}

/// Ratios as fractions: one value, a comma-separated string or a sequence (list, tuple, any iterable) of
/// [`ratio_value`]s.
fn ratios_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<f64>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    let one = |item: &Bound<'_, PyAny>| -> PyResult<Vec<f64>> {
        if let Ok(s) = item.cast::<PyString>() {
            return s
                .to_str()?
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| suite::parse_ratio(p).map_err(ratio_error))
                .collect();
        }
        Ok(vec![ratio_value(item)?])
    };
    if obj.is_instance_of::<PyString>() || obj.extract::<f64>().is_ok() {
        return one(obj);
    }
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        out.extend(one(&item?)?);
    }
    Ok(out)
}

/// One oversubscription ratio in percent, read as ``sim_uvm`` reads it: a number in percent (``200``) or a string
/// as on the command line (``"200"``, ``"200%"``, ``"2x"``). ``oversub.sweep.grid`` checks its ratios with it.
///
/// Raises:
///     ValueError: a negative or unreadable ratio, or a bare number above 0 and below 10, which is almost certainly
///         a fraction ("ratios are percent as in the paper: did you mean 200?"); write ``"5%"`` to mean 5%.
#[pyfunction]
fn ratio_percent(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    // Rounded to a billionth of a percent, so that "33.3" comes back as 33.3 rather than 33.300000000000004.
    Ok((ratio_value(value)? * 100.0 * 1e9).round() / 1e9)
}

/// Simulates page-migration policies for unified memory under oversubscription (Chang et al., SYSTOR'21), as
/// ``oversub sim uvm --json`` does: every trace source × ratio × policy, in parallel, with the GIL released.
///
/// Args:
///     workloads: generated workloads, a name, a comma-separated string or a sequence of names: bfs, sssp, nw,
///         gaussian, atax, pagerank, bst, or "all". Default: all with ``suite``, else none.
///     traces: trace files to simulate (oversub binary or NVBit mem_trace text): a path or a sequence of paths.
///     ratios: oversubscription ratios, (problem - GPU memory) / GPU memory, in **percent** as in the paper:
///         numbers (``200``) or strings as on the command line (``"200"``, ``"200%"``, ``"2x"``); one value, a
///         comma-separated string or a sequence (list, tuple). A bare number above 0 and below 10 is refused as a
///         likely fraction (write ``"5%"`` for 5%). Default: 100, 200, 300 with ``suite``, else 200.
///     policies: policy names (a string, comma separated, or a sequence), or "all" (the default): eager,
///         eager-wopref, lazy-grp-hw[:N], pin-host, lazy-pg-stat-sw[:N] (without N: the paper's thresholds 2, 8,
///         32, 64, 256), lazy-pg-dyn-sw[:N], static-map[:SHARE], dynamap, oracle.
///     suite: every workload, ratios 100, 200, 300 and every policy (the paper's Figs. 8, 11, 12), unless given.
///     quick: small problem sizes (each workload simulates in about a second); ``scale`` is then ignored.
///     scale: multiply the default problem size by this factor.
///     seed: seed of the random graphs and keys (the same seed gives the same traces).
///     graph: graph file for bfs, sssp and pagerank (edge list or Matrix Market) instead of R-MAT.
///     profile: platform profile whose ``[uvm]`` table sets the simulated machine (decisions keep the paper's
///         constants unless ``decide_with="machine"``).
///     l2: GPU L2 size, int bytes or a size string, fixed (default: the paper's 3 MiB scaled with GPU memory).
///     time_model: "overlap" (default; per epoch the slowest resource) or "serial" (events priced with Eqs. 1
///         and 3 and summed).
///     machine_scale: "capacity" (default; L2 and 2 MiB granularities scale with GPU memory) or "none".
///     decide_with: "paper" (default; Eqs. 1 and 3 with the printed constants) or "machine".
///     eviction: "allocation" (least recently migrated first, NVIDIA's driver; default) or "lru".
///     eviction_unit: "block" (default; the driver's 2 MiB, scaled), "group" (64 KiB) or "page".
///     threads: worker threads (default: one per core).
///
/// Returns:
///     dict with ``runs`` (one dict per run, in source × ratio × policy order: workload, ratio_percent, policy,
///     est_time_s, speedup_vs_lazygrphw (None without a LazyGrpHW run to compare with), faults, migrations,
///     prefetches, evictions, evictions_per_page, remote_accesses, cache_hits, gpu_mem_accesses, bytes_h2d,
///     bytes_d2h, accesses, footprint_bytes, gpu_memory_bytes, sim_seconds), ``speedups`` (the figures' rows:
///     workload, ratio_percent, label, est_time_s, speedup; LazyPgStatSW reduced to its best threshold; only
///     where LazyGrpHW ran), ``cost_model`` (the constants used), ``eviction``, ``eviction_unit`` and
///     ``wall_seconds``.
///
/// Raises:
///     oversub.errors.SimError: an unknown workload or policy name, an unreadable or malformed trace, graph or
///         profile file, a cost model that describes no machine.
///     ValueError: nothing to simulate, a bad ratio, scale, L2 size, eviction order or unit.
#[pyfunction]
#[pyo3(signature = (
    *,
    workloads=None,
    traces=None,
    ratios=None,
    policies=None,
    suite=false,
    quick=false,
    scale=None,
    seed=1,
    graph=None,
    profile=None,
    l2=None,
    time_model=None,
    machine_scale=None,
    decide_with="paper",
    eviction=None,
    eviction_unit=None,
    threads=None,
))]
#[allow(clippy::too_many_arguments)]
fn sim_uvm<'py>(
    py: Python<'py>,
    workloads: Option<&Bound<'py, PyAny>>,
    traces: Option<&Bound<'py, PyAny>>,
    ratios: Option<&Bound<'py, PyAny>>,
    policies: Option<&Bound<'py, PyAny>>,
    suite: bool,
    quick: bool,
    scale: Option<f64>,
    seed: u64,
    graph: Option<PathBuf>,
    profile: Option<PathBuf>,
    l2: Option<&Bound<'py, PyAny>>,
    time_model: Option<Choice<TimeModel>>,
    machine_scale: Option<Choice<MachineScale>>,
    decide_with: &str,
    eviction: Option<Choice<EvictionOrder>>,
    eviction_unit: Option<Choice<EvictionUnit>>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    // `None`: the simulator's defaults, the CLI's too.
    let time_model = time_model.map_or_else(TimeModel::default, |c| c.0);
    let machine_scale = machine_scale.map_or_else(MachineScale::default, |c| c.0);
    let decide_with_machine = match decide_with.trim().to_ascii_lowercase().as_str() {
        "paper" => false,
        "machine" => true,
        _ => {
            return Err(PyValueError::new_err(format!(
                "decide_with must be \"paper\" or \"machine\", not {decide_with:?}"
            )))
        }
    };
    let workload_names = names_arg(workloads, "workloads")?;
    let trace_paths = paths_arg(traces, "traces")?;
    let mut ratios = ratios_arg(ratios)?;
    if ratios.is_empty() {
        ratios = if suite {
            vec![1.0, 2.0, 3.0]
        } else {
            vec![2.0]
        };
    }
    let policy_names = names_arg(policies, "policies")?;
    let size = match (quick, scale) {
        (true, _) => WorkloadSize::Quick,
        (false, Some(f)) if f.is_finite() && f > 0.0 => WorkloadSize::Scale(f),
        (false, Some(f)) => {
            return Err(PyValueError::new_err(format!(
                "scale must be a positive number, not {f}"
            )))
        }
        (false, None) => WorkloadSize::Default,
    };
    let l2_bytes = l2.map(|o| size_arg(o, "l2")).transpose()?;
    let eviction = eviction.map_or_else(EvictionOrder::default, |c| c.0);
    let eviction_unit = eviction_unit.map_or_else(EvictionUnit::default, |c| c.0);
    let all = suite || workload_names.iter().any(|w| w.eq_ignore_ascii_case("all"));
    if !all && workload_names.is_empty() && trace_paths.is_empty() {
        return Err(PyValueError::new_err(
            "say what to simulate: workloads=..., traces=... or suite=True",
        ));
    }
    let doc = py
        .detach(|| -> Result<UvmDoc, Raised> {
            let mut sources = Vec::new();
            if all {
                sources.extend(WorkloadKind::ALL.iter().map(|&k| TraceSource::Workload(k)));
            } else {
                for w in &workload_names {
                    sources.push(TraceSource::Workload(
                        WorkloadKind::from_name(w).map_err(raised)?,
                    ));
                }
            }
            sources.extend(trace_paths.into_iter().map(TraceSource::File));
            let policies = uvm_report::parse_policies(&policy_names).map_err(raised)?;
            let mut cost = match &profile {
                Some(p) => CostModel::from_profile(p).map_err(raised)?,
                None => CostModel::default(),
            };
            if let Some(l2) = l2_bytes {
                cost.machine.l2_bytes = l2;
            }
            if decide_with_machine {
                cost.decide_with_machine();
            }
            cost.validate().map_err(raised)?;
            let mut template = SimConfig::new(UvmPolicy::DynaMap, 2.0);
            template.cost = cost;
            template.l2_fixed = l2_bytes.is_some();
            template.time_model = time_model;
            template.machine_scale = machine_scale;
            template.series_points = 32;
            template.eviction = eviction;
            template.eviction_unit = eviction_unit;
            let spec = SuiteSpec {
                sources,
                ratios,
                policies,
                params: WorkloadParams { size, seed, graph },
                template,
                threads: threads.unwrap_or(0),
            };
            let started = Instant::now();
            let results = run_suite(&spec, &|_| {}).map_err(raised)?;
            Ok(UvmDoc::new(
                &results,
                &spec,
                started.elapsed().as_secs_f64(),
            ))
        })
        .map_err(|r| r.to_pyerr(py))?;
    to_python(py, &doc)
}

// ---------------------------------------------------------------------------------------------------------------
// `oversub sim swap`.

/// Simulates contention-aware swap space management (Yang & Chen) as ``oversub sim swap --json`` does: each
/// scenario under Baseline (LRU swapping), MaT (SM throttling), Alg. 1's priority scheduling alone, Alg. 2's direct
/// access alone and the proposed policy (both), with every task's lengthened latency. Runs with the GIL released.
///
/// Args:
///     scenarios: built-in scenarios, a name, a comma-separated string or a sequence: fig4a, fig4b, fig5a,
///         fig5b, fig6, or "all". Default: all, unless ``scenario_files`` are given.
///     scenario_files: scenario TOML files of your own (docs/sim-swap.md): a path or a sequence of paths.
///     suite: every built-in scenario, every policy and both swap-ratio rules.
///     policies: "all" (the default: baseline, mat, alg1-priority, alg2-direct, proposed), "paper" (baseline, mat,
///         proposed), or any of "baseline", "mat", "alg1-priority", "alg2-direct", "proposed",
///         "proposed-printed-ceil"; a string, comma separated, or a sequence. "proposed" and "alg2-direct" run
///         once per rule in ``alpha_rules``.
///     alpha_rules: Alg. 2's swap-ratio rule(s): "fraction" (default) and/or "printed-ceil".
///     capacity: memory capacity for every scenario, int bytes or a size string (default: each scenario's).
///     sms: streaming multiprocessors (default: the number of tasks).
///     evictable: which tasks Baseline and MaT may swap out: "not-transferring" (default) or "between-subtasks".
///     direct_access: when the proposed policy's victims access the SSD: "serial" (default: in the read and
///         write-back steps) or "overlapped" (during the computation). With ``seeds`` and no ``direct_access``,
///         both run.
///     profile: platform profile whose ``[swap]`` table overrides the memory-controller and SSD bandwidths.
///     seed: seed of the synthetic compute times, for one draw (when ``seeds`` is not given).
///     seeds: report every figure over many seeds instead (``oversub sim swap --seeds``): a count N (seeds 1..N),
///         a range string "A-B", or a sequence of seeds.
///     priorities: "measured" (the default, Alg. 1 as written: C_i(N) under Baseline in the scenario's memory; the
///         library's and the command line's default too), "contention" or "given".
///     check: run the conservation checks on every simulation (always on in debug builds).
///
/// Returns:
///     dict with ``scenarios`` (one dict per scenario × policy: name, policy (key), policy_label, tasks (list:
///     task, priority (1 = highest), lengthened_latency_s, response_s, alone_s, degree, alpha, swap_outs),
///     makespan_s, swap_outs, memory_peak_bytes), ``summaries`` (one per scenario: name, figure, highest,
///     highest_proposed_lengthened_s, lowest, lowest_cut_vs_baseline_pct, lowest_cut_vs_mat_pct,
///     paper_cut_vs_baseline_pct, paper_cut_vs_mat_pct), ``seed`` and, with a profile, ``profile`` (path, swap).
///     With ``seeds``: dict with ``kind`` ("seeds"), ``seeds``, ``default_direct_access``, ``priorities`` and
///     ``scenarios`` (one per scenario × direct-access timing: name, paper, direct_access, seed_dependent,
///     policies, policy_labels, positions (per priority: tasks, lengthened_s spreads (n, median, q1, q3, min,
///     max) per policy, proposed_beats_baseline, proposed_beats_mat, seeds), lowest_cut_vs_baseline_pct,
///     lowest_cut_vs_mat_pct, per_seed), as ``oversub sim swap --json`` writes it.
///
/// Raises:
///     oversub.errors.SwapSimError: an unknown scenario or policy, an invalid or unreadable scenario (file), a
///         profile bandwidth the model cannot take, a simulation that fails; run failures name the scenario.
///     oversub.errors.ProfileError: the profile cannot be read or is not valid.
///     ValueError: a bad alpha rule, priorities, evictable or direct_access value, or ``sms=0``.
#[pyfunction]
#[pyo3(signature = (
    *,
    scenarios=None,
    scenario_files=None,
    suite=false,
    policies=None,
    alpha_rules=None,
    capacity=None,
    sms=None,
    evictable=None,
    direct_access=None,
    profile=None,
    seed=1,
    seeds=None,
    priorities=None,
    check=false,
))]
#[allow(clippy::too_many_arguments)]
fn sim_swap<'py>(
    py: Python<'py>,
    scenarios: Option<&Bound<'py, PyAny>>,
    scenario_files: Option<&Bound<'py, PyAny>>,
    suite: bool,
    policies: Option<&Bound<'py, PyAny>>,
    alpha_rules: Option<&Bound<'py, PyAny>>,
    capacity: Option<&Bound<'py, PyAny>>,
    sms: Option<u32>,
    evictable: Option<&str>,
    direct_access: Option<&str>,
    profile: Option<PathBuf>,
    seed: u64,
    seeds: Option<&Bound<'py, PyAny>>,
    priorities: Option<Choice<PrioritySource>>,
    check: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let seed_list: Option<Vec<u64>> = match seeds {
        None => None,
        Some(v) => Some(if let Ok(n) = v.extract::<u64>() {
            parse_seeds(&n.to_string()).map_err(|e| PyValueError::new_err(e.to_string()))?
        } else if let Ok(text) = v.extract::<String>() {
            parse_seeds(&text).map_err(|e| PyValueError::new_err(e.to_string()))?
        } else {
            let list: Vec<u64> = v.extract().map_err(|_| {
                PyValueError::new_err(
                    "seeds must be a count, a range string \"A-B\" or a sequence of seeds",
                )
            })?;
            if list.is_empty() {
                return Err(PyValueError::new_err("seeds: at least one seed"));
            }
            list
        }),
    };
    let scenario_names = names_arg(scenarios, "scenarios")?;
    let files = paths_arg(scenario_files, "scenario_files")?;
    let policy_names = names_arg(policies, "policies")?;
    let rule_names = names_arg(alpha_rules, "alpha_rules")?;
    let capacity = capacity.map(|c| size_arg(c, "capacity")).transpose()?;
    if sms == Some(0) {
        return Err(PyValueError::new_err(
            "sms must be at least 1 (the GPU needs an SM)",
        ));
    }
    let evictable = evictable
        .map(|e| e.trim().parse::<Evictable>())
        .transpose()
        .map_err(PyValueError::new_err)?;
    let direct_access = direct_access
        .map(|d| d.trim().parse::<DirectAccess>())
        .transpose()
        .map_err(PyValueError::new_err)?;
    let priorities = priorities.map_or_else(PrioritySource::default, |c| c.0);
    // Alg. 2's rules, then the policies they expand to (as the command line does).
    let named_rules = rule_names
        .iter()
        .map(|r| {
            r.to_ascii_lowercase()
                .parse::<AlphaRule>()
                .map_err(|e| PyValueError::new_err(format!("alpha_rules: {e}")))
        })
        .collect::<PyResult<Vec<AlphaRule>>>()?;
    let rules = swap_report::alpha_rules(&named_rules, suite);
    // The scenarios of one seed, with every override applied.
    let make = |seed: u64, swap_profile: Option<&ProfileSwap>| -> Result<Vec<Scenario>, Raised> {
        let names = swap_scenarios::builtin_names(&scenario_names, suite, !files.is_empty());
        let mut list: Vec<Scenario> = Vec::new();
        for n in &names {
            list.push(swap_scenarios::builtin(n, seed).map_err(raised)?);
        }
        for f in &files {
            list.push(swap_scenarios::from_file(f, seed).map_err(raised)?);
        }
        for s in &mut list {
            if let Some(c) = capacity {
                s.system.capacity_bytes = c;
            }
            if let Some(n) = sms {
                s.system.sms = n;
            }
            if let Some(e) = evictable {
                s.system.evictable = e;
            }
            if let Some(d) = direct_access {
                s.system.direct_access = d;
            }
            if let Some(p) = swap_profile {
                s.system.apply_profile(&p.swap).map_err(|e| {
                    let r = e.to_raised();
                    Raised::new(r.class, format!("{}: {}", p.path, r.message))
                })?;
            }
            s.validate().map_err(raised)?;
        }
        Ok(list)
    };
    let load_profile = || {
        profile
            .as_deref()
            .map(ProfileSwap::load)
            .transpose()
            .map_err(raised)
    };
    if let Some(seed_list) = seed_list {
        let sets = py
            .detach(|| -> Result<Vec<SeedSet>, Raised> {
                let policies = expand_policies(&policy_names, &rules, suite).map_err(raised)?;
                let swap_profile = load_profile()?;
                let timings = match direct_access {
                    Some(d) => vec![d],
                    None => DirectAccess::both().to_vec(),
                };
                let mut per_seed = std::collections::HashMap::new();
                for &seed in &seed_list {
                    let mut list = Vec::new();
                    for s in make(seed, swap_profile.as_ref())? {
                        for &d in &timings {
                            let mut s = s.clone();
                            s.system.direct_access = d;
                            list.push(s);
                        }
                    }
                    per_seed.insert(seed, list);
                }
                let options = StudyOptions {
                    policies,
                    priorities,
                    page_bytes: 4096,
                    check: check || cfg!(debug_assertions),
                };
                let build = |seed: u64| Ok(per_seed.get(&seed).cloned().unwrap_or_default());
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                run_over_seeds(&build, &seed_list, &options, threads, &|_, _| {}).map_err(raised)
            })
            .map_err(|r| r.to_pyerr(py))?;
        return to_python(py, &SeedsDoc::new(&seed_list, priorities.name(), &sets));
    }
    let doc = py
        .detach(|| -> Result<SwapDoc, Raised> {
            let policies = expand_policies(&policy_names, &rules, suite).map_err(raised)?;
            let swap_profile = load_profile()?;
            let list = make(seed, swap_profile.as_ref())?;
            let options = StudyOptions {
                policies,
                priorities,
                page_bytes: 4096,
                check: check || cfg!(debug_assertions),
            };
            let mut studies = Vec::new();
            for s in &list {
                studies.push(run_study(s, &options).map_err(|e| {
                    let r = e.to_raised();
                    Raised::new(r.class, format!("{}: {}", s.name, r.message))
                })?);
            }
            Ok(SwapDoc::new(&studies, seed, swap_profile))
        })
        .map_err(|r| r.to_pyerr(py))?;
    to_python(py, &doc)
}
