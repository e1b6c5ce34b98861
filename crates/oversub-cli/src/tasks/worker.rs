//! The built-in tasks' worker subcommands, run as `oversub tasks worker …` inside their cgroups (the body is
//! [`oversub_lab::tasks::worker`]).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use oversub_lab::tasks::worker::{file_io, FileIo};

use crate::error::BoxError;

/// The hidden worker subcommands.
#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Write a file of SIZE bytes, sync it, then read it PASSES times through the page cache; remove it at the end.
    FileIo(FileIoArgs),
}

#[derive(Debug, Args)]
pub struct FileIoArgs {
    /// The file to write (created or truncated; removed at the end).
    #[arg(long)]
    file: PathBuf,
    /// Its size.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::args::parse_positive_size_arg)]
    size: u64,
    /// How many times to read it back.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true, value_parser = crate::args::parse_count::<u32>)]
    passes: u32,
    /// Keep the file at the end.
    #[arg(long)]
    keep: bool,
    /// Compute per byte read: rounds of a hash over every chunk after it is read (0: pure I/O).
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<u32>
    )]
    hash_rounds: u32,
}

pub fn run(cmd: WorkerCommand) -> Result<(), BoxError> {
    match cmd {
        WorkerCommand::FileIo(args) => {
            let checksum = file_io(&FileIo {
                file: args.file,
                size: args.size,
                passes: args.passes,
                keep: args.keep,
                hash_rounds: args.hash_rounds,
            })?;
            println!(
                "file-io: wrote and read {} bytes {} times (checksum {checksum:016x})",
                args.size, args.passes
            );
            Ok(())
        }
    }
}
