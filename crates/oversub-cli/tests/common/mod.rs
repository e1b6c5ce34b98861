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

/// The JSON document in `path`.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}
