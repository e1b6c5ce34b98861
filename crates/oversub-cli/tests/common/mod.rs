//! What the CLI's end-to-end tests share: starting the `oversub` binary, reading its output and the JSON it wrote.
//! Each test file uses part of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

/// The `oversub` binary with progress bars off (`OVERSUB_NO_PROGRESS`).
pub fn oversub() -> Command {
    let mut c = oversub_bare();
    c.env("OVERSUB_NO_PROGRESS", "1");
    c
}

/// The `oversub` binary with the environment the test runs in.
pub fn oversub_bare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oversub"))
}

/// A run's standard output, lossily decoded.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run's standard error, lossily decoded.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A run's standard output and standard error.
pub fn text(out: &Output) -> (String, String) {
    (stdout(out), stderr(out))
}

/// A run's standard output, after checking that it succeeded (the failure shows both streams).
pub fn succeeded(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// The JSON document in `path`.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// (parent pid, start time) of a process, from `/proc/PID/stat`; None when it is gone.
fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything; the fields after its last ')' are plain.
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split_whitespace().collect();
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// Every process under `pid` now, as (pid, start time), so that [`still_running`] cannot mistake a reused pid.
pub fn descendants(pid: u32) -> Vec<(u32, u64)> {
    let all: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| proc_stat(p).map(|(ppid, start)| (p, ppid, start)))
                .collect()
        })
        .unwrap_or_default();
    let mut found: Vec<(u32, u64)> = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for &(p, ppid, start) in &all {
            if ppid == parent && !found.iter().any(|f| f.0 == p) {
                found.push((p, start));
                parents.push(p);
            }
        }
    }
    found
}

/// Those of `procs` still running (zombies, already dead, do not count), with their command lines.
pub fn still_running(procs: &[(u32, u64)]) -> Vec<String> {
    procs
        .iter()
        .filter(|&&(pid, start)| {
            proc_stat(pid).is_some_and(|(_, s)| s == start)
                && !std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                    s.lines()
                        .any(|l| l.starts_with("State:") && l.contains('Z'))
                })
        })
        .map(|&(pid, _)| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!(
                "{pid} {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ").trim()
            )
        })
        .collect()
}
