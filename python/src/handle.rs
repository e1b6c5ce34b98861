//! `Handle`, an asynchronous page-in or page-out, with the interface of `concurrent.futures.Future` (`done`,
//! `result`, `exception`, `add_done_callback`) plus `wait` and `await`.
//!
//! Every handle registers [`Ticket::on_complete`] when it is made. That callback runs on an I/O engine thread, so it
//! never touches Python: it flags the completion (waking `wait`, a timed wait on a condition variable, no polling)
//! and, when Python is waiting on it (done-callbacks, awaiting coroutines), hands the handle to one process-wide
//! dispatcher thread. The dispatcher finishes the operation without the GIL, then takes the GIL to run the
//! done-callbacks and to resolve asyncio futures through their loop's `call_soon_threadsafe`. So `await` costs one
//! future, not an executor thread, and a slow callback never stalls the engine.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use oversub_core::{OpKind, Ticket};
use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::{Raised, ToRaised};
use crate::pager::{lock, reap, BufCore, Buffer, SIGNAL_CHECK};

/// The operation and, once finished, its outcome.
#[derive(Debug)]
struct Settlement {
    ticket: Option<Ticket>,
    outcome: Option<Result<(), Raised>>,
}

/// Python waiting on a handle's completion, run by the dispatcher.
#[derive(Debug)]
enum Pending {
    /// `add_done_callback(func)`: `func(handle)`.
    Callback { func: Py<PyAny>, handle: Py<Handle> },
    /// `await handle`: the future to resolve on its loop. Holds the handle so a handle nobody else keeps is not
    /// dropped (and its operation handed to the reaper) before the awaiting coroutine is told.
    Future {
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        _keep_alive: Py<Handle>,
    },
}

/// What the completion callback touches: never held while an operation is finished.
#[derive(Debug, Default)]
struct Signal {
    io_done: bool,
    pending: Vec<Pending>,
}

/// The part of a handle shared with its completion callback and the dispatcher.
#[derive(Debug)]
struct Shared {
    settlement: Mutex<Settlement>,
    signal: Mutex<Signal>,
    completed: Condvar,
}

impl Shared {
    /// Called once, when the I/O side completes (on an engine thread, or at once if it already has).
    fn on_io_complete(self: &Arc<Self>) {
        let dispatch = {
            let mut signal = lock(&self.signal);
            signal.io_done = true;
            !signal.pending.is_empty()
        };
        self.completed.notify_all();
        if dispatch {
            dispatch_later(Arc::clone(self));
        }
    }

    /// Waits up to `timeout` for the I/O side; true when it has completed.
    fn wait_io(&self, timeout: Duration) -> bool {
        let signal = lock(&self.signal);
        let (signal, _) =
            oversub_base::sync::wait_timeout_while(&self.completed, signal, timeout, |s| {
                !s.io_done
            });
        signal.io_done
    }

    fn io_done(&self) -> bool {
        lock(&self.signal).io_done
    }

    /// Finishes the operation (which must have completed on the I/O side, so this does not wait for I/O) unless
    /// another caller did; the outcome.
    fn settle(&self) -> Result<(), Raised> {
        let mut st = lock(&self.settlement);
        Self::settle_locked(&mut st, true).unwrap_or_else(|| Err(lost()))
    }

    fn settle_locked(st: &mut Settlement, block: bool) -> Option<Result<(), Raised>> {
        if st.outcome.is_none() {
            let complete = st.ticket.as_ref().is_none_or(Ticket::is_complete);
            if complete || block {
                let outcome = match st.ticket.take() {
                    Some(t) => t.finish().map_err(|e| e.to_raised()),
                    None => Err(lost()),
                };
                st.outcome = Some(outcome);
            }
        }
        st.outcome.clone()
    }
}

fn lost() -> Raised {
    Raised::new("InternalError", "handle lost its operation")
}

/// Hands a completed handle with Python waiting on it to the dispatcher thread (started on first use).
fn dispatch_later(shared: Arc<Shared>) {
    static DISPATCHER: OnceLock<Option<Mutex<Sender<Arc<Shared>>>>> = OnceLock::new();
    let dispatcher = DISPATCHER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Shared>>();
        std::thread::Builder::new()
            .name("oversub-callbacks".into())
            .spawn(move || {
                for shared in rx {
                    dispatch(&shared);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let unsent = match dispatcher {
        Some(tx) => lock(tx).send(shared).err().map(|e| e.0),
        None => Some(shared),
    };
    if let Some(shared) = unsent {
        // No dispatcher thread: run here (on the completing thread; a slow callback then delays its I/O engine).
        dispatch(&shared);
    }
}

/// Finishes the operation without the GIL, then tells Python: done-callbacks in the order they were added, then
/// the awaiting futures.
fn dispatch(shared: &Shared) {
    let outcome = shared.settle();
    let pending = std::mem::take(&mut lock(&shared.signal).pending);
    // None once the interpreter is finalizing: nobody is left to tell (the references are then dropped later).
    let _ = Python::try_attach(|py| {
        for p in pending {
            match p {
                Pending::Callback { func, handle } => {
                    run_callback(py, func.bind(py), handle.bind(py))
                }
                Pending::Future {
                    event_loop, future, ..
                } => {
                    let exc = outcome_exception(py, &outcome);
                    let scheduled = resolver(py).and_then(|resolve| {
                        event_loop
                            .bind(py)
                            .call_method1("call_soon_threadsafe", (resolve, future.bind(py), exc))
                    });
                    if let Err(e) = scheduled {
                        // The loop is closed: nobody awaits the future any more.
                        tracing::debug!("cannot resolve an awaited handle: {e}");
                    }
                }
            }
        }
    });
}

fn outcome_exception<'py>(
    py: Python<'py>,
    outcome: &Result<(), Raised>,
) -> Option<Bound<'py, PyAny>> {
    outcome
        .as_ref()
        .err()
        .map(|r| r.to_pyerr(py).into_value(py).into_bound(py).into_any())
}

/// Calls a done-callback; an exception it raises is logged on the "oversub" logger, as `concurrent.futures` does,
/// and goes no further.
fn run_callback(py: Python<'_>, func: &Bound<'_, PyAny>, handle: &Bound<'_, Handle>) {
    if let Err(e) = func.call1((handle,)) {
        let logged = py.import("logging").and_then(|logging| {
            let logger = logging.call_method1("getLogger", ("oversub",))?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("exc_info", e.value(py))?;
            logger.call_method(
                "error",
                ("exception calling callback for %r", handle),
                Some(&kwargs),
            )
        });
        if let Err(log_error) = logged {
            // Logging itself failed: let Python print both, as for an exception nobody can catch.
            e.write_unraisable(py, Some(func));
            log_error.write_unraisable(py, Some(func));
        }
    }
}

/// Resolves an asyncio future on its loop's thread unless it was cancelled meanwhile.
#[pyfunction]
fn resolve_future(future: &Bound<'_, PyAny>, exc: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match exc {
        None => future.call_method1("set_result", (future.py().None(),))?,
        Some(e) => future.call_method1("set_exception", (e,))?,
    };
    Ok(())
}

fn resolver(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(RESOLVE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(wrap_pyfunction!(resolve_future, py)?.into_any().unbind())
        })?
        .bind(py))
}

/// An asynchronous page-in or page-out in flight, with the interface of ``concurrent.futures.Future``.
///
/// ``done()`` tells without blocking; ``result(timeout)`` (or ``wait``) blocks with the GIL released, answering
/// Ctrl-C, and raises the operation's error; ``exception(timeout)`` returns it instead; ``add_done_callback(fn)``
/// calls ``fn(handle)`` once the operation has completed; ``await handle`` suspends the coroutine until the
/// completion wakes it (no thread per handle). Asking again returns (or raises) the same outcome. A handle dropped
/// unfinished leaves its operation to finish in the background (nothing blocks, nothing leaks).
#[pyclass(frozen, module = "oversub")]
#[derive(Debug)]
pub struct Handle {
    shared: Arc<Shared>,
    kind: OpKind,
    buffer: Py<Buffer>,
    /// The buffer's Rust side, to hand over with an unfinished ticket when the handle is dropped.
    core: Arc<BufCore>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(ticket) = lock(&self.shared.settlement).ticket.take() {
            // Dropped with the GIL held, maybe by the garbage collector: never wait here.
            reap(ticket, Arc::clone(&self.core));
        }
    }
}

impl Handle {
    pub(crate) fn new(buffer: &Bound<'_, Buffer>, ticket: Ticket) -> Handle {
        let kind = ticket.kind();
        let shared = Arc::new(Shared {
            settlement: Mutex::new(Settlement {
                ticket: None,
                outcome: None,
            }),
            signal: Mutex::new(Signal::default()),
            completed: Condvar::new(),
        });
        // Weak: an operation outliving its handle (reaped) must not keep the handle's state alive, nor form a
        // cycle through the ticket's own callback list.
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        ticket.on_complete(move || {
            if let Some(shared) = weak.upgrade() {
                shared.on_io_complete();
            }
        });
        lock(&shared.settlement).ticket = Some(ticket);
        Handle {
            shared,
            kind,
            buffer: buffer.clone().unbind(),
            core: Arc::clone(&buffer.get().core),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            OpKind::PageIn => "page_in",
            OpKind::PageOut => "page_out",
        }
    }

    /// Waits (GIL released, answering signals every [`SIGNAL_CHECK`]) up to `timeout` seconds; None when it ran
    /// out, else the outcome.
    fn outcome_within(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Result<(), Raised>>> {
        let deadline = match timeout {
            None => None,
            Some(t) if t >= 0.0 && t.is_finite() => {
                Some(Instant::now() + Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a finite number of seconds >= 0, got {t}"
                )))
            }
        };
        loop {
            let slice = deadline.map_or(SIGNAL_CHECK, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK)
            });
            if py.detach(|| self.shared.wait_io(slice)) {
                return Ok(Some(py.detach(|| self.shared.settle())));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    fn timeout_error(&self, timeout: Option<f64>) -> PyErr {
        PyTimeoutError::new_err(format!(
            "{} of {} not complete after {} s",
            self.kind_name(),
            self.core.handle,
            timeout.unwrap_or(0.0)
        ))
    }
}

#[pymethods]
impl Handle {
    /// Whether the operation has completed (then ``result()`` returns at once). Never blocks: while another
    /// thread is finishing the operation, the answer is False until it has.
    fn done(&self) -> bool {
        match self.shared.settlement.try_lock() {
            Ok(mut st) => Shared::settle_locked(&mut st, false).is_some(),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                Shared::settle_locked(&mut p.into_inner(), false).is_some()
            }
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// Always False: a paging operation cannot be cancelled (for code written against ``Future``).
    fn cancelled(&self) -> bool {
        false
    }

    /// Waits for the operation (GIL released) and raises its error, if any.
    ///
    /// Args:
    ///     timeout: seconds to wait at most; None waits as long as it takes.
    ///
    /// Raises:
    ///     TimeoutError: the operation had not completed within `timeout` (it goes on; wait again).
    ///     KeyboardInterrupt: Ctrl-C during the wait (the operation goes on; wait again).
    ///     oversub.errors.Error: the operation failed (e.g. IoError); the buffer keeps its earlier state.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        match self.outcome_within(py, timeout)? {
            Some(Ok(())) => Ok(()),
            Some(Err(r)) => Err(r.to_pyerr(py)),
            None => Err(self.timeout_error(timeout)),
        }
    }

    /// As ``concurrent.futures.Future.result``: waits like ``wait(timeout)`` and returns None (a paging operation
    /// has no value), or raises the operation's error or TimeoutError.
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.wait(py, timeout)
    }

    /// As ``concurrent.futures.Future.exception``: waits like ``wait(timeout)`` and returns the operation's error
    /// (not raised), or None when it succeeded; raises TimeoutError when it is not done in time.
    #[pyo3(signature = (timeout=None))]
    fn exception<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.outcome_within(py, timeout)? {
            Some(outcome) => Ok(outcome_exception(py, &outcome)),
            None => Err(self.timeout_error(timeout)),
        }
    }

    /// Calls ``fn(handle)`` once the operation has completed (at once, on this thread, if it already has;
    /// otherwise on oversub's callback thread, with the operation finished, so ``fn`` may call ``result()``
    /// without blocking). Callbacks run in the order they were added; an exception one raises is logged on the
    /// "oversub" logger and ignored, as ``concurrent.futures`` does. The handle stays alive until its callbacks
    /// have run. All handles' callbacks share that one thread: keep them short (hand long work to an executor).
    fn add_done_callback(slf: &Bound<'_, Self>, r#fn: Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        {
            let mut signal = lock(&this.shared.signal);
            if !signal.io_done {
                signal.pending.push(Pending::Callback {
                    func: r#fn.unbind(),
                    handle: slf.clone().unbind(),
                });
                return Ok(());
            }
        }
        let py = slf.py();
        let _ = py.detach(|| this.shared.settle());
        run_callback(py, &r#fn, slf);
        Ok(())
    }

    /// ``await handle``: suspends the coroutine until the operation completes (an asyncio future resolved by the
    /// completion; no executor thread), then returns None or raises the operation's error.
    fn __await__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let queued = {
            let mut signal = lock(&this.shared.signal);
            if signal.io_done {
                false
            } else {
                signal.pending.push(Pending::Future {
                    event_loop: event_loop.clone().unbind(),
                    future: future.clone().unbind(),
                    _keep_alive: slf.clone().unbind(),
                });
                true
            }
        };
        if !queued {
            let outcome = py.detach(|| this.shared.settle());
            resolve_future(&future, outcome_exception(py, &outcome).as_ref())?;
        }
        future.call_method0("__await__")
    }

    /// "page_in" or "page_out".
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind_name()
    }

    /// The buffer being paged.
    #[getter]
    fn buffer(&self, py: Python<'_>) -> Py<Buffer> {
        self.buffer.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        let state = match &lock(&self.shared.settlement).outcome {
            None if self.shared.io_done() => "complete",
            None => "in flight",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        format!(
            "oversub.Handle({} of {}, {state})",
            self.kind_name(),
            self.buffer.get().core.handle
        )
    }
}
