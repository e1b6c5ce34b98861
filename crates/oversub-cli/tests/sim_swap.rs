//! `oversub sim swap` end to end: Fig. 6 with JSON and a figure, a scenario file, clear refusals of bad arguments
//! and impossible scenarios.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{oversub, stderr, succeeded};

#[test]
fn fig6_writes_json_and_a_figure() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("swap.json");
    let plots = dir.path().join("plots");
    let out = oversub()
        .args([
            "sim",
            "swap",
            "--seed",
            "1",
            "--scenario",
            "fig6",
            "--check",
            "--json",
        ])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    for needle in [
        "GESUMMV",
        "Baseline (s)",
        "MaT (s)",
        "Proposed (s)",
        "Alg.1 priority only",
        "Alg.2 direct only",
        "ablation",
        "paper 70%",
        "conservation checks passed",
        "one draw: seed 1",
    ] {
        assert!(stdout.contains(needle), "missing {needle}: {stdout}");
    }

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["scenarios"].as_array().unwrap();
    assert_eq!(runs.len(), 5, "one entry per scenario × policy");
    let mut policies = Vec::new();
    for run in runs {
        assert_eq!(run["name"], "fig6");
        policies.push(run["policy"].as_str().unwrap().to_string());
        let tasks = run["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), 4);
        let mut priorities: Vec<u64> = tasks
            .iter()
            .map(|t| t["priority"].as_u64().unwrap())
            .collect();
        priorities.sort_unstable();
        assert_eq!(priorities, vec![1, 2, 3, 4]);
        for t in tasks {
            assert!(t["task"].is_string());
            let l = t["lengthened_latency_s"].as_f64().unwrap();
            assert!(l.is_finite() && l >= 0.0, "{t}");
        }
    }
    assert_eq!(
        policies,
        vec![
            "baseline",
            "mat",
            "alg1-priority",
            "alg2-direct",
            "proposed"
        ]
    );
    // The top task runs as if alone under the proposed policy.
    let proposed = &runs[4]["tasks"].as_array().unwrap();
    let top = proposed.iter().find(|t| t["priority"] == 1).unwrap();
    assert_eq!(top["lengthened_latency_s"].as_f64().unwrap(), 0.0);

    let svg = std::fs::read_to_string(plots.join("fig6.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("GESUMMV") && svg.contains("Proposed"));
}

#[test]
fn seeds_report_medians_shares_and_both_timings() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("seeds.json");
    let plots = dir.path().join("plots");
    let out = oversub()
        .args([
            "sim",
            "swap",
            "--scenario",
            "fig4a,fig6",
            "--seeds",
            "3-6",
            "--no-progress",
            "--json",
        ])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    for needle in [
        "fig4a (Fig. 4(a)), direct access serial (default): 4 seeds (seeds 3-6)",
        "fig4a (Fig. 4(a)), direct access overlapped: 4 seeds",
        "every seed is the same run",
        "Proposed < Baseline",
        "median [IQR]",
        "Summary over seeds",
        "/4",
    ] {
        assert!(stdout.contains(needle), "missing {needle}: {stdout}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["kind"], "seeds");
    assert_eq!(doc["seeds"], serde_json::json!([3, 4, 5, 6]));
    assert_eq!(doc["default_direct_access"], "serial");
    let sets = doc["scenarios"].as_array().unwrap();
    // Two scenarios × two direct-access timings.
    assert_eq!(sets.len(), 4);
    let timings: Vec<&str> = sets
        .iter()
        .map(|s| s["direct_access"].as_str().unwrap())
        .collect();
    assert_eq!(
        timings,
        vec!["serial", "overlapped", "serial", "overlapped"]
    );
    for set in sets {
        assert_eq!(set["per_seed"].as_array().unwrap().len(), 4);
        let policies = set["policies"].as_array().unwrap();
        let positions = set["positions"].as_array().unwrap();
        assert_eq!(positions.len(), 4);
        for p in positions {
            assert_eq!(p["seeds"], 4);
            let k = p["proposed_beats_baseline"].as_u64().unwrap();
            assert!(k <= 4);
            let spreads = p["lengthened_s"].as_array().unwrap();
            assert_eq!(spreads.len(), policies.len());
            for sp in spreads {
                for key in ["median", "q1", "q3", "min", "max", "n"] {
                    assert!(sp[key].is_number(), "{key} in {sp}");
                }
            }
        }
    }
    assert_eq!(sets[0]["seed_dependent"], true);
    assert_eq!(sets[2]["seed_dependent"], false);
    for f in [
        "fig4a.svg",
        "fig4a-overlapped.svg",
        "fig6.svg",
        "fig6-overlapped.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("seed 3:"), "{f}");
    }
    // --direct-access names one timing: only that one runs.
    let out = oversub()
        .args([
            "sim",
            "swap",
            "--scenario",
            "fig6",
            "--seeds",
            "2",
            "--no-progress",
        ])
        .args(["--direct-access", "overlapped"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("direct access overlapped: 2 seeds") && !stdout.contains("serial"),
        "{stdout}"
    );
}

#[test]
fn both_alpha_rules_in_one_run_and_the_same_seed_gives_the_same_figures() {
    let run = || {
        oversub()
            .args([
                "sim",
                "swap",
                "--scenario",
                "fig4a,fig6",
                "--alpha-rule",
                "fraction,printed-ceil",
            ])
            .args(["--seed", "3"])
            .output()
            .unwrap()
    };
    let a = run();
    assert!(a.status.success(), "{}", stderr(&a));
    let stdout = String::from_utf8_lossy(&a.stdout);
    assert!(
        stdout.contains("α frac") && stdout.contains("α ceil"),
        "{stdout}"
    );
    assert!(stdout.contains("Proposed (printed ceil)"), "{stdout}");
    assert_eq!(run().stdout, a.stdout);
}

#[test]
fn a_scenario_file_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pair.toml");
    std::fs::write(
        &file,
        "name = \"pair\"\ncapacity = \"1GB\"\n\
         [[task]]\nname = \"a\"\nmemory = \"600MB\"\ncompute_s = [0.5, 0.5]\npriority = 2\n\
         [[task]]\nname = \"b\"\nmemory = \"600MB\"\nsubtasks = 3\ncompute = \"low\"\npriority = 1\n",
    )
    .unwrap();
    let out = oversub()
        .args([
            "sim",
            "swap",
            "--seed",
            "1",
            "--priorities",
            "given",
            "--scenario-file",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("\npair:") && !stdout.contains("fig4a"),
        "only the file's scenario: {stdout}"
    );
    assert!(stdout.contains("highest priority a"), "{stdout}");
}

#[test]
fn bad_arguments_and_impossible_scenarios_are_refused_clearly() {
    let refused = |args: &[&str]| {
        let out = oversub().args(["sim", "swap"]).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        stderr(&out)
    };
    let e = refused(&["--seeds", "0"]);
    assert!(
        e.contains("--seeds") && e.contains("at least one seed"),
        "{e}"
    );
    let e = refused(&["--seeds", "9-3"]);
    assert!(e.contains("before it starts"), "{e}");
    let e = refused(&["--seed", "1", "--seeds", "3"]);
    assert!(e.contains("--seed") && e.contains("--seeds"), "{e}");
    let e = refused(&["--scenario", "fig7"]);
    assert!(
        e.contains("unknown scenario `fig7`") && e.contains("fig5b"),
        "{e}"
    );
    let e = refused(&["--policy", "lru"]);
    assert!(
        e.contains("unknown policy `lru`") && e.contains("mat"),
        "{e}"
    );
    let e = refused(&["--alpha-rule", "round"]);
    assert!(e.contains("round") && e.contains("printed-ceil"), "{e}");
    let e = refused(&["--capacity", "lots"]);
    assert!(e.contains("--capacity"), "{e}");
    let e = refused(&["--scenario", "fig4a", "--capacity", "4GB"]);
    assert!(
        e.contains("6000000000 bytes") && e.contains("must fit"),
        "{e}"
    );
    // Refused by the flag's parser now, naming the flag.
    let e = refused(&["--scenario", "fig4a", "--sms", "0"]);
    assert!(e.contains("--sms") && e.contains("at least 1"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty.toml");
    std::fs::write(&file, "capacity = \"1GB\"\n").unwrap();
    let e = refused(&["--scenario-file", file.to_str().unwrap()]);
    assert!(e.contains("empty.toml") && e.contains("no tasks"), "{e}");
    let e = refused(&[
        "--scenario-file",
        dir.path().join("missing.toml").to_str().unwrap(),
    ]);
    assert!(e.contains("missing.toml"), "{e}");
}

#[test]
fn a_profile_sets_the_bandwidths_of_every_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("pair.toml");
    std::fs::write(
        &scenario,
        "name = \"pair\"\ncapacity = \"1GB\"\n\
         [[task]]\nname = \"a\"\nmemory = \"600MB\"\ncompute_s = [0.5, 0.5]\n\
         [[task]]\nname = \"b\"\nmemory = \"600MB\"\ncompute_s = [0.2, 0.2, 0.2]\n",
    )
    .unwrap();
    let profile = dir.path().join("profile.toml");
    std::fs::write(
        &profile,
        "[profile]\nversion = 1\n[swap]\nssd_read_bytes_per_s = 1.0e9\nssd_write_bytes_per_s = 9.0e8\n",
    )
    .unwrap();
    let json = dir.path().join("swap.json");
    let out = oversub()
        .args([
            "sim",
            "swap",
            "--seed",
            "1",
            "--scenario",
            "fig6",
            "--scenario-file",
        ])
        .arg(&scenario)
        .arg("--profile")
        .arg(&profile)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("machine constants from")
            && err.contains("profile.toml")
            && err.contains("SSD read 1000 MB/s, SSD write 900 MB/s"),
        "{err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Both the built-in scenario and the file's take the profile's SSD and keep the memory controller.
    assert_eq!(
        stdout
            .matches("memory controller 20000 MB/s, SSD read 1000 / write 900 MB/s")
            .count(),
        2,
        "{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(doc["scenarios"].as_array().unwrap().len() >= 6);
    assert_eq!(doc["profile"]["swap"]["ssd_read_bytes_per_s"], 1.0e9);
    assert_eq!(doc["profile"]["swap"]["ssd_write_bytes_per_s"], 9.0e8);
    assert!(doc["profile"]["swap"].get("memory_bytes_per_s").is_none());
    assert!(doc["profile"]["path"]
        .as_str()
        .unwrap()
        .ends_with("profile.toml"));

    // Without --profile the JSON has no profile key.
    let out = oversub()
        .args(["sim", "swap", "--seed", "1", "--scenario", "fig6", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(doc.get("profile").is_none());

    for (text, message) in [
        (
            "[profile]\nversion = 3\n[swap]\nssd_read_bytes_per_s = 1e9\n",
            "profile.toml: schema version 3 is not supported",
        ),
        (
            "[profile]\nversion = 1\n[swap]\nssd_read_bytes_per_s = -1e9\n",
            "swap.ssd_read_bytes_per_s must be a positive finite number",
        ),
        (
            "[profile]\nversion = 1\n[swap]\nssd_read_bytes_per_s = 0.25\n",
            "profile.toml: profile key swap.ssd_read_bytes_per_s must round to at least 1 byte/s",
        ),
        (
            "[profile]\nversion = 1\n[swap]\nssd_bytes_per_s = 1e9\n",
            "profile.toml: line 4: unknown field `ssd_bytes_per_s`",
        ),
    ] {
        std::fs::write(&profile, text).unwrap();
        let out = oversub()
            .args(["sim", "swap", "--scenario", "fig6", "--profile"])
            .arg(&profile)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text} accepted");
        let e = stderr(&out);
        assert!(e.contains(message), "{text}: {e}");
    }
}

/// `--ray` hands the sweep to Python; where that cannot happen the error says what is missing. (The sweep itself
/// is tested from Python, python/tests/test_sweep.py, with a local Ray cluster.)
#[test]
fn ray_sweeps_name_what_is_missing() {
    let out = oversub()
        .env("OVERSUB_PYTHON", "/nonexistent/python3")
        .args(["sim", "uvm", "--workload", "bfs", "--quick", "--ray"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("`/nonexistent/python3` could not be started"),
        "{}",
        stderr(&out)
    );
    // An interpreter without the package: the install line.
    let out = oversub()
        .env("OVERSUB_PYTHON", "/bin/false")
        .args([
            "sim",
            "swap",
            "--scenario",
            "fig4a",
            "--ray",
            "ray://head:10001",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("pip install \"oversub[ray]\""),
        "{}",
        stderr(&out)
    );
    // Outputs the Ray path does not write are refused before anything runs.
    let out = oversub()
        .args([
            "sim",
            "uvm",
            "--workload",
            "bfs",
            "--quick",
            "--ray",
            "--csv",
            "/tmp/x",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--csv is not available with --ray"),
        "{}",
        stderr(&out)
    );
}
