//! The `oversub` command: front end of the oversub libraries (demo, plan, run, bench, sim, arbiter, tasks; probe
//! as its issue lands). Logs go to stderr through `tracing`, filtered by `RUST_LOG`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod arbiter;
mod args;
mod bench;
mod error;
mod probe;
mod sched;
mod sim;
mod tasks;

/// GPU memory oversubscription runtime: page whole accelerator buffers to host memory and NVMe storage.
#[derive(Debug, Parser)]
#[command(name = "oversub", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The paper's example (Figs. 5-8) run for real in all three paging modes, with an HTML report.
    Demo(sched::DemoArgs),
    /// Analyse a schedule before running it: feasibility per mode, paging per slot, minimum period, largest
    /// oversubscription.
    Plan(sched::PlanArgs),
    /// Execute a schedule with real timers, threads and paging (async, sync or demand mode).
    Run(sched::RunArgs),
    /// Benchmarks that compare oversub against baselines in the same run and report ratios.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The SiΓ memory arbiter: worst-case bounds from phase lengths, a shared server, phases from scripts, status.
    #[command(subcommand)]
    Arbiter(arbiter::ArbiterCommand),
    /// Trace-driven simulators: page-migration policies for unified memory under oversubscription.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Run several real commands under memory cgroup limits planned by contention-aware swap space management,
    /// and compare their response times against the same commands without the limits.
    Tasks(tasks::TasksArgs),
    /// Measure this machine's TLB-miss, page-fault, shootdown, copy and storage costs (and the GPU's, with CUDA)
    /// and write the platform profile that plan, run, sim uvm and sim swap read with --profile.
    Probe(probe::ProbeArgs),
}

fn main() -> ExitCode {
    // Like any Unix filter, end quietly when the reader of our output goes away (`oversub ... | head`) instead of
    // panicking on the failed print.
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Arbiter(cmd) => arbiter::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Demo(args) => sched::demo_cmd(args),
        Command::Plan(args) => sched::plan_cmd(args),
        Command::Run(args) => sched::run_cmd(args),
        Command::Sim(cmd) => sim::run(cmd),
        Command::Tasks(args) => tasks::run(args),
        Command::Probe(args) => probe::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            for line in error::report_lines(&*e) {
                eprintln!("{line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// A progress bar for long work, labelled `name` (`{pos}/{len}` followed by `unit`), hidden when `hidden` or when
/// `OVERSUB_NO_PROGRESS` is set (tests and child processes).
fn progress_bar(len: u64, name: &str, unit: &str, hidden: bool) -> indicatif::ProgressBar {
    let template =
        format!("{{spinner}} {name} [{{bar:30}}] {{pos}}/{{len}}{unit} {{msg}} ({{elapsed}})");
    let bar = indicatif::ProgressBar::new(len).with_style(
        indicatif::ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if hidden || std::env::var_os("OVERSUB_NO_PROGRESS").is_some() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,oversub_io=info,oversub_core=info,oversub=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
