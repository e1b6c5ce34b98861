//! `oversub sim trace …`: make and inspect trace files.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};
use oversub_report::{format_bytes, format_seconds, text_table};
use oversub_sim::uvm::trace::{self, TraceWriter};
use oversub_sim::uvm::workload::{self, WorkloadKind};
use oversub_sim::uvm::PAGE_BYTES;

use super::uvm::WorkloadOpts;
use crate::error::BoxError;

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Convert a trace (NVBit `mem_trace` text, or oversub binary) to oversub's binary format.
    Convert {
        /// Input file.
        input: PathBuf,
        /// Output file (binary).
        output: PathBuf,
    },
    /// Write a workload generator's trace to a binary file.
    Gen(GenArgs),
    /// Describe a trace file: accesses, footprint, reads and writes, warps.
    Info {
        /// The file (binary or NVBit text).
        input: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Workload to generate.
    #[arg(long)]
    workload: String,
    #[command(flatten)]
    opts: WorkloadOpts,
    /// Output file.
    #[arg(long, short)]
    out: PathBuf,
}

pub fn run(cmd: TraceCommand) -> Result<(), BoxError> {
    match cmd {
        TraceCommand::Convert { input, output } => {
            let started = Instant::now();
            let t = trace::load(&input)?;
            trace::write_trace(&output, &t)?;
            let bytes = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
            println!(
                "{} accesses from {} -> {} ({}, {:.2} bytes/access) in {}",
                t.accesses.len(),
                input.display(),
                output.display(),
                format_bytes(bytes),
                bytes as f64 / t.accesses.len().max(1) as f64,
                format_seconds(started.elapsed().as_secs_f64())
            );
            Ok(())
        }
        TraceCommand::Gen(args) => {
            let kind = WorkloadKind::from_name(&args.workload)?;
            let params = args.opts.params()?;
            let file = std::fs::File::create(&args.out)
                .map_err(|e| format!("{}: {e}", args.out.display()))?;
            let mut writer =
                TraceWriter::with_path(std::io::BufWriter::new(file), kind.name(), &args.out)?;
            let mut failed = None;
            let mut count = 0u64;
            workload::generate_into(kind, &params, &mut |a| {
                if failed.is_none() {
                    match writer.push(a) {
                        Ok(()) => count += 1,
                        Err(e) => failed = Some(e),
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e.into());
            }
            writer.finish()?;
            let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
            println!(
                "{}: {count} accesses -> {} ({})",
                kind.name(),
                args.out.display(),
                format_bytes(bytes)
            );
            Ok(())
        }
        TraceCommand::Info { input, json } => {
            let t = trace::load(&input)?;
            let writes = t.accesses.iter().filter(|a| a.write).count();
            let mut warps: Vec<u32> = t.accesses.iter().map(|a| a.warp).collect();
            warps.sort_unstable();
            warps.dedup();
            let pages = t.footprint_pages();
            let lo = t.accesses.iter().map(|a| a.addr).min().unwrap_or(0);
            let hi = t.accesses.iter().map(|a| a.addr).max().unwrap_or(0);
            if json {
                let v = serde_json::json!({
                    "name": t.name, "accesses": t.accesses.len(), "writes": writes,
                    "warps": warps.len(), "footprint_pages": pages, "footprint_bytes": pages * PAGE_BYTES,
                    "lowest_address": lo, "highest_address": hi,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows = vec![
                    vec!["name".into(), t.name.clone()],
                    vec!["accesses".into(), t.accesses.len().to_string()],
                    vec!["writes".into(), writes.to_string()],
                    vec!["warps".into(), warps.len().to_string()],
                    vec![
                        "footprint".into(),
                        format!("{} ({pages} pages)", format_bytes(pages * PAGE_BYTES)),
                    ],
                    vec!["address range".into(), format!("{lo:#x}..={hi:#x}")],
                ];
                print!("{}", text_table(&["", ""], &rows));
            }
            Ok(())
        }
    }
}
