//! The `oversub` binary end to end: help on every subcommand, a small paging benchmark with JSON and plots, and
//! clear refusals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn oversub() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oversub"))
}

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

#[test]
fn paging_benchmark_writes_json_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("paging.json");
    let plot = dir.path().join("paging.svg");
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--size",
            "3MiB",
            "--samples",
            "2",
            "--cache-drop",
            "fadvise",
        ])
        .arg("--store")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("oversub_page_in") && stdout.contains("ratio"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["size_bytes"], 3 << 20);
    assert_eq!(v["samples"], 2);
    assert_eq!(v["cache_drop"], "posix_fadvise");
    assert!(v["engine"].is_string());
    for name in [
        "oversub_page_in",
        "oversub_page_out",
        "direct_read",
        "direct_write",
        "demand_paging_read",
        "raw_limit_read",
        "raw_limit_write",
        "unchecked_page_in",
        "unchecked_page_out",
        "async_page_in_start",
        "async_page_in_finish",
        "async_page_out_start",
        "async_page_out_finish",
    ] {
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
