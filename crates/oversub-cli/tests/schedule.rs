//! `oversub plan`, `run` and `demo` end to end on tiny configurations (timings are not asserted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

mod common;
use common::{oversub_bare as oversub, succeeded};

fn examples() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"))
}

const PROFILE: &str =
    "[profile]\nversion = 1\n\n[storage]\nread_bytes_per_s = 1.0e9\nwrite_bytes_per_s = 2.0e9\n";

/// The paper's example at 1/50 scale: 2 MiB units, 30 ms period.
const TINY: &str = r#"
[platform]
capacity = "8MiB"
cpus = 2
gpus = 1

[[component]]
name = "A"
budget_ms = 10
period_ms = 30
cpus = [0]
gpus = [0]
work = { sleep_ms = 3 }
[[component.buffer]]
name = "w"
size = "2MiB"
read_only = true

[[component]]
name = "B"
budget_ms = 10
period_ms = 30
cpus = [0]
work = { sleep_ms = 3 }
[[component.buffer]]
name = "s"
size = "2MiB"

[[component]]
name = "C"
budget_ms = 10
period_ms = 30
cpus = [0]
work = { sleep_ms = 3 }
[[component.buffer]]
name = "s"
size = "2MiB"

[[component]]
name = "D"
budget_ms = 15
period_ms = 30
cpus = [1]
work = { spin_ms = 3 }
[[component.buffer]]
name = "s"
size = "2MiB"

[[component]]
name = "E"
budget_ms = 15
period_ms = 30
cpus = [1]
work = { sleep_ms = 3 }
[[component.buffer]]
name = "s"
size = "2MiB"
"#;

#[test]
fn help_is_there_for_every_schedule_subcommand() {
    for sub in ["plan", "run", "demo"] {
        let out = oversub().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{sub}"
        );
    }
}

#[test]
fn plan_reports_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let json = dir.path().join("plan.json");
    let out = oversub()
        .arg("plan")
        .arg(examples().join("paper.toml"))
        .arg("--profile")
        .arg(&profile)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    for m in ["async", "sync", "demand"] {
        assert!(stdout.contains(m), "{stdout}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["modes"]["async"]["page_outs_per_hyperperiod"].is_number());
    assert!(v["modes"]["sync"]["min_feasible_period_s"].is_number());
}

#[test]
fn run_all_modes_writes_json_traces_and_timelines() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(
        &config,
        format!("{TINY}\n").replace(
            "[platform]",
            &format!("[platform]\nstore = {:?}", dir.path().to_string_lossy()),
        ),
    )
    .unwrap();
    let profile = dir.path().join("profile.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let json = dir.path().join("run.json");
    let out = oversub()
        .arg("run")
        .arg(&config)
        .args(["--mode", "all", "--hyperperiods", "3", "--no-pin"])
        .arg("--profile")
        .arg(&profile)
        .arg("--json")
        .arg(&json)
        .arg("--trace")
        .arg(dir.path().join("t.json"))
        .arg("--svg")
        .arg(dir.path().join("t.svg"))
        .output()
        .unwrap();
    succeeded(&out);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for m in ["async", "sync", "demand"] {
        for key in [
            "target_period_s",
            "met_target",
            "deadline_misses",
            "max_lateness_s",
            "bytes_paged",
            "min_feasible_period_s",
        ] {
            assert!(!v["modes"][m][key].is_null(), "{m}.{key}");
        }
        let trace: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("t-{m}.json"))).unwrap(),
        )
        .unwrap();
        assert!(trace["traceEvents"].as_array().unwrap().len() > 10);
        assert!(
            std::fs::read_to_string(dir.path().join(format!("t-{m}.svg")))
                .unwrap()
                .starts_with("<svg")
        );
    }
}

#[test]
fn profiles_of_another_version_without_storage_or_with_bad_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.toml");
    let cases = [
        (
            PROFILE.replace("version = 1", "version = 2"),
            "profile.toml: schema version 2 is not supported; this oversub reads version 1",
        ),
        (
            "[profile]\nversion = 1\n".to_string(),
            "profile.toml has no [storage] table: run `oversub probe`",
        ),
        (
            PROFILE.replace("write_bytes_per_s = 2.0e9", "write_bytes_per_s = -2.0e9"),
            "storage.write_bytes_per_s must be a positive finite number",
        ),
        (
            PROFILE.replace("[profile]\nversion = 1\n", ""),
            "missing the [profile] table with `version = 1`",
        ),
    ];
    for (text, message) in cases {
        std::fs::write(&profile, &text).unwrap();
        for sub in ["plan", "run"] {
            let out = oversub()
                .arg(sub)
                .arg(examples().join("paper.toml"))
                .arg("--profile")
                .arg(&profile)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{sub} accepted {text}");
            assert!(err.contains(message), "{sub}, {text}: {err}");
        }
    }
}

#[test]
fn configuration_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        TINY.replace(
            "budget_ms = 15\nperiod_ms = 30",
            "budget_ms = 45\nperiod_ms = 30",
        ),
    )
    .unwrap();
    let out = oversub().arg("plan").arg(&config).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:") && err.contains("period"), "{err}");
}

#[test]
fn demo_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("demo");
    let out = oversub()
        .arg("demo")
        .arg("--out")
        .arg(&out_dir)
        .arg("--store")
        .arg(dir.path())
        .args(["--max-unit", "2MiB", "--hyperperiods", "1"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("paper's analysis"), "{stdout}");
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("async"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let modes: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    for m in ["async", "sync", "demand"] {
        assert!(modes.contains(&m), "{modes:?}");
    }
    assert_eq!(v["swap_share"], 1.0);
    assert!(
        v.get("largest_swap_share_met").is_some()
            && v.get("predicted_largest_swap_share").is_some()
    );
    assert!(v["demand_read_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains("largest swap share"), "{stdout}");
    // Piped (no terminal, so no progress bar), it still says what it is doing: a line per finished run, with its
    // warm-up and how the store was primed.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run 1, async at the target period:")
            && stderr.contains("run 3, demand at the target period:")
            && stderr.contains("store primed in"),
        "{stderr}"
    );
    for run in v["runs"].as_array().unwrap() {
        assert!(run["prime"]["rounds"].as_u64().unwrap() >= 1, "{run}");
        let reps = run["misses"]["repetitions"].as_array().unwrap();
        assert_eq!(
            reps.len() as u64,
            run["warmup_hyperperiods"].as_u64().unwrap() + 1
        );
        assert!(run["misses"]["origin"]["kind"].is_string(), "{run}");
        assert_eq!(run["warmup_asked"], 2);
    }
}

#[test]
fn run_refuses_components_without_built_in_work_and_bad_inflation() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("user.toml");
    std::fs::write(
        &cfg,
        "[platform]\ncapacity = \"4MiB\"\ncpus = 1\n\n[[component]]\nname = \"mine\"\nbudget_ms = 10\nperiod_ms = 20\n",
    )
    .unwrap();
    let out = oversub().arg("run").arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("component mine has no built-in work"),
        "{stderr}"
    );
    assert!(stderr.contains("run_schedule"), "{stderr}");

    let out = oversub()
        .arg("run")
        .arg(examples().join("paper.toml"))
        .args(["--inflate", "0.5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("inflation factor"),
        "{stderr}"
    );

    let out = oversub()
        .arg("plan")
        .arg(&cfg)
        .arg("--inflate-from")
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
}
