//! Small conversions shared by the bindings: sizes written as `"4GiB"` or ints, option enums by name, Rust values
//! as Python dicts.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;

/// A byte count given as an int or as a size string (`"256MiB"`, `"1GiB"`, `"4096"`). `what` names the argument
/// in the error.
pub(crate) fn size_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_str()?;
        return oversub_report::parse_size(text).map_err(|e| {
            PyValueError::new_err(format!("{what}: cannot read {text:?} as a size: {e}"))
        });
    }
    match obj.extract::<i128>() {
        Ok(n) if n < 0 => Err(PyValueError::new_err(format!(
            "{what} must not be negative, got {n}"
        ))),
        Ok(n) => {
            u64::try_from(n).map_err(|_| PyValueError::new_err(format!("{what} is too large: {n}")))
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be an int (bytes) or a size string such as \"4GiB\", not {}",
            obj.get_type().name()?
        ))),
    }
}

/// `oversub.parse_size`: the one size parser of every front (`Pool(capacity=...)`, the lab, `oversub.torch`, the
/// CLI's flags), so that a size string means the same bytes wherever it is typed. An int passes through (checked);
/// a refused string is a `ValueError` naming the accepted units.
#[pyfunction]
pub(crate) fn parse_size(size: &Bound<'_, PyAny>) -> PyResult<u64> {
    size_arg(size, "size")
}

/// A Rust option enum given by name (`engine="psync"`): the one conversion of every enum that derives
/// `clap::ValueEnum`, so Python accepts exactly the names the CLI does (case aside) and a refused name lists them.
/// PyO3 adds the argument's name to the error as a note.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Choice<T>(pub(crate) T);

impl<'a, 'py, T: clap::ValueEnum> FromPyObject<'a, 'py> for Choice<T> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let Ok(given) = obj.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "expected one of {} (a str), not {}",
                names::<T>().join(", "),
                obj.get_type().name()?
            )));
        };
        let given = given.to_str()?;
        T::from_str(given.trim(), true).map(Choice).map_err(|_| {
            PyValueError::new_err(format!(
                "{given:?} is not one of {}",
                names::<T>().join(", ")
            ))
        })
    }
}

/// The names `T` is given by, in declaration order.
pub(crate) fn names<T: clap::ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .filter(|p| !p.is_hide_set())
        .map(|p| p.get_name().to_string())
        .collect()
}

/// A serialisable Rust value as plain Python objects (dicts, lists, floats, ints, strings, None), through JSON.
pub(crate) fn to_python<'py, T: serde::Serialize>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let text = serde_json::to_string(value)
        .map_err(|e| PyValueError::new_err(format!("cannot convert the result: {e}")))?;
    let loads = LOADS.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("json")?.getattr("loads")?.unbind())
    })?;
    loads.bind(py).call1((text,))
}
