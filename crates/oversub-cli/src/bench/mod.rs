//! `oversub bench …`: each benchmark measures oversub and its baselines in the same run and reports ratios.

use clap::Subcommand;

pub mod interference;
pub mod paging;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Page-in/page-out throughput and async overheads against direct I/O, demand paging and the raw io_uring
    /// limit (the experiment of Secs. V-A and V-B, Figs. 12-13).
    Paging(paging::PagingArgs),
    /// How paging and copies slow DRAM-bound CPU tasks (Figs. 14-15), and how the SiΓ memory arbiter removes that
    /// interference for PREM tasks (alone / interfered / arbitrated, starvation curve).
    Interference(interference::InterferenceArgs),
}

pub fn run(cmd: BenchCommand) -> Result<(), BoxError> {
    match cmd {
        BenchCommand::Paging(args) => paging::run(args),
        BenchCommand::Interference(args) => interference::run(args),
    }
}
