//! Fuzzing the two trace readers, which take files users bring: the binary decoder over arbitrary bytes and over
//! corrupted encodings of real traces, and the NVBit `mem_trace` importer over arbitrary and mutated text. Each
//! must return a trace or a typed `SimError`, never panic or allocate what a length field claims; a trace that
//! decodes must encode back to the same bytes. `PROPTEST_CASES` raises the case count (default here: 256).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Cursor;
use std::path::Path;

use oversub_sim::uvm::trace::{decode, encode, import_nvbit_reader};
use oversub_sim::uvm::{Access, Trace};
use proptest::prelude::*;

fn sample_trace(n: usize, seed: u64) -> Trace {
    let mut x = seed | 1;
    let accesses = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Access {
                addr: x % (1 << 34),
                warp: (x >> 40) as u32 % 64,
                bytes: 1 + (x >> 20) as u16 % 128,
                write: x & 1 == 0,
            }
        })
        .collect();
    Trace {
        name: "fuzz".into(),
        accesses,
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(t) = decode(&bytes, Path::new("fuzz")) {
            prop_assert_eq!(encode(&t), bytes);
        }
    }

    #[test]
    fn corrupted_traces_are_refused_or_round_trip(
        n in 0usize..64,
        seed in any::<u64>(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<Option<usize>>(),
    ) {
        let mut bytes = encode(&sample_trace(n, seed));
        for (at, mask) in flips {
            let i = at % bytes.len();
            bytes[i] ^= mask.max(1);
        }
        if let Some(c) = cut {
            bytes.truncate(c % (bytes.len() + 1));
        }
        if let Ok(t) = decode(&bytes, Path::new("fuzz")) {
            prop_assert_eq!(encode(&t), bytes);
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_nvbit_importer(text in ".{0,600}") {
        let _ = import_nvbit_reader(Cursor::new(text.into_bytes()), Path::new("fuzz.txt"));
    }

    #[test]
    fn nvbit_shaped_lines_import_or_fail_with_a_typed_error(
        lines in prop::collection::vec(
            "(MEMTRACE: )?(CTX 0x[0-9a-f]{1,18} - (grid_launch_id [0-9]{1,20} - )?)?(CTA [0-9]{1,12},[0-9]{1,3},[0-9]{1,3} - warp [0-9]{1,11} - (LDG|STG|LD|ST|ATOM)[.A-Z0-9]{0,8} - (0x[0-9a-f]{0,20} ?){0,34}|LAUNCH - .{0,30}|.{0,40})",
            0..20,
        ),
    ) {
        let text = lines.join("\n");
        let _ = import_nvbit_reader(Cursor::new(text.into_bytes()), Path::new("fuzz.txt"));
    }
}
