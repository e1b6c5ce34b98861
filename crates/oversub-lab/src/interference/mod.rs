//! The interference experiments behind `oversub bench interference`: how much paging and copies slow CPU tasks
//! that thrash DRAM (the paper's Sec. V-C, Figs. 14-15, [`thrash`]), and how the SiΓ arbiter removes that
//! interference for PREM tasks (SiΓ Figs. 5-8, [`prem`]). [`run`] takes [`InterferenceOptions`] and returns an
//! [`InterferenceReport`]; the PREM task's own process calls [`prem::child::serve`].

pub mod prem;
pub mod thrash;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::harness::{cpu, Steps};
use crate::{LabError, Progress};
pub use prem::child::{serve as serve_prem_task, PremTaskCommand, PremTaskOptions};
pub use prem::{InterfererKind, Placement, PremOptions, PremResult, StarvationRow};
pub use thrash::{ThrashKind, ThrashOptions, ThrashRow};

/// Which experiments to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Part {
    /// Both experiments.
    All,
    /// Paging vs DRAM-thrashing tasks (Figs. 14-15).
    Thrashing,
    /// A PREM task vs transfers, alone / interfered / arbitrated, and the starvation curve (SiΓ Figs. 5-8).
    Prem,
}

/// What to measure; `None` fields take their defaults (which depend on `quick`). The fields are the flags of
/// `oversub bench interference` (`--json` and `--plot` aside), which flattens this struct; [`Default`] gives the
/// CLI's defaults (a test in the CLI checks they agree).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct InterferenceOptions {
    /// Short runs (a few minutes in all): 1 s measurement windows, 150 PREM iterations per condition.
    #[cfg_attr(feature = "clap", arg(long))]
    pub quick: bool,
    /// Which experiment to run.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Part::All))]
    pub part: Part,
    /// Directory for the swap-store files of the paging loops (default: the system's temporary directory); several,
    /// comma-separated, stripe each loop's store over them.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_delimiter = ',', value_name = "DIR[,DIR...]")
    )]
    pub store: Vec<PathBuf>,
    /// Length of each thrashing measurement window (default 5s, 1s with --quick).
    #[cfg_attr(feature = "clap", arg(long, value_parser = crate::args::parse_duration))]
    pub measure: Option<Duration>,
    /// Size of the buffers the paging loops page out and in.
    #[cfg_attr(feature = "clap", arg(long, default_value = "64MiB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub paging_buffer: u64,
    /// Last-level cache size (default: read from sysfs).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub llc: Option<u64>,
    /// PREM iterations per condition (default: the paper's 1350; 150 with --quick).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub iterations: Option<usize>,
    /// Where the PREM task runs: in a process of its own (the paper's setting) and/or as a thread of the
    /// benchmark's process, sharing the pager's address space.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "separate,one-process"
        )
    )]
    pub placement: Vec<Placement>,
    /// The interferers run beside the PREM task.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "paging,paging-dontneed,copy,copy-nt"
        )
    )]
    pub interferers: Vec<InterfererKind>,
    /// Split each PREM condition into this many interleaved rounds (alone, interfered, arbitrated, alone, ...), so
    /// that slow drifts of the machine fall on every condition alike (default 10, 3 with --quick).
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<usize>))]
    pub rounds: Option<usize>,
    /// Write a Chrome trace-event timeline of the PREM runs (phases, gate decisions, transfer-side work, outlier
    /// causes) to this file; open it in Perfetto (ui.perfetto.dev).
    #[cfg_attr(feature = "clap", arg(long))]
    pub trace: Option<PathBuf>,
    /// Pixel data the PREM task walks per pass (the paper's 256 MB).
    #[cfg_attr(feature = "clap", arg(long, default_value = "256MB", allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub data: u64,
    /// The command that runs the PREM task in a process of its own (needed by the PREM part; the CLI sets itself).
    #[cfg_attr(feature = "clap", arg(skip))]
    pub prem_task: Option<PremTaskCommand>,
}

impl Default for InterferenceOptions {
    fn default() -> InterferenceOptions {
        InterferenceOptions {
            quick: false,
            part: Part::All,
            store: Vec::new(),
            measure: None,
            paging_buffer: 64 << 20,
            llc: None,
            iterations: None,
            placement: vec![Placement::Separate, Placement::OneProcess],
            interferers: vec![
                InterfererKind::Paging,
                InterfererKind::PagingDontneed,
                InterfererKind::Copy,
                InterfererKind::CopyNt,
            ],
            rounds: None,
            trace: None,
            data: 256_000_000,
            prem_task: None,
        }
    }
}

/// The machine the experiments ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub llc_bytes: u64,
    pub virtual_machine: bool,
}

/// Everything [`run`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct InterferenceReport {
    pub machine: Machine,
    pub thrashing: Vec<ThrashRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prem: Option<PremResult>,
    pub starvation: Vec<StarvationRow>,
}

impl InterferenceOptions {
    /// Refuses options out of range and a machine with fewer than two CPUs, before anything runs (so a front end
    /// can check before it creates its outputs).
    pub fn check(&self) -> Result<(), LabError> {
        let invalid = |m: &str| Err(LabError::InvalidOption(m.to_string()));
        if cpu::online_cpus() < 2 {
            return invalid(
                "the interference benchmarks need at least two CPUs (one for the tasks, one for paging)",
            );
        }
        if self.paging_buffer < 4096 {
            return invalid("--paging-buffer must be at least 4KiB");
        }
        if self.data < (1 << 20) {
            return invalid("--data must be at least 1MiB");
        }
        if self.iterations == Some(0) {
            return invalid("--iterations must be at least 1");
        }
        if self.placement.is_empty() || self.interferers.is_empty() {
            return invalid("--placement and --interferers need at least one value each");
        }
        if let Some(d) = self.store_dirs().iter().find(|d| !d.is_dir()) {
            return Err(LabError::InvalidOption(format!(
                "--store {} is not a directory",
                d.display()
            )));
        }
        Ok(())
    }

    fn store_dirs(&self) -> Vec<PathBuf> {
        if self.store.is_empty() {
            vec![std::env::temp_dir()]
        } else {
            self.store.clone()
        }
    }

    fn runs_thrashing(&self) -> bool {
        matches!(self.part, Part::All | Part::Thrashing)
    }

    fn runs_prem(&self) -> bool {
        matches!(self.part, Part::All | Part::Prem)
    }

    fn thrash_options(&self, cpus: usize, llc: u64, store_dirs: Vec<PathBuf>) -> ThrashOptions {
        ThrashOptions {
            kinds: vec![ThrashKind::Sequential, ThrashKind::RandomDependent],
            max_tasks: cpus.saturating_sub(1),
            working_set_bytes: 4 * llc,
            measure: self
                .measure
                .unwrap_or(Duration::from_secs(if self.quick { 1 } else { 5 })),
            paging_buffer_bytes: self.paging_buffer,
            store_dirs,
        }
    }

    fn prem_options(
        &self,
        cpus: usize,
        llc: u64,
        store_dirs: Vec<PathBuf>,
        task_command: PremTaskCommand,
    ) -> PremOptions {
        let gc_ratios: Vec<f64> = if self.quick {
            vec![0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.5, 2.0]
        } else {
            (1..=20).map(|i| i as f64 / 10.0).collect()
        };
        PremOptions {
            llc_bytes: llc,
            data_bytes: self.data,
            iterations: self
                .iterations
                .unwrap_or(if self.quick { 150 } else { 1350 }),
            placements: dedup(&self.placement),
            interferers: dedup(&self.interferers),
            trace: self.trace.clone(),
            rounds: self
                .rounds
                .unwrap_or(if self.quick { 3 } else { 10 })
                .max(1),
            paging_buffer_bytes: self.paging_buffer,
            copy_bytes: if self.quick { 32 << 20 } else { 100_000_000 },
            store_dirs,
            task_cpu: 0,
            interferer_cpu: cpus.saturating_sub(1),
            gc_ratios,
            starvation_iterations: if self.quick { 4 } else { 12 },
            task_command,
        }
    }
}

/// The number of progress steps [`run`] reports with these options (measurement windows, PREM iterations and
/// stages), for sizing a progress bar.
pub fn steps(opts: &InterferenceOptions) -> u64 {
    let cpus = cpu::online_cpus();
    let placeholder = PremTaskCommand {
        program: PathBuf::new(),
        args: Vec::new(),
    };
    let thrash = if opts.runs_thrashing() {
        thrash::windows(&opts.thrash_options(cpus, 0, Vec::new()))
    } else {
        0
    };
    let prem = if opts.runs_prem() {
        prem::steps(&opts.prem_options(cpus, 0, Vec::new(), placeholder))
    } else {
        0
    };
    thrash + prem
}

/// Runs the experiments `opts` selects, reporting each finished step to `progress` with the stage's name.
pub fn run(
    opts: &InterferenceOptions,
    progress: Progress<'_>,
) -> Result<InterferenceReport, LabError> {
    opts.check()?;
    let cpus = cpu::online_cpus();
    let llc = match opts.llc.or_else(cpu::last_level_cache_bytes) {
        Some(l) if l > 0 => l,
        _ => {
            tracing::warn!("last-level cache size unknown; assuming 8 MiB (give --llc)");
            8 << 20
        }
    };
    let store_dirs = opts.store_dirs();
    let virtual_machine = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.contains(" hypervisor"))
    });

    let steps = Steps::new(progress);
    let thrashing = if opts.runs_thrashing() {
        steps.set_message("DRAM thrashers vs paging");
        thrash::run(&opts.thrash_options(cpus, llc, store_dirs.clone()), &steps)?
    } else {
        Vec::new()
    };
    let (prem, starvation) = if opts.runs_prem() {
        let task_command = opts.prem_task.clone().ok_or_else(|| {
            LabError::InvalidOption(
                "the PREM part needs the command that runs the PREM task in a process of its own"
                    .into(),
            )
        })?;
        steps.set_message("PREM task vs transfers");
        let (p, s) = prem::run(
            &opts.prem_options(cpus, llc, store_dirs, task_command),
            &steps,
        )?;
        (Some(p), s)
    } else {
        (None, Vec::new())
    };
    Ok(InterferenceReport {
        machine: Machine {
            cpus,
            llc_bytes: llc,
            virtual_machine,
        },
        thrashing,
        prem,
        starvation,
    })
}

fn dedup<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}
