//! The workload generators through their public API: shapes, bounds, determinism, graph files and errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::time::Instant;

use oversub_sim::uvm::workload::{
    coalesce, generate, generate_into, info, WorkloadInfo, WorkloadKind, WorkloadParams,
    WorkloadSize, HEAP_BASE, MAX_SCALE,
};
use oversub_sim::uvm::{Access, SimError, BLOCK_BYTES, LINE_BYTES};

const MIB: f64 = 1024.0 * 1024.0;

fn params(size: WorkloadSize, seed: u64) -> WorkloadParams {
    WorkloadParams {
        size,
        seed,
        graph: None,
    }
}

/// A small size for the tests that generate several times.
const SMALL: WorkloadSize = WorkloadSize::Scale(1.0 / 64.0);

/// Checks every access against the allocations; returns how many accesses fell in each.
fn check_bounds(kind: WorkloadKind, info: &WorkloadInfo, accesses: &[Access]) -> Vec<u64> {
    let ranges = info.ranges();
    assert_eq!(ranges.len(), info.allocations.len());
    assert_eq!(ranges.first().map(|r| r.start), Some(HEAP_BASE));
    for r in &ranges {
        assert_eq!(
            r.start % BLOCK_BYTES,
            0,
            "{kind}: allocation not 2 MiB aligned"
        );
    }
    let mut hits = vec![0u64; ranges.len()];
    for a in accesses {
        assert!((1..=128).contains(&a.bytes), "{kind}: {a:?} has a bad size");
        assert!(
            a.addr % LINE_BYTES + u64::from(a.bytes) <= LINE_BYTES,
            "{kind}: {a:?} crosses a line"
        );
        let Some(i) = ranges.iter().position(|r| r.contains(&a.addr)) else {
            panic!("{kind}: {a:?} lies outside every allocation {ranges:x?}");
        };
        assert!(
            a.addr + u64::from(a.bytes) <= ranges[i].end,
            "{kind}: {a:?} runs off its allocation"
        );
        hits[i] += 1;
    }
    hits
}

#[test]
fn every_workload_generates_in_bounds_at_quick_size() {
    // In parallel: this is the expensive test.
    std::thread::scope(|s| {
        for kind in WorkloadKind::ALL {
            s.spawn(move || {
                let p = params(WorkloadSize::Quick, 1);
                let info = info(kind, &p).unwrap();
                let footprint = info.footprint_bytes as f64 / MIB;
                // PageRank (10 iterations) and Gaussian (every pivot) spend their accesses on time, not size.
                let band = match kind {
                    WorkloadKind::PageRank | WorkloadKind::Gaussian => 0.5..=4.0,
                    _ => 16.0..=48.0,
                };
                assert!(
                    band.contains(&footprint),
                    "{kind}: quick footprint {footprint:.1} MiB"
                );
                assert_eq!(
                    info.footprint_bytes,
                    info.allocations.iter().map(|a| a.1).sum::<u64>()
                );
                let trace = generate(kind, &p).unwrap();
                assert_eq!(trace.name, kind.name());
                assert!(!trace.accesses.is_empty(), "{kind}: empty trace");
                let hits = check_bounds(kind, &info, &trace.accesses);
                // Every array but the one-byte flags is touched.
                for ((name, bytes), h) in info.allocations.iter().zip(&hits) {
                    assert!(
                        *h > 0 || *bytes <= 1,
                        "{kind}: allocation {name} never touched"
                    );
                }
                assert!(trace.accesses.iter().any(|a| a.write), "{kind}: no stores");
                // Warps interleave: the first accesses come from many different warps.
                let mut warps: Vec<u32> =
                    trace.accesses.iter().take(2000).map(|a| a.warp).collect();
                warps.sort_unstable();
                warps.dedup();
                assert!(
                    warps.len() > 1,
                    "{kind}: a single warp in the first accesses"
                );
            });
        }
    });
}

#[test]
fn same_seed_same_trace_and_streaming_matches() {
    std::thread::scope(|s| {
        for kind in WorkloadKind::ALL {
            s.spawn(move || {
                let a = generate(kind, &params(SMALL, 7)).unwrap();
                let mut streamed = Vec::new();
                generate_into(kind, &params(SMALL, 7), &mut |x| streamed.push(x)).unwrap();
                assert_eq!(
                    a.accesses, streamed,
                    "{kind}: generate_into differs from generate"
                );
                let b = generate(kind, &params(SMALL, 7)).unwrap();
                assert_eq!(a, b, "{kind}: not deterministic");
                let info = info(kind, &params(SMALL, 7)).unwrap();
                check_bounds(kind, &info, &a.accesses);
                let c = generate(kind, &params(SMALL, 8)).unwrap();
                let random = matches!(
                    kind,
                    WorkloadKind::Bfs
                        | WorkloadKind::Sssp
                        | WorkloadKind::PageRank
                        | WorkloadKind::Bst
                );
                assert_eq!(a != c, random, "{kind}: seed sensitivity");
            });
        }
    });
}

#[test]
fn sizes_grow_with_scale_and_bad_scales_are_rejected() {
    for kind in WorkloadKind::ALL {
        let small = info(kind, &params(WorkloadSize::Scale(0.25), 1))
            .unwrap()
            .footprint_bytes;
        let default = info(kind, &params(WorkloadSize::Default, 1))
            .unwrap()
            .footprint_bytes as f64
            / MIB;
        let big = info(kind, &params(WorkloadSize::Scale(4.0), 1))
            .unwrap()
            .footprint_bytes;
        assert!(small * 8 < big, "{kind}: {small} vs {big}");
        let band = match kind {
            WorkloadKind::PageRank | WorkloadKind::Gaussian => 1.5..=16.0,
            _ => 64.0..=256.0,
        };
        assert!(
            band.contains(&default),
            "{kind}: default footprint {default:.1} MiB"
        );
        for bad in [0.0, -2.0, f64::NAN, f64::INFINITY, MAX_SCALE * 2.0] {
            let p = params(WorkloadSize::Scale(bad), 1);
            assert!(
                matches!(info(kind, &p), Err(SimError::InvalidParameter(_))),
                "{kind} {bad}"
            );
            let mut n = 0;
            let r = generate_into(kind, &p, &mut |_| n += 1);
            assert!(
                matches!(r, Err(SimError::InvalidParameter(_))),
                "{kind} {bad}"
            );
            assert_eq!(n, 0);
        }
    }
    assert_eq!(WorkloadParams::default(), params(WorkloadSize::Default, 1));
}

#[test]
fn names_round_trip_and_unknown_names_list_the_known() {
    for kind in WorkloadKind::ALL {
        assert_eq!(WorkloadKind::from_name(kind.name()).unwrap(), kind);
        assert_eq!(
            WorkloadKind::from_name(&kind.name().to_uppercase()).unwrap(),
            kind
        );
        assert_eq!(kind.to_string(), kind.name());
        assert!(!kind.description().is_empty());
    }
    assert_eq!(
        WorkloadKind::from_name("PageRank").unwrap(),
        WorkloadKind::PageRank
    );
    let err = WorkloadKind::from_name("hotspot").unwrap_err();
    let SimError::UnknownWorkload { name, known } = &err else {
        panic!("expected UnknownWorkload, got {err}");
    };
    assert_eq!(name, "hotspot");
    assert_eq!(known, "bfs, sssp, nw, gaussian, atax, pagerank, bst");
    assert!(err.to_string().contains("pagerank"));
}

#[test]
fn coalescing_of_hand_made_warps() {
    let consecutive: Vec<u64> = (0..32).map(|i| 0x7f00_0000_0000 + 4 * i).collect();
    assert_eq!(
        coalesce(9, &consecutive, 4, false),
        vec![Access::read(9, 0x7f00_0000_0000, 128)]
    );
    let strided: Vec<u64> = (0..32).map(|i| 0x1000 + 128 * i).collect();
    let out = coalesce(9, &strided, 4, true);
    assert_eq!(out.len(), 32);
    assert!(out.iter().all(|a| a.bytes == 4 && a.write && a.warp == 9));
    assert!(out.windows(2).all(|w| w[0].addr < w[1].addr));
    // Every lane the same word: a broadcast, one access of 4 bytes.
    assert_eq!(
        coalesce(0, &[64; 32], 4, false),
        vec![Access::read(0, 64, 4)]
    );
    // Half a warp of 8-byte elements from the middle of a line into the next.
    let out = coalesce(
        0,
        &(0..16).map(|i| 64 + 8 * i).collect::<Vec<_>>(),
        8,
        false,
    );
    assert_eq!(out, vec![Access::read(0, 64, 64), Access::read(0, 128, 64)]);
}

fn write_temp(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.flush().unwrap();
    f
}

fn graph_params(path: &std::path::Path) -> WorkloadParams {
    WorkloadParams {
        size: WorkloadSize::Quick,
        seed: 3,
        graph: Some(path.to_path_buf()),
    }
}

#[test]
fn graph_files_drive_the_graph_workloads() {
    // A ring of 100 vertices with chords, as an edge list and as Matrix Market.
    let mut el = String::from("# ring\n");
    let mut mm =
        String::from("%%MatrixMarket matrix coordinate integer general\n% ring\n100 100 200\n");
    for v in 0..100u32 {
        el += &format!(
            "{v} {} {}\n{v}\t{}\t1\n",
            (v + 1) % 100,
            v % 7 + 1,
            (v * 37) % 100
        );
        mm += &format!(
            "{} {} {}\n{} {} 1\n",
            v + 1,
            (v + 1) % 100 + 1,
            v % 7 + 1,
            v + 1,
            (v * 37) % 100 + 1
        );
    }
    for text in [el, mm] {
        let f = write_temp(&text);
        let p = graph_params(f.path());
        for kind in [
            WorkloadKind::Bfs,
            WorkloadKind::Sssp,
            WorkloadKind::PageRank,
        ] {
            let info = info(kind, &p).unwrap();
            let bytes = |name: &str| info.allocations.iter().find(|a| a.0 == name).map(|a| a.1);
            match kind {
                WorkloadKind::PageRank => {
                    assert_eq!(bytes("row_offsets"), Some(101 * 4));
                    assert_eq!(bytes("column_numbers"), Some(200 * 4));
                }
                _ => {
                    assert_eq!(bytes("vertexlist"), Some(101 * 8));
                    assert_eq!(bytes("edgelist"), Some(200 * 8));
                }
            }
            let trace = generate(kind, &p).unwrap();
            assert!(!trace.accesses.is_empty());
            check_bounds(kind, &info, &trace.accesses);
        }
        // The same file gives the same trace whatever the seed (weights come from the file).
        let mut q = graph_params(f.path());
        q.seed = 99;
        assert_eq!(
            generate(WorkloadKind::Sssp, &graph_params(f.path())).unwrap(),
            generate(WorkloadKind::Sssp, &q).unwrap()
        );
    }
}

#[test]
fn bad_graph_files_are_errors_with_line_numbers() {
    let cases = [
        ("0 1\n1 2\n2 three\n", "line 3"),
        ("# empty\n", "line 2"),
        ("0 1 0.5\n1 2\n", "line 2"),
        (
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n4 1 1.0\n",
            "line 4",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n3 3 5\n1 2 1.0\n",
            "line 4",
        ),
        (
            "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
            "line 1",
        ),
    ];
    for (text, want) in cases {
        let f = write_temp(text);
        for kind in [WorkloadKind::Bfs, WorkloadKind::PageRank] {
            let p = graph_params(f.path());
            let mut n = 0;
            let err = generate_into(kind, &p, &mut |_| n += 1).unwrap_err();
            assert_eq!(n, 0);
            match &err {
                SimError::BadFile { path, location, .. } => {
                    assert_eq!(location, want, "{text}");
                    assert_eq!(path, f.path());
                }
                other => panic!("{text}: expected BadFile, got {other}"),
            }
            assert!(matches!(info(kind, &p), Err(SimError::BadFile { .. })));
        }
    }
    let p = graph_params(std::path::Path::new("/nonexistent/oversub/graph.mtx"));
    assert!(matches!(
        generate(WorkloadKind::Sssp, &p),
        Err(SimError::Io { .. })
    ));
    // Workloads without a graph ignore the file.
    assert!(info(WorkloadKind::Nw, &p).is_ok());
}

/// Sizes and generation speed of every workload: `cargo test --release -p oversub-sim --test workload -- --ignored
/// --nocapture` (`OVERSUB_WORKLOAD=bfs` and `OVERSUB_SIZE=quick|default` narrow it down).
#[test]
#[ignore = "a measurement, not a check; run with --release"]
fn print_sizes() {
    println!("| workload | size | footprint MiB | accesses | M accesses/s | generation s |");
    println!("|---|---|---|---|---|---|");
    let only = std::env::var("OVERSUB_WORKLOAD").ok();
    let only_size = std::env::var("OVERSUB_SIZE").ok();
    for size in [WorkloadSize::Quick, WorkloadSize::Default] {
        if only_size
            .as_deref()
            .is_some_and(|s| !format!("{size:?}").eq_ignore_ascii_case(s))
        {
            continue;
        }
        for kind in WorkloadKind::ALL {
            if only.as_deref().is_some_and(|w| w != kind.name()) {
                continue;
            }
            let p = params(size, 1);
            let info = info(kind, &p).unwrap();
            let start = Instant::now();
            let mut n = 0u64;
            let mut writes = 0u64;
            generate_into(kind, &p, &mut |a| {
                n += 1;
                writes += u64::from(a.write);
            })
            .unwrap();
            let secs = start.elapsed().as_secs_f64();
            println!(
                "| {kind} | {size:?} | {:.1} | {n} ({:.0}% stores) | {:.1} | {secs:.2} |",
                info.footprint_bytes as f64 / MIB,
                100.0 * writes as f64 / n as f64,
                n as f64 / secs / 1e6,
            );
        }
    }
}
