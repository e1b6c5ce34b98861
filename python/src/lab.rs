//! The lab's experiments from Python: `oversub.lab.paging(...)` (`oversub bench paging`), `oversub.probe(...)`
//! and `oversub.write_profile(...)` (`oversub probe`), each the same `oversub_lab` function the CLI calls, run
//! without the GIL, its report returned as plain dicts.

use std::path::PathBuf;

use clap::Args;
use oversub_accel::PageRelease;
use oversub_io::EngineChoice;
use oversub_lab::harness::cache::CacheDropMode;
use oversub_lab::interference::{self, InterferenceOptions, PremTaskCommand, PremTaskOptions};
use oversub_lab::paging::{self, PagingDevice, PagingOptions};
use oversub_lab::profile::{self as lab_profile, ProbeName, ProbeOptions};
use oversub_lab::tasks::{self, worker::FileIo, TasksOptions, WorkerCommand};
use oversub_lab::tenants::{self, TenantsOptions};
use oversub_lab::LabError;
use oversub_profile::Profile;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::{Raised, ToRaised};
use crate::util::{size_arg, to_python, Choice};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lab_paging, m)?)?;
    m.add_function(wrap_pyfunction!(lab_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(lab_run, m)?)?;
    m.add_function(wrap_pyfunction!(lab_child, m)?)?;
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

/// `oversub bench paging` (see `oversub bench paging --help` for each option); the report as a dict, the JSON
/// `--json` writes. An option left `None` takes the lab's default, the CLI's ([`lab_defaults`]).
#[pyfunction]
#[pyo3(signature = (
    size = None, samples = None, store = Vec::new(), engine = None, device = None, *, max_io = None,
    queue_depth = None, cache_drop = None, release = None, checksums = None, stripe_bytes = None, io_auto = None,
    io_profile = None, force_store = None, gpu = None, staging_chunk = None, staging_chunks = None,
    pageable_staging = None, skip_unified = None, cufile = None
))]
#[allow(clippy::too_many_arguments)]
fn lab_paging<'py>(
    py: Python<'py>,
    size: Option<&Bound<'py, PyAny>>,
    samples: Option<usize>,
    store: Vec<PathBuf>,
    engine: Option<Choice<EngineChoice>>,
    device: Option<Choice<PagingDevice>>,
    max_io: Option<&Bound<'py, PyAny>>,
    queue_depth: Option<usize>,
    cache_drop: Option<Choice<CacheDropMode>>,
    release: Option<Choice<PageRelease>>,
    checksums: Option<bool>,
    stripe_bytes: Option<&Bound<'py, PyAny>>,
    io_auto: Option<bool>,
    io_profile: Option<PathBuf>,
    force_store: Option<bool>,
    gpu: Option<i32>,
    staging_chunk: Option<&Bound<'py, PyAny>>,
    staging_chunks: Option<usize>,
    pageable_staging: Option<bool>,
    skip_unified: Option<bool>,
    cufile: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let d = PagingOptions::default();
    let size_or = |obj: Option<&Bound<'py, PyAny>>, what: &str, default: u64| {
        obj.map_or(Ok(default), |s| size_arg(s, what))
    };
    let opts = PagingOptions {
        size: size_or(size, "size", d.size)?,
        samples: samples.unwrap_or(d.samples),
        store,
        stripe_bytes: stripe_bytes
            .map(|s| size_arg(s, "stripe_bytes"))
            .transpose()?,
        device: device.map_or(d.device, |c| c.0),
        engine: engine.map_or(d.engine, |c| c.0),
        max_io: size_or(max_io, "max_io", d.max_io)?,
        queue_depth: queue_depth.unwrap_or(d.queue_depth),
        io_profile,
        io_auto: io_auto.unwrap_or(d.io_auto),
        force_store: force_store.unwrap_or(d.force_store),
        release: release.map_or(d.release, |c| c.0),
        no_checksums: checksums.map_or(d.no_checksums, |c| !c),
        cache_drop: cache_drop.map_or(d.cache_drop, |c| c.0),
        gpu: gpu.unwrap_or(d.gpu),
        staging_chunk: size_or(staging_chunk, "staging_chunk", d.staging_chunk)?,
        staging_chunks: staging_chunks.unwrap_or(d.staging_chunks),
        pageable_staging: pageable_staging.unwrap_or(d.pageable_staging),
        skip_unified: skip_unified.unwrap_or(d.skip_unified),
        no_cufile: cufile.map_or(d.no_cufile, |c| !c),
    };
    let report = py
        .detach(|| paging::run(&opts, &paging::no_events))
        .map_err(raised)?;
    to_python(py, &report)
}

/// The experiments whose options Python passes as keyword arguments read as their flags.
const EXPERIMENTS: &str = "paging, tenants, interference, tasks";

/// `experiment`'s flags as clap declares them: the lab's options struct, the one declaration of each option.
fn command_of(experiment: &str) -> PyResult<clap::Command> {
    let name = match experiment {
        "paging" => "paging",
        "tenants" => "tenants",
        "interference" => "interference",
        "tasks" => "tasks",
        other => {
            return Err(PyValueError::new_err(format!(
                "{other:?} is not one of {EXPERIMENTS}"
            )))
        }
    };
    let cmd = clap::Command::new(name).no_binary_name(true);
    Ok(match name {
        "paging" => PagingOptions::augment_args(cmd),
        "tenants" => TenantsOptions::augment_args(cmd),
        "interference" => InterferenceOptions::augment_args(cmd),
        _ => TasksOptions::augment_args(cmd),
    })
}

/// Keyword `options` (flag names in snake case; `None` left out) as the argument list of `cmd`: a flag for each
/// `True` switch, `--name VALUE` for each value or item of a list (`str()` of it: sizes such as `"64MiB"`, numbers,
/// paths, enum names). clap then parses them as it parses the command line, with the same checks and defaults.
fn argv_of(cmd: &clap::Command, options: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let mut argv = Vec::new();
    let Some(options) = options else {
        return Ok(argv);
    };
    for (key, value) in options.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id().as_str() == key && a.get_long().is_some());
        let Some((arg, long)) = arg.and_then(|a| a.get_long().map(|l| (a, l))) else {
            let known: Vec<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
            return Err(PyTypeError::new_err(format!(
                "{key:?} is not an option of {}: accepted are {}",
                cmd.get_name(),
                known.join(", ")
            )));
        };
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            if value.is_truthy()? {
                argv.push(format!("--{long}"));
            }
            continue;
        }
        let items: Vec<Bound<'_, PyAny>> =
            if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
                value.try_iter()?.collect::<PyResult<_>>()?
            } else {
                vec![value]
            };
        for item in items {
            argv.push(format!("--{long}"));
            argv.push(item.str()?.to_str()?.to_string());
        }
    }
    Ok(argv)
}

/// `experiment`'s options from keyword `options`, parsed by clap as the command's flags are.
fn options_of<T: clap::FromArgMatches>(
    experiment: &str,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<T> {
    let cmd = command_of(experiment)?;
    let argv = argv_of(&cmd, options)?;
    let parsed = cmd
        .try_get_matches_from(argv)
        .and_then(|m| T::from_arg_matches(&m));
    parsed.map_err(|e| {
        // clap's message, less its usage lines and its hint at --help (there is no --help here).
        let text = e.render().to_string();
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        PyValueError::new_err(first.to_string())
    })
}

/// The defaults of `experiment`'s options as their flags declare them (the text a flag's `[default: ...]` shows;
/// a list for a list, `None` where there is none, `False` for a switch): what an option left out means.
#[pyfunction]
fn lab_defaults<'py>(py: Python<'py>, experiment: &str) -> PyResult<Bound<'py, PyDict>> {
    let cmd = command_of(experiment)?;
    let out = PyDict::new(py);
    for arg in cmd.get_arguments().filter(|a| a.get_long().is_some()) {
        let id = arg.get_id().as_str();
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            out.set_item(id, false)?;
            continue;
        }
        let values: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let many = arg.get_value_delimiter().is_some()
            || matches!(arg.get_action(), clap::ArgAction::Append);
        match (values.as_slice(), many) {
            (_, true) => out.set_item(
                id,
                values
                    .iter()
                    .flat_map(|v| v.split(',').map(str::to_string))
                    .collect::<Vec<_>>(),
            )?,
            ([], false) => out.set_item(id, py.None())?,
            ([one], false) => out.set_item(id, one)?,
            (_, false) => out.set_item(id, values)?,
        }
    }
    Ok(out)
}

/// `oversub bench tenants`, `oversub bench interference` or `oversub tasks`: keyword `options` named as the
/// command's flags (`lab_defaults` lists them), the report as a dict (the JSON `--json` writes). `child` is the
/// command that runs this package's child processes (`python -m oversub.lab.X`): the PREM task of interference,
/// the built-in tasks' worker.
#[pyfunction]
#[pyo3(signature = (experiment, options = None, child = None))]
fn lab_run<'py>(
    py: Python<'py>,
    experiment: &str,
    options: Option<&Bound<'py, PyDict>>,
    child: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (program, args) = match child.as_deref() {
        Some([program, args @ ..]) => (
            Some(PathBuf::from(program)),
            args.iter()
                .map(Into::into)
                .collect::<Vec<std::ffi::OsString>>(),
        ),
        _ => (None, Vec::new()),
    };
    let quiet = &|_: &str| {};
    match experiment {
        "tenants" => {
            let opts: TenantsOptions = options_of(experiment, options)?;
            let report = py.detach(|| tenants::run(&opts, quiet)).map_err(raised)?;
            to_python(py, &report)
        }
        "interference" => {
            let mut opts: InterferenceOptions = options_of(experiment, options)?;
            opts.prem_task = program.map(|program| PremTaskCommand { program, args });
            opts.check().map_err(raised)?;
            let report = py
                .detach(|| interference::run(&opts, quiet))
                .map_err(raised)?;
            to_python(py, &report)
        }
        "tasks" => {
            let mut opts: TasksOptions = options_of(experiment, options)?;
            opts.worker = program.map(|program| WorkerCommand { program, args });
            opts.check().map_err(raised)?;
            let report = py.detach(|| tasks::run(&opts, quiet)).map_err(raised)?;
            to_python(py, &report)
        }
        other => Err(PyValueError::new_err(format!(
            "{other:?} is not one of tenants, interference, tasks (paging is lab_paging)"
        ))),
    }
}

/// The child processes the lab starts, as `python -m oversub.lab.interference prem-task ...` and `python -m
/// oversub.lab.tasks worker file-io ...` run them (the CLI's hidden `bench prem-task` and `tasks worker`).
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true)]
enum Child {
    /// The PREM task of interference, spoken to on stdin and stdout.
    PremTask(PremTaskOptions),
    /// A built-in task's body.
    #[command(subcommand)]
    Worker(Worker),
}

#[derive(Debug, clap::Subcommand)]
enum Worker {
    FileIo(FileIo),
}

/// Runs one of the lab's child processes' bodies from its argument list; the file-io worker's checksum is
/// returned (for the caller to print), the PREM task returns `None` when its parent closes stdin.
#[pyfunction]
fn lab_child(py: Python<'_>, argv: Vec<String>) -> PyResult<Option<u64>> {
    let child = <Child as clap::Parser>::try_parse_from(argv)
        .map_err(|e| PyValueError::new_err(e.render().to_string()))?;
    py.detach(|| match child {
        Child::PremTask(opts) => {
            interference::serve_prem_task(&opts, std::io::stdin().lock(), std::io::stdout())
                .map(|()| None)
        }
        Child::Worker(Worker::FileIo(f)) => tasks::worker::file_io(&f).map(Some),
    })
    .map_err(|e| PyErr::from(raised(e)))
}

/// `oversub probe`: the probes (`only`, less `skip`; all by default) with the quick plan or the full one, the
/// store's file in `dir`; the results as a dict with the platform profile made of them under `"profile"` and
/// what could not go in under `"profile_notes"`.
#[pyfunction]
#[pyo3(signature = (quick = true, only = None, skip = None, dir = None))]
fn lab_probe<'py>(
    py: Python<'py>,
    quick: bool,
    only: Option<Vec<Choice<ProbeName>>>,
    skip: Option<Vec<Choice<ProbeName>>>,
    dir: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let names = |list: Option<Vec<Choice<ProbeName>>>| -> Vec<ProbeName> {
        list.unwrap_or_default().into_iter().map(|c| c.0).collect()
    };
    // The command's options, its defaults for the rest.
    let opts = ProbeOptions {
        quick,
        only: names(only),
        skip: names(skip),
        dir,
        ..ProbeOptions::default()
    };
    let selected = opts.selected().map_err(raised)?;
    let plan = opts.plan();
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
