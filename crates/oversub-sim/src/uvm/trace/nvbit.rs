//! The NVBit `mem_trace` text importer: coalesces each warp instruction's lane addresses into one access per
//! 128-byte line.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::uvm::{Access, SimError, Trace, LINE_BYTES};

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

#[cfg(test)]
mod tests {
    use super::*;

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
