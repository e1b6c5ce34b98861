//! `oversub bench …`: each benchmark measures oversub and its baselines in the same run and reports ratios.

use clap::Subcommand;

pub mod interference;
pub mod paging;
mod paging_cuda;
pub mod tenants;

use crate::error::BoxError;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Page-in/page-out throughput and async overheads against direct I/O, demand paging and the raw io_uring
    /// limit (the experiment of Secs. V-A and V-B, Figs. 12-13); with --device cuda, against the bus, the store,
    /// naive read-and-copy, unified memory and keep-the-address paging on a GPU.
    Paging(paging::PagingArgs),
    /// How paging and copies slow DRAM-bound CPU tasks (Figs. 14-15), and how the SiΓ memory arbiter removes that
    /// interference for PREM tasks (alone / interfered / arbitrated, starvation curve).
    Interference(interference::InterferenceArgs),
    /// Several tenants oversubscribing one pool: alone, together under LRU swapping, and together under the
    /// contention-aware plan (priorities, victims, direct store access); slowdown per tenant.
    Tenants(tenants::TenantsArgs),
    /// The PREM task of `bench interference`, run in a process of its own (spoken to on stdin/stdout).
    #[command(hide = true)]
    PremTask(oversub_lab::interference::PremTaskOptions),
}

pub fn run(cmd: BenchCommand) -> Result<(), BoxError> {
    match cmd {
        BenchCommand::Paging(args) => paging::run(args),
        BenchCommand::Interference(args) => interference::run(args),
        BenchCommand::Tenants(args) => tenants::run(args),
        BenchCommand::PremTask(args) => interference::serve_prem_task(args),
    }
}
