//! Python code in schedule slots: `run_schedule(work={"A": fn}, init={...})`.
//!
//! The executor calls a component's registered Rust closure on its lane thread once per slot, after the slot's
//! page-ins completed. For a Python function that closure takes the GIL (`Python::attach`; the run itself holds
//! it nowhere else), builds an [`Slot`] over the component's resident buffers and calls the function with it.
//!
//! Views of the buffers (NumPy arrays, memoryviews, DLPack tensors) point at memory the plan pages out after the
//! slot, so each one holds a Rust [`Lease`] of its buffer: every buffer-protocol export carries one in
//! `Py_buffer.internal`, dropped by `bf_releasebuffer`; every DLPack capsule carries one, dropped by its deleter.
//! When the function returns, the slot is closed (its own leases dropped, its cached arrays released, its methods
//! refusing), and a lease still alive then (a view the function kept) stops the run with the executor's "still
//! alive" error. An exception of the function stops the run first: `run_schedule` raises `RunError` from it.

use std::error::Error as StdError;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use oversub_sched::{
    work_mismatch, Lease, RunError, Runtime, SlotContext, System, WorkMismatch, WorkResult,
};
use pyo3::exceptions::{PyBufferError, PyException, PyImportError, PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

use crate::dlpack::{byte_capsule, DL_CPU};
use crate::errors::{Raised, ToRaised};
use crate::views::fill_byte_view;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Slot>()?;
    m.add_class::<SlotView>()?;
    m.add_class::<NoopWork>()?;
    m.add("NOOP", Py::new(m.py(), NoopWork)?)?;
    Ok(())
}

use oversub_base::sync::lock;

// ---------------------------------------------------------------------------------------------------------------
// The `work=` and `init=` arguments.

/// `oversub.NOOP`: registered as a component's work, a Rust closure that does nothing. It is the baseline for
/// measuring what calling Python in each slot costs (examples/bench_work_overhead.py).
#[pyclass(frozen, module = "oversub", name = "_NoopWork")]
#[derive(Debug)]
pub(crate) struct NoopWork;

#[pymethods]
impl NoopWork {
    fn __repr__(&self) -> &'static str {
        "oversub.NOOP"
    }
}

/// What a component runs in its slots.
#[derive(Debug)]
enum Job {
    /// A Python callable, called with the [`Slot`].
    Python(Py<PyAny>),
    /// `oversub.NOOP`: nothing, in Rust.
    Noop,
}

/// The Python code `run_schedule` registers: `work=` (each slot) and `init=` (once, before the run).
#[derive(Debug, Default)]
pub(crate) struct UserWorks {
    work: Vec<(String, Job)>,
    init: Vec<(String, Job)>,
}

/// `{component: callable or oversub.NOOP}`, any mapping; None is no registration.
fn jobs_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<(String, Job)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Vec::new());
    };
    let items = if let Ok(d) = obj.cast::<PyDict>() {
        d.items().into_any()
    } else if obj.hasattr("items")? {
        obj.call_method0("items")?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a dict from component name to a function taking the slot, not {}",
            type_name(obj)
        )));
    };
    let mut jobs = Vec::new();
    for item in items.try_iter()? {
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let name = key
            .cast::<PyString>()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what}: component names must be strings, not {}",
                    type_name(&key)
                ))
            })?
            .to_str()?
            .to_string();
        let job = if value.is_instance_of::<NoopWork>() {
            Job::Noop
        } else if value.is_callable() {
            Job::Python(value.unbind())
        } else {
            return Err(PyTypeError::new_err(format!(
                "{what}[{name:?}] must be callable (a function taking the slot) or oversub.NOOP, not {}",
                type_name(&value)
            )));
        };
        jobs.push((name, job));
    }
    Ok(jobs)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

impl UserWorks {
    /// Reads `work=` and `init=`; TypeError for what is not a mapping of names to callables.
    pub(crate) fn from_args(
        work: Option<&Bound<'_, PyAny>>,
        init: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<UserWorks> {
        let works = UserWorks {
            work: jobs_arg(work, "work")?,
            init: jobs_arg(init, "init")?,
        };
        let python = works.work.iter().chain(&works.init);
        if python.into_iter().any(|(_, j)| matches!(j, Job::Python(_))) {
            // Imported now (where installed) rather than by the first slot that views its buffers.
            if let Some(py) = work.or(init).map(|o| o.py()) {
                let _ = numpy(py);
            }
        }
        Ok(works)
    }

    /// Every name must be a component, and every component without a built-in work needs code (ConfigError).
    pub(crate) fn check(&self, system: &System) -> Result<(), Raised> {
        let mismatch = work_mismatch(
            system,
            self.work.iter().map(|(n, _)| n.as_str()),
            self.init.iter().map(|(n, _)| n.as_str()),
        );
        match mismatch {
            None => Ok(()),
            Some(WorkMismatch::Unknown { name, init, known }) => Err(Raised::new(
                "ConfigError",
                format!(
                    "{}={{{name:?}: ...}}: the configuration has no component {name:?} (it has: {known})",
                    if init { "init" } else { "work" }
                ),
            )),
            Some(WorkMismatch::Missing(missing)) => {
                let many = missing.len() > 1;
                let list = missing
                    .iter()
                    .map(|n| format!("{n:?}: fn"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Err(Raised::new(
                    "ConfigError",
                    format!(
                        "no work for component{} {}: the configuration gives {} no built-in work (work = {{ spin_ms \
                         = … }} or {{ sleep_ms = … }}), so pass {} code as run_schedule(..., work={{{list}}})",
                        if many { "s" } else { "" },
                        missing.join(", "),
                        if many { "them" } else { "it" },
                        if many { "their" } else { "its" },
                    ),
                ))
            }
            Some(other) => Err(Raised::new("ConfigError", other.to_string())),
        }
    }

    /// Registers the works and inits with `rt`; a set `stop` makes them stop the run at their next slot.
    pub(crate) fn register<'w>(&'w self, mut rt: Runtime<'w>, stop: &'w Stop) -> Runtime<'w> {
        for (name, job) in &self.work {
            rt = match job {
                Job::Python(f) => rt.work(name.clone(), move |ctx: &mut SlotContext<'_>| {
                    call_python(f, ctx, stop, false)
                }),
                Job::Noop => rt.work(name.clone(), move |_: &mut SlotContext<'_>| stop.check()),
            };
        }
        for (name, job) in &self.init {
            rt = match job {
                Job::Python(f) => rt.init(name.clone(), move |ctx: &mut SlotContext<'_>| {
                    call_python(f, ctx, stop, true)
                }),
                Job::Noop => rt.init(name.clone(), move |_: &mut SlotContext<'_>| stop.check()),
            };
        }
        rt
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Stopping a run: Ctrl-C while the caller waits, and errors that carry the Python exception.

/// Set when the caller's thread saw a signal (Ctrl-C) during the run: Python works stop the run at their next slot.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    set: AtomicBool,
    error: Mutex<Option<PyErr>>,
}

impl Stop {
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    fn interrupt(&self, e: PyErr) {
        lock(&self.error).get_or_insert(e);
        self.set.store(true, Ordering::Release);
    }

    /// The exception a signal handler raised during the run (KeyboardInterrupt), which `run_schedule` raises.
    pub(crate) fn take(&self) -> Option<PyErr> {
        lock(&self.error).take()
    }

    fn check(&self) -> WorkResult {
        if self.is_set() {
            return Err(Box::new(Interrupted));
        }
        Ok(())
    }
}

/// A work's answer to a set [`Stop`].
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted (KeyboardInterrupt)")
    }
}

impl StdError for Interrupted {}

/// A Python exception raised by a work, carried through the run's [`RunError::Work`].
struct PyWorkError {
    /// "ValueError: message", made while the GIL was held.
    text: String,
    err: PyErr,
    /// Not an `Exception` (KeyboardInterrupt, SystemExit): re-raised as it is.
    passthrough: bool,
}

impl std::fmt::Debug for PyWorkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyWorkError")
            .field("text", &self.text)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for PyWorkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl StdError for PyWorkError {}

fn py_failure(py: Python<'_>, err: PyErr) -> Box<dyn StdError + Send + Sync> {
    let value = err.value(py);
    let ty = value
        .get_type()
        .qualname()
        .map_or_else(|_| "exception".to_string(), |n| n.to_string());
    let text = match value.str() {
        Ok(s) if !s.is_empty().unwrap_or(true) => format!("{ty}: {s}"),
        _ => ty,
    };
    let passthrough = !err.is_instance_of::<PyException>(py);
    Box::new(PyWorkError {
        text,
        err,
        passthrough,
    })
}

/// Why `run_schedule` failed, before it becomes a Python exception.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An `oversub.errors` exception.
    Raised(Raised),
    /// A work's Python exception stopped the run.
    Work(Box<WorkFailure>),
    /// A work stopped the run for a Ctrl-C (the exception is in [`Stop`]).
    Interrupted,
}

/// A work's Python exception and where it stopped the run.
#[derive(Debug)]
pub(crate) struct WorkFailure {
    /// The run's message ("work of component A failed in its slot 3 ...").
    message: String,
    err: PyErr,
    passthrough: bool,
    component: String,
    instance: usize,
    hyperperiod: usize,
    planned_start_s: f64,
}

impl From<Raised> for Failure {
    fn from(r: Raised) -> Failure {
        Failure::Raised(r)
    }
}

/// A run's error, keeping a work's Python exception.
pub(crate) fn run_failure(e: RunError) -> Failure {
    let text = e.to_string();
    match e {
        RunError::Work {
            component,
            instance,
            hyperperiod,
            planned_start_s,
            source: Some(source),
            ..
        } => match source.downcast::<PyWorkError>() {
            Ok(w) => Failure::Work(Box::new(WorkFailure {
                message: text,
                err: w.err,
                passthrough: w.passthrough,
                component,
                instance,
                hyperperiod,
                planned_start_s,
            })),
            Err(other) if other.is::<Interrupted>() => Failure::Interrupted,
            Err(_) => Raised::new("RunError", text).into(),
        },
        RunError::Config(message) => Raised::new("ConfigError", message).into(),
        RunError::Setup(setup) => setup.to_raised().into(),
        other => other.to_raised().into(),
    }
}

impl Failure {
    /// The exception to raise: `RunError` from a work's exception (its `__cause__`, with the slot as attributes),
    /// or the work's KeyboardInterrupt / SystemExit itself, with a note naming the slot.
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Raised(r) => r.to_pyerr(py),
            Failure::Interrupted => Raised::new("RunError", "the run was interrupted").to_pyerr(py),
            Failure::Work(w) => {
                let WorkFailure {
                    message,
                    err,
                    passthrough,
                    component,
                    instance,
                    hyperperiod,
                    planned_start_s,
                } = *w;
                if passthrough {
                    let _ = err.add_note(py, format!("(oversub: the run stopped: {message})"));
                    return err;
                }
                let e = Raised::new("RunError", message).to_pyerr(py);
                let v = e.value(py);
                let _ = v.setattr("component", component);
                let _ = v.setattr("instance", instance);
                let _ = v.setattr("hyperperiod", hyperperiod);
                let _ = v.setattr("planned_start_s", planned_start_s);
                e.set_cause(py, Some(err));
                e
            }
        }
    }
}

/// How often the caller's thread looks for signals (Ctrl-C) while a run goes on.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// Runs `f` on a thread of its own with the GIL released, while the caller's thread checks for signals every
/// [`SIGNAL_POLL`]: a signal handler's exception (KeyboardInterrupt) sets `stop`, so the run's Python works stop it
/// at their next slot, and is kept for the caller to raise.
pub(crate) fn detach_interruptibly<T, F>(py: Python<'_>, stop: &Stop, f: F) -> T
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    py.detach(|| {
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let worker = s.spawn(move || {
                let _ = tx.send(f());
            });
            loop {
                match rx.recv_timeout(SIGNAL_POLL) {
                    Ok(v) => {
                        // Joined (not just left to the scope) so the thread's kept Python thread state is given
                        // back before the GIL is taken again.
                        let _ = worker.join();
                        return v;
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if !stop.is_set() {
                            if let Err(e) = Python::attach(|py| py.check_signals()) {
                                stop.interrupt(e);
                            }
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        // The thread ended without sending: it panicked; pass the panic on.
                        let payload = match worker.join() {
                            Err(p) => p,
                            Ok(()) => Box::new("the run's thread ended without a result"),
                        };
                        std::panic::resume_unwind(payload)
                    }
                }
            }
        })
    })
}

// ---------------------------------------------------------------------------------------------------------------
// One slot as Python sees it.

/// A buffer's address, which may cross threads: it is dereferenced only by the consumers of views, while a
/// [`Lease`] keeps the memory resident and allocated.
#[derive(Debug, Clone, Copy)]
struct Addr(*mut u8);

// SAFETY: a plain address; every dereference goes through a view that holds a lease (see `Addr`).
unsafe impl Send for Addr {}
// SAFETY: as above; the address itself is never written.
unsafe impl Sync for Addr {}

#[derive(Debug)]
struct BufInfo {
    name: String,
    addr: Addr,
    len: usize,
    read_only: bool,
}

/// What a [`Slot`] and its [`SlotView`]s share. Holds no Python object, so an export's lease can be dropped
/// without the GIL (a DLPack consumer's deleter may run anywhere).
#[derive(Debug)]
struct SlotShared {
    component: String,
    instance: usize,
    hyperperiod: usize,
    planned_start_s: f64,
    deadline_s: f64,
    deadline: Instant,
    /// An init, which runs before the buffers are first stored: read-only buffers are still writable.
    init: bool,
    bufs: Vec<BufInfo>,
    /// One lease per buffer while the work runs; `None` once the slot is over. Exports clone them.
    leases: Mutex<Option<Vec<Lease>>>,
    /// Exports alive (buffer-protocol exports and DLPack capsules).
    live: AtomicUsize,
}

impl SlotShared {
    fn new(
        ctx: &SlotContext<'_>,
        init: bool,
    ) -> Result<SlotShared, Box<dyn StdError + Send + Sync>> {
        let mut bufs = Vec::new();
        let mut leases = Vec::new();
        for name in ctx.buffer_names() {
            let raw = ctx.raw(name)?;
            bufs.push(BufInfo {
                name: name.to_string(),
                addr: Addr(raw.ptr),
                len: raw.len,
                read_only: raw.read_only && !init,
            });
            leases.push(ctx.lease(name)?);
        }
        Ok(SlotShared {
            component: ctx.component().to_string(),
            instance: ctx.instance(),
            hyperperiod: ctx.hyperperiod(),
            planned_start_s: ctx.planned_start_s(),
            deadline_s: ctx.deadline_s(),
            deadline: ctx.deadline(),
            init,
            bufs,
            leases: Mutex::new(Some(leases)),
            live: AtomicUsize::new(0),
        })
    }

    fn what(&self) -> String {
        if self.init {
            format!("the init of component {}", self.component)
        } else {
            format!(
                "slot {} of component {} (hyperperiod {})",
                self.instance, self.component, self.hyperperiod
            )
        }
    }

    fn over_message(&self) -> String {
        format!(
            "{} is over: a Slot and views of its buffers are valid only during the work call it was passed to \
             (copy what you need to keep)",
            self.what()
        )
    }

    fn is_over(&self) -> bool {
        lock(&self.leases).is_none()
    }

    fn index(&self, name: &str) -> PyResult<usize> {
        self.bufs
            .iter()
            .position(|b| b.name == name)
            .ok_or_else(|| {
                pyo3::exceptions::PyKeyError::new_err(format!(
                    "component {} has no buffer {name:?} (it has: {})",
                    self.component,
                    self.bufs
                        .iter()
                        .map(|b| b.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// A lease for one more export of buffer `i`; ViewError once the slot is over.
    fn export(shared: &Arc<SlotShared>, i: usize) -> PyResult<ExportLease> {
        let leases = lock(&shared.leases);
        let lease = leases
            .as_ref()
            .and_then(|l| l.get(i))
            .cloned()
            .ok_or_else(|| Raised::new("ViewError", shared.over_message()))?;
        shared.live.fetch_add(1, Ordering::AcqRel);
        Ok(ExportLease {
            _lease: lease,
            shared: Arc::clone(shared),
        })
    }
}

/// One export's hold on its buffer.
#[derive(Debug)]
struct ExportLease {
    _lease: Lease,
    shared: Arc<SlotShared>,
}

impl Drop for ExportLease {
    fn drop(&mut self) {
        self.shared.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A Python thread state kept on a lane thread from its first Python work until the thread ends.
///
/// `Python::attach` on a thread without one creates a thread state and deletes it on return, and the first call of
/// a fresh state allocates its frame stack: about 20 µs per slot. Keeping one state per lane thread (the GIL
/// released between slots) makes later `attach`es cheap restores of it. The thread-local's destructor gives it
/// back when the thread ends; the executor joins its lane threads (and [`detach_interruptibly`] its run thread)
/// before the run returns, so that happens while `run_schedule` waits, with the interpreter alive and the GIL
/// free to take.
struct KeptThreadState {
    gstate: ffi::PyGILState_STATE,
    tstate: *mut ffi::PyThreadState,
}

impl Drop for KeptThreadState {
    fn drop(&mut self) {
        // SAFETY: `tstate` is this thread's own state, released by `PyEval_SaveThread` in `keep_thread_state`; it is
        // made current again (taking the GIL), then the `PyGILState_Ensure` that created it is undone, which deletes
        // it and releases the GIL. No Python code of this thread runs afterwards.
        unsafe {
            ffi::PyEval_RestoreThread(self.tstate);
            ffi::PyGILState_Release(self.gstate);
        }
    }
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<KeptThreadState>> = const { std::cell::RefCell::new(None) };
}

/// Gives this thread a Python thread state that outlives the slot (see [`KeptThreadState`]), unless it has one.
fn keep_thread_state() {
    let _ = KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.is_some() {
            return;
        }
        // SAFETY: the interpreter runs (run_schedule called us) and this thread does not hold the GIL: works run on
        // the executor's threads (or run_schedule's run thread, for inits), outside any `Python::attach`.
        // `PyGILState_Ensure` creates the thread's state and takes the GIL; `PyEval_SaveThread` releases the GIL and
        // returns that state, kept for the destructor.
        unsafe {
            let gstate = ffi::PyGILState_Ensure();
            let tstate = ffi::PyEval_SaveThread();
            *kept = Some(KeptThreadState { gstate, tstate });
        }
    });
}

/// Calls a Python work with the slot, then closes the slot.
fn call_python(f: &Py<PyAny>, ctx: &mut SlotContext<'_>, stop: &Stop, init: bool) -> WorkResult {
    stop.check()?;
    let shared = Arc::new(SlotShared::new(ctx, init)?);
    keep_thread_state();
    Python::attach(|py| -> WorkResult {
        let slot = Bound::new(
            py,
            Slot {
                shared: Arc::clone(&shared),
                cache: Mutex::new(None),
            },
        )
        .map_err(|e| py_failure(py, e))?;
        let outcome = f.bind(py).call1((&slot,));
        slot.get().close(py);
        drop(slot);
        let returned = outcome.map_err(|e| py_failure(py, e))?;
        if !returned.is_none() && returned.hasattr("__await__").unwrap_or(false) {
            // A coroutine would never run: say so instead of silently doing nothing.
            let _ = returned.call_method0("close");
            return Err(py_failure(
                py,
                PyTypeError::new_err(
                    "the work returned an awaitable: work functions are called on the run's threads, not in an \
                     event loop; pass a plain function (def, not async def)",
                ),
            ));
        }
        drop(returned);
        if shared.live.load(Ordering::Acquire) > 0 {
            // Views in reference cycles go with a collection; views the work kept stay (the executor reports
            // them).
            if let Ok(gc) = py.import("gc") {
                let _ = gc.call_method0("collect");
            }
        }
        Ok(())
    })
}

/// NumPy's `frombuffer` and `dtype("uint8")`, imported on first use.
fn numpy(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    static NUMPY: PyOnceLock<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    NUMPY.get_or_try_init(py, || {
        let np = py.import("numpy").map_err(|_| {
            PyImportError::new_err(
                "viewing a slot's buffers as arrays needs NumPy: pip install numpy (without it, use \
                 memoryview(slot.view(name)))",
            )
        })?;
        let dtype = np.getattr("dtype")?;
        let uint8 = dtype.call1(("uint8",))?;
        Ok((np.getattr("frombuffer")?.unbind(), dtype.unbind(), uint8.unbind()))
    })
}

/// `numpy.frombuffer(view, dtype, count)`.
fn frombuffer<'py>(
    view: &Bound<'py, SlotView>,
    dtype: &Bound<'py, PyAny>,
    count: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let py = view.py();
    let (frombuffer, _, _) = numpy(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", dtype)?;
    kwargs.set_item("count", count)?;
    frombuffer.bind(py).call((view,), Some(&kwargs))
}

/// The context of one slot of a component's Python work, passed to the function registered with
/// ``run_schedule(work={name: fn})`` (or ``init=``). It is valid only during that call: afterwards its buffer
/// methods raise ``oversub.errors.ViewError`` and its timing methods ``RuntimeError``.
///
/// Views of the buffers (``buffers``, ``array()``, ``view()`` and what is made from them) point at the component's
/// resident memory, zero-copy. Each keeps the buffer from being paged out while it lives, so a view still alive
/// when the function returns (kept in a global, a list, an object) stops the run with ``RunError`` ("still
/// alive"): copy what must outlive the slot.
#[pyclass(frozen, module = "oversub", name = "Slot")]
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<SlotShared>,
    /// `buffers`: the dict and its read-only proxy, made on first use.
    cache: Mutex<Option<(Py<PyDict>, Py<PyAny>)>>,
}

impl Slot {
    /// Ends the slot: no more exports, the slot's own leases and cached arrays released.
    fn close(&self, py: Python<'_>) {
        *lock(&self.shared.leases) = None;
        let cache = lock(&self.cache).take();
        if let Some((dict, proxy)) = cache {
            // Clearing (not just dropping) also releases the arrays when the function kept the mapping.
            dict.bind(py).clear();
            drop(proxy);
        }
    }

    fn open(&self) -> PyResult<()> {
        if self.shared.is_over() {
            return Err(Raised::new("ViewError", self.shared.over_message()).into());
        }
        Ok(())
    }

    fn open_timing(&self) -> PyResult<()> {
        if self.shared.is_over() {
            return Err(PyRuntimeError::new_err(self.shared.over_message()));
        }
        Ok(())
    }

    fn new_view<'py>(slf: &Bound<'py, Self>, index: usize) -> PyResult<Bound<'py, SlotView>> {
        Bound::new(
            slf.py(),
            SlotView {
                shared: Arc::clone(&slf.get().shared),
                index,
            },
        )
    }
}

#[pymethods]
impl Slot {
    /// The component's name.
    #[getter]
    fn component(&self) -> &str {
        &self.shared.component
    }

    /// The how-many-th slot of this component this is, from 0 (warm-up included); 0 in an init.
    #[getter]
    fn instance(&self) -> usize {
        self.shared.instance
    }

    /// The repetition of the table (hyperperiod) this slot belongs to, from 0 (warm-up included).
    #[getter]
    fn hyperperiod(&self) -> usize {
        self.shared.hyperperiod
    }

    /// Planned start of the slot, seconds from the table's start.
    #[getter]
    fn planned_start_s(&self) -> f64 {
        self.shared.planned_start_s
    }

    /// End of the slot's window, seconds from the table's start: work that returns later is a deadline miss (it
    /// is never cut). Infinite in an init.
    #[getter]
    fn deadline_s(&self) -> f64 {
        self.shared.deadline_s
    }

    /// Whether this is the component's init (``run_schedule(init=...)``), which runs once before the table.
    #[getter]
    fn is_init(&self) -> bool {
        self.shared.init
    }

    /// The component's buffer names, in declaration order.
    #[getter]
    fn buffer_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.shared.bufs.iter().map(|b| b.name.as_str()))
    }

    /// Whether the slot is still running (its function has not returned).
    #[getter]
    fn active(&self) -> bool {
        !self.shared.is_over()
    }

    /// A read-only mapping from buffer name to a 1-D ``uint8`` NumPy array over the buffer's memory (no copy).
    /// Arrays of read-only buffers are read-only (except in an init, which runs before the buffers are first
    /// stored). Needs NumPy.
    #[getter]
    fn buffers<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        me.open()?;
        if let Some((_, proxy)) = lock(&me.cache).as_ref() {
            return Ok(proxy.bind(py).clone());
        }
        let (_, _, uint8) = numpy(py)?;
        let dict = PyDict::new(py);
        for (i, b) in me.shared.bufs.iter().enumerate() {
            let view = Slot::new_view(slf, i)?;
            dict.set_item(&b.name, frombuffer(&view, uint8.bind(py), b.len)?)?;
        }
        static PROXY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let proxy_type = PROXY.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("types")?.getattr("MappingProxyType")?.unbind())
        })?;
        let proxy = proxy_type.bind(py).call1((&dict,))?;
        *lock(&me.cache) = Some((dict.unbind(), proxy.clone().unbind()));
        Ok(proxy)
    }

    /// A typed NumPy view of a buffer (no copy): ``dtype`` is anything ``numpy.dtype`` accepts, ``shape`` an int or
    /// a tuple (default: 1-D over the whole buffer). A shape may cover less than the buffer (its first bytes); one
    /// that needs more, or a dtype that does not divide the buffer when no shape is given, raises
    /// ``oversub.errors.ViewError``.
    #[pyo3(signature = (name, dtype, shape=None))]
    fn array<'py>(
        slf: &Bound<'py, Self>,
        name: &str,
        dtype: &Bound<'py, PyAny>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        me.open()?;
        let i = me.shared.index(name)?;
        let len = me.shared.bufs[i].len;
        let (_, np_dtype, _) = numpy(py)?;
        let dtype = np_dtype.bind(py).call1((dtype,))?;
        let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
        let itemsize = itemsize.max(1);
        let dims: Option<Vec<i64>> = match shape {
            None => None,
            Some(s) if s.is_none() => None,
            Some(s) if s.is_instance_of::<PyInt>() => Some(vec![s.extract()?]),
            Some(s) => Some(s.extract()?),
        };
        let whole = len / itemsize;
        let bad = |why: String| -> PyErr {
            Raised::new(
                "ViewError",
                format!(
                    "buffer {}.{name} ({len} bytes) cannot be viewed as {why}",
                    me.shared.component
                ),
            )
            .into()
        };
        if let Some(d) = &dims {
            crate::views::check_shape(d).map_err(&bad)?;
        }
        // Known dimensions: view just that many elements; with a -1, the whole buffer and let reshape decide.
        let count = dims.as_ref().and_then(|d| {
            d.iter().try_fold(1usize, |acc, &x| {
                usize::try_from(x).ok().map(|x| acc.saturating_mul(x))
            })
        });
        let count = match count {
            Some(c) if c > whole => {
                return Err(bad(format!(
                    "shape {:?} of {dtype}: that needs {} bytes",
                    dims.unwrap_or_default(),
                    c.saturating_mul(itemsize)
                )))
            }
            Some(c) => c,
            None if len % itemsize != 0 => {
                return Err(bad(format!(
                    "{dtype} ({itemsize} bytes per element): not a whole number of elements; give a shape"
                )))
            }
            None => whole,
        };
        let view = Slot::new_view(slf, i)?;
        let arr = frombuffer(&view, &dtype, count)?;
        match dims {
            Some(d) => arr.call_method1("reshape", (PyTuple::new(py, d)?,)),
            None => Ok(arr),
        }
    }

    /// The buffer-protocol and DLPack exporter of one buffer (``oversub.SlotView``): ``memoryview(v)``,
    /// ``numpy.from_dlpack(v)``, ``torch.from_dlpack(v)``; no NumPy needed.
    fn view<'py>(slf: &Bound<'py, Self>, name: &str) -> PyResult<Bound<'py, SlotView>> {
        let me = slf.get();
        me.open()?;
        let i = me.shared.index(name)?;
        Slot::new_view(slf, i)
    }

    /// Whether a buffer is read-only in this slot.
    fn is_read_only(&self, name: &str) -> PyResult<bool> {
        self.open()?;
        Ok(self.shared.bufs[self.shared.index(name)?].read_only)
    }

    /// Seconds left until the slot's deadline (0.0 once it has passed).
    fn remaining_s(&self) -> PyResult<f64> {
        self.open_timing()?;
        Ok(self
            .shared
            .deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64())
    }

    /// Whether the deadline has passed: long work checks this and stops early, since the executor never cuts it.
    fn overrun(&self) -> PyResult<bool> {
        self.open_timing()?;
        Ok(Instant::now() >= self.shared.deadline)
    }

    fn __repr__(&self) -> String {
        format!(
            "<oversub.Slot {}{}: buffers {}>",
            self.shared.what(),
            if self.shared.is_over() { ", over" } else { "" },
            self.shared
                .bufs
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// One buffer of a running slot as a buffer-protocol and DLPack exporter (``Slot.view(name)``). Every export
/// (memoryview, NumPy array, DLPack tensor) keeps the buffer resident until it is released; exporting after the
/// slot is over raises ``oversub.errors.ViewError``.
#[pyclass(frozen, module = "oversub", name = "SlotView")]
#[derive(Debug)]
pub(crate) struct SlotView {
    shared: Arc<SlotShared>,
    index: usize,
}

impl SlotView {
    fn buf(&self) -> &BufInfo {
        &self.shared.bufs[self.index]
    }
}

#[pymethods]
impl SlotView {
    /// The buffer's name.
    #[getter]
    fn name(&self) -> &str {
        &self.buf().name
    }

    /// Its size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf().len
    }

    /// Whether it is read-only in this slot (exports are then read-only).
    #[getter]
    fn readonly(&self) -> bool {
        self.buf().read_only
    }

    fn __len__(&self) -> usize {
        self.buf().len
    }

    fn __repr__(&self) -> String {
        format!(
            "<oversub.SlotView {}.{} ({} bytes{}) of {}>",
            self.shared.component,
            self.buf().name,
            self.buf().len,
            if self.buf().read_only {
                ", read-only"
            } else {
                ""
            },
            self.shared.what()
        )
    }

    /// Buffer protocol: a 1-D unsigned-byte export holding a lease until released.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null Py_buffer"));
        }
        let me = slf.get();
        let b = me.buf();
        if b.read_only && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(Raised::new(
                "ViewError",
                format!("buffer {}.{} is read-only", me.shared.component, b.name),
            )
            .into());
        }
        let lease = Box::into_raw(Box::new(SlotShared::export(&me.shared, me.index)?));
        // SAFETY: `view` is non-null and the interpreter's to fill (bf_getbuffer's contract); the address is valid
        // for `len` bytes while the lease stored in `internal` lives, which `__releasebuffer__` drops.
        let filled = unsafe {
            fill_byte_view(
                view,
                slf.clone().into_any(),
                b.addr.0,
                b.len as u64,
                b.read_only,
                flags,
                lease.cast::<c_void>(),
            )
        };
        if filled.is_err() {
            // SAFETY: the view was not handed out, so nothing else owns the lease.
            drop(unsafe { Box::from_raw(lease) });
        }
        filled
    }

    /// The end of an export: its lease goes.
    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        if view.is_null() {
            return;
        }
        // SAFETY: the interpreter passes the Py_buffer `__getbuffer__` filled, whose `internal` is the leaked
        // `Box<ExportLease>` (or null once taken); it is released once.
        unsafe {
            let internal = (*view).internal;
            (*view).internal = std::ptr::null_mut();
            if !internal.is_null() {
                drop(Box::from_raw(internal.cast::<ExportLease>()));
            }
        }
    }

    /// DLPack export (1-D uint8, host memory): ``torch.from_dlpack(v)``, ``numpy.from_dlpack(v)``. The consumer's
    /// tensor keeps the buffer resident until it is deleted. With DLPack 1.0 (``max_version`` >= (1, 0)) a
    /// read-only buffer is flagged read-only; legacy consumers get no flag (NumPy then makes its array
    /// read-only anyway, others may not).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Host memory, already paged in: no stream to synchronise with.
        let _ = stream;
        let versioned = crate::dlpack::wants_versioned(max_version)?;
        dlpack(slf, dl_device, copy, versioned)
    }

    /// (device type, device id) for DLPack: (1, 0), host memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }
}

fn dlpack<'py>(
    slf: &Bound<'py, SlotView>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    versioned: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let me = slf.get();
    let b = me.buf();
    if copy == Some(true) {
        return Err(PyBufferError::new_err(
            "slot buffers export views only (copy=True is not supported); copy the consumer's tensor",
        ));
    }
    if let Some(d) = dl_device {
        if d != (DL_CPU, 0) {
            return Err(PyBufferError::new_err(format!(
                "buffer {}.{} is on DLPack device {:?} (host memory), not {d:?}",
                me.shared.component,
                b.name,
                (DL_CPU, 0)
            )));
        }
    }
    let len =
        i64::try_from(b.len).map_err(|_| PyBufferError::new_err("buffer too large for DLPack"))?;
    crate::dlpack::refuse_legacy_read_only(b.read_only, versioned)?;
    let lease = SlotShared::export(&me.shared, me.index)?;
    byte_capsule(
        py,
        b.addr.0.cast::<c_void>(),
        (DL_CPU, 0),
        len,
        b.read_only,
        versioned,
        lease,
    )
}
