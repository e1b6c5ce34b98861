//! Errors name their subject (the path, the flag, the key) and say what to do (issue 32): store errors, a store
//! location that does not exist, negative and zero sizes and counts, the chain of causes, configuration types.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{oversub, stderr};
use oversub_testkit::require;

const PROFILE: &str =
    "[profile]\nversion = 1\n\n[storage]\nread_bytes_per_s = 1.0e9\nwrite_bytes_per_s = 2.0e9\n";

/// One component with one buffer; `store` goes into [platform] when given.
fn config(dir: &Path, store: Option<&Path>, budget: &str) -> PathBuf {
    let store = store.map_or(String::new(), |s| {
        format!("store = {:?}\n", s.display().to_string())
    });
    let text = format!(
        "[platform]\ncapacity = \"8MiB\"\ncpus = 1\n{store}\n[[component]]\nname = \"A\"\nbudget_ms = {budget}\n\
         period_ms = 30\nwork = {{ sleep_ms = 3 }}\n[[component.buffer]]\nname = \"w\"\nsize = \"2MiB\"\n"
    );
    let path = dir.join("c.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `oversub args...`, which must fail; its standard error.
fn fails(args: &[&str]) -> String {
    let out: Output = oversub().args(args).output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?} succeeded:\n{err}");
    assert!(!err.contains("panicked"), "{args:?}:\n{err}");
    err
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// No line of `err` repeats what another line already said.
#[track_caller]
fn no_line_repeats(err: &str) {
    let lines: Vec<&str> = err
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("error: ")
                .trim_start_matches("caused by: ")
        })
        .filter(|l| !l.is_empty())
        .collect();
    for (i, a) in lines.iter().enumerate() {
        for (j, b) in lines.iter().enumerate() {
            assert!(
                i == j || !b.contains(a),
                "line {a:?} repeats in {b:?}:\n{err}"
            );
        }
    }
}

#[test]
fn store_errors_name_the_path_the_size_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.display().to_string();

    // A file in a folder that does not exist.
    let missing = dir.path().join("no/such/swap");
    let err = fails(&[
        "bench",
        "paging",
        "--size",
        "1MiB",
        "--samples",
        "1",
        "--store",
        &s(&missing),
    ]);
    assert!(
        err.contains(&format!(
            "cannot create the swap store file {}",
            s(&missing)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "the folder {} does not exist",
            s(&dir.path().join("no/such"))
        )),
        "{err}"
    );
    no_line_repeats(&err);
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // A size no file system holds: the size asked and the folder.
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--size",
            "1EiB",
            "--samples",
            "1",
            "--store",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    require!(
        !out.status.success(),
        "the file system under {} takes a 1 EiB sparse file",
        dir.path().display()
    );
    assert!(
        err.contains(&format!(
            "cannot reserve 1.00 EiB for the swap store {}/",
            s(dir.path())
        )),
        "{err}"
    );
    assert!(
        err.contains("give a smaller capacity or another store location"),
        "{err}"
    );
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // A folder this user may not write into (root may write anywhere).
    if !oversub_testkit::is_root() {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let err = fails(&[
            "bench",
            "paging",
            "--size",
            "1MiB",
            "--samples",
            "1",
            "--store",
            &s(&locked),
        ]);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(
            err.contains(&format!("may not create files in {}", s(&locked))),
            "{err}"
        );
    }
}

/// A file system with too little room: a 4 MiB tmpfs, where one can be mounted (root, a mount namespace).
#[test]
fn a_full_file_system_says_how_much_is_free() {
    require!(oversub_testkit::is_root(), "mounting a tmpfs needs root");
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4M", "tmpfs"])
        .arg(dir.path())
        .output()
        .map_err(|e| e.to_string())
        .and_then(|o| o.status.success().then_some(()).ok_or_else(|| stderr(&o)));
    require!(mounted, "no tmpfs can be mounted here");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let out = oversub()
        .args([
            "bench",
            "paging",
            "--size",
            "16MiB",
            "--samples",
            "1",
            "--store",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "cannot reserve 16.00 MiB for the swap store {}/",
            dir.path().display()
        )),
        "{err}"
    );
    assert!(
        err.contains(
            "(free: 4.00 MiB on that file system; give a smaller capacity or another store location)"
        ),
        "{err}"
    );
    no_line_repeats(&err);
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn a_store_location_that_does_not_exist_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nonexistent/dir");
    let want = format!(
        "store location {} does not exist: give an existing folder, file or device",
        missing.display()
    );
    let out_dir = dir.path().join("demo-out");
    let err = fails(&[
        "demo",
        "--store",
        &missing.display().to_string(),
        "--out",
        &out_dir.display().to_string(),
        "--hyperperiods",
        "1",
    ]);
    assert!(err.contains(&want), "{err}");
    no_line_repeats(&err);
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // The platform's store of a configuration, for `run` (with the speeds from a profile, so the pool is what
    // meets the store first) and `plan` (which measures on it).
    let profile = dir.path().join("p.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let cfg = config(dir.path(), Some(&missing), "10");
    let (cfg, profile) = (cfg.display().to_string(), profile.display().to_string());
    let err = fails(&["run", &cfg, "--profile", &profile, "--hyperperiods", "1"]);
    assert!(err.contains(&want), "{err}");
    let err = fails(&["plan", &cfg]);
    assert!(err.contains(&want), "{err}");
    assert!(!dir.path().join("nonexistent").exists());
}

#[test]
fn negative_shares_and_sizes_reach_the_flag_parser() {
    for (args, flag, why) in [
        (
            &["demo", "--swap-share", "-1"][..],
            "--swap-share",
            "is not a swap share",
        ),
        (
            &["demo", "--max-unit", "-5MiB"],
            "--max-unit",
            "cannot be negative",
        ),
        (
            &["bench", "paging", "--size", "-1GiB"],
            "--size",
            "cannot be negative",
        ),
        (
            &["run", "x.toml", "--inflate", "-2"],
            "--inflate",
            "not an inflation factor",
        ),
        (
            &["plan", "x.toml", "--inflate", "-2"],
            "--inflate",
            "not an inflation factor",
        ),
        (
            &["demo", "--warmup", "-1"],
            "--warmup",
            "cannot be negative",
        ),
        (
            &["demo", "--extra-warmup", "-1"],
            "--extra-warmup",
            "cannot be negative",
        ),
        (
            &["bench", "tenants", "--tenants", "-3"],
            "--tenants",
            "cannot be negative",
        ),
        (
            &["sim", "swap", "--compute-scale", "-1"],
            "--compute-scale",
            "greater than 0",
        ),
        (&["tasks", "--repeat", "-1"], "--repeat", "-1"),
        (
            &["probe", "--queue-depths", "1,-2"],
            "--queue-depths",
            "cannot be negative",
        ),
    ] {
        let err = fails(args);
        assert!(!err.contains("unexpected argument"), "{args:?}:\n{err}");
        assert!(err.contains(&format!("for '{flag} ")), "{args:?}:\n{err}");
        assert!(err.contains(why), "{args:?}:\n{err}");
    }
}

#[test]
fn zero_sizes_and_counts_are_refused_by_the_flag_parser() {
    for (args, flag) in [
        (&["demo", "--max-unit", "0"][..], "--max-unit"),
        (&["demo", "--hyperperiods", "0"], "--hyperperiods"),
        (&["run", "x.toml", "--hyperperiods", "0"], "--hyperperiods"),
        (&["bench", "paging", "--size", "0"], "--size"),
        (&["bench", "paging", "--max-io", "0MiB"], "--max-io"),
        (&["bench", "paging", "--queue-depth", "0"], "--queue-depth"),
        (&["bench", "paging", "--samples", "0"], "--samples"),
        (&["bench", "tenants", "--buffer", "0"], "--buffer"),
        (&["bench", "tenants", "--rounds", "0"], "--rounds"),
        (
            &["bench", "interference", "--paging-buffer", "0"],
            "--paging-buffer",
        ),
        (
            &["bench", "interference", "--iterations", "0"],
            "--iterations",
        ),
        (&["sim", "swap", "--sms", "0"], "--sms"),
        (&["sim", "swap", "--capacity", "0"], "--capacity"),
        (&["sim", "uvm", "--scale", "0"], "--scale"),
        (&["tasks", "--size", "0"], "--size"),
        (&["tasks", "--passes", "0"], "--passes"),
        (&["probe", "--block-sizes", "4KiB,0"], "--block-sizes"),
    ] {
        let err = fails(args);
        assert!(
            err.starts_with("error: invalid value '") && err.contains(&format!("for '{flag} ")),
            "{args:?}:\n{err}"
        );
        assert!(
            err.contains("give "),
            "{args:?} does not say what to give:\n{err}"
        );
    }
    // Where 0 means none, it is a value like any other: the run gets as far as the missing file.
    let err = fails(&["run", "/nonexistent/c.toml", "--warmup", "0"]);
    assert!(err.contains("/nonexistent/c.toml"), "{err}");
    assert!(!err.contains("--warmup"), "{err}");
}

#[test]
fn causes_already_said_are_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    // A configuration file that is not there: the OS error is in the message already.
    let err = fails(&["run", &dir.path().join("none.toml").display().to_string()]);
    assert!(err.contains("none.toml"), "{err}");
    assert!(!err.contains("caused by"), "{err}");
    no_line_repeats(&err);
    // A store file in a missing folder.
    let err = fails(&[
        "bench",
        "paging",
        "--size",
        "1MiB",
        "--samples",
        "1",
        "--store",
        &dir.path().join("a/b").display().to_string(),
    ]);
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error: ")).count(),
        1,
        "{err}"
    );
    no_line_repeats(&err);
    // A trace that is not there.
    let err = fails(&[
        "sim",
        "uvm",
        "--trace",
        "/nonexistent/trace.bin",
        "--no-progress",
    ]);
    no_line_repeats(&err);
}

#[test]
fn a_number_written_as_a_string_names_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), None, "\"100\"");
    let line = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("budget_ms"))
        .unwrap()
        + 1;
    let err = fails(&["plan", &cfg.display().to_string()]);
    assert!(
        err.contains(&format!(
            "{}:{line}:13: budget_ms must be a number of milliseconds, e.g. budget_ms = 100, not the string \"100\"",
            cfg.display()
        )),
        "{err}"
    );
    // Sizes may be strings.
    let ok_cfg = config(dir.path(), None, "10");
    let profile = dir.path().join("p.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let out = oversub()
        .args(["plan", &ok_cfg.display().to_string(), "--profile"])
        .arg(&profile)
        .args(["--demand-bandwidth", "1e9"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A negative duration reaches the duration parser, which says why, instead of clap's "unexpected argument '-5'".
#[test]
fn a_negative_duration_is_named_as_such() {
    let err = fails(&[
        "arbiter",
        "bound",
        "--load",
        "-5ms",
        "--compute",
        "1ms",
        "--unload",
        "1ms",
    ]);
    assert!(
        err.contains("cannot be negative") && err.contains("--load"),
        "{err}"
    );
}
