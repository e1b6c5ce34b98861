//! Fuzzing the schedule configuration, a file users write: arbitrary text and mutations of the examples (lines
//! dropped or doubled, numbers swapped for huge, zero, negative or fractional ones, bytes flipped) must give a
//! `System` or a typed `ConfigError`, never a panic; what parses must also plan (the `oversub plan` path) without
//! panicking. `PROPTEST_CASES` raises the case count (default here: 256 per property).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_sched::config::parse_system;
use oversub_sched::plan::{self, Bandwidths, Mode};
use proptest::prelude::*;

const PAPER: &str = include_str!("../../../examples/paper.toml");
const EXPLICIT: &str = include_str!("../../../examples/explicit.toml");

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "0.0",
    "-0.5",
    "1e308",
    "1e-308",
    "nan",
    "inf",
    "-inf",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "1e20",
    "\"1PiB\"",
    "\"0B\"",
    "\"-3MiB\"",
    "\"99999999999TiB\"",
    "\"1.5\"",
    "\"\"",
];

/// What `oversub plan` does with a configuration, on a small horizon. A system too large to plan quickly is
/// skipped (its size is the user's choice, not a parser bug).
fn plan_it(text: &str) {
    let Ok(system) = parse_system(text, "fuzz.toml") else {
        return;
    };
    if system.components.len() > 16 || system.buffers().len() > 64 {
        return;
    }
    let bw = Bandwidths::direct(1e9, 1e9);
    for mode in Mode::ALL {
        let _ = plan::steady_feasible(&system, mode, bw);
        let _ = plan::plan(&system, mode, 2, bw);
    }
}

/// Applies one mutation, chosen by `kind`, at position `at` (scaled to the text), with `pick` choosing a value.
fn mutate(base: &str, kind: u8, at: usize, pick: usize) -> String {
    let lines: Vec<&str> = base.lines().collect();
    let n = lines.len().max(1);
    match kind % 5 {
        // Drop a line.
        0 => lines
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at % n)
            .map(|(_, l)| *l)
            .collect::<Vec<_>>()
            .join("\n"),
        // Double a line.
        1 => {
            let mut v = lines.clone();
            if let Some(l) = lines.get(at % n) {
                v.insert(at % n, l);
            }
            v.join("\n")
        }
        // Replace the k-th number with a hostile one.
        2 | 3 => {
            let bytes = base.as_bytes();
            let starts: Vec<usize> = (0..bytes.len())
                .filter(|&i| {
                    bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                })
                .collect();
            if starts.is_empty() {
                return base.to_string();
            }
            let s = starts[at % starts.len()];
            let mut e = s;
            while e < bytes.len()
                && (bytes[e].is_ascii_alphanumeric() || bytes[e] == b'.' || bytes[e] == b'_')
            {
                e += 1;
            }
            format!(
                "{}{}{}",
                &base[..s],
                NUMBERS[pick % NUMBERS.len()],
                &base[e..]
            )
        }
        // Flip a byte (kept valid UTF-8 by flipping within ASCII).
        _ => {
            let mut b = base.as_bytes().to_vec();
            if !b.is_empty() {
                let i = at % b.len();
                if b[i].is_ascii() {
                    b[i] = (b[i] ^ (1 << (pick % 7))) & 0x7f;
                }
            }
            String::from_utf8(b).unwrap_or_else(|_| base.to_string())
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        plan_it(&text);
    }

    #[test]
    fn arbitrary_toml_shaped_text_never_panics(
        text in "(\\[[a-z_\\.\\[\\]]{1,20}\\]\n|[a-z_]{1,12} = (-?[0-9]{1,22}(\\.[0-9]{1,4})?|\"[0-9A-Za-z ]{0,10}\"|\\[[0-9, \"A-Z]{0,20}\\]|true)\n){0,30}"
    ) {
        plan_it(&text);
    }

    #[test]
    fn mutated_examples_parse_or_fail_with_a_typed_error(
        which in any::<bool>(),
        steps in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..4),
    ) {
        let mut text = if which { PAPER.to_string() } else { EXPLICIT.to_string() };
        for (kind, at, pick) in steps {
            text = mutate(&text, kind, at, pick);
        }
        plan_it(&text);
    }
}
