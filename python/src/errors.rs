//! Rust errors as Python exceptions of the `oversub.errors` hierarchy, with the Rust message unchanged.
//!
//! The classes are defined in Python (`oversub/errors.py`) so they can also derive from the standard exceptions
//! (`MemoryError`, `OSError`, ...); Rust only picks the class by variant and formats the message. [`Raised`] is the
//! GIL-free form, so errors can cross threads that do not hold the GIL and be raised later, once or many times.

use oversub_accel::AccelError;
use oversub_core::PagerError;
use oversub_io::IoError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// An exception to raise: its class in `oversub.errors`, its message, and the numbers of the Rust error that a
/// program may act on (`needed_bytes`, `errno`, ...), set as attributes so that nobody parses the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Raised {
    pub class: &'static str,
    pub message: String,
    pub attrs: Vec<(&'static str, i64)>,
}

impl Raised {
    pub(crate) fn new(class: &'static str, message: impl Into<String>) -> Raised {
        Raised {
            class,
            message: message.into(),
            attrs: Vec::new(),
        }
    }

    /// The same, with attribute `name` set to `value` (saturated: byte counts above `i64::MAX` cannot occur).
    fn with(mut self, name: &'static str, value: impl TryInto<i64>) -> Raised {
        self.attrs
            .push((name, value.try_into().unwrap_or(i64::MAX)));
        self
    }

    /// The Python exception; falls back to `RuntimeError` should the class be missing. The message is the only
    /// argument (`OSError(errno, text)` would prefix it with `[Errno N]`); `errno` is set as an attribute instead.
    pub(crate) fn to_pyerr(&self, py: Python<'_>) -> PyErr {
        let err = match error_class(py, self.class) {
            Ok(ty) => PyErr::from_type(ty, (self.message.clone(),)),
            Err(e) => return e,
        };
        let value = err.value(py);
        for (name, v) in &self.attrs {
            if let Err(e) = value.setattr(*name, *v) {
                return e;
            }
        }
        err
    }
}

impl From<Raised> for PyErr {
    fn from(r: Raised) -> PyErr {
        Python::attach(|py| r.to_pyerr(py))
    }
}

fn error_class<'py>(py: Python<'py>, name: &'static str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("oversub.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Converts a Rust error into the exception that stands for it.
pub(crate) trait ToRaised {
    fn to_raised(&self) -> Raised;
}

impl ToRaised for PagerError {
    fn to_raised(&self) -> Raised {
        let class = match self {
            PagerError::Store(io) => return io.to_raised(),
            PagerError::Device(accel) => return accel.to_raised(),
            PagerError::UnknownBuffer(_) => "UnknownBufferError",
            PagerError::WrongAddressSpace(_) => "WrongAddressSpaceError",
            PagerError::Unpageable(_) => "UnpageableError",
            PagerError::AlreadyResident(_) => "AlreadyResidentError",
            PagerError::AlreadyPagedOut(_) => "AlreadyPagedOutError",
            PagerError::OperationInFlight { .. } => "OperationInFlightError",
            PagerError::NotResident { .. } => "NotResidentError",
            PagerError::ReadOnly(_) => "ReadOnlyError",
            PagerError::OutOfMemory {
                needed_bytes,
                available_bytes,
                capacity_bytes,
            } => {
                return Raised::new("OutOfMemoryError", self.to_string())
                    .with("needed_bytes", *needed_bytes)
                    .with("available_bytes", *available_bytes)
                    .with("capacity_bytes", *capacity_bytes)
            }
            PagerError::QuotaExceeded {
                needed_bytes,
                charged_bytes,
                limit_bytes,
                ..
            } => {
                return Raised::new("QuotaExceededError", self.to_string())
                    .with("needed_bytes", *needed_bytes)
                    .with("charged_bytes", *charged_bytes)
                    .with("limit_bytes", *limit_bytes)
            }
            PagerError::Tenant(_) => "TenantError",
            PagerError::OutOfBounds { .. } => "OutOfBoundsError",
            PagerError::InvalidSize(_) => "InvalidSizeError",
            PagerError::ChecksumMismatch { .. } => "ChecksumMismatchError",
            PagerError::Unsupported(_) => "UnsupportedError",
            PagerError::Internal(_) => "InternalError",
            PagerError::Forked { .. } => "ForkError",
            PagerError::CompletionLost { .. } => "CompletionLostError",
            _ => "PagerError",
        };
        Raised::new(class, self.to_string())
    }
}

impl ToRaised for IoError {
    fn to_raised(&self) -> Raised {
        let class = match self {
            IoError::StoreFull { .. } => "StoreFullError",
            IoError::StoreBusy { .. } => "StoreBusyError",
            IoError::StoreRefused { .. } => "StoreRefusedError",
            IoError::ExternalChanged { .. } => "ExternalChangedError",
            _ => "IoError",
        };
        let raised = Raised::new(class, self.to_string());
        // `errno` as `OSError`s have it: the system's error where there was one, ENOSPC for a full store (the
        // store's own accounting refused, as the file system would), None otherwise.
        let errno = match self {
            IoError::StoreFull { needed, free } => {
                return raised
                    .with("errno", libc::ENOSPC)
                    .with("needed_bytes", *needed)
                    .with("free_bytes", *free)
            }
            other => other.raw_os_error(),
        };
        match errno {
            Some(n) => raised.with("errno", n),
            None => raised,
        }
    }
}

impl ToRaised for AccelError {
    fn to_raised(&self) -> Raised {
        let class = match self {
            AccelError::NoDriver(_) => "NoDriverError",
            AccelError::OutOfMemory(_) => "DeviceOutOfMemoryError",
            _ => "AccelError",
        };
        Raised::new(class, self.to_string())
    }
}

impl ToRaised for oversub_sched::ConfigError {
    fn to_raised(&self) -> Raised {
        Raised::new("ConfigError", self.to_string())
    }
}

impl ToRaised for oversub_sched::RunError {
    fn to_raised(&self) -> Raised {
        Raised::new("RunError", self.to_string())
    }
}

impl ToRaised for oversub_sched::SetupError {
    fn to_raised(&self) -> Raised {
        match self {
            oversub_sched::SetupError::Profile(e) => e.to_raised(),
            oversub_sched::SetupError::Io(e) => e.to_raised(),
            oversub_sched::SetupError::Pager(e) => e.to_raised(),
            oversub_sched::SetupError::Demand(_) => Raised::new("IoError", self.to_string()),
            oversub_sched::SetupError::StoreMissing { .. }
            | oversub_sched::SetupError::StoreLocation { .. }
            | oversub_sched::SetupError::DemandOnDevice { .. } => {
                Raised::new("IoError", self.to_string())
            }
            _ => Raised::new("ProfileError", self.to_string()),
        }
    }
}

impl ToRaised for oversub_sim::uvm::SimError {
    fn to_raised(&self) -> Raised {
        Raised::new("SimError", self.to_string())
    }
}

impl ToRaised for oversub_sim::swap::SwapSimError {
    fn to_raised(&self) -> Raised {
        Raised::new("SwapSimError", self.to_string())
    }
}

impl ToRaised for oversub_profile::ProfileError {
    fn to_raised(&self) -> Raised {
        Raised::new("ProfileError", self.to_string())
    }
}

/// `result.py()?`: a Rust result as a Python one.
pub(crate) trait OrRaise<T> {
    fn py(self) -> PyResult<T>;
}

impl<T, E: ToRaised> OrRaise<T> for Result<T, E> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| e.to_raised().into())
    }
}
