//! `oversub sim uvm --ray` end to end (issue 32), where the Python package and Ray are installed in the interpreter
//! the CLI starts (`$OVERSUB_PYTHON`, else `python3`; skipped with the reason otherwise): the same JSON document as
//! a local run, and a killed command that leaves no Ray process behind. Each test starts a local Ray cluster, which
//! takes a few seconds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use std::time::{Duration, Instant};

use common::{descendants, oversub, read_json, stderr, still_running};
use oversub_testkit::{python_with, require};
use serde_json::Value;

/// The document's skeleton: every object's keys, every array's items, the JSON type of every value.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

/// The document less what measures this machine rather than the simulation (each run's `sim_seconds`, the whole
/// run's `wall_seconds`).
fn without_timing(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("wall_seconds");
    }
    for run in v["runs"].as_array_mut().into_iter().flatten() {
        if let Some(m) = run.as_object_mut() {
            m.remove("sim_seconds");
        }
    }
    v
}

#[test]
fn json_is_the_same_document_with_and_without_ray() {
    let py = require!(
        python_with("oversub.sweep, ray"),
        "--ray needs the oversub Python package and Ray in the interpreter the CLI starts"
    );
    let dir = tempfile::tempdir().unwrap();
    let doc = |ray: bool| {
        let json = dir.path().join(if ray { "ray.json" } else { "local.json" });
        let mut cmd = oversub();
        cmd.env("OVERSUB_PYTHON", &py)
            .args(["sim", "uvm", "--workload", "nw,bfs", "--quick"])
            .args(["--ratio", "100,200%", "--policy"])
            .args(["lazy-grp-hw,dynamap,lazy-pg-stat-sw:8,lazy-pg-stat-sw:32"])
            .args(["--no-progress", "--json"])
            .arg(&json);
        if ray {
            cmd.arg("--ray");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "ray {ray}: {}", stderr(&out));
        read_json(&json)
    };
    let local = doc(false);
    let ray = doc(true);
    assert_eq!(
        shape(&ray),
        shape(&local),
        "--ray wrote another shape of document"
    );
    let runs = local["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 16);
    assert_eq!(runs[0]["ratio_percent"], 100);
    assert!(ray["runs"][0]["sim_seconds"].as_f64().unwrap() > 0.0);
    // The simulators are deterministic: the same runs in the same order, the same speed-ups (to the last digit or
    // so: the numbers went through Python's JSON and back).
    same_values(&without_timing(ray), &without_timing(local), "");
}

fn same_values(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                same_values(v, &y[k], &format!("{at}.{k}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_values(v, w, &format!("{at}[{i}]"));
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                "{at}: {x} with --ray, {y} without"
            );
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn a_killed_ray_sweep_leaves_no_process_behind() {
    require!(cfg!(target_os = "linux"), "the test reads /proc");
    let py = require!(
        python_with("oversub.sweep, ray"),
        "--ray needs the oversub Python package and Ray in the interpreter the CLI starts"
    );
    // Long enough not to end by itself while the test watches (minutes on two cores): seven tasks of 13 ratios
    // times every policy.
    let ratios: Vec<String> = (4..=16).map(|q| (q * 25).to_string()).collect();
    let mut child = oversub()
        .env("OVERSUB_PYTHON", &py)
        .args(["sim", "uvm", "--workload", "all", "--quick", "--ratio"])
        .arg(ratios.join(","))
        .args(["--policy", "all", "--ray"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until a Ray worker runs a task: the cluster, its agents and workers are all up then.
    let started = Instant::now();
    let running_task = |procs: &[(u32, u64)]| {
        still_running(procs)
            .iter()
            .any(|p| p.contains("ray::_run_task"))
    };
    let mut procs = descendants(pid);
    while !running_task(&procs) {
        if started.elapsed() > Duration::from_secs(240) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "no Ray task started: {:?}",
                still_running(&descendants(pid))
            );
        }
        std::thread::sleep(Duration::from_millis(200));
        procs = descendants(pid);
    }
    procs = descendants(pid);
    assert!(
        still_running(&procs).iter().any(|p| p.contains("raylet")),
        "{:?}",
        still_running(&procs)
    );
    child.kill().unwrap(); // SIGKILL: the CLI cannot clean up; Python sees its standard input end
    child.wait().unwrap();
    let killed = Instant::now();
    let mut left = still_running(&procs);
    while !left.is_empty() && killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        left = still_running(&procs);
    }
    assert!(
        left.is_empty(),
        "still running 30 s after the kill: {left:?}"
    );
}
