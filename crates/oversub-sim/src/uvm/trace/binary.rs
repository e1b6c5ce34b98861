//! oversub's binary trace format: [`TraceWriter`], [`TraceReader`] and the whole-trace wrappers.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::iter::FusedIterator;
use std::path::{Path, PathBuf};

use crate::uvm::{Access, SimError, Trace, LINE_BYTES};

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
}
