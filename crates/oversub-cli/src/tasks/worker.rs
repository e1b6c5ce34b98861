//! The built-in tasks' worker subcommands, run as `oversub tasks worker …` inside their cgroups (the body is
//! [`oversub_lab::tasks::worker`]).

use clap::Subcommand;
use oversub_lab::tasks::worker::{file_io, FileIo};

use crate::error::BoxError;

/// The hidden worker subcommands.
#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Write a file of SIZE bytes, sync it, then read it PASSES times through the page cache; remove it at the end.
    FileIo(FileIo),
}

pub fn run(cmd: WorkerCommand) -> Result<(), BoxError> {
    match cmd {
        WorkerCommand::FileIo(args) => {
            let checksum = file_io(&args)?;
            println!(
                "file-io: wrote and read {} bytes {} times (checksum {checksum:016x})",
                args.size, args.passes
            );
            Ok(())
        }
    }
}
