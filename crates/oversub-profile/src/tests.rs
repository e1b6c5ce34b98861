//! Round trips, every refusal with its key or line, atomic saves, and a parser that never panics on what users write.

use std::path::Path;

use proptest::prelude::*;

use crate::*;

const P: &str = "p.toml";

fn full() -> Profile {
    Profile {
        profile: Meta {
            version: VERSION,
            created_by: Some("oversub 0.1.0 probe".into()),
            created_unix_s: Some(1_700_000_000),
            host: Some("box \"one\"".into()),
            kernel: Some("6.8.0-45-generic".into()),
            cpu_model: Some("AMD EPYC 7B13".into()),
            cpus: Some(2),
            quick: true,
        },
        cpu: Some(Cpu {
            tlb_miss_latency_s: 8.5e-9,
            tlb_miss_count: MissCount::Derived,
            stride_4k_access_s: Some(1.25e-8),
            stride_4k_access_thp_s: Some(4.0e-9),
            page_fault_s: 2.5e-7,
            uffd_fault_s: Some(6.1e-6),
            shootdown_s: Some(3.3e-6),
            memcpy_bytes_per_s: 9.87e9,
        }),
        storage: Some(Storage {
            read_bytes_per_s: 1.9e9,
            write_bytes_per_s: 4.4e9,
            path: Some("/var/tmp".into()),
            block_bytes: Some(1 << 20),
            queue_depth: Some(8),
            points: vec![
                StoragePoint {
                    block_bytes: 4096,
                    queue_depth: 1,
                    read_bytes_per_s: 1.1e8,
                    write_bytes_per_s: 9.0e7,
                },
                StoragePoint {
                    block_bytes: 1 << 20,
                    queue_depth: 8,
                    read_bytes_per_s: 1.9e9,
                    write_bytes_per_s: 4.4e9,
                },
            ],
        }),
        gpu: Some(Gpu {
            name: "NVIDIA H100 80GB HBM3".into(),
            h2d_pinned_bytes_per_s: Some(5.3e10),
            d2h_pinned_bytes_per_s: Some(5.4e10),
            h2d_pageable_bytes_per_s: Some(1.2e10),
            d2h_pageable_bytes_per_s: Some(1.1e10),
            managed_fault_s: Some(3.1e-5),
            prefetch_bytes_per_s: Some(4.0e10),
            vmm_map_s: Some(2.0e-5),
            vmm_unmap_s: Some(1.5e-5),
            vmm_granularity_bytes: Some(2 << 20),
            preempt_s: Some(1.0e-4),
        }),
        uvm: Some(Uvm {
            line_bytes: Some(128),
            page_bytes: Some(4096),
            cpu_mem_bytes_per_s: Some(2.0e10),
            gpu_mem_bytes_per_s: Some(3.0e12),
            pci_bytes_per_s: Some(5.0e10),
            fault_s: Some(0.0),
            fault_service_s: Some(3e-6),
            remote_line_s: Some(1e-6),
            transfer_setup_s: Some(2e-6),
            outstanding_misses: Some(240),
            l2_bytes: Some(50 << 20),
            l2_ways: Some(16),
            remote_lines_per_s: Some(3.9e8),
            migrate_4k_stride_page_s: Some(1.04e-6),
            migrate_64k_stride_touch_s: Some(3.8e-6),
        }),
        swap: Some(SwapMachine {
            memory_bytes_per_s: Some(2.0e10),
            ssd_read_bytes_per_s: Some(1.9e9),
            ssd_write_bytes_per_s: Some(4.4e9),
        }),
    }
}

fn parse(text: &str) -> Result<Profile, ProfileError> {
    Profile::from_toml_str(text, P)
}

/// The error for `text` with `[profile] version = 1` in front of it.
fn refused(text: &str) -> ProfileError {
    match parse(&format!("[profile]\nversion = 1\n{text}")) {
        Ok(p) => panic!("accepted {text:?}: {p:?}"),
        Err(e) => e,
    }
}

fn invalid_key(e: &ProfileError) -> &str {
    match e {
        ProfileError::Invalid { key, .. } => key,
        other => panic!("not an Invalid error: {other:?}"),
    }
}

fn parse_line(e: &ProfileError) -> Option<usize> {
    match e {
        ProfileError::Parse { line, .. } => *line,
        other => panic!("not a Parse error: {other:?}"),
    }
}

#[test]
fn full_and_minimal_profiles_round_trip() {
    for p in [full(), Profile::new(Meta::default())] {
        let text = p.to_toml_string().unwrap();
        assert!(
            text.starts_with("# oversub platform profile, schema version 1: see docs/profile.md\n"),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), p, "{text}");
    }
    let text = full().to_toml_string().unwrap();
    for table in [
        "[profile]",
        "[cpu]",
        "[storage]",
        "[[storage.points]]",
        "[gpu]",
        "[uvm]",
        "[swap]",
    ] {
        assert!(text.contains(table), "{table} missing: {text}");
    }
    assert!(text.contains("tlb_miss_count = \"derived\""), "{text}");
    let minimal = Profile::new(Meta::default()).to_toml_string().unwrap();
    assert!(!minimal.contains("[storage]"), "{minimal}");
}

#[test]
fn hand_written_profile_with_integers_for_bandwidths_is_read() {
    let p = parse(
        "# mine\n[profile]\nversion = 1\n[storage]\nread_bytes_per_s = 1000000000\nwrite_bytes_per_s = 2e9\n",
    )
    .unwrap();
    let s = p.storage.unwrap();
    assert_eq!(s.read_bytes_per_s, 1e9);
    assert_eq!(s.write_bytes_per_s, 2e9);
    assert!(s.points.is_empty());
    assert!(!p.profile.quick);
}

#[test]
fn other_versions_are_refused_before_the_schema_is_looked_at() {
    // A newer file may well have keys this build does not know: the version is what to report.
    let e = parse("[profile]\nversion = 2\n[storage]\nread_bytes_per_s = 1e9\nnew_key = 1\n")
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProfileError::Version {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "p.toml: schema version 2 is not supported; this oversub reads version 1 (re-run `oversub probe`)"
    );
    let e = parse("[profile]\nversion = 0\n").unwrap_err();
    assert!(matches!(e, ProfileError::Version { found: 0, .. }), "{e:?}");
    for bad in ["\"1\"", "1.0", "-1", "4294967296"] {
        let e = parse(&format!("[profile]\nversion = {bad}\n")).unwrap_err();
        assert!(
            e.to_string()
                .contains("profile.version must be a whole number"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn missing_profile_table_or_version_is_named() {
    for text in [
        "",
        "# nothing\n",
        "[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\n",
        "[profile]\ncreated_by = \"me\"\n",
        "profile = 1\n",
    ] {
        let e = parse(text).unwrap_err();
        assert!(
            e.to_string()
                .contains("missing the [profile] table with `version = 1`"),
            "{text:?}: {e}"
        );
        assert!(e.to_string().starts_with("p.toml: "), "{e}");
    }
}

#[test]
fn syntax_errors_unknown_and_missing_keys_have_lines() {
    let e = parse("[profile]\nversion = 1\n\n[storage\n").unwrap_err();
    assert_eq!(parse_line(&e), Some(4), "{e}");
    assert!(e.to_string().starts_with("p.toml: line 4: "), "{e}");

    let e =
        refused("[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\nblock_size = 4096\n");
    assert_eq!(parse_line(&e), Some(6), "{e}");
    assert!(e.to_string().contains("block_size"), "{e}");

    let e = refused("[tlb]\nmiss_s = 1e-9\n");
    assert_eq!(parse_line(&e), Some(3), "{e}");
    assert!(e.to_string().contains("tlb"), "{e}");

    let e = refused("[storage]\nread_bytes_per_s = 1e9\n");
    assert_eq!(
        e.to_string(),
        "p.toml: line 3: missing field `write_bytes_per_s` in [storage]"
    );
    let e = refused("[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\n[[storage.points]]\nblock_bytes = 4096\n");
    assert!(e.to_string().contains("in [[storage.points]]"), "{e}");

    let e = refused("[storage]\nread_bytes_per_s = \"fast\"\nwrite_bytes_per_s = 1e9\n");
    assert_eq!(parse_line(&e), Some(4), "{e}");

    let e = refused("[cpu]\ntlb_miss_latency_s = 1e-9\ntlb_miss_count = \"guessed\"\npage_fault_s = 1e-7\nmemcpy_bytes_per_s = 1e9\n");
    assert_eq!(parse_line(&e), Some(5), "{e}");

    let e = refused("[uvm]\nl2_ways = -16\n");
    assert_eq!(parse_line(&e), Some(4), "{e}");
}

#[test]
fn out_of_range_values_name_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[storage]\nread_bytes_per_s = -5\nwrite_bytes_per_s = 1e9\n",
            "storage.read_bytes_per_s",
            "must be a positive finite number, not -5",
        ),
        (
            "[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 0\n",
            "storage.write_bytes_per_s",
            "not 0",
        ),
        (
            "[storage]\nread_bytes_per_s = nan\nwrite_bytes_per_s = 1e9\n",
            "storage.read_bytes_per_s",
            "not NaN",
        ),
        (
            "[storage]\nread_bytes_per_s = inf\nwrite_bytes_per_s = 1e9\n",
            "storage.read_bytes_per_s",
            "not inf",
        ),
        (
            "[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\nblock_bytes = 0\n",
            "storage.block_bytes",
            "must be at least 1, not 0",
        ),
        (
            "[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\nqueue_depth = 0\n",
            "storage.queue_depth",
            "at least 1",
        ),
        (
            "[cpu]\ntlb_miss_latency_s = 0.0\ntlb_miss_count = \"perf\"\npage_fault_s = 1e-7\nmemcpy_bytes_per_s = 1e9\n",
            "cpu.tlb_miss_latency_s",
            "positive",
        ),
        (
            "[cpu]\ntlb_miss_latency_s = 1e-9\ntlb_miss_count = \"perf\"\npage_fault_s = 1e-7\nmemcpy_bytes_per_s = 1e9\nshootdown_s = -1e-6\n",
            "cpu.shootdown_s",
            "positive",
        ),
        ("[gpu]\nname = \"x\"\nvmm_map_s = 0\n", "gpu.vmm_map_s", "positive"),
        (
            "[gpu]\nname = \"x\"\nvmm_granularity_bytes = 0\n",
            "gpu.vmm_granularity_bytes",
            "at least 1",
        ),
        ("[uvm]\npage_bytes = 3000\n", "uvm.page_bytes", "power of two, not 3000"),
        ("[uvm]\nline_bytes = 0\n", "uvm.line_bytes", "power of two, not 0"),
        ("[uvm]\npci_bytes_per_s = 0\n", "uvm.pci_bytes_per_s", "positive"),
        ("[uvm]\nfault_s = -1e-6\n", "uvm.fault_s", "at least 0, not -0.000001"),
        ("[uvm]\nremote_line_s = nan\n", "uvm.remote_line_s", "not NaN"),
        ("[uvm]\nl2_ways = 0\n", "uvm.l2_ways", "at least 1"),
        ("[uvm]\nl2_bytes = 0\n", "uvm.l2_bytes", "at least 1"),
        ("[swap]\nssd_write_bytes_per_s = -inf\n", "swap.ssd_write_bytes_per_s", "not -inf"),
    ];
    for (text, key, message) in cases {
        let e = refused(text);
        assert_eq!(invalid_key(&e), *key, "{text}: {e}");
        assert!(e.to_string().contains(message), "{text}: {e}");
        assert!(e.to_string().starts_with(&format!("p.toml: {key} ")), "{e}");
    }
    let e = parse("[profile]\nversion = 1\ncpus = 0\n").unwrap_err();
    assert_eq!(invalid_key(&e), "profile.cpus");
    // Free faults and remote lines are a what-if the simulator accepts.
    parse("[profile]\nversion = 1\n[uvm]\nfault_s = 0\nremote_line_s = 0.0\n").unwrap();
}

#[test]
fn a_bad_grid_point_is_named_by_its_index() {
    let mut p = full();
    if let Some(s) = &mut p.storage {
        s.points.push(StoragePoint {
            block_bytes: 0,
            queue_depth: 4,
            read_bytes_per_s: 1e9,
            write_bytes_per_s: 1e9,
        });
    }
    let e = parse(&p.to_toml_string().unwrap()).unwrap_err();
    assert_eq!(invalid_key(&e), "storage.points[2].block_bytes", "{e}");
    let e = refused(
        "[storage]\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = 1e9\n\
         [[storage.points]]\nblock_bytes = 4096\nqueue_depth = 1\nread_bytes_per_s = 1e9\nwrite_bytes_per_s = -2\n",
    );
    assert_eq!(
        invalid_key(&e),
        "storage.points[0].write_bytes_per_s",
        "{e}"
    );
}

#[test]
fn save_and_load_through_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.toml");
    full().save(&path).unwrap();
    assert_eq!(Profile::load(&path).unwrap(), full());
    // Saving again replaces the file whole and leaves no temporary file behind.
    let minimal = Profile::new(Meta::default());
    minimal.save(&path).unwrap();
    assert_eq!(Profile::load(&path).unwrap(), minimal);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("profile.toml")]);

    // A profile this build would refuse to read is not written, and the old file stays.
    let mut bad = full();
    if let Some(s) = &mut bad.storage {
        s.read_bytes_per_s = -1.0;
    }
    let e = bad.save(&path).unwrap_err();
    assert_eq!(invalid_key(&e), "storage.read_bytes_per_s");
    let mut newer = minimal.clone();
    newer.profile.version = 2;
    assert!(matches!(
        newer.save(&path).unwrap_err(),
        ProfileError::Version { found: 2, .. }
    ));
    assert_eq!(Profile::load(&path).unwrap(), minimal);

    // A directory that does not exist: an I/O error naming the file.
    let missing = dir.path().join("no/such/dir/profile.toml");
    let e = minimal.save(&missing).unwrap_err();
    assert!(matches!(e, ProfileError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("profile.toml"), "{e}");
    let e = Profile::load(&missing).unwrap_err();
    assert!(matches!(e, ProfileError::Io { .. }), "{e:?}");
}

#[test]
fn numbers_toml_cannot_hold_are_a_serialize_error() {
    let mut p = Profile::new(Meta::default());
    p.profile.created_unix_s = Some(u64::MAX);
    let e = p.to_toml_string().unwrap_err();
    assert!(matches!(e, ProfileError::Serialize { .. }), "{e:?}");
    assert!(e.to_string().contains("too large"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.toml");
    assert!(p.save(&path).is_err());
    assert!(!path.exists());
    p.profile.created_unix_s = Some(i64::MAX as u64);
    assert_eq!(parse(&p.to_toml_string().unwrap()).unwrap(), p);
}

/// Edits of a text, by character so the result stays a string: delete one, insert one, or cut the rest.
fn mutate(text: &str, edits: &[(usize, char, u8)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for &(at, c, op) in edits {
        let at = at % (chars.len() + 1);
        match op {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 => chars.insert(at, c),
            2 if at < chars.len() => chars[at] = c,
            3 => chars.truncate(at),
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// What TOML writers put where: structure characters and the values that trip range checks.
fn toml_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(vec![
            '[', ']', '=', '"', '\'', '\n', '#', '.', ',', '-', '+', 'e', '0', '1', '9', ' ', '{',
            '}', 'n', 'i',
        ]),
        any::<char>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in ".*") {
        let _ = parse(&text);
    }

    #[test]
    fn mutated_profiles_never_panic_and_what_is_accepted_round_trips(
        edits in proptest::collection::vec((any::<usize>(), toml_char(), 0u8..4), 1..6),
    ) {
        let text = mutate(&full().to_toml_string().unwrap(), &edits);
        if let Ok(p) = parse(&text) {
            // Whatever is accepted is written back in a form that reads as the same profile.
            let again = p.to_toml_string();
            prop_assert!(again.is_ok(), "{text}: {again:?}");
            if let Ok(again) = again {
                prop_assert_eq!(parse(&again).ok(), Some(p), "{}", again);
            }
        }
    }
}

#[test]
fn every_example_in_the_docs_is_a_valid_profile() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/profile.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "the full example and the smallest what-if");
    for b in &blocks {
        Profile::from_toml_str(b, &path).unwrap_or_else(|e| panic!("{e}\n{b}"));
    }
    // The first is complete: every table, the grid included.
    let p = Profile::from_toml_str(blocks[0], &path).unwrap();
    assert!(p.cpu.is_some() && p.gpu.is_some() && p.uvm.is_some() && p.swap.is_some());
    assert_eq!(p.storage.map(|s| s.points.len()), Some(2));
}
