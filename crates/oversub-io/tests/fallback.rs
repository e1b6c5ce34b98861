//! Engine selection falls back to psync when io_uring is refused, as under a seccomp policy that blocks it.
//!
//! Each case re-runs this test binary as a child process that installs a seccomp filter (refusing
//! `io_uring_setup`, or only `io_uring_enter` so that creating a ring works but using it does not) and then selects
//! an engine. The filter lives and dies with the child, so the rest of the suite is untouched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use oversub_io::{select_engine, EngineChoice};

const CHILD_ENV: &str = "OVERSUB_TEST_SECCOMP_BLOCK";
const SYS_IO_URING_SETUP: u32 = 425;
const SYS_IO_URING_ENTER: u32 = 426;

/// Makes `syscall` fail with EPERM in this process from now on.
fn refuse_syscall(syscall: u32) {
    // BPF: load the syscall number; if it matches, return ERRNO(EPERM), else allow.
    let filter = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: syscall,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with valid arguments; prog points to a live filter for the duration of the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn child_selects_engine_under_seccomp() {
    let Ok(which) = std::env::var(CHILD_ENV) else {
        return; // only meaningful inside the child started below
    };
    refuse_syscall(which.parse().unwrap());
    let engine = select_engine(EngineChoice::Auto, 8).unwrap();
    assert_eq!(engine.name(), "psync");
    assert!(
        select_engine(EngineChoice::Uring, 8).is_err(),
        "explicit io_uring must fail, not fall back"
    );
}

#[test]
fn auto_falls_back_to_psync_when_io_uring_is_blocked() {
    for syscall in [SYS_IO_URING_SETUP, SYS_IO_URING_ENTER] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_selects_engine_under_seccomp",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, syscall.to_string())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "blocking syscall {syscall}:\n{text}");
        assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    }
}
