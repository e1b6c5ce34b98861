//! The `oversub` binary end to end: help on every subcommand, a small paging benchmark with JSON and plots, and
//! clear refusals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{oversub_bare as oversub, read_json, succeeded};

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["--help"][..],
        &["bench", "--help"],
        &["bench", "paging", "--help"],
        &["bench", "interference", "--help"],
        &["arbiter", "--help"],
        &["arbiter", "bound", "--help"],
        &["arbiter", "serve", "--help"],
        &["arbiter", "phase", "--help"],
        &["arbiter", "status", "--help"],
    ] {
        let out = oversub().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Usage"), "{args:?}: {text}");
    }
}

/// `oversub bench paging` on 3 MiB, 2 samples, the page cache dropped with fadvise (any user may).
fn small_paging_bench() -> std::process::Command {
    let mut c = oversub();
    c.args(["bench", "paging", "--size", "3MiB", "--samples", "2"])
        .args(["--cache-drop", "fadvise"]);
    c
}

#[test]
fn paging_benchmark_writes_json_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("paging.json");
    let plot = dir.path().join("paging.svg");
    let out = small_paging_bench()
        .arg("--store")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("oversub_page_in") && stdout.contains("ratio"),
        "{stdout}"
    );
    let v = read_json(&json);
    assert_eq!(v["size_bytes"], 3 << 20);
    assert_eq!(v["samples"], 2);
    assert_eq!(v["cache_drop"], "posix_fadvise");
    assert!(v["engine"].is_string());
    // Every measurement the lab declares, checksums on and off.
    for name in oversub_lab::paging::host::NAMES {
        for stat in ["min_s", "median_s", "mean_s", "p99_s", "max_s", "std_s"] {
            assert!(v["results"][name][stat].is_number(), "{name}.{stat}");
        }
    }
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    assert!(dir.path().join("paging-async.svg").exists());
    // The benchmark's own store file is gone afterwards.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "swap"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn striped_paging_benchmark_reports_each_member_count() {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("striped.json");
    let out = small_paging_bench()
        .args(["--no-checksums", "--stripe-bytes", "1MiB", "--store"])
        .arg(format!("{},{}", d1.path().display(), d2.path().display()))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("bandwidth per member count"), "{stdout}");
    assert!(
        stderr.contains("2 members, striped by 1.00 MiB"),
        "{stderr}"
    );
    let v = read_json(&json);
    assert_eq!(v["members"], 2);
    assert_eq!(v["stripe_bytes"], 1 << 20);
    let rows = v["stripe_sweep"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["members"], i + 1);
        for key in [
            "page_out_gib_s",
            "page_in_gib_s",
            "page_out_ratio",
            "page_in_ratio",
        ] {
            assert!(row[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {row}");
        }
    }
    assert_eq!(rows[0]["page_out_ratio"], 1.0);
    // Both members' files are gone afterwards.
    for d in [&d1, &d2] {
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
    // One location named twice is refused before anything is written.
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--size",
            "1MiB",
            "--samples",
            "1",
            "--store",
        ])
        .arg(format!("{0},{0}", d1.path().display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the same"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(d1.path()).unwrap().count(), 0);
}

#[test]
fn existing_files_need_force_and_bad_sizes_are_refused() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--size",
            "1MiB",
            "--samples",
            "1",
            "--store",
        ])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    let out = oversub()
        .args(["bench", "paging", "--size", "12 parsecs"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = oversub()
        .args(["bench", "paging", "--samples", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--samples"));
}
