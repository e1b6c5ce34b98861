//! The arbiter in shared memory, used from two processes: the child announces a phase and exits without clearing
//! it (as a crashed task would); the parent sees it, then sees it expire.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use oversub_arbiter::{
    Arbiter, ArbiterConfig, ArbiterError, Decision, MonotonicClock, PhaseKind, WaitReason,
};

const CHILD_ENV: &str = "OVERSUB_ARBITER_TEST_CHILD";

fn config() -> ArbiterConfig {
    ArbiterConfig {
        stale_after: Duration::from_millis(10),
        chunk_time: Some(Duration::from_micros(100)),
        ..ArbiterConfig::default()
    }
}

fn unique_name(tag: &str) -> String {
    format!("test-{tag}-{}", std::process::id())
}

/// Runs only as the child of `a_crashed_task_in_another_process_blocks_then_expires`.
#[test]
fn child_announces_and_exits() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let arbiter = Arbiter::open_at(&PathBuf::from(path)).unwrap();
    let task = arbiter.register_task().unwrap();
    task.mem(Duration::from_secs(1)).unwrap();
    task.detach();
}

#[test]
fn a_crashed_task_in_another_process_blocks_then_expires() {
    let name = unique_name("xproc");
    let arbiter = Arbiter::create_shared(&name, config()).unwrap();
    let path = arbiter.path().unwrap().to_path_buf();
    assert_eq!(
        path,
        PathBuf::from(format!("/dev/shm/oversub-arbiter-{name}"))
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_announces_and_exits", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .status()
        .unwrap();
    assert!(status.success());

    let tasks = arbiter.tasks();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].phase, PhaseKind::Mem);
    assert_ne!(tasks[0].pid, std::process::id());
    assert!(matches!(
        arbiter.request(Duration::from_micros(100)),
        Decision::Wait {
            reason: WaitReason::MemoryPhase,
            ..
        }
    ));
    // Once its deadline and the stale time have passed, the dead task no longer blocks anything.
    let later = MonotonicClock::now() + 1_020_000_000;
    assert_eq!(
        arbiter.decide_at(later, Duration::from_micros(100)),
        Decision::Unrestricted
    );

    drop(arbiter);
    assert!(!path.exists(), "the creator removes the file");
}

#[test]
fn a_second_handle_sees_the_first_ones_phases() {
    let name = unique_name("two");
    let server = Arbiter::create_shared(&name, config()).unwrap();
    let client = Arbiter::open_shared(&name).unwrap();
    assert_eq!(client.chunk_time(), Duration::from_micros(100));
    assert_eq!(client.stale_after(), Duration::from_millis(10));
    let task = client.register_task().unwrap();
    task.com(Duration::from_secs(5)).unwrap();
    assert!(
        matches!(server.request(Duration::from_micros(100)), Decision::Grant { chunks, .. } if chunks > 40_000)
    );
    drop(task);
    assert_eq!(
        server.request(Duration::from_micros(100)),
        Decision::Unrestricted
    );
    assert_eq!(server.stats().requests, 2);
}

#[test]
fn bad_names_files_and_duplicates_are_refused() {
    for bad in ["", "a/b", "..", "x y", &"n".repeat(65)] {
        assert!(
            matches!(
                Arbiter::create_shared(bad, config()),
                Err(ArbiterError::InvalidName(_))
            ),
            "{bad:?}"
        );
    }
    let name = unique_name("dup");
    let _first = Arbiter::create_shared(&name, config()).unwrap();
    assert!(matches!(
        Arbiter::create_shared(&name, config()),
        Err(ArbiterError::Os { op: "create", .. })
    ));
    assert!(matches!(
        Arbiter::open_shared(&unique_name("missing")),
        Err(ArbiterError::Os { op: "open", .. })
    ));
    let dir = std::env::temp_dir().join(unique_name("garbage"));
    std::fs::write(&dir, vec![7u8; 64]).unwrap();
    // Written with the umask's mode (readable by others) and too short: refused before it is mapped.
    let err = Arbiter::open_at(&dir).unwrap_err();
    assert!(matches!(err, ArbiterError::Untrusted { .. }), "{err}");
    std::fs::remove_file(&dir).unwrap();
}
