#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `oversub probe` end to end at tiny sizes: the table, the JSON, the figures, the profile (read back by the
//! profile crate and by `plan`'s reader), and clear refusals.

mod common;
use common::oversub;

#[test]
fn storage_and_copy_probe_writes_a_valid_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("profile.toml");
    let json = dir.path().join("probe.json");
    let plots = dir.path().join("plots");
    let o = oversub()
        .args(["probe", "--quick", "--only", "copy,storage,gpu"])
        .args(["--file-size", "4MiB", "--storage-seconds", "0.02"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("memcpy, one thread"), "{stdout}");
    assert!(stdout.contains("store direct read / write"), "{stdout}");
    // No GPU in CI: said plainly, not an error.
    assert!(
        stdout.contains("gpu") && (stdout.contains("skipped") || stdout.contains("GPU ")),
        "{stdout}"
    );

    let p = oversub_profile::Profile::load(&out).unwrap();
    assert_eq!(p.profile.version, oversub_profile::VERSION);
    assert!(p.profile.quick);
    assert!(
        p.cpu.is_none(),
        "the cpu table needs the tlb and fault probes"
    );
    let s = p.storage.unwrap();
    assert!(s.read_bytes_per_s > 0.0 && s.write_bytes_per_s > 0.0);
    assert_eq!(s.points.len(), 8);
    let swap = p.swap.unwrap();
    assert!(swap.memory_bytes_per_s.unwrap() > 0.0);
    assert_eq!(swap.ssd_read_bytes_per_s, Some(s.read_bytes_per_s));

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["copy"]["median_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["storage"]["points"].as_array().unwrap().len(), 8);
    assert!(v["tlb"].is_null());
    assert!(plots.join("storage-read.svg").exists());
    assert!(plots.join("storage-write.svg").exists());
    // The test file is gone; only what we asked for is left.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["plots", "probe.json", "profile.toml"]);
}

#[test]
fn cpu_probes_fill_the_cpu_table() {
    // The quick sizes of the CPU probes take a few seconds; shootdown and B+-tree are covered by the library's
    // smoke tests.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.toml");
    let o = oversub()
        .args(["probe", "--quick", "--only", "tlb,faults,copy"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("Fig. 2") && stdout.contains("Fig. 6"),
        "{stdout}"
    );
    let p = oversub_profile::Profile::load(&out).unwrap();
    // A noisy TLB difference can leave the table out (the probe says so); when present it is sane.
    if let Some(cpu) = p.cpu {
        assert!(cpu.page_fault_s > 0.0 && cpu.memcpy_bytes_per_s > 0.0);
    } else {
        assert!(stdout.contains("no [cpu] table"), "{stdout}");
    }
    let uvm = p.uvm.unwrap();
    assert!(uvm.cpu_mem_bytes_per_s.unwrap() > 0.0);
}

#[test]
fn refusals_are_clear() {
    let run = |args: &[&str]| {
        let o = oversub().arg("probe").args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(run(&["--only", "tlb", "--skip", "tlb"]).contains("no probe to run"));
    assert!(run(&["--only", "copy", "--dir", "/nonexistent/dir"]).contains("not a directory"));
    assert!(run(&["--only", "copy", "--out", "/nonexistent/dir/p.toml"]).contains("does not exist"));
    assert!(run(&["--only", "nonsense"]).contains("invalid value"));
    assert!(run(&["--only", "storage", "--storage-seconds=-1"]).contains("--storage-seconds"));
    let o = oversub().args(["probe", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--quick") && help.contains("--out") && help.contains("--only"));
}
