//! The shared file is checked before it is mapped: files that other users may write or own, of the wrong size,
//! symbolic links, FIFOs and foreign contents are refused; a dead server's file is taken over, a live one's is
//! not. Real files under /dev/shm, real child processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::{OpenOptions, Permissions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use oversub_arbiter::{Arbiter, ArbiterConfig, ArbiterError, SharedOptions};
use oversub_testkit::{is_root, require};

const CHILD_ENV: &str = "OVERSUB_ARBITER_TRUST_CHILD";

fn config() -> ArbiterConfig {
    ArbiterConfig {
        chunk_time: Some(Duration::from_micros(100)),
        ..ArbiterConfig::default()
    }
}

fn unique(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/oversub-arbiter-trust-{tag}-{}",
        std::process::id()
    ))
}

/// Removes the file when the test ends, passed or not.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn untrusted(result: Result<Arbiter, ArbiterError>, needle: &str) {
    match result {
        Err(e @ ArbiterError::Untrusted { .. }) => {
            assert!(e.to_string().contains(needle), "{e}")
        }
        Err(e) => panic!("expected Untrusted ({needle}), got {e}"),
        Ok(_) => panic!("expected Untrusted ({needle}), got an arbiter"),
    }
}

/// A copy of a real arbiter's file at `to`, mode 0600, made by this user: a valid image to spoil in one way.
fn image_copy(tag: &str, to: &Path) -> Vec<u8> {
    let server = Arbiter::create_at(&unique(&format!("{tag}-src")), config()).unwrap();
    let bytes = std::fs::read(server.path().unwrap()).unwrap();
    write_private(to, &bytes);
    bytes
}

fn write_private(to: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_file_others_may_read_or_write_is_refused() {
    let path = unique("mode");
    let _server = Arbiter::create_at(&path, config()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    Arbiter::open_at(&path).unwrap();
    for mode in [0o666, 0o644, 0o604, 0o620, 0o640, 0o602] {
        std::fs::set_permissions(&path, Permissions::from_mode(mode)).unwrap();
        untrusted(Arbiter::open_at(&path), "mode");
    }
    // A trusted group may have the group bits, never others'.
    let gid = std::fs::metadata(&path).unwrap().gid();
    std::fs::set_permissions(&path, Permissions::from_mode(0o660)).unwrap();
    Arbiter::open_at_with(&path, SharedOptions::new().allow_group(gid)).unwrap();
    untrusted(Arbiter::open_at(&path), "mode");
    std::fs::set_permissions(&path, Permissions::from_mode(0o666)).unwrap();
    untrusted(
        Arbiter::open_at_with(&path, SharedOptions::new().allow_group(gid)),
        "mode",
    );
    std::fs::set_permissions(&path, Permissions::from_mode(0o600)).unwrap();
    Arbiter::open_at(&path).unwrap();
}

#[test]
fn a_file_owned_by_another_user_is_refused_unless_trusted() {
    require!(is_root(), "changing a file's owner needs root");
    let path = unique("owner");
    let server = Arbiter::create_at(&path, config()).unwrap();
    let file = OpenOptions::new().read(true).open(&path).unwrap();
    std::os::unix::fs::fchown(&file, Some(65534), None).unwrap();
    drop(file);
    // Root too refuses another user's file by default.
    untrusted(Arbiter::open_at(&path), "owned by uid 65534");
    let client = Arbiter::open_at_with(&path, SharedOptions::new().allow_owner(65534)).unwrap();
    assert_eq!(client.server_pid(), std::process::id());
    let gid = std::fs::metadata(&path).unwrap().gid();
    Arbiter::open_at_with(&path, SharedOptions::new().allow_group(gid)).unwrap();
    untrusted(
        Arbiter::open_at_with(&path, SharedOptions::new().allow_owner(65533)),
        "owned by uid 65534",
    );
    // Trusting the owner does not let its group or others write.
    std::fs::set_permissions(&path, Permissions::from_mode(0o620)).unwrap();
    untrusted(
        Arbiter::open_at_with(&path, SharedOptions::new().allow_owner(65534)),
        "mode",
    );
    drop(server);
    assert!(!path.exists(), "the server removes its file");
}

#[test]
fn a_file_of_the_wrong_size_is_refused_without_faulting() {
    let path = unique("size");
    let _cleanup = Cleanup(path.clone());
    let bytes = image_copy("size", &path);
    // The copy itself is a valid arbiter.
    Arbiter::open_at(&path).unwrap();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    for len in [0, 100, bytes.len() as u64 - 8, bytes.len() as u64 + 4096] {
        file.set_len(len).unwrap();
        untrusted(Arbiter::open_at(&path), "size");
    }
}

#[test]
fn symbolic_links_are_refused() {
    let target = unique("link-target");
    let link = unique("link");
    let _cleanup = Cleanup(link.clone());
    let _server = Arbiter::create_at(&target, config()).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    untrusted(Arbiter::open_at(&link), "symbolic link");
    untrusted(
        Arbiter::create_at_with(&link, config(), SharedOptions::new().take_over_stale(true)),
        "symbolic link",
    );
    // A dangling link does not make the creator write where it points.
    let nowhere = unique("link-nowhere");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&nowhere, &link).unwrap();
    assert!(matches!(
        Arbiter::create_at(&link, config()),
        Err(ArbiterError::Os { op: "create", .. })
    ));
    assert!(!nowhere.exists());
}

#[test]
fn a_fifo_is_refused() {
    let path = unique("fifo");
    let _cleanup = Cleanup(path.clone());
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    untrusted(Arbiter::open_at(&path), "not a regular file");
}

#[test]
fn a_foreign_file_of_the_right_size_is_refused_and_left_alone() {
    let path = unique("foreign");
    let _cleanup = Cleanup(path.clone());
    let len = image_copy("foreign", &path).len();
    std::fs::remove_file(&path).unwrap();
    write_private(&path, &vec![0x5a; len]);
    let err = Arbiter::open_at(&path).unwrap_err();
    assert!(
        matches!(err, ArbiterError::Incompatible { ref reason, .. } if reason.contains("magic")),
        "{err}"
    );
    let err = Arbiter::create_at_with(&path, config(), SharedOptions::new().take_over_stale(true))
        .unwrap_err();
    assert!(matches!(err, ArbiterError::Incompatible { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; len]);
}

/// Runs only as the child of `a_dead_servers_file_is_taken_over`: creates the arbiter and exits without
/// removing it, as a killed server would.
#[test]
fn child_creates_and_vanishes() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let arbiter = Arbiter::create_at(Path::new(&path), config()).unwrap();
    let task = arbiter.register_task().unwrap();
    task.detach();
    std::mem::forget(arbiter);
}

#[test]
fn a_dead_servers_file_is_taken_over() {
    let path = unique("stale");
    let _cleanup = Cleanup(path.clone());
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_creates_and_vanishes", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .spawn()
        .unwrap();
    let child_pid = child.id();
    assert!(child.wait_with_output().unwrap().status.success());
    assert!(path.exists(), "the child left its file behind");

    // Clients still open it; a plain create refuses it.
    let client = Arbiter::open_at(&path).unwrap();
    assert_eq!(client.server_pid(), child_pid);
    assert!(matches!(
        Arbiter::create_at(&path, config()),
        Err(ArbiterError::Os { op: "create", .. })
    ));
    let server =
        Arbiter::create_at_with(&path, config(), SharedOptions::new().take_over_stale(true))
            .unwrap();
    assert_eq!(server.taken_over_from(), Some(child_pid));
    assert_eq!(server.server_pid(), std::process::id());
    // The same file: a client of the old server sees the new one, and the child's task slot carried over.
    assert_eq!(client.server_pid(), std::process::id());
    assert_eq!(server.tasks().len(), 1);

    // While it serves, nobody else takes it over.
    match Arbiter::create_at_with(&path, config(), SharedOptions::new().take_over_stale(true)) {
        Err(ArbiterError::InUse { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("expected InUse, got {other:?}"),
    }
    drop(server);
    assert!(!path.exists(), "the new server removes the file");
}

#[test]
fn a_server_does_not_remove_a_file_that_replaced_its_own() {
    let path = unique("replaced");
    let _cleanup = Cleanup(path.clone());
    let first = Arbiter::create_at(&path, config()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = Arbiter::create_at(&path, config()).unwrap();
    drop(first);
    assert!(path.exists(), "the first server left the second one's file");
    drop(second);
    assert!(!path.exists());
}

#[test]
fn a_group_shared_arbiter_is_opened_with_the_group_only() {
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let path = unique("group");
    let server =
        Arbiter::create_at_with(&path, config(), SharedOptions::new().allow_group(gid)).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, gid));
    untrusted(Arbiter::open_at(&path), "mode");
    let client = Arbiter::open_at_with(&path, SharedOptions::new().allow_group(gid)).unwrap();
    assert_eq!(client.chunk_time(), server.chunk_time());
}

#[test]
fn a_file_of_another_layout_version_is_refused_clearly() {
    let path = unique("version");
    let _cleanup = Cleanup(path.clone());
    let mut bytes = image_copy("version", &path);
    std::fs::remove_file(&path).unwrap();
    // The version is the u32 right after the 8-byte magic.
    bytes[8..12].copy_from_slice(&(oversub_arbiter::LAYOUT_VERSION + 1).to_ne_bytes());
    write_private(&path, &bytes);
    let err = Arbiter::open_at(&path).unwrap_err();
    assert!(
        matches!(err, ArbiterError::Incompatible { ref reason, .. }
            if reason.contains(&format!("layout version {}", oversub_arbiter::LAYOUT_VERSION + 1))),
        "{err}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}
