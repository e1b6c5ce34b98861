//! `oversub bench paging --device cuda` end to end: its flags in `--help`, and either a clear "no CUDA driver found"
//! refusal that leaves no file behind (machines without a GPU, like CI) or, with `OVERSUB_TEST_CUDA=1` on a machine
//! with a GPU, a tiny real run whose JSON holds every measurement.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::oversub;

fn real_gpu() -> bool {
    std::env::var("OVERSUB_TEST_CUDA").as_deref() == Ok("1")
}

#[test]
fn help_lists_the_cuda_flags() {
    let out = oversub()
        .args(["bench", "paging", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--device",
        "cuda",
        "--gpu",
        "--staging-chunk ",
        "--staging-chunks",
        "--pageable-staging",
        "--skip-unified",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

#[test]
fn cuda_paging_without_a_driver_fails_cleanly_or_runs_on_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cuda.json");
    let mut cmd = oversub();
    cmd.args([
        "bench",
        "paging",
        "--device",
        "cuda",
        "--size",
        "64MiB",
        "--samples",
        "2",
        "--skip-unified",
        "--cache-drop",
        "fadvise",
    ])
    .arg("--store")
    .arg(dir.path())
    .arg("--json")
    .arg(&json);
    let started = std::time::Instant::now();
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "the command panicked:\n{stderr}"
    );

    if !real_gpu() {
        if out.status.success() {
            // A machine with a GPU that did not ask for the GPU test: the run worked, nothing more to check here.
            eprintln!("a CUDA device is present; set OVERSUB_TEST_CUDA=1 to check the run");
            return;
        }
        assert!(
            stderr.contains("no CUDA driver found") || stderr.contains("no CUDA device"),
            "stdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the refusal took {:?}",
            started.elapsed()
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "files left behind: {left:?}");
        return;
    }

    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("transfer path"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "device_name",
        "driver_version",
        "device_total_bytes",
        "device_free_bytes",
        "transfer_path",
        "staging",
        "host_tier_bytes",
        "unified_memory",
        "results",
        "rates_gb_per_s",
        "ratios",
        "pager_io",
    ] {
        assert!(report.get(key).is_some(), "{key} missing: {report:#}");
    }
    assert_eq!(report["device"], "cuda");
    let path = report["transfer_path"].as_str().unwrap();
    assert!(path == "staging" || path == "cufile", "{path}");
    assert_eq!(report["unified_memory"]["measured"], false);
    let results = report["results"].as_object().unwrap();
    // Every measurement the lab declares but unified memory (skipped here).
    for name in oversub_lab::paging::cuda::NAMES
        .into_iter()
        .filter(|n| *n != "unified_memory")
    {
        let s = &results[name];
        assert_eq!(s["count"], 2, "{name}: {s}");
        assert!(s["median_s"].as_f64().unwrap() > 0.0, "{name}: {s}");
    }
    assert!(
        !results.contains_key("unified_memory"),
        "--skip-unified was given"
    );
    let ratios = report["ratios"].as_array().unwrap();
    assert!(ratios.len() >= 3, "{ratios:?}");
    // The store file the run made in the directory is gone; only the JSON remains.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("cuda.json")]);
}

#[test]
fn cuda_paging_refuses_an_empty_staging_ring() {
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--device",
            "cuda",
            "--size",
            "4MiB",
            "--staging-chunks",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--staging-chunks"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
