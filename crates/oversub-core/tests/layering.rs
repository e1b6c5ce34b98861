//! The pager's layers stay apart: `space/` (the bookkeeping of buffers) uses `tier/` (where a copy lives), which uses
//! `transfer/` (how bytes move); never the other way, so a new way of moving bytes never depends on where copies are
//! kept, and neither on how buffers are kept (docs/ARCHITECTURE.md, "The pager has three layers").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// Fails if a file of `src/{dir}` names any of `forbidden` (outside comments); returns how many files it read.
fn never_uses(dir: &str, forbidden: &[&str]) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for name in forbidden {
                    assert!(
                        !code.contains(name),
                        "{}:{}: uses {name}: {line}",
                        path.display(),
                        n + 1
                    );
                }
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn transfer_never_uses_space_or_tiers() {
    let checked = never_uses(
        "transfer",
        &[
            "crate::space",
            "super::super::space",
            "crate::tier",
            "super::super::tier",
        ],
    );
    assert!(checked >= 5, "only {checked} files under src/transfer");
}

#[test]
fn tiers_never_use_space() {
    let checked = never_uses("tier", &["crate::space", "super::super::space"]);
    assert!(checked >= 4, "only {checked} files under src/tier");
}
