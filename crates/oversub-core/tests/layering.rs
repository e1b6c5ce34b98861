//! The pager's two layers stay apart: `transfer/` (how bytes move) never reaches into `space/` (the bookkeeping of
//! buffers), so a new way of moving bytes never depends on how buffers are kept (docs/ARCHITECTURE.md, "The pager
//! has two layers").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn transfer_never_uses_space() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/transfer");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                assert!(
                    !code.contains("crate::space") && !code.contains("super::super::space"),
                    "{}:{}: transfer/ uses space/: {line}",
                    path.display(),
                    n + 1
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} files under {}", dir.display());
}
