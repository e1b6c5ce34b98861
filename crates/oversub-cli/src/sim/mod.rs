//! `oversub sim …`: trace-driven simulators.

use clap::Subcommand;

use crate::error::BoxError;

mod ray;
pub mod swap;
pub mod trace;
pub mod uvm;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Unified-memory page migration under oversubscription: Eager, LazyGrpHW, PinHost, DynaMap and the rest of
    /// the SYSTOR'21 study, plus an oracle, on generated workloads or recorded traces.
    Uvm(uvm::UvmArgs),
    /// Contention-aware swap space management for several tasks (Yang & Chen): Baseline, MaT and the proposed
    /// policy on the paper's scenarios, lengthened latency per task.
    Swap(swap::SwapArgs),
    /// Trace files: convert NVBit `mem_trace` output, write a generator's trace, describe a file.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
}

pub fn run(cmd: SimCommand) -> Result<(), BoxError> {
    match cmd {
        SimCommand::Uvm(args) => uvm::run(args),
        SimCommand::Swap(args) => swap::run(args),
        SimCommand::Trace(cmd) => trace::run(cmd),
    }
}
