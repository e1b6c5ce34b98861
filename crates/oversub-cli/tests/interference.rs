//! `oversub bench interference` and `oversub arbiter` end to end, at tiny sizes: the JSON has the documented
//! shape, figures are written, a phase announced by one process is seen by another, and bad input is refused
//! clearly. No timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

mod common;
use common::{oversub, read_json, succeeded};

fn positive(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

#[test]
fn interference_benchmark_writes_the_documented_json_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let plots = dir.path().join("plots");
    let trace_path = dir.path().join("trace.json");
    let out = oversub()
        .args([
            "bench",
            "interference",
            "--quick",
            "--measure",
            "100ms",
            "--llc",
            "2MiB",
        ])
        .args([
            "--paging-buffer",
            "2MiB",
            "--data",
            "8MiB",
            "--iterations",
            "6",
            "--rounds",
            "2",
        ])
        .arg("--store")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .arg("--trace")
        .arg(&trace_path)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("PREM task vs transfers"), "{stdout}");
    let v: serde_json::Value = read_json(&json);

    let thrashing = v["thrashing"].as_array().unwrap();
    assert_eq!(
        thrashing.len(),
        2,
        "one row per kind on a 2-CPU machine or more rows: {thrashing:?}"
    );
    for row in thrashing {
        assert!(["sequential", "random"].contains(&row["kind"].as_str().unwrap()));
        assert!(row["tasks"].as_u64().unwrap() >= 1);
        for k in [
            "bw_alone_mbs",
            "bw_with_paging_mbs",
            "paging_mean_s_alone",
            "paging_mean_s_with",
        ] {
            positive(&row[k], k);
        }
    }
    let prem = &v["prem"];
    let placements = prem["placements"].as_array().unwrap();
    assert_eq!(
        placements.len(),
        2,
        "own process and one process by default"
    );
    for pl in placements {
        let mut conds = vec![&pl["alone"]];
        let runs = pl["interferers"].as_array().unwrap();
        assert_eq!(
            runs.len(),
            4,
            "paging, paging-dontneed, copy and copy-nt by default"
        );
        for run in runs {
            conds.push(&run["interfered"]);
            conds.push(&run["arbitrated"]);
            // At these sizes a run may end before the interferer completes one operation: only check the shape.
            for k in ["interfered", "arbitrated"] {
                let x = run["interferer_mbs"][k].as_f64().unwrap();
                assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
            }
            let at = &run["attribution"];
            assert_eq!(at["memory_phases"].as_u64(), Some(12), "{at}");
            assert!(at["outliers"].as_u64().unwrap() <= 12);
            assert!(at["by_cause"].is_object());
        }
        for cond in conds {
            assert_eq!(cond["iterations"].as_u64(), Some(6));
            for phase in ["mem_load_us", "compute_us", "mem_unload_us"] {
                let st = &cond[phase];
                let (min, mean, p99, max) = (
                    positive(&st["min"], "min"),
                    positive(&st["mean"], "mean"),
                    positive(&st["p99"], "p99"),
                    positive(&st["max"], "max"),
                );
                assert!(min <= mean && mean <= max && p99 <= max, "{phase}: {st}");
            }
        }
    }
    let threads = prem["threads"].as_array().unwrap();
    assert!(
        threads.iter().any(|t| t["thread"] == "oversub-gated-i"),
        "{threads:?}"
    );
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace_path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["name"] == "load" && e["ph"] == "X"));
    assert!(events.iter().any(|e| e["cat"] == "gate"));
    let starvation = v["starvation"].as_array().unwrap();
    assert_eq!(starvation.len(), 8);
    for row in starvation {
        positive(&row["gc_ratio"], "gc_ratio");
        assert!(row["iterations"].is_u64());
    }
    for f in [
        "thrash-sequential-bandwidth.svg",
        "thrash-random-paging.svg",
        "prem-load.svg",
        "prem-unload.svg",
        "prem-interferer.svg",
        "starvation.svg",
    ] {
        let text = std::fs::read_to_string(plots.join(f)).unwrap();
        assert!(text.starts_with("<svg") || text.starts_with("<?xml"), "{f}");
    }
}

#[test]
fn bounds_from_phase_lengths() {
    // One PREM task's phases, with the options each run adds.
    let bound = |more: &[&str]| {
        let out = oversub()
            .args(["arbiter", "bound", "--load", "444us", "--compute", "8784us"])
            .args(["--unload", "716us"])
            .args(more)
            .output()
            .unwrap();
        succeeded(&out)
    };
    let json = bound(&[
        "--transfer",
        "20ms",
        "--kernel",
        "12.3ms",
        "--preemptible",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let paper = positive(&v["transfer"]["bound_paper_s"], "bound");
    assert!(paper > 0.020 && paper < 0.030, "{paper}");
    assert_eq!(v["kernel"]["case"], "Preemptible");
    let text = bound(&["--kernel", "12ms"]);
    assert!(text.contains("waits for NO_OPER"), "{text}");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    for (args, needle) in [
        (
            &[
                "arbiter",
                "bound",
                "--load=-5us",
                "--compute",
                "1ms",
                "--unload",
                "1ms",
                "--transfer",
                "1ms",
            ][..],
            "negative",
        ),
        (
            &[
                "arbiter",
                "bound",
                "--load",
                "5",
                "--compute",
                "1ms",
                "--unload",
                "1ms",
                "--transfer",
                "1ms",
            ],
            "unit",
        ),
        (
            &[
                "arbiter",
                "bound",
                "--load",
                "1ms",
                "--compute",
                "1ms",
                "--unload",
                "1ms",
            ],
            "--transfer",
        ),
        (
            &[
                "arbiter",
                "phase",
                "--name",
                "nobody-here",
                "CPU_NAP",
                "1ms",
            ],
            "unknown phase",
        ),
        (
            &["arbiter", "phase", "--name", "nobody-here", "CPU_MEM"],
            "needs a duration",
        ),
        (
            &[
                "arbiter",
                "phase",
                "--name",
                "nobody-here",
                "--",
                "CPU_MEM",
                "-1ms",
            ],
            "negative",
        ),
        (
            &["arbiter", "status", "--name", "a/b"],
            "invalid arbiter name",
        ),
        (
            &["bench", "interference", "--iterations", "0"],
            "--iterations",
        ),
    ] {
        let out = oversub().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_phase_announced_from_the_shell_is_seen_by_status() {
    let name = format!("clitest-{}", std::process::id());
    let path = std::path::PathBuf::from(format!("/dev/shm/oversub-arbiter-{name}"));
    let mut server = oversub()
        .args([
            "arbiter",
            "serve",
            "--name",
            &name,
            "--for",
            "20s",
            "--chunk-time",
            "100us",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = oversub()
        .args(["arbiter", "phase", "--name", &name, "CPU_MEM", "10s"])
        .output()
        .unwrap();
    succeeded(&out);
    let out = oversub()
        .args(["arbiter", "status", "--name", &name, "--json"])
        .output()
        .unwrap();
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{v}");
    assert_eq!(tasks[0]["phase"], "Mem");
    assert!(tasks[0]["remaining_ns"].as_i64().unwrap() > 0);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&path);
}
