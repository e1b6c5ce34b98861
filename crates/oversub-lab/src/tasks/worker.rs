//! The built-in tasks' body, run inside their cgroups by the [`super::WorkerCommand`] (`oversub tasks worker …`).
//!
//! `file-io` is the paper's real-platform task (Sec. V-C): it writes a file and reads it back several times
//! through the page cache. Its memory demand is the file's size: with that much memory the reads after the write
//! all hit the cache; with less, Linux reclaims the file's pages and every pass reads the missing ones back from
//! the disk.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;

use crate::LabError;

/// The `file-io` worker: write a file of `size` bytes, sync it, then read it `passes` times through the page
/// cache; remove it at the end unless `keep`.
/// Its fields are the flags of the worker's `file-io` command (the CLI's hidden `tasks worker file-io`, Python's
/// `python -m oversub.lab.tasks worker file-io`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct FileIo {
    /// The file to write (created or truncated; removed at the end).
    #[cfg_attr(feature = "clap", arg(long))]
    pub file: PathBuf,
    /// Its size.
    #[cfg_attr(feature = "clap", arg(long, allow_hyphen_values = true,
        value_parser = crate::args::parse_positive_size_arg))]
    pub size: u64,
    /// How many times to read it back.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3, allow_hyphen_values = true,
        value_parser = crate::args::parse_count::<u32>))]
    pub passes: u32,
    /// Keep the file at the end.
    #[cfg_attr(feature = "clap", arg(long))]
    pub keep: bool,
    /// Compute per byte read: rounds of a hash over every chunk after it is read (0: pure I/O).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, allow_hyphen_values = true,
        value_parser = crate::args::parse_count_or_zero::<u32>))]
    pub hash_rounds: u32,
}

/// `rounds` passes of FNV-1a over `data`: CPU work proportional to the bytes, which the compiler cannot skip.
fn hash_rounds(data: &[u8], rounds: u32, mut h: u64) -> u64 {
    for r in 0..rounds {
        h ^= u64::from(r);
        for &b in data {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

const CHUNK: usize = 1 << 20;

/// The byte pattern of chunk `index`: its index in the first 8 bytes, then a fixed pattern.
fn stamp(buf: &mut [u8], index: u64) {
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&index.to_le_bytes()[..n]);
}

/// Runs the `file-io` worker; returns the checksum of what it read (which the compiler cannot skip computing).
pub fn file_io(args: &FileIo) -> Result<u64, LabError> {
    let at = |what: &str, e: std::io::Error| -> LabError {
        LabError::Failed(format!("{what} {}: {e}", args.file.display()))
    };
    let mut buf = vec![0u8; CHUNK];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&args.file)
            .map_err(|e| at("cannot create", e))?;
        let mut left = args.size;
        let mut index = 0u64;
        while left > 0 {
            let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
            stamp(&mut buf[..n], index);
            f.write_all(&buf[..n]).map_err(|e| at("cannot write", e))?;
            left -= n as u64;
            index += 1;
        }
        f.sync_data().map_err(|e| at("cannot sync", e))?;
    }
    let mut checksum = 0u64;
    for pass in 0..args.passes {
        let mut f = File::open(&args.file).map_err(|e| at("cannot open", e))?;
        let mut index = 0u64;
        let mut total = 0u64;
        loop {
            let mut filled = 0;
            while filled < CHUNK {
                let n = f
                    .read(&mut buf[filled..])
                    .map_err(|e| at("cannot read", e))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            let mut head = [0u8; 8];
            let h = filled.min(8);
            head[..h].copy_from_slice(&buf[..h]);
            let mut expected = [0u8; 8];
            expected[..h].copy_from_slice(&index.to_le_bytes()[..h]);
            if head != expected {
                return Err(format!(
                    "{}: chunk {index} read back wrong in pass {pass}",
                    args.file.display()
                )
                .into());
            }
            checksum = checksum
                .wrapping_mul(0x100_0000_01b3)
                .wrapping_add(u64::from(buf[filled - 1]));
            checksum = hash_rounds(&buf[..filled], args.hash_rounds, checksum);
            total += filled as u64;
            index += 1;
        }
        if total != args.size {
            return Err(format!(
                "{}: read {total} bytes in pass {pass}, expected {}",
                args.file.display(),
                args.size
            )
            .into());
        }
    }
    if !args.keep {
        std::fs::remove_file(&args.file).map_err(|e| at("cannot remove", e))?;
    }
    Ok(checksum)
}
