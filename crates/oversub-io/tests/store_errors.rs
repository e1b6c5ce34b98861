#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Errors of making a store name the file or folder, the size asked and what to do, keep the OS error as their
//! source, and leave nothing behind.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use oversub_io::{IoEngine, IoError, PsyncEngine, SwapStore};
use oversub_testkit::require;

const MIB: u64 = 1 << 20;

fn engine() -> Arc<dyn IoEngine> {
    Arc::new(PsyncEngine::new(2).unwrap())
}

fn left_in(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn a_file_in_a_missing_folder_names_the_file_and_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/swap");
    let err = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine())
        .build(std::slice::from_ref(&missing))
        .unwrap_err();
    match &err {
        IoError::StoreIo { op, path, .. } => {
            assert_eq!(*op, "open");
            assert_eq!(path, &missing);
        }
        other => panic!("expected StoreIo, got {other:?}"),
    }
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot create the swap store file {}: ",
            missing.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "the folder {} does not exist",
            dir.path().join("no/such").display()
        )),
        "{text}"
    );
    // The OS error is the source, and nothing was created.
    assert!(std::error::Error::source(&err).is_some());
    assert!(left_in(dir.path()).is_empty());
}

#[test]
fn an_impossible_capacity_names_the_store_and_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let result = SwapStore::builder()
        .capacity_bytes(1 << 60)
        .engine(engine())
        .create_temp(dir.path());
    // A file system that cannot preallocate makes a sparse file instead, which may be allowed this large.
    let err = require!(
        result.err(),
        "the file system under {} takes a 1 EiB sparse file",
        dir.path().display()
    );
    match &err {
        IoError::StoreIo { op, path, hint, .. } => {
            assert!(matches!(*op, "fallocate" | "ftruncate"), "{err:?}");
            assert_eq!(path.parent(), Some(dir.path()));
            assert!(hint.is_some(), "{err:?}");
        }
        other => panic!("expected StoreIo, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("cannot reserve 1.00 EiB for the swap store "),
        "{text}"
    );
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    assert!(
        text.contains("give a smaller capacity or another store location"),
        "{text}"
    );
    assert!(left_in(dir.path()).is_empty());
}

#[test]
fn a_folder_without_write_permission_is_named() {
    require!(
        !oversub_testkit::is_root(),
        "root may write into a folder of mode 0500"
    );
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
    let err = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine())
        .create_temp(&locked)
        .unwrap_err();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot create the swap store file {}/",
            locked.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("may not create files in {}", locked.display())),
        "{text}"
    );

    // A file this user may not write.
    let file = dir.path().join("read-only");
    std::fs::write(&file, b"").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = SwapStore::builder()
        .capacity_bytes(MIB)
        .engine(engine())
        .open(&file)
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot open the swap store {}: ", file.display())),
        "{text}"
    );
    assert!(text.contains("change its permissions"), "{text}");
}
