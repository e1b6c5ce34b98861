//! The lab's experiments from Python: `oversub.lab.paging(...)` (`oversub bench paging`), `oversub.probe(...)`
//! and `oversub.write_profile(...)` (`oversub probe`), each the same `oversub_lab` function the CLI calls, run
//! without the GIL, its report returned as plain dicts.

use std::path::PathBuf;

use oversub_accel::PageRelease;
use oversub_io::EngineChoice;
use oversub_lab::harness::cache::CacheDropMode;
use oversub_lab::paging::{self, PagingDevice, PagingOptions};
use oversub_lab::profile::{self as lab_profile, ProbeName, ProbePlan, ALL_PROBES};
use oversub_lab::LabError;
use oversub_profile::Profile;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{Raised, ToRaised};
use crate::util::{size_arg, to_python};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lab_paging, m)?)?;
    m.add_function(wrap_pyfunction!(lab_probe, m)?)?;
    m.add_function(wrap_pyfunction!(lab_write_profile, m)?)?;
    Ok(())
}

/// A lab error as the exception to raise: the lower layers' own classes, a refused option as `ConfigError`
/// (a `ValueError`), anything else as `RunError`.
fn raised(e: LabError) -> Raised {
    match e {
        LabError::Io(e) => e.to_raised(),
        LabError::Accel(e) => e.to_raised(),
        LabError::Pager(e) => e.to_raised(),
        LabError::Profile(e) => e.to_raised(),
        LabError::InvalidOption(why) => Raised::new("ConfigError", why),
        other => Raised::new("RunError", other.to_string()),
    }
}

fn choice<T: Copy>(what: &str, given: &str, options: &[(&str, T)]) -> PyResult<T> {
    options
        .iter()
        .find(|(name, _)| *name == given)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
            PyValueError::new_err(format!(
                "{what} must be one of {}, not {given:?}",
                names.join(", ")
            ))
        })
}

/// `oversub bench paging` (see `oversub bench paging --help` for each option); the report as a dict, the JSON
/// `--json` writes.
#[pyfunction]
#[pyo3(signature = (
    size, samples, store, engine, device, *, max_io = None, queue_depth = 32, cache_drop = "auto",
    release = "recycle", checksums = true, stripe_bytes = None, io_auto = false, io_profile = None,
    force_store = false, gpu = 0, staging_chunk = None, staging_chunks = 8, pageable_staging = false,
    skip_unified = false, cufile = true
))]
#[allow(clippy::too_many_arguments)]
fn lab_paging<'py>(
    py: Python<'py>,
    size: &Bound<'py, PyAny>,
    samples: usize,
    store: Vec<PathBuf>,
    engine: &str,
    device: &str,
    max_io: Option<&Bound<'py, PyAny>>,
    queue_depth: usize,
    cache_drop: &str,
    release: &str,
    checksums: bool,
    stripe_bytes: Option<&Bound<'py, PyAny>>,
    io_auto: bool,
    io_profile: Option<PathBuf>,
    force_store: bool,
    gpu: i32,
    staging_chunk: Option<&Bound<'py, PyAny>>,
    staging_chunks: usize,
    pageable_staging: bool,
    skip_unified: bool,
    cufile: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let defaults = PagingOptions::default();
    let opts = PagingOptions {
        size: size_arg(size, "size")?,
        samples,
        store,
        stripe_bytes: stripe_bytes
            .map(|s| size_arg(s, "stripe_bytes"))
            .transpose()?,
        device: choice(
            "device",
            device,
            &[("host", PagingDevice::Host), ("cuda", PagingDevice::Cuda)],
        )?,
        engine: choice(
            "engine",
            engine,
            &[
                ("auto", EngineChoice::Auto),
                ("uring", EngineChoice::Uring),
                ("psync", EngineChoice::Psync),
            ],
        )?,
        max_io: max_io
            .map(|s| size_arg(s, "max_io"))
            .transpose()?
            .unwrap_or(defaults.max_io),
        queue_depth,
        io_profile,
        io_auto,
        force_store,
        release: choice(
            "release",
            release,
            &[
                ("recycle", PageRelease::Recycle),
                ("immediate", PageRelease::Immediate),
                ("lazy", PageRelease::Lazy),
            ],
        )?,
        no_checksums: !checksums,
        cache_drop: choice(
            "cache_drop",
            cache_drop,
            &[
                ("auto", CacheDropMode::Auto),
                ("drop-caches", CacheDropMode::DropCaches),
                ("fadvise", CacheDropMode::Fadvise),
            ],
        )?,
        gpu,
        staging_chunk: staging_chunk
            .map(|s| size_arg(s, "staging_chunk"))
            .transpose()?
            .unwrap_or(defaults.staging_chunk),
        staging_chunks,
        pageable_staging,
        skip_unified,
        no_cufile: !cufile,
    };
    let report = py
        .detach(|| paging::run(&opts, &paging::no_events))
        .map_err(raised)?;
    to_python(py, &report)
}

/// `oversub probe`: the probes (`only`, less `skip`; all by default) with the quick plan or the full one, the
/// store's file in `dir`; the results as a dict with the platform profile made of them under `"profile"` and
/// what could not go in under `"profile_notes"`.
#[pyfunction]
#[pyo3(signature = (quick = true, only = None, skip = None, dir = None))]
fn lab_probe<'py>(
    py: Python<'py>,
    quick: bool,
    only: Option<Vec<String>>,
    skip: Option<Vec<String>>,
    dir: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let names = [
        ("tlb", ProbeName::Tlb),
        ("faults", ProbeName::Faults),
        ("shootdown", ProbeName::Shootdown),
        ("btree", ProbeName::Btree),
        ("copy", ProbeName::Copy),
        ("storage", ProbeName::Storage),
        ("gpu", ProbeName::Gpu),
    ];
    let parse = |list: Option<Vec<String>>, what: &str| -> PyResult<Vec<ProbeName>> {
        list.unwrap_or_default()
            .iter()
            .map(|n| choice(what, n, &names))
            .collect()
    };
    let (only, skip) = (parse(only, "only")?, parse(skip, "skip")?);
    let selected: Vec<ProbeName> = ALL_PROBES
        .iter()
        .copied()
        .filter(|p| only.is_empty() || only.contains(p))
        .filter(|p| !skip.contains(p))
        .collect();
    if selected.is_empty() {
        return Err(PyValueError::new_err("only and skip leave no probe to run"));
    }
    let plan = ProbePlan::new(quick, dir.unwrap_or_else(std::env::temp_dir));
    let (results, profile, notes) = py
        .detach(|| {
            let sys = oversub_probe::system::SystemInfo::detect();
            let results = lab_profile::measure(&plan, &selected, &sys, &|_: &str| {})?;
            let (profile, notes) = lab_profile::to_profile(&results, &plan);
            Ok::<_, LabError>((results, profile, notes))
        })
        .map_err(raised)?;
    let out = to_python(py, &results)?;
    out.set_item("profile", to_python(py, &profile)?)?;
    out.set_item("profile_notes", notes)?;
    Ok(out)
}

/// Writes a platform profile (a dict in the profile's shape, as `oversub.probe()["profile"]`) to `path` as TOML,
/// checked first as `oversub probe --out` checks it.
#[pyfunction]
fn lab_write_profile(profile_json: &str, path: PathBuf) -> PyResult<()> {
    let profile: Profile = serde_json::from_str(profile_json).map_err(|e| {
        PyValueError::new_err(format!("not a platform profile (docs/profile.md): {e}"))
    })?;
    profile.save(&path).map_err(|e| PyErr::from(e.to_raised()))
}
