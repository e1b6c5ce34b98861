//! Fuzzing the platform profile, a file users hand to `plan`, `run` and the simulators: arbitrary text and
//! mutations of a valid profile must give a `Profile` or a typed `ProfileError`, never a panic, and a profile that
//! loads must write back out and load again. `PROPTEST_CASES` raises the case count (default here: 256).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_profile::Profile;
use proptest::prelude::*;

/// A profile with every table, as the probe writes one (the fields of the crate's own full test profile).
const FULL: &str = r#"
[profile]
version = 1
created_by = "oversub 0.1.0 probe"
created_unix_s = 1700000000
host = "box"
kernel = "6.8.0-45-generic"
cpu_model = "AMD EPYC 7B13"
cpus = 2
quick = true

[cpu]
tlb_miss_latency_s = 8.5e-9
tlb_miss_count = "derived"
stride_4k_access_s = 1.25e-8
stride_4k_access_thp_s = 4.0e-9
page_fault_s = 2.5e-7
uffd_fault_s = 6.1e-6
shootdown_s = 3.3e-6
memcpy_bytes_per_s = 9.87e9

[storage]
read_bytes_per_s = 1.9e9
write_bytes_per_s = 4.4e9
path = "/var/tmp"
block_bytes = 1048576
queue_depth = 8

[[storage.points]]
block_bytes = 4096
queue_depth = 1
read_bytes_per_s = 1.1e8
write_bytes_per_s = 9.0e7

[[storage.points]]
block_bytes = 1048576
queue_depth = 8
read_bytes_per_s = 1.9e9
write_bytes_per_s = 4.4e9

[gpu]
name = "NVIDIA H100 80GB HBM3"
h2d_pinned_bytes_per_s = 5.3e10
d2h_pinned_bytes_per_s = 5.4e10
managed_fault_s = 3.1e-5
vmm_granularity_bytes = 2097152
preempt_s = 1.0e-4

[uvm]
line_bytes = 128
page_bytes = 4096
pci_bytes_per_s = 5.0e10
fault_s = 0.0
fault_service_s = 3e-6
remote_line_s = 1e-6
transfer_setup_s = 2e-6
outstanding_misses = 240
l2_bytes = 52428800
l2_ways = 16

[swap]
memory_bytes_per_s = 2.0e10
ssd_read_bytes_per_s = 1.9e9
ssd_write_bytes_per_s = 4.4e9
"#;

fn valid() -> String {
    if let Err(e) = Profile::from_toml_str(FULL, "full.toml") {
        panic!("the full profile should load: {e}");
    }
    FULL.to_string()
}

fn check(text: &str) {
    if let Ok(p) = Profile::from_toml_str(text, "fuzz.toml") {
        let out = p.to_toml_string().unwrap();
        let back = Profile::from_toml_str(&out, "fuzz-back.toml");
        assert!(
            back.is_ok(),
            "a loaded profile did not load again: {back:?}\n{out}"
        );
    }
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "18446744073709551615",
    "9223372036854775807",
    "-0.0",
    "1e-320",
    "\"x\"",
    "[]",
    "{}",
];

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        check(&text);
    }

    #[test]
    fn mutated_profiles_load_or_fail_with_a_typed_error(
        edits in prop::collection::vec((any::<usize>(), any::<usize>(), 0u8..3), 1..4),
    ) {
        let mut lines: Vec<String> = valid().lines().map(str::to_string).collect();
        for (at, pick, kind) in edits {
            if lines.is_empty() {
                break;
            }
            let i = at % lines.len();
            match kind {
                0 => { lines.remove(i); }
                1 => { let l = lines[i].clone(); lines.insert(i, l); }
                _ => {
                    if let Some(eq) = lines[i].find('=') {
                        lines[i] = format!("{}= {}", &lines[i][..eq], NUMBERS[pick % NUMBERS.len()]);
                    }
                }
            }
        }
        check(&lines.join("\n"));
    }
}
