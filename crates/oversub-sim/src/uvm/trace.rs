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

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::iter::FusedIterator;
use std::path::{Path, PathBuf};

use super::{Access, SimError, Trace, LINE_BYTES};

/// The eight bytes every binary trace starts with.
pub const MAGIC: [u8; 8] = *b"OVSTRACE";
/// The binary format version this build writes, and the only one it reads.
pub const VERSION: u32 = 1;
/// The longest trace name the binary format stores, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 65_535;

/// Header byte that ends the records; the footer follows.
const END_MARKER: u8 = 0x80;
/// Record header bit: a store.
const WRITE_BIT: u8 = 0x01;
/// Record header bit: the warp differs from the previous record's; a zigzag varint warp delta follows.
const WARP_BIT: u8 = 0x02;
/// Record header bit: the address delta is a multiple of the line size and is stored divided by it.
const SCALED_BIT: u8 = 0x04;
/// Record header bits 3..=5 hold the size code.
const SIZE_SHIFT: u8 = 3;
/// Record header bits 6 and 7 must be clear (bit 7 alone is the end marker).
const RESERVED_BITS: u8 = 0xC0;
/// Size code meaning "an explicit byte count follows".
const SIZE_EXPLICIT: u8 = 7;
/// Byte counts with a size code of their own, most frequent first (full line, then word-sized lanes).
const SIZE_TABLE: [u16; 7] = [128, 4, 8, 16, 32, 64, 1];
/// Largest byte count of one access.
const MAX_ACCESS_BYTES: u16 = LINE_BYTES as u16;
/// Bytes of the fixed part of the header: magic, version, name length.
const HEADER_FIXED_BYTES: usize = 16;
/// Bytes the streaming writer gathers before writing.
const BUF_BYTES: usize = 64 * 1024;
/// Buffer size of the streaming reader; it must hold the fixed header or a whole name.
const READ_BUF_BYTES: usize = 256 * 1024;
/// The longest record: header byte, two 10-byte varints and a byte count.
const MAX_RECORD_BYTES: usize = 22;

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Folds `bytes` into an FNV-1a 64 state: simple enough that anyone can re-implement the checksum from the spec.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// Maps small negative and positive numbers to small unsigned ones (0, -1, 1, -2 → 0, 1, 2, 3).
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// The size code of a byte count: its index in [`SIZE_TABLE`], or [`SIZE_EXPLICIT`].
fn size_code(bytes: u16) -> u8 {
    SIZE_TABLE
        .iter()
        .position(|&b| b == bytes)
        .map_or(SIZE_EXPLICIT, |i| i as u8)
}

/// Why `a` cannot be stored, if it cannot: the format (and the simulator) wants 1..=128 bytes that do not run past
/// the end of the address space.
fn access_problem(a: &Access) -> Option<String> {
    if a.bytes == 0 || a.bytes > MAX_ACCESS_BYTES {
        return Some(format!(
            "an access of {} bytes (must be 1..={MAX_ACCESS_BYTES})",
            a.bytes
        ));
    }
    if a.addr.checked_add(u64::from(a.bytes) - 1).is_none() {
        return Some(format!(
            "an access of {} bytes at {:#x} runs past the end of the 64-bit address space",
            a.bytes, a.addr
        ));
    }
    None
}

/// The header bytes: magic, version, name length and name. `name` must be at most [`MAX_NAME_BYTES`] long.
fn header_bytes(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + name.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// Delta state shared by the writer and [`encode`]: both start from address 0 and warp 0.
#[derive(Debug, Default, Clone, Copy)]
struct Encoder {
    prev_addr: u64,
    prev_warp: u32,
}

impl Encoder {
    /// Appends the record of `a`, which must pass [`access_problem`].
    fn put(&mut self, a: &Access, out: &mut Vec<u8>) {
        let mut rec = RecordBytes::default();
        let mut head = if a.write { WRITE_BIT } else { 0 };
        let warp_delta = i64::from(a.warp) - i64::from(self.prev_warp);
        if warp_delta != 0 {
            head |= WARP_BIT;
        }
        // Wrapping difference: every address is one delta away from every other, and a jump down to a high
        // address stays short.
        let delta = a.addr.wrapping_sub(self.prev_addr) as i64;
        let delta = if delta % LINE_BYTES as i64 == 0 {
            head |= SCALED_BIT;
            delta / LINE_BYTES as i64
        } else {
            delta
        };
        let code = size_code(a.bytes);
        head |= code << SIZE_SHIFT;
        rec.push(head);
        if warp_delta != 0 {
            rec.varint(zigzag(warp_delta));
        }
        rec.varint(zigzag(delta));
        if code == SIZE_EXPLICIT {
            rec.push(a.bytes as u8);
        }
        out.extend_from_slice(rec.bytes());
        self.prev_addr = a.addr;
        self.prev_warp = a.warp;
    }
}

/// One record assembled on the stack, so the output grows once per record rather than once per byte.
///
/// Varints are unsigned LEB128: 7 bits per byte, low group first, high bit set when more follow.
#[derive(Debug, Default)]
struct RecordBytes {
    bytes: [u8; MAX_RECORD_BYTES],
    len: usize,
}

impl RecordBytes {
    fn push(&mut self, b: u8) {
        // A record never exceeds MAX_RECORD_BYTES, so nothing is ever dropped here.
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }

    fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// Writes a binary trace one access at a time, so a generator never holds the whole stream.
///
/// Buffered internally: `W` may be a bare [`File`]. Dropping the writer without [`finish`](Self::finish) leaves a
/// file without footer, which every reader rejects as truncated.
pub struct TraceWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    hash: u64,
    enc: Encoder,
    count: u64,
    path: PathBuf,
}

impl<W: Write> fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("path", &self.path)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace called `name` on `w`; I/O errors name the pseudo-path `<trace NAME>`.
    ///
    /// Fails with [`SimError::InvalidParameter`] if `name` is longer than [`MAX_NAME_BYTES`].
    pub fn new(w: W, name: &str) -> Result<Self, SimError> {
        Self::with_path(w, name, format!("<trace {name}>"))
    }

    /// Like [`new`](Self::new), with the file name `path` in I/O errors.
    pub fn with_path(w: W, name: &str, path: impl Into<PathBuf>) -> Result<Self, SimError> {
        if name.len() > MAX_NAME_BYTES {
            return Err(SimError::InvalidParameter(format!(
                "trace name of {} bytes; the trace format stores at most {MAX_NAME_BYTES}",
                name.len()
            )));
        }
        let mut buf = header_bytes(name);
        buf.reserve(BUF_BYTES);
        Ok(Self {
            out: w,
            buf,
            hash: FNV_OFFSET,
            enc: Encoder::default(),
            count: 0,
            path: path.into(),
        })
    }

    /// Appends one access.
    ///
    /// Fails with [`SimError::InvalidParameter`] if `a.bytes` is not in 1..=128 or the access runs past
    /// `u64::MAX` (nothing is written then), or with [`SimError::Io`].
    pub fn push(&mut self, a: Access) -> Result<(), SimError> {
        if let Some(problem) = access_problem(&a) {
            return Err(SimError::InvalidParameter(format!(
                "access {} of {}: {problem}",
                self.count,
                self.path.display()
            )));
        }
        self.enc.put(&a, &mut self.buf);
        self.count += 1;
        if self.buf.len() >= BUF_BYTES {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Accesses pushed so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the end marker and the footer (count, checksum), flushes, and hands back the writer.
    pub fn finish(mut self) -> Result<W, SimError> {
        self.buf.push(END_MARKER);
        self.buf.extend_from_slice(&self.count.to_le_bytes());
        self.flush_buf()?;
        let sum = self.hash.to_le_bytes();
        self.out
            .write_all(&sum)
            .and_then(|()| self.out.flush())
            .map_err(|e| SimError::io(&self.path, e))?;
        Ok(self.out)
    }

    /// Hashes and writes the buffer.
    fn flush_buf(&mut self) -> Result<(), SimError> {
        self.hash = fnv1a(self.hash, &self.buf);
        self.out
            .write_all(&self.buf)
            .map_err(|e| SimError::io(&self.path, e))?;
        self.buf.clear();
        Ok(())
    }
}

/// Writes `trace` to a new binary file at `path` (replacing any).
///
/// Every access is checked before the file is created, so an invalid trace leaves no partial file.
pub fn write_trace(path: &Path, trace: &Trace) -> Result<(), SimError> {
    if trace.name.len() > MAX_NAME_BYTES {
        return Err(SimError::InvalidParameter(format!(
            "trace name of {} bytes; the trace format stores at most {MAX_NAME_BYTES}",
            trace.name.len()
        )));
    }
    if let Some((i, problem)) = trace
        .accesses
        .iter()
        .enumerate()
        .find_map(|(i, a)| access_problem(a).map(|p| (i, p)))
    {
        return Err(SimError::InvalidParameter(format!(
            "access {i} of trace `{}`: {problem}",
            trace.name
        )));
    }
    let file = File::create(path).map_err(|e| SimError::io(path, e))?;
    let mut w = TraceWriter::with_path(file, &trace.name, path)?;
    for &a in &trace.accesses {
        w.push(a)?;
    }
    w.finish()?;
    Ok(())
}

/// The binary encoding of `trace`, as [`write_trace`] would write it.
///
/// Infallible, so values the format cannot hold are clamped rather than refused: a name is cut to
/// [`MAX_NAME_BYTES`] (at a character boundary), a byte count to 1..=128 and to the end of the address space. Valid
/// traces are encoded exactly; use [`TraceWriter`] to be told about invalid ones.
pub fn encode(trace: &Trace) -> Vec<u8> {
    let mut cut = trace.name.len().min(MAX_NAME_BYTES);
    while !trace.name.is_char_boundary(cut) {
        cut -= 1;
    }
    let name = trace.name.get(..cut).unwrap_or_default();
    let mut out = header_bytes(name);
    out.reserve(trace.accesses.len() * 4 + 17);
    let mut enc = Encoder::default();
    for a in &trace.accesses {
        let after = u64::MAX - a.addr; // bytes after the first one, up to the end of the address space
        let mut bytes = a.bytes.clamp(1, MAX_ACCESS_BYTES);
        if u64::from(bytes) - 1 > after {
            bytes = (after + 1) as u16;
        }
        enc.put(&Access { bytes, ..*a }, &mut out);
    }
    out.push(END_MARKER);
    out.extend_from_slice(&(trace.accesses.len() as u64).to_le_bytes());
    let sum = fnv1a(FNV_OFFSET, &out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes a whole binary trace held in memory; `path_for_errors` names it in errors.
pub fn decode(bytes: &[u8], path_for_errors: &Path) -> Result<Trace, SimError> {
    TraceReader::new(bytes, path_for_errors)?.into_trace()
}

/// Reads a whole binary trace file.
pub fn read_trace(path: &Path) -> Result<Trace, SimError> {
    let file = File::open(path).map_err(|e| SimError::io(path, e))?;
    TraceReader::new(file, path)?.into_trace()
}

/// Reads a binary trace as a stream of accesses.
///
/// [`new`](Self::new) reads and checks the header. Each item is the next access, or the first error met; the count
/// and checksum in the footer are checked when the records run out, so corruption shows up as an `Err` last item:
/// consume the whole iterator before trusting the accesses. After an error the iterator ends. Buffered internally:
/// `R` may be a bare [`File`].
pub struct TraceReader<R: Read> {
    inner: R,
    buf: Box<[u8]>,
    /// Next unread byte of `buf`.
    pos: usize,
    /// Valid bytes in `buf`.
    len: usize,
    /// `inner` has reported end of file.
    eof: bool,
    /// `buf[..hashed]` is already folded into `hash`.
    hashed: usize,
    /// Whether consumed bytes go into the checksum (all but the stored checksum itself).
    hashing: bool,
    /// File offset of `buf[0]`.
    base: u64,
    hash: u64,
    name: String,
    path: PathBuf,
    prev_addr: u64,
    prev_warp: u32,
    /// Records decoded so far.
    count: u64,
    done: bool,
}

impl<R: Read> fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("count", &self.count)
            .field("offset", &self.offset())
            .finish_non_exhaustive()
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `r`; `path_for_errors` names the file in errors.
    pub fn new(r: R, path_for_errors: impl Into<PathBuf>) -> Result<Self, SimError> {
        let mut reader = Self {
            inner: r,
            buf: vec![0; READ_BUF_BYTES].into_boxed_slice(),
            pos: 0,
            len: 0,
            eof: false,
            hashed: 0,
            hashing: true,
            base: 0,
            hash: FNV_OFFSET,
            name: String::new(),
            path: path_for_errors.into(),
            prev_addr: 0,
            prev_warp: 0,
            count: 0,
            done: false,
        };
        reader.read_header()?;
        Ok(reader)
    }

    /// The trace's name from the header.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Accesses read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Reads the remaining accesses into a [`Trace`], checking the footer.
    pub fn into_trace(mut self) -> Result<Trace, SimError> {
        let mut accesses = Vec::new();
        for a in &mut self {
            accesses.push(a?);
        }
        Ok(Trace {
            name: self.name,
            accesses,
        })
    }

    /// File offset of the next unread byte.
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The buffered, unread bytes.
    fn unread(&self) -> &[u8] {
        self.buf.get(self.pos..self.len).unwrap_or_default()
    }

    fn bad(&self, at: u64, reason: impl Into<String>) -> SimError {
        SimError::bad_file(&self.path, format!("byte {at}"), reason)
    }

    /// Folds the consumed, not yet hashed bytes into the checksum.
    fn fold_hash(&mut self) {
        if self.hashing {
            if let Some(chunk) = self.buf.get(self.hashed..self.pos) {
                self.hash = fnv1a(self.hash, chunk);
            }
        }
        self.hashed = self.pos;
    }

    /// Makes at least `want` (at most the buffer size) unread bytes available, fewer only at end of file; returns
    /// how many are.
    fn ensure(&mut self, want: usize) -> Result<usize, SimError> {
        if self.len - self.pos >= want || self.eof {
            return Ok(self.len - self.pos);
        }
        // Hash what was consumed, then move the unread tail to the front to make room.
        self.fold_hash();
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        self.hashed = 0;
        while self.len < want {
            let Some(space) = self.buf.get_mut(self.len..) else {
                break;
            };
            let room = space.len();
            match self.inner.read(space) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.len += n.min(room),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SimError::io(&self.path, e)),
            }
        }
        Ok(self.len - self.pos)
    }

    fn read_header(&mut self) -> Result<(), SimError> {
        let got = self.ensure(HEADER_FIXED_BYTES)?;
        let fixed = self.unread();
        let head = fixed.get(..got.min(MAGIC.len())).unwrap_or_default();
        if head.is_empty() {
            return Err(self.bad(
                0,
                "the file is empty (an oversub binary trace starts with `OVSTRACE`)",
            ));
        }
        if head != MAGIC {
            if MAGIC.starts_with(head) {
                return Err(self.bad(
                    got as u64,
                    "truncated: the file ends inside the magic `OVSTRACE`",
                ));
            }
            return Err(self.bad(0, bad_magic_reason(head)));
        }
        let word = |at: usize| {
            fixed
                .get(at..at + 4)
                .and_then(|w| <[u8; 4]>::try_from(w).ok())
                .map(u32::from_le_bytes)
        };
        let Some(version) = word(8) else {
            return Err(self.bad(
                got as u64,
                "truncated: the file ends inside the header's version",
            ));
        };
        if version != VERSION {
            return Err(self.bad(
                8,
                format!(
                    "unsupported trace format version {version} (this build reads version {VERSION})"
                ),
            ));
        }
        let Some(name_len) = word(12) else {
            return Err(self.bad(
                got as u64,
                "truncated: the file ends inside the header's name length",
            ));
        };
        let name_len = name_len as usize;
        if name_len > MAX_NAME_BYTES {
            return Err(self.bad(
                12,
                format!(
                    "corrupt header: name length {name_len} is over the {MAX_NAME_BYTES}-byte limit"
                ),
            ));
        }
        self.pos += HEADER_FIXED_BYTES;
        let got = self.ensure(name_len)?;
        let Some(name) = self.unread().get(..name_len) else {
            return Err(self.bad(
                self.offset() + got as u64,
                "truncated: the file ends inside the trace name",
            ));
        };
        self.name = match std::str::from_utf8(name) {
            Ok(name) => name.to_string(),
            Err(e) => {
                return Err(self.bad(
                    self.offset() + e.valid_up_to() as u64,
                    "corrupt header: the trace name is not valid UTF-8",
                ))
            }
        };
        self.pos += name_len;
        Ok(())
    }

    /// Decodes the next record; `None` after the end marker and a valid footer.
    fn read_record(&mut self) -> Result<Option<Access>, SimError> {
        let n = self.count;
        self.ensure(MAX_RECORD_BYTES)?;
        let rest = self.unread();
        match rest.first() {
            None => {
                return Err(self.bad(
                    self.offset(),
                    format!(
                        "truncated: the file ends after {n} records, without the end marker and footer \
                         (was the writer finished?)"
                    ),
                ));
            }
            Some(&END_MARKER) => {
                self.pos += 1;
                self.read_footer()?;
                return Ok(None);
            }
            Some(_) => {}
        }
        match decode_record(rest, self.prev_addr, self.prev_warp, n) {
            Ok((a, used)) => {
                self.pos += used;
                self.prev_addr = a.addr;
                self.prev_warp = a.warp;
                Ok(Some(a))
            }
            Err((at, reason)) => Err(self.bad(self.offset() + at as u64, reason)),
        }
    }

    /// Reads and checks the footer (count, checksum) and that nothing follows it.
    fn read_footer(&mut self) -> Result<(), SimError> {
        let count_at = self.offset();
        let got = self.ensure(16)?;
        let word = |s: &[u8]| {
            s.get(..8)
                .and_then(|w| <[u8; 8]>::try_from(w).ok())
                .map(u64::from_le_bytes)
        };
        let Some(count) = word(self.unread()) else {
            return Err(self.bad(
                count_at + got as u64,
                "truncated: the file ends inside the footer's access count",
            ));
        };
        self.pos += 8;
        self.fold_hash();
        self.hashing = false;
        let computed = self.hash;
        let sum_at = self.offset();
        let Some(stored) = word(self.unread()) else {
            return Err(self.bad(
                count_at + got as u64,
                "truncated: the file ends inside the footer's checksum",
            ));
        };
        self.pos += 8;
        if stored != computed {
            return Err(self.bad(
                sum_at,
                format!(
                    "checksum mismatch: the footer says {stored:#018x} but the contents hash to {computed:#018x}; \
                     the file is corrupt"
                ),
            ));
        }
        if count != self.count {
            return Err(self.bad(
                count_at,
                format!(
                    "the footer says {count} accesses but {} records precede it",
                    self.count
                ),
            ));
        }
        let end = self.offset();
        if self.ensure(1)? > 0 {
            return Err(self.bad(
                end,
                format!("trailing garbage: the trace ends at byte {end} but the file goes on"),
            ));
        }
        Ok(())
    }
}

/// Reads the unsigned LEB128 varint at `s[*i..]` holding `what` of record `n`, advancing `i`.
fn slice_varint(s: &[u8], i: &mut usize, what: &str, n: u64) -> Result<u64, (usize, String)> {
    let start = *i;
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let Some(&b) = s.get(*i) else {
            return Err((
                *i,
                format!("truncated: the file ends inside {what} of record {n}"),
            ));
        };
        // The tenth byte holds bit 63 only; anything more cannot be a u64.
        if shift == 63 && b > 1 {
            return Err((
                start,
                format!("varint overflow: {what} of record {n} does not fit in 64 bits"),
            ));
        }
        value |= u64::from(b & 0x7f) << shift;
        *i += 1;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// Decodes record `n` (not the end marker) from the front of `s`, given the previous address and warp: the access
/// and the bytes it took, or the offset in `s` of what is wrong and why. `s` ending early means the file did.
fn decode_record(
    s: &[u8],
    prev_addr: u64,
    prev_warp: u32,
    n: u64,
) -> Result<(Access, usize), (usize, String)> {
    let Some(&head) = s.first() else {
        return Err((0, format!("truncated: the file ends before record {n}")));
    };
    if head & RESERVED_BITS != 0 {
        return Err((
            0,
            format!("record {n}: header byte {head:#04x} has reserved bits set"),
        ));
    }
    let mut i = 1;
    let warp = if head & WARP_BIT != 0 {
        let at = i;
        let delta = unzigzag(slice_varint(s, &mut i, "the warp delta", n)?);
        let warp = i64::from(prev_warp).checked_add(delta);
        let Some(warp) = warp.and_then(|w| u32::try_from(w).ok()) else {
            let why = format!("warp delta {delta} from warp {prev_warp} leaves the u32 range");
            return Err((at, format!("record {n}: {why}")));
        };
        warp
    } else {
        prev_warp
    };
    let at = i;
    let delta = unzigzag(slice_varint(s, &mut i, "the address delta", n)?);
    let delta = if head & SCALED_BIT != 0 {
        match delta.checked_mul(LINE_BYTES as i64) {
            Some(d) => d,
            None => {
                return Err((
                    at,
                    format!(
                        "record {n}: address delta overflow ({delta} lines do not fit in 64 bits)"
                    ),
                ))
            }
        }
    } else {
        delta
    };
    // Wrapping, as the writer took the difference.
    let addr = prev_addr.wrapping_add(delta as u64);
    let code = (head >> SIZE_SHIFT) & 0x07;
    let bytes = if code == SIZE_EXPLICIT {
        let Some(&b) = s.get(i) else {
            return Err((
                i,
                format!("truncated: the file ends inside the byte count of record {n}"),
            ));
        };
        if b == 0 || u16::from(b) > MAX_ACCESS_BYTES {
            return Err((
                i,
                format!("record {n}: byte count {b} (must be 1..={MAX_ACCESS_BYTES})"),
            ));
        }
        i += 1;
        u16::from(b)
    } else {
        SIZE_TABLE
            .get(usize::from(code))
            .copied()
            .unwrap_or(MAX_ACCESS_BYTES)
    };
    if addr.checked_add(u64::from(bytes) - 1).is_none() {
        return Err((
            0,
            format!(
                "record {n}: address overflow: {bytes} bytes at {addr:#x} run past the end of the 64-bit address \
                 space"
            ),
        ));
    }
    let access = Access {
        addr,
        warp,
        bytes,
        write: head & WRITE_BIT != 0,
    };
    Ok((access, i))
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Access, SimError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.read_record() {
            Ok(Some(a)) => {
                self.count += 1;
                Some(Ok(a))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<R: Read> FusedIterator for TraceReader<R> {}

/// The reason given for a file that does not start with the magic, guessing what it is instead.
fn bad_magic_reason(head: &[u8]) -> String {
    let texty = head
        .iter()
        .all(|&b| b.is_ascii_graphic() || matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if !texty {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        return format!(
            "not an oversub binary trace: it starts with bytes {}, not the magic `OVSTRACE`",
            hex.join(" ")
        );
    }
    let text = String::from_utf8_lossy(head);
    let text = text.trim_end();
    let nvbit = [&b"MEMTRACE"[..], b"CTX ", b"CTA ", b"--------"]
        .iter()
        .any(|p| head.starts_with(p));
    if nvbit {
        format!(
            "not an oversub binary trace: it starts with `{text}`, which looks like the text output of NVBit's \
             mem_trace; import it with `load`/`import_nvbit` or convert it with the CLI"
        )
    } else {
        format!("not an oversub binary trace: it starts with the text `{text}`, not the magic `OVSTRACE`")
    }
}

// ---------------------------------------------------------------------------------------------------------------
// NVBit mem_trace import
// ---------------------------------------------------------------------------------------------------------------

/// Lanes in a warp: every mem_trace record lists this many addresses.
const LANES: usize = 32;

/// What an NVBit import read besides the accesses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvbitStats {
    /// Lines read.
    pub lines: u64,
    /// mem_trace record lines (one warp instruction each), whatever became of them.
    pub records: u64,
    /// Kernel launch lines (`MEMTRACE: CTX … - LAUNCH - …`).
    pub launches: u64,
    /// Other lines: banners, the program's own output.
    pub other_lines: u64,
    /// Records of shared or local memory instructions, which never touch unified memory.
    pub skipped_records: u64,
    /// Records whose lanes were all inactive (address 0).
    pub empty_records: u64,
    /// Distinct warps, (context, launch, CTA, warp) combinations, in the trace.
    pub warps: u64,
}

/// What a mem_trace opcode does to unified memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// Not unified memory (shared or local): skipped.
    Skip,
    /// Reads `size` bytes per lane.
    Load(u64),
    /// Writes (stores, reductions, atomics) `size` bytes per lane.
    Store(u64),
}

/// Classifies a SASS opcode such as `LDG.E.64` or `ATOMG.E.ADD.STRONG.GPU`.
fn classify_opcode(op: &str) -> OpKind {
    let mut parts = op.split('.');
    let base = parts.next().unwrap_or_default();
    if matches!(
        base,
        "LDS" | "STS" | "LDSM" | "STSM" | "LDL" | "STL" | "ATOMS"
    ) {
        return OpKind::Skip;
    }
    // The width suffix: 32-bit unless said otherwise.
    let size = parts
        .find_map(|p| match p {
            "8" | "U8" | "S8" => Some(1),
            "16" | "U16" | "S16" => Some(2),
            "64" | "U64" | "S64" | "F64" => Some(8),
            "128" => Some(16),
            _ => None,
        })
        .unwrap_or(4);
    if base.starts_with("ST") || base.starts_with("RED") || base.starts_with("ATOM") {
        OpKind::Store(size)
    } else {
        OpKind::Load(size)
    }
}

/// One parsed mem_trace record line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NvbitRecord<'a> {
    ctx: u64,
    launch: u64,
    cta: [u32; 3],
    warp: u32,
    opcode: &'a str,
    addrs: [u64; LANES],
}

/// What a line of mem_trace output is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind<'a> {
    /// A memory record (or something that starts like one), from `CTX` or `CTA` on.
    Record(&'a str),
    /// A kernel launch line.
    Launch,
    /// Anything else.
    Other,
}

fn line_kind(line: &str) -> LineKind<'_> {
    let t = line.trim_start();
    let body = t.strip_prefix("MEMTRACE:").map_or(t, str::trim_start);
    let is_ctx = body.starts_with("CTX ");
    let is_cta = body
        .strip_prefix("CTA ")
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    if !is_ctx && !is_cta {
        return LineKind::Other;
    }
    if is_ctx && body.split(" - ").nth(1).map(str::trim) == Some("LAUNCH") {
        return LineKind::Launch;
    }
    LineKind::Record(body)
}

/// `s` for quoting in an error, cut to a readable length.
fn excerpt(s: &str) -> String {
    const MAX_CHARS: usize = 60;
    match s.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", s.get(..cut).unwrap_or_default()),
        None => s.to_string(),
    }
}

fn parse_hex(tok: &str) -> Option<u64> {
    let digits = tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X"))?;
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

fn parse_dec<T: std::str::FromStr>(tok: &str) -> Option<T> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tok.parse().ok()
}

/// Parses a record body (from `CTX`/`CTA` on): `[CTX 0xC - ][grid_launch_id N - ]CTA x,y,z - warp W - OP - A0 … A31`.
fn parse_record(body: &str) -> Result<NvbitRecord<'_>, String> {
    let mut fields = body.split(" - ").map(str::trim);
    let mut field = fields.next().unwrap_or_default();
    let mut ctx = 0;
    if let Some(rest) = field.strip_prefix("CTX ") {
        ctx = parse_hex(rest.trim()).ok_or_else(|| format!("bad context `{}`", excerpt(rest)))?;
        field = fields.next().ok_or("nothing after the context")?;
    }
    let mut launch = 0;
    if let Some(rest) = field.strip_prefix("grid_launch_id ") {
        launch = parse_dec(rest.trim())
            .ok_or_else(|| format!("bad grid_launch_id `{}`", excerpt(rest)))?;
        field = fields.next().ok_or("nothing after the grid_launch_id")?;
    }
    let cta_text = field
        .strip_prefix("CTA ")
        .ok_or_else(|| format!("expected `CTA x,y,z`, found `{}`", excerpt(field)))?;
    let mut cta = [0u32; 3];
    let mut coords = cta_text.trim().split(',');
    for slot in &mut cta {
        *slot = coords
            .next()
            .and_then(|c| parse_dec(c.trim()))
            .ok_or_else(|| format!("bad CTA coordinates `{}`", excerpt(cta_text)))?;
    }
    if coords.next().is_some() {
        return Err(format!("bad CTA coordinates `{}`", excerpt(cta_text)));
    }
    let field = fields.next().ok_or("nothing after the CTA")?;
    let warp = field
        .strip_prefix("warp ")
        .and_then(|w| parse_dec(w.trim()))
        .ok_or_else(|| format!("expected `warp N`, found `{}`", excerpt(field)))?;
    let opcode = fields.next().ok_or("no opcode after the warp")?;
    if !opcode.starts_with(|c: char| c.is_ascii_uppercase()) || opcode.contains(char::is_whitespace)
    {
        return Err(format!("bad opcode `{}`", excerpt(opcode)));
    }
    let addr_text = fields.next().ok_or("no addresses after the opcode")?;
    if fields.next().is_some() {
        return Err("unexpected ` - ` after the addresses".to_string());
    }
    let mut addrs = [0u64; LANES];
    let mut n = 0;
    for tok in addr_text.split_whitespace() {
        let a = parse_hex(tok).ok_or_else(|| format!("bad address `{}`", excerpt(tok)))?;
        match addrs.get_mut(n) {
            Some(slot) => *slot = a,
            None => return Err(format!("more than {LANES} addresses")),
        }
        n += 1;
    }
    if n != LANES {
        return Err(format!(
            "{n} addresses where mem_trace prints {LANES} (a cut-off line?)"
        ));
    }
    Ok(NvbitRecord {
        ctx,
        launch,
        cta,
        warp,
        opcode,
        addrs,
    })
}

/// The bits of a line's byte mask for offsets `lo..hi` (`lo < hi <= 128`).
fn mask_bits(lo: u64, hi: u64) -> u128 {
    let width = hi - lo;
    if width >= 128 {
        u128::MAX
    } else {
        ((1u128 << width) - 1) << lo
    }
}

/// Coalesces one warp instruction: each active lane touches `size` bytes from its address; the result is one access
/// per distinct line, in ascending line order, starting at the lowest byte touched and counting the distinct bytes.
fn coalesce(addrs: &[u64], size: u64, warp: u32, write: bool, out: &mut Vec<Access>) {
    let mut lines: Vec<(u64, u128)> = Vec::new();
    let mut touch = |line: u64, mask: u128| match lines.iter_mut().find(|(l, _)| *l == line) {
        Some((_, m)) => *m |= mask,
        None => lines.push((line, mask)),
    };
    for &a in addrs.iter().filter(|&&a| a != 0) {
        // Bytes past the end of the address space are dropped rather than wrapped.
        let end = (u128::from(a) + u128::from(size)).min(1u128 << 64);
        let mut at = u128::from(a);
        while at < end {
            let line = (at / u128::from(LINE_BYTES)) as u64;
            let line_end = (u128::from(line) + 1) * u128::from(LINE_BYTES);
            let stop = end.min(line_end);
            let lo = (at % u128::from(LINE_BYTES)) as u64;
            touch(line, mask_bits(lo, lo + (stop - at) as u64));
            at = stop;
        }
    }
    lines.sort_unstable_by_key(|&(l, _)| l);
    for (line, mask) in lines {
        out.push(Access {
            addr: line * LINE_BYTES + u64::from(mask.trailing_zeros()),
            warp,
            bytes: mask.count_ones() as u16,
            write,
        });
    }
}

/// The trace name for an imported file: its name without `.txt`/`.log` and `.nvbit` (`app.nvbit.txt` → `app`).
fn name_from_path(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name = file.as_str();
    for ext in [".txt", ".log", ".nvbit"] {
        if let Some(stem) = name.strip_suffix(ext) {
            if !stem.is_empty() {
                name = stem;
            }
        }
    }
    if name.is_empty() {
        "nvbit".to_string()
    } else {
        name.to_string()
    }
}

/// Imports the text output of NVBit's `mem_trace` tool from a file.
pub fn import_nvbit(path: &Path) -> Result<Trace, SimError> {
    let file = File::open(path).map_err(|e| SimError::io(path, e))?;
    import_nvbit_reader(BufReader::with_capacity(256 * 1024, file), path)
}

/// Imports `mem_trace` text from `r`; `path_for_errors` names it in errors and gives the trace its name.
pub fn import_nvbit_reader(r: impl BufRead, path_for_errors: &Path) -> Result<Trace, SimError> {
    import_nvbit_with_stats(r, path_for_errors).map(|(trace, _)| trace)
}

/// Like [`import_nvbit_reader`], also saying how many lines were records, launches or other text.
///
/// Record lines are accepted in both layouts NVBit has printed: `MEMTRACE: CTX 0x… - grid_launch_id N - CTA x,y,z -
/// warp W - OPCODE - ` followed by 32 lane addresses (recent), and `CTA x,y,z - warp W - OPCODE - …` with or without
/// `CTX 0x… - ` (older). Lines that start like a record but do not parse are errors (`line N`); all other lines are
/// counted and ignored. A warp is one (context, launch, CTA, warp) combination, numbered densely in order of first
/// appearance. Lanes at address 0 are inactive; shared and local memory instructions are skipped; the lanes of one
/// record are coalesced into one access per 128-byte line. A file without any record line is an error.
pub fn import_nvbit_with_stats(
    mut r: impl BufRead,
    path_for_errors: &Path,
) -> Result<(Trace, NvbitStats), SimError> {
    let mut trace = Trace::new(name_from_path(path_for_errors));
    let mut stats = NvbitStats::default();
    let mut warps: HashMap<(u64, u64, [u32; 3], u32), u32> = HashMap::new();
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = r
            .read_until(b'\n', &mut raw)
            .map_err(|e| SimError::io(path_for_errors, e))?;
        if n == 0 {
            break;
        }
        stats.lines += 1;
        let line_no = stats.lines;
        let bad = |reason: String| {
            SimError::bad_file(
                path_for_errors,
                format!("line {line_no}"),
                format!("malformed mem_trace record: {reason}"),
            )
        };
        let Ok(line) = std::str::from_utf8(&raw) else {
            // Program output may be anything; a record line is ASCII, so this one only matters if it looks like one.
            let lossy = String::from_utf8_lossy(&raw);
            if matches!(line_kind(&lossy), LineKind::Record(_)) {
                return Err(bad("not valid UTF-8".to_string()));
            }
            stats.other_lines += 1;
            continue;
        };
        let line = line.trim_end_matches(['\n', '\r']);
        let body = match line_kind(line) {
            LineKind::Record(body) => body,
            LineKind::Launch => {
                stats.launches += 1;
                continue;
            }
            LineKind::Other => {
                stats.other_lines += 1;
                continue;
            }
        };
        let rec = parse_record(body).map_err(bad)?;
        stats.records += 1;
        let (size, write) = match classify_opcode(rec.opcode) {
            OpKind::Skip => {
                stats.skipped_records += 1;
                continue;
            }
            OpKind::Load(size) => (size, false),
            OpKind::Store(size) => (size, true),
        };
        if rec.addrs.iter().all(|&a| a == 0) {
            stats.empty_records += 1;
            continue;
        }
        let next_id = warps.len();
        let warp = match warps.get(&(rec.ctx, rec.launch, rec.cta, rec.warp)) {
            Some(&w) => w,
            None => {
                let id = u32::try_from(next_id)
                    .map_err(|_| bad("more than 2^32 distinct warps".to_string()))?;
                warps.insert((rec.ctx, rec.launch, rec.cta, rec.warp), id);
                id
            }
        };
        coalesce(&rec.addrs, size, warp, write, &mut trace.accesses);
    }
    stats.warps = warps.len() as u64;
    if stats.records == 0 {
        return Err(SimError::bad_file(
            path_for_errors,
            format!("end of file (line {})", stats.lines),
            format!(
                "neither an oversub binary trace (no `OVSTRACE` magic) nor NVBit mem_trace output: none of its {} \
                 lines is a record like `MEMTRACE: CTX 0x… - grid_launch_id 0 - CTA 0,0,0 - warp 0 - LDG.E - 0x… …`",
                stats.lines
            ),
        ));
    }
    tracing::debug!(
        path = %path_for_errors.display(),
        accesses = trace.accesses.len(),
        ?stats,
        "imported NVBit mem_trace output"
    );
    Ok((trace, stats))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends `v` as an unsigned LEB128 varint (7 bits per byte, low group first, high bit = more follows).
    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn roundtrip(t: &Trace) -> Trace {
        decode(&encode(t), Path::new("mem")).unwrap()
    }

    #[test]
    fn zigzag_and_varint_edges() {
        for v in [0, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(out.last(), Some(&1));
        out.clear();
        put_varint(&mut out, 127);
        assert_eq!(out, [127]);
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn sequential_records_are_two_bytes() {
        let mut t = Trace::new("seq");
        t.accesses = (0..1000).map(|i| Access::read(0, i * 128, 128)).collect();
        let bytes = encode(&t);
        let fixed = 16 + 3 + 1 + 16;
        assert_eq!(bytes.len() - fixed, 2 * 1000);
        assert_eq!(roundtrip(&t), t);
    }

    #[test]
    fn empty_trace_layout() {
        let bytes = encode(&Trace::new("x"));
        assert_eq!(&bytes[..8], b"OVSTRACE");
        assert_eq!(&bytes[8..12], &1u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &1u32.to_le_bytes());
        assert_eq!(bytes[16], b'x');
        assert_eq!(bytes[17], END_MARKER);
        assert_eq!(&bytes[18..26], &0u64.to_le_bytes());
        assert_eq!(
            &bytes[26..34],
            &fnv1a(FNV_OFFSET, &bytes[..26]).to_le_bytes()
        );
        assert_eq!(bytes.len(), 34);
    }

    #[test]
    fn encode_clamps_what_the_format_cannot_hold() {
        let mut t = Trace::new("clamp");
        t.accesses = vec![
            Access::read(0, 64, 0),
            Access::read(0, 64, 500),
            Access::read(0, u64::MAX - 1, 128),
        ];
        let back = roundtrip(&t);
        let bytes: Vec<u16> = back.accesses.iter().map(|a| a.bytes).collect();
        assert_eq!(bytes, [1, 128, 2]);
    }

    #[test]
    fn writer_refuses_bad_accesses() {
        let mut w = TraceWriter::new(Vec::new(), "w").unwrap();
        assert!(matches!(
            w.push(Access::read(0, 0, 0)),
            Err(SimError::InvalidParameter(_))
        ));
        assert!(matches!(
            w.push(Access::read(0, u64::MAX, 2)),
            Err(SimError::InvalidParameter(_))
        ));
        w.push(Access::read(0, u64::MAX, 1)).unwrap();
        let bytes = w.finish().unwrap();
        let t = decode(&bytes, Path::new("w")).unwrap();
        assert_eq!(t.accesses, [Access::read(0, u64::MAX, 1)]);
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        assert!(TraceWriter::new(Vec::new(), &long).is_err());
    }

    #[test]
    fn reserved_header_bits_and_bad_counts_are_errors() {
        let mut bytes = encode(&Trace {
            name: String::new(),
            accesses: vec![Access::read(0, 256, 128)],
        });
        // Record header is at byte 16 (empty name).
        bytes[16] |= 0x40;
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("byte 16") && err.contains("reserved"), "{err}");

        let mut bytes = encode(&Trace {
            name: String::new(),
            accesses: vec![Access::read(0, 256, 3)],
        });
        // head, delta, explicit byte count
        assert_eq!(bytes[16] >> SIZE_SHIFT & 7, SIZE_EXPLICIT);
        bytes[18] = 0;
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(
            err.contains("byte 18") && err.contains("byte count 0"),
            "{err}"
        );
        bytes[18] = 129;
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("byte count 129"), "{err}");
    }

    #[test]
    fn varint_overflow_is_reported() {
        let mut bytes = header_bytes("");
        bytes.push(0); // read, same warp, scaled=0, size 128
        bytes.extend_from_slice(&[0xff; 10]);
        bytes.push(0x01);
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(
            err.contains("byte 17") && err.contains("varint overflow"),
            "{err}"
        );
    }

    #[test]
    fn address_overflow_is_reported() {
        let mut bytes = header_bytes("");
        bytes.push(0); // 128 bytes at delta -1 → 0xffff_ffff_ffff_ffff
        put_varint(&mut bytes, zigzag(-1));
        bytes.push(END_MARKER);
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("address overflow"), "{err}");
    }

    #[test]
    fn scaled_delta_overflow_is_reported() {
        let mut bytes = header_bytes("");
        bytes.push(SCALED_BIT);
        put_varint(&mut bytes, zigzag(i64::MAX));
        let err = decode(&bytes, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("address delta overflow"), "{err}");
    }

    #[test]
    fn bad_magic_reasons() {
        assert!(bad_magic_reason(b"MEMTRACE").contains("mem_trace"));
        assert!(bad_magic_reason(b"CTA 0,0,").contains("mem_trace"));
        assert!(bad_magic_reason(b"hello wo").contains("`hello wo`"));
        assert!(bad_magic_reason(&[0x89, b'P', b'N', b'G']).contains("89 50 4e 47"));
        let err = decode(b"OVSTR", Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let err = decode(b"", Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        let mut v2 = encode(&Trace::new("v"));
        v2[8] = 2;
        let err = decode(&v2, Path::new("f")).unwrap_err().to_string();
        assert!(err.contains("byte 8") && err.contains("version 2"), "{err}");
    }

    #[test]
    fn opcodes() {
        assert_eq!(classify_opcode("LDG.E"), OpKind::Load(4));
        assert_eq!(classify_opcode("LDG.E.64"), OpKind::Load(8));
        assert_eq!(classify_opcode("LDG.E.128.CONSTANT"), OpKind::Load(16));
        assert_eq!(classify_opcode("LDG.E.U8"), OpKind::Load(1));
        assert_eq!(classify_opcode("LD.E.S16"), OpKind::Load(2));
        assert_eq!(classify_opcode("LDG.E.8.SYS"), OpKind::Load(1));
        assert_eq!(classify_opcode("STG.E.64"), OpKind::Store(8));
        assert_eq!(classify_opcode("ST.E"), OpKind::Store(4));
        assert_eq!(classify_opcode("RED.E.ADD.STRONG.GPU"), OpKind::Store(4));
        assert_eq!(classify_opcode("ATOMG.E.ADD.F64.RN"), OpKind::Store(8));
        assert_eq!(classify_opcode("ATOM.E.CAS.64"), OpKind::Store(8));
        for op in [
            "LDS",
            "LDS.U.128",
            "STS.64",
            "LDSM.16.M88.4",
            "LDL.64",
            "STL",
            "ATOMS.ADD",
        ] {
            assert_eq!(classify_opcode(op), OpKind::Skip, "{op}");
        }
        assert_eq!(classify_opcode("LDGSTS.E.BYPASS.128"), OpKind::Load(16));
    }

    #[test]
    fn coalescing() {
        let mut out = Vec::new();
        // Eight lanes on one 4-byte word, eight spread over the next line's offsets 2..10.
        let mut addrs = vec![0x1005u64; 8];
        addrs.extend((0..8).map(|i| 0x1082 + i));
        addrs.extend([0u64; 16]);
        coalesce(&addrs, 1, 7, false, &mut out);
        assert_eq!(
            out,
            [Access::read(7, 0x1005, 1), Access::read(7, 0x1082, 8)]
        );
        out.clear();
        // A misaligned 8-byte lane straddling a line boundary, lanes listed high line first.
        coalesce(&[0x2000, 0x1ffc], 8, 1, true, &mut out);
        assert_eq!(
            out,
            [Access::write(1, 0x1ffc, 4), Access::write(1, 0x2000, 8)]
        );
        out.clear();
        // The last bytes of the address space: nothing wraps.
        coalesce(&[u64::MAX - 1], 16, 0, false, &mut out);
        assert_eq!(out, [Access::read(0, u64::MAX - 1, 2)]);
    }

    #[test]
    fn line_kinds() {
        assert_eq!(line_kind("Final sum = 1.0"), LineKind::Other);
        assert_eq!(
            line_kind("MEMTRACE: STARTING CONTEXT 0x5603f0a1b2c0"),
            LineKind::Other
        );
        assert_eq!(
            line_kind(
                "MEMTRACE: CTX 0x00005603f0a1b2c0 - LAUNCH - Kernel pc 0x00007f3a5c000000 - Kernel name vecAdd"
            ),
            LineKind::Launch
        );
        assert_eq!(
            line_kind("CTA 0,0,0 - warp 1"),
            LineKind::Record("CTA 0,0,0 - warp 1")
        );
        assert_eq!(line_kind("CTA is short for"), LineKind::Other);
    }

    #[test]
    fn record_parse_errors() {
        let addrs = " 0x0000000000001000".repeat(32);
        let ok = format!("CTX 0x01 - grid_launch_id 3 - CTA 1,2,3 - warp 4 - LDG.E -{addrs} ");
        let rec = parse_record(&ok).unwrap();
        assert_eq!(
            (rec.ctx, rec.launch, rec.cta, rec.warp),
            (1, 3, [1, 2, 3], 4)
        );
        assert_eq!(rec.opcode, "LDG.E");
        let short = format!("CTA 1,2,3 - warp 4 - LDG.E -{}", " 0x10".repeat(31));
        assert!(parse_record(&short).unwrap_err().contains("31 addresses"));
        let long = format!("CTA 1,2,3 - warp 4 - LDG.E -{}", " 0x10".repeat(33));
        assert!(parse_record(&long).unwrap_err().contains("more than 32"));
        assert!(parse_record("CTA 1,2 - warp 4 - LDG.E - 0x10")
            .unwrap_err()
            .contains("CTA"));
        assert!(parse_record("CTA 1,2,3 - warp x - LDG.E - 0x10")
            .unwrap_err()
            .contains("warp"));
        assert!(parse_record("CTA 1,2,3 - warp 1 - LDG.E - 0x+1")
            .unwrap_err()
            .contains("0x+1"));
    }

    #[test]
    fn long_fields_are_cut_in_errors() {
        let junk = "Z".repeat(5000);
        let err = parse_record(&format!("CTA 0,0,0 - warp {junk}")).unwrap_err();
        assert!(err.len() < 200, "{err}");
        assert_eq!(excerpt("short"), "short");
    }

    #[test]
    fn import_names() {
        assert_eq!(name_from_path(Path::new("/t/app.nvbit.txt")), "app");
        assert_eq!(name_from_path(Path::new("bfs.log")), "bfs");
        assert_eq!(name_from_path(Path::new("")), "nvbit");
        assert_eq!(name_from_path(Path::new(".txt")), ".txt");
    }
}
