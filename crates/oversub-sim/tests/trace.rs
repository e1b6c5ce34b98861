//! Trace files: binary round trips, corruption, NVBit mem_trace import and format detection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::io::{BufWriter, Cursor};
use std::path::Path;

use oversub_sim::uvm::trace::{
    decode, encode, import_nvbit, import_nvbit_reader, import_nvbit_with_stats, load, read_trace,
    write_trace, NvbitStats, TraceReader, TraceWriter,
};
use oversub_sim::uvm::{Access, SimError, Trace};
use proptest::prelude::*;

fn trace(name: &str, accesses: Vec<Access>) -> Trace {
    Trace {
        name: name.to_string(),
        accesses,
    }
}

/// Every way of writing and reading gives back `t`.
fn assert_round_trips(t: &Trace) {
    let bytes = encode(t);
    assert_eq!(&decode(&bytes, Path::new("mem")).unwrap(), t);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ovtrace");
    write_trace(&path, t).unwrap();
    assert_eq!(fs::read(&path).unwrap(), bytes, "file and encode() differ");
    assert_eq!(&read_trace(&path).unwrap(), t);
    assert_eq!(&load(&path).unwrap(), t);

    let mut w = TraceWriter::new(Vec::new(), &t.name).unwrap();
    for &a in &t.accesses {
        w.push(a).unwrap();
    }
    assert_eq!(w.count(), t.accesses.len() as u64);
    assert_eq!(
        w.finish().unwrap(),
        bytes,
        "streaming writer and encode() differ"
    );

    let r = TraceReader::new(Cursor::new(&bytes), "cursor").unwrap();
    assert_eq!(r.name(), t.name);
    let back: Vec<Access> = r.collect::<Result<_, _>>().unwrap();
    assert_eq!(back, t.accesses);
}

#[test]
fn empty_trace_round_trips() {
    assert_round_trips(&Trace::new(""));
    assert_round_trips(&Trace::new("empty ünïcode ✓"));
}

#[test]
fn hand_cases_round_trip() {
    let top = u64::MAX;
    let accesses = vec![
        Access::read(0, 0x7f3a_5800_0000, 128),
        Access::read(0, 0x7f3a_5800_0080, 128),
        // going down, by a whole line and by an odd amount
        Access::read(0, 0x7f3a_5800_0000, 128),
        Access::write(0, 0x7f3a_57ff_ffe3, 4),
        // warp changes, both ways, to the extremes
        Access::read(5, 0x1000, 8),
        Access::read(u32::MAX, 0x1000, 8),
        Access::read(0, 0x1000, 8),
        Access::write(u32::MAX, 0x2000, 16),
        // the ends of the address space
        Access::read(1, top - 127, 128),
        Access::read(1, top, 1),
        Access::write(2, 0, 1),
        Access::read(3, top - 3, 4),
        Access::read(3, 0, 128),
        Access::read(3, 1 << 63, 64),
        Access::read(3, (1 << 63) - 128, 32),
    ];
    assert_round_trips(&trace("hand", accesses));
}

#[test]
fn every_byte_count_round_trips() {
    let accesses: Vec<Access> = (1..=128u16)
        .map(|b| Access {
            addr: 0x10_0000 + u64::from(b) * 128,
            warp: u32::from(b % 3),
            bytes: b,
            write: b % 2 == 0,
        })
        .collect();
    assert_round_trips(&trace("sizes", accesses));
}

#[test]
fn writer_can_stream_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream.ovtrace");
    let file = fs::File::create(&path).unwrap();
    let mut w = TraceWriter::with_path(BufWriter::new(file), "stream", &path).unwrap();
    // More than one internal buffer of records.
    for i in 0..100_000u64 {
        w.push(Access::read((i % 7) as u32, i * 128, 128)).unwrap();
    }
    w.finish().unwrap();
    let t = read_trace(&path).unwrap();
    assert_eq!(t.name, "stream");
    assert_eq!(t.accesses.len(), 100_000);
    assert_eq!(
        t.accesses[99_999],
        Access::read((99_999 % 7) as u32, 99_999 * 128, 128)
    );
}

#[test]
fn unfinished_writer_leaves_a_rejected_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.ovtrace");
    let mut w = TraceWriter::new(fs::File::create(&path).unwrap(), "cut").unwrap();
    for i in 0..100_000u64 {
        w.push(Access::read(0, i * 128, 128)).unwrap();
    }
    drop(w); // no finish(): some buffers reached the file, the footer did not
    let err = read_trace(&path).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");

    let mut bytes = encode(&trace("cut", vec![Access::read(0, 128, 128)]));
    bytes.truncate(bytes.len() - 17); // the end marker and the footer
    let err = decode(&bytes, Path::new("cut.ovtrace"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("truncated") && err.contains("after 1 records"),
        "{err}"
    );
}

#[test]
fn corruption_is_reported_by_the_last_item() {
    let t = trace(
        "c",
        (0..100).map(|i| Access::read(0, i * 128, 128)).collect(),
    );
    let mut bytes = encode(&t);
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01; // flips the write bit of some record: still parses
    let items: Vec<_> = TraceReader::new(&bytes[..], "c").unwrap().collect();
    assert_eq!(items.len(), 101);
    assert!(items[..100].iter().all(Result::is_ok));
    let err = items[100].as_ref().unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn malformed_binary_errors_name_the_byte() {
    let t = trace("m", vec![Access::read(0, 4096, 128)]);
    let good = encode(&t);

    let mut trailing = good.clone();
    trailing.push(0);
    let err = decode(&trailing, Path::new("m")).unwrap_err();
    match &err {
        SimError::BadFile {
            location, reason, ..
        } => {
            assert_eq!(location, &format!("byte {}", good.len()));
            assert!(reason.contains("trailing garbage"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }

    let mut count = good.clone();
    let n = count.len();
    count[n - 16] = 2; // the footer count, then a checksum over it
    let sum = fnv(&count[..n - 8]);
    count[n - 8..].copy_from_slice(&sum.to_le_bytes());
    let err = decode(&count, Path::new("m")).unwrap_err().to_string();
    assert!(err.contains("footer says 2 accesses but 1"), "{err}");

    let mut name = good.clone();
    name[12..16].copy_from_slice(&65_536u32.to_le_bytes());
    let err = decode(&name, Path::new("m")).unwrap_err().to_string();
    assert!(
        err.contains("byte 12") && err.contains("name length"),
        "{err}"
    );

    let mut utf8 = encode(&trace("mm", vec![]));
    utf8[17] = 0xc3; // a lead byte with nothing after it in the name
    let err = decode(&utf8, Path::new("m")).unwrap_err().to_string();
    assert!(err.contains("byte 17") && err.contains("UTF-8"), "{err}");
}

/// FNV-1a 64, as the spec defines the checksum.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn access_strategy() -> impl Strategy<Value = Access> {
    let addr = prop_oneof![
        any::<u64>(),
        0u64..1 << 20,
        (0u64..1 << 24).prop_map(|line| line * 128),
        (u64::MAX - 4096..=u64::MAX),
    ];
    let warp = prop_oneof![Just(0u32), 0u32..64, any::<u32>()];
    (addr, warp, 1u16..=128, any::<bool>()).prop_map(|(addr, warp, bytes, write)| Access {
        addr: addr.min(u64::MAX - (u64::from(bytes) - 1)),
        warp,
        bytes,
        write,
    })
}

fn trace_strategy() -> impl Strategy<Value = Trace> {
    (
        "[a-z0-9_.-]{0,12}",
        prop::collection::vec(access_strategy(), 0..300),
    )
        .prop_map(|(name, accesses)| Trace { name, accesses })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_traces_round_trip(t in trace_strategy()) {
        let bytes = encode(&t);
        prop_assert_eq!(decode(&bytes, Path::new("p")).unwrap(), t.clone());
        let mut w = TraceWriter::new(Vec::new(), &t.name).unwrap();
        for &a in &t.accesses {
            w.push(a).unwrap();
        }
        prop_assert_eq!(w.finish().unwrap(), bytes);
    }

    #[test]
    fn random_bytes_are_rejected(mut bytes in prop::collection::vec(any::<u8>(), 0..600), header in any::<bool>()) {
        if header {
            // Get past the magic and version to exercise the record decoder.
            let mut v = b"OVSTRACE".to_vec();
            v.extend_from_slice(&1u32.to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
            v.append(&mut bytes);
            bytes = v;
        }
        prop_assert!(decode(&bytes, Path::new("fuzz")).is_err());
    }

    #[test]
    fn mutated_files_are_rejected(
        t in trace_strategy(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        extra in any::<u8>(),
    ) {
        let good = encode(&t);
        let mut bad = good.clone();
        let i = at.index(bad.len());
        bad[i] ^= flip;
        prop_assert!(decode(&bad, Path::new("flip")).is_err(), "flip at {}", i);

        let short = &good[..cut.index(good.len())];
        prop_assert!(decode(short, Path::new("cut")).is_err());

        let mut longer = good.clone();
        longer.insert(at.index(good.len() + 1), extra);
        prop_assert!(decode(&longer, Path::new("insert")).is_err());
    }

    #[test]
    fn random_text_never_panics(
        lines in prop::collection::vec(
            (
                prop_oneof![
                    Just(""),
                    Just("MEMTRACE: CTX 0x01 - "),
                    Just("CTA "),
                    Just("CTX 0x1 - CTA 1,2,3 - warp 4 - "),
                ],
                "[ -~]{0,80}",
            ),
            0..8),
    ) {
        let text: String = lines.iter().map(|(p, s)| format!("{p}{s}\n")).collect();
        let _ = import_nvbit_reader(text.as_bytes(), Path::new("fuzz.txt"));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// NVBit mem_trace
// ---------------------------------------------------------------------------------------------------------------

const CTX: &str = "0x00005603f0a1b2c0";
const A: u64 = 0x0000_7f3a_5800_0000;
const B: u64 = 0x0000_7f3a_5820_0000;
const C: u64 = 0x0000_7f3a_5840_0040;
const D: u64 = 0x0000_7f3a_5860_0000;
const E: u64 = 0x0000_7f3a_5880_0010;
const F: u64 = 0x0000_7f3a_58a0_0000;
const G: u64 = 0x0000_7f3a_58c0_0000;

/// The 32 lane addresses as mem_trace prints them (`0x%016lx ` each).
fn lanes(addr: impl Fn(u64) -> u64) -> String {
    (0..32).map(|i| format!("0x{:016x} ", addr(i))).collect()
}

/// A record line of recent NVBit (1.5 and later).
fn recent(launch: u64, cta: &str, warp: u32, op: &str, addrs: String) -> String {
    format!("MEMTRACE: CTX {CTX} - grid_launch_id {launch} - CTA {cta} - warp {warp} - {op} - {addrs}\n")
}

fn launch_line(id: u64) -> String {
    format!(
        "MEMTRACE: CTX {CTX} - LAUNCH - Kernel pc 0x00007f3a5c000000 - Kernel name vecAdd(double*, double*, \
         double*, int) - grid launch id {id} - grid size 2,1,1 - block size 64,1,1 - nregs 16 - shmem 0 - cuda \
         stream id 0\n"
    )
}

const BANNER: &str = "\
------------- NVBit (NVidia Binary Instrumentation Tool v1.7.1) Loaded --------------
NVBit core environment variables (mostly for nvbit-devs):
            NVDISASM = nvdisasm - override default nvdisasm found in PATH
            NOBANNER = 0 - if set, does not print this banner
---------------------------------------------------------------------------------
         INSTR_BEGIN = 0 - Beginning of the instruction interval where to apply instrumentation
           INSTR_END = 4294967295 - End of the instruction interval where to apply instrumentation
        TOOL_VERBOSE = 0 - Enable verbosity inside the tool
----------------------------------------------------------------------------------------------------
";

fn recent_sample() -> String {
    let mut s = BANNER.to_string();
    s += &launch_line(0);
    s += &recent(0, "0,0,0", 0, "LDG.E", lanes(|i| A + 4 * i));
    s += &recent(0, "0,0,0", 1, "LDG.E.64", lanes(|i| B + 8 * i));
    s += &recent(
        0,
        "1,0,0",
        0,
        "STG.E",
        lanes(|i| if i < 16 { C + 4 * i } else { 0 }),
    );
    s += &recent(0, "0,0,0", 0, "LDS", lanes(|i| 4 * i + 16));
    s += &recent(
        0,
        "0,0,0",
        0,
        "LDG.E.U8",
        lanes(|i| match i {
            0..=7 => D + 5,
            8..=15 => D + 130 + (i - 8),
            _ => 0,
        }),
    );
    s += &recent(0, "0,0,0", 1, "ATOMG.E.ADD.STRONG.GPU", lanes(|_| E));
    s += &recent(0, "1,0,0", 0, "STL.64", lanes(|i| 0xfffc80 + 8 * i));
    s += &recent(0, "1,0,0", 1, "LDG.E", lanes(|_| 0));
    s += "Result = PASS\r\n";
    s += &launch_line(1);
    s += &recent(
        1,
        "0,0,0",
        0,
        "LDG.E.128",
        lanes(|i| if i < 8 { F + 16 * i } else { 0 }),
    );
    s += &recent(
        1,
        "0,0,0",
        0,
        "STG.E.128",
        lanes(|i| if i < 8 { G + 16 * (7 - i) } else { 0 }),
    );
    s
}

fn recent_expected() -> Vec<Access> {
    vec![
        Access::read(0, A, 128),
        Access::read(1, B, 128),
        Access::read(1, B + 128, 128),
        Access::write(2, C, 64),
        Access::read(0, D + 5, 1),
        Access::read(0, D + 130, 8),
        Access::write(1, E, 4),
        // a new launch: new warps
        Access::read(3, F, 128),
        Access::write(3, G, 128),
    ]
}

#[test]
fn nvbit_recent_format_imports() {
    let text = recent_sample();
    let (t, stats) =
        import_nvbit_with_stats(text.as_bytes(), Path::new("/runs/vecadd.nvbit.txt")).unwrap();
    assert_eq!(t.name, "vecadd");
    assert_eq!(t.accesses, recent_expected());
    assert_eq!(
        stats,
        NvbitStats {
            lines: 22,
            records: 10,
            launches: 2,
            other_lines: 10,
            skipped_records: 2,
            empty_records: 1,
            warps: 4,
        }
    );
}

#[test]
fn nvbit_older_formats_import() {
    let text = format!(
        "------------- NVBit (NVidia Binary Instrumentation Tool v1.4) Loaded --------------\n\
         Kernel _Z6vecAddPdS_S_i - grid size 1,1,1 - block size 32,1,1 - nregs 16 - shmem 0 - cuda stream id 0\n\
         CTA 0,0,0 - warp 0 - LDG.E.64.SYS - {}\n\
         CTA 0,0,0 - warp 0 - STG.E.64.SYS - {}\n\
         CTX {CTX} - CTA 2,0,0 - warp 3 - LD.E - {}\n\
         Final sum = 1.000000; sum/n = 1.000000 (should be ~1)\n",
        lanes(|i| A + 8 * i),
        lanes(|i| C - 0x40 + 8 * i),
        lanes(|i| if i % 2 == 0 { A + 4 * i } else { 0 }),
    );
    let t = import_nvbit_reader(text.as_bytes(), Path::new("old.log")).unwrap();
    assert_eq!(t.name, "old");
    assert_eq!(
        t.accesses,
        vec![
            Access::read(0, A, 128),
            Access::read(0, A + 128, 128),
            Access::write(0, C - 0x40, 128),
            Access::write(0, C + 0x40, 128),
            // 16 lanes of 4 bytes, every other word
            Access::read(1, A, 64),
        ]
    );
}

#[test]
fn nvbit_import_round_trips_through_binary() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("app.nvbit.txt");
    fs::write(&txt, recent_sample()).unwrap();
    let imported = import_nvbit(&txt).unwrap();
    assert_eq!(imported.accesses, recent_expected());
    assert_eq!(load(&txt).unwrap(), imported);

    let bin = dir.path().join("app.ovtrace");
    write_trace(&bin, &imported).unwrap();
    assert_eq!(read_trace(&bin).unwrap(), imported);
    assert_eq!(load(&bin).unwrap(), imported);
}

#[test]
fn malformed_nvbit_record_names_the_line() {
    let mut text = recent_sample();
    // Cut the first LDG.E record (line 11) after twenty addresses, as a killed process would.
    let start = text.find("- LDG.E - ").unwrap();
    let cut = start + "- LDG.E - ".len() + 20 * 19;
    let end = cut + text[cut..].find('\n').unwrap();
    text.replace_range(cut..end, "");
    let err = import_nvbit_reader(text.as_bytes(), Path::new("bad.txt")).unwrap_err();
    match err {
        SimError::BadFile {
            location, reason, ..
        } => {
            assert_eq!(location, "line 11");
            assert!(reason.contains("20 addresses"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }

    let text = format!(
        "{BANNER}CTA 0,0 - warp 0 - LDG.E - {}\n",
        lanes(|i| A + 4 * i)
    );
    let err = import_nvbit_reader(text.as_bytes(), Path::new("bad.txt"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 10") && err.contains("CTA coordinates"),
        "{err}"
    );
}

#[test]
fn files_of_neither_kind_are_rejected_clearly() {
    let dir = tempfile::tempdir().unwrap();

    let text = dir.path().join("notes.txt");
    fs::write(&text, "hello\nworld\n").unwrap();
    let err = load(&text).unwrap_err().to_string();
    assert!(err.contains("neither") && err.contains("2 lines"), "{err}");
    let err = import_nvbit(&text).unwrap_err().to_string();
    assert!(err.contains("mem_trace"), "{err}");

    let png = dir.path().join("plot.png");
    fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let err = load(&png).unwrap_err().to_string();
    assert!(err.contains("byte 0") && err.contains("neither"), "{err}");

    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    let err = load(&empty).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");

    // NVBit text handed to the binary reader: say what it looks like.
    let nvbit = dir.path().join("app.txt");
    fs::write(&nvbit, recent(0, "0,0,0", 0, "LDG.E", lanes(|i| A + 4 * i))).unwrap();
    let err = read_trace(&nvbit).unwrap_err().to_string();
    assert!(err.contains("byte 0") && err.contains("mem_trace"), "{err}");

    let missing = dir.path().join("missing");
    assert!(matches!(load(&missing), Err(SimError::Io { .. })));
}

// ---------------------------------------------------------------------------------------------------------------
// Size
// ---------------------------------------------------------------------------------------------------------------

/// xorshift64*: enough randomness for a size measurement, without depending on the crate's generator.
fn rand(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn bytes_per_access(t: &Trace) -> f64 {
    encode(t).len() as f64 / t.accesses.len() as f64
}

#[test]
fn encoding_is_compact() {
    const N: u64 = 100_000;
    let base = 0x7f00_0000_0000u64;
    let seq = trace(
        "seq",
        (0..N)
            .map(|i| Access::read(0, base + i * 128, 128))
            .collect(),
    );
    let warps = trace(
        "seq-32-warps",
        (0..N)
            .map(|i| Access::read((i % 32) as u32, base + i * 128, 128))
            .collect(),
    );
    let mut s = 0x9e37_79b9_7f4a_7c15;
    let random = trace(
        "random-1GiB",
        (0..N)
            .map(|_| {
                let line = rand(&mut s) % (1 << 23);
                let warp = (rand(&mut s) % 1024) as u32;
                let write = rand(&mut s) & 3 == 0;
                let bytes = if rand(&mut s) & 1 == 0 { 128 } else { 4 };
                Access {
                    addr: base + line * 128,
                    warp,
                    bytes,
                    write,
                }
            })
            .collect(),
    );
    let (a, b, c) = (
        bytes_per_access(&seq),
        bytes_per_access(&warps),
        bytes_per_access(&random),
    );
    eprintln!(
        "bytes/access: sequential {a:.2}, sequential over 32 warps {b:.2}, random in 1 GiB over 1024 warps {c:.2}"
    );
    assert!(a < 2.01, "{a}");
    assert!(b < 3.01, "{b}");
    assert!(c < 7.5, "{c}");
    for t in [&seq, &warps, &random] {
        assert_eq!(&decode(&encode(t), Path::new("size")).unwrap(), t);
    }
}
