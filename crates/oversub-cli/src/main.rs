//! The `oversub` command: front end of the oversub libraries (benchmarks now; demo, run, plan, sim and probe as
//! their issues land). Logs go to stderr through `tracing`, filtered by `RUST_LOG`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod mem;

/// GPU memory oversubscription runtime: page whole accelerator buffers to host memory and NVMe storage.
#[derive(Debug, Parser)]
#[command(name = "oversub", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks that compare oversub against baselines in the same run and report ratios.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
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
