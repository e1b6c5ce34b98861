//! The schedule runtime and the simulators from Python (results as plain dicts).

use pyo3::prelude::*;

pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
