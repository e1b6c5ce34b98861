//! `--ray [ADDRESS]`: a simulator sweep handed to the Python package's `oversub.sweep`, which runs each trace's
//! policies and ratios as one Ray task and prints the same speedup table. oversub has no cluster scheduler of its
//! own; this is the one door to one (docs/sim-uvm.md, "Sweeps on Ray").

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::BoxError;

/// The interpreter: `$OVERSUB_PYTHON`, else `python3` on the PATH.
fn python() -> String {
    std::env::var("OVERSUB_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs `python -m oversub.sweep SIM ARGS --ray [ADDRESS]`. With `capture`, the sweep's JSON result is read back
/// and returned (and written to `json` if given); otherwise Python prints its table.
pub fn delegate(
    sim: &str,
    mut args: Vec<String>,
    address: &str,
    json: Option<&Path>,
    capture: bool,
) -> Result<Option<serde_json::Value>, BoxError> {
    let py = python();
    let check = Command::new(&py)
        .args(["-c", "import oversub.sweep, ray"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            format!("--ray runs the sweep from Python, but `{py}` could not be started: {e} (set OVERSUB_PYTHON)")
        })?;
    if !check.status.success() {
        let why = String::from_utf8_lossy(&check.stderr);
        let last = why.lines().last().unwrap_or("").trim();
        return Err(format!(
            "--ray needs the oversub Python package and Ray in `{py}`: pip install \"oversub[ray]\" ({last})"
        )
        .into());
    }
    args.insert(0, sim.into());
    args.splice(0..0, ["-m".to_string(), "oversub.sweep".to_string()]);
    args.push("--ray".into());
    if !address.is_empty() {
        args.push(address.into());
    }
    let capture = capture || json.is_some();
    if capture {
        args.push("--json".into());
    }
    // The sweep ends with this process: Python reads its standard input, which only this process holds open, and
    // stops (cleaning up its Ray cluster or workers) at end of file, which a kill of this process gives too.
    args.push("--exit-with-stdin".into());
    let mut child = Command::new(&py)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(if capture {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting `{py}`: {e}"))?;
    let keep_open = child.stdin.take();
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)
            .map_err(|e| format!("reading the sweep's output: {e}"))?;
    }
    let status = child.wait()?;
    drop(keep_open);
    let value = if capture {
        if let Some(path) = json {
            std::fs::write(path, &stdout)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        serde_json::from_slice::<serde_json::Value>(&stdout).ok()
    } else {
        None
    };
    match status.code() {
        Some(0) => Ok(value),
        Some(1) => Err("some runs of the sweep failed (listed above)".into()),
        Some(130) => Err("the sweep was interrupted".into()),
        _ => Err(format!("the Ray sweep failed ({status})").into()),
    }
}

/// `name=value` for `--option`, when the flag is set.
pub fn option(name: &str, value: impl std::fmt::Display) -> [String; 2] {
    ["--option".into(), format!("{name}={value}")]
}
