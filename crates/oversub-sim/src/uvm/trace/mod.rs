//! Trace files: oversub's compact binary format and the NVBit `mem_trace` text importer.
//!
//! The binary format (laid out byte by byte in `docs/trace-format.md`) is a header (`OVSTRACE`, version, name), one
//! delta-encoded record per access (2 bytes for a streaming warp, about 7 for random lines), an end marker and a
//! footer holding the access count and an FNV-1a 64 checksum of everything before it. It is written and read as a
//! stream:
//! [`TraceWriter`] lets a generator write without holding the trace, [`TraceReader`] yields the accesses one at a
//! time and reports corruption (checksum, count) with its last item. [`write_trace`], [`read_trace`], [`encode`]
//! and [`decode`] wrap them for whole traces.
//!
//! [`import_nvbit`] turns the text printed by NVBit's `mem_trace` tool into a [`Trace`], coalescing the 32 lane
//! addresses of each warp instruction into one access per 128-byte line; [`load`] accepts either kind of file.
//!
//! `binary.rs` holds the format, `nvbit.rs` the importer; [`load`] (here) picks one by the file's first bytes.

mod binary;
mod nvbit;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

pub use binary::{
    decode, encode, read_trace, write_trace, TraceReader, TraceWriter, MAGIC, MAX_NAME_BYTES,
    VERSION,
};
pub use nvbit::{import_nvbit, import_nvbit_reader, import_nvbit_with_stats, NvbitStats};

use super::{SimError, Trace};

/// Loads a trace file of either kind: oversub binary (recognised by its magic) or NVBit `mem_trace` text.
///
/// A file that is neither (binary data, or text without any mem_trace record) is a [`SimError::BadFile`].
pub fn load(path: &Path) -> Result<Trace, SimError> {
    let file = File::open(path).map_err(|e| SimError::io(path, e))?;
    let mut r = BufReader::with_capacity(256 * 1024, file);
    // Decide from the first buffer-full, then let go of it so the chosen reader gets `r` whole.
    let (binary, bad_at, start) = {
        let head = r.fill_buf().map_err(|e| SimError::io(path, e))?;
        let prefix = head.get(..MAGIC.len().min(head.len())).unwrap_or_default();
        let sniff = head.get(..head.len().min(4096)).unwrap_or_default();
        let bad_at = match std::str::from_utf8(sniff) {
            // An error without length is a character cut by the sniff window, not bad data.
            Err(e) if e.error_len().is_some() => Some(e.valid_up_to()),
            _ => sniff.iter().position(|&b| b == 0),
        };
        (MAGIC.starts_with(prefix), bad_at, describe_start(prefix))
    };
    // Anything that begins like the magic (the empty file included) goes to the binary reader, whose errors say
    // what is wrong with a binary trace.
    if binary {
        return TraceReader::new(r, path)?.into_trace();
    }
    if let Some(at) = bad_at {
        return Err(SimError::bad_file(
            path,
            format!("byte {at}"),
            format!(
                "neither an oversub binary trace (it starts with {start}, not `OVSTRACE`) nor NVBit mem_trace \
                 text (binary data)"
            ),
        ));
    }
    import_nvbit_reader(r, path)
}

/// The first bytes of a file, as text if they are printable, else in hex.
fn describe_start(head: &[u8]) -> String {
    if head.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("`{}`", String::from_utf8_lossy(head))
    } else {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("bytes {}", hex.join(" "))
    }
}
