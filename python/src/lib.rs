//! Python bindings of oversub: the `oversub._oversub` extension module behind the `oversub` package.
//!
//! It binds the pager (`Pool`, `AddressSpace`, `Buffer`, and `Handle`, a future woken by the completion),
//! zero-copy views of resident buffers (buffer protocol, DLPack, `__cuda_array_interface__`), and the schedule
//! runtime and simulators, whose results come back as plain dicts. Rust errors become exceptions of
//! `oversub.errors` with the Rust message. The pure-Python part (`python/oversub/`) adds the exception classes,
//! the typed records of `oversub.records`, pandas helpers and type stubs.

mod dlpack;
mod errors;
mod handle;
mod lab;
mod pager;
mod slots;
mod studies;
mod util;
mod views;

use pyo3::prelude::*;

/// The native part of the `oversub` package; import `oversub` instead.
#[pymodule]
fn _oversub(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(util::parse_size, m)?)?;
    pager::register(m)?;
    studies::register(m)?;
    slots::register(m)?;
    lab::register(m)?;
    Ok(())
}

/// `RUST_LOG` controls the Rust side's `tracing` logs (to stderr), as for the `oversub` command.
fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
}
