//! `oversub bench tenants` end to end at tiny sizes: the JSON has the documented shape, the plan made the
//! lowest-ranked tenant the victim, the chart is written, and bad input is refused clearly. No timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{oversub, read_json, succeeded};

#[test]
fn tenants_benchmark_writes_json_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = oversub()
        .args([
            "bench",
            "tenants",
            "--demand",
            "8MiB",
            "--buffer",
            "1MiB",
            "--compute",
            "1ms,2ms",
        ])
        .args(["--rounds", "1", "--samples", "1", "--priorities", "given"])
        .args(["--priority-windows", "0,2"])
        .arg("--store-dir")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("highest-priority tenant"), "{stdout}");
    let v: serde_json::Value = read_json(&json);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        for key in [
            "alone_s",
            "lru_s",
            "planned_s",
            "slowdown_lru",
            "slowdown_planned",
        ] {
            let x = r[key].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{key} = {x}");
        }
    }
    // Given priorities: t0 first, t2 last and the only victim.
    let t2 = rows.iter().find(|r| r["tenant"] == "t2").unwrap();
    assert_eq!(t2["rank"], 2);
    assert!(t2["alpha"].as_f64().unwrap() > 0.0);
    assert!(t2["planned_direct_bytes"].as_u64().unwrap() > 0);
    let t0 = rows.iter().find(|r| r["tenant"] == "t0").unwrap();
    assert_eq!(t0["alpha"].as_f64().unwrap(), 0.0);
    assert_eq!(v["target_highest_priority_slowdown"], 1.1);
    assert!(dir.path().join("tenants-slowdown.svg").exists());
    // The cold-start experiment: FIFO against priority I/O at the engine's depth and at a window of 2.
    let p = &v["priority_io"];
    assert_eq!(p["tenant"], "t0");
    assert!(p["slowdown_fifo"].as_f64().unwrap() > 0.0);
    let windows: Vec<u64> = p["priority"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["window"].as_u64().unwrap())
        .collect();
    assert_eq!(windows.len(), 2);
    assert_eq!(windows[1], 2);
    assert!(windows[0] >= 1);
    assert!(stdout.contains("cold start"), "{stdout}");
}

#[test]
fn tenants_benchmark_refuses_bad_input() {
    for (args, needle) in [
        (vec!["--tenants", "1"], "at least 2 tenants"),
        (vec!["--oversubscription", "0.5"], "--oversubscription"),
        (vec!["--buffer", "1GiB"], "no larger than --demand"),
        (vec!["--alpha-rule", "round"], "unknown swap-ratio rule"),
        (vec!["--demand=-5MiB"], "-5MiB"),
    ] {
        let out = oversub()
            .args(["bench", "tenants"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
