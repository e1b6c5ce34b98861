//! Running a test's body in a forked child of the test process, as Python's multiprocessing "fork" start method or
//! `os.fork()` do: the child has a copy of every object the test made, but only the forking thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Exit code of a child whose body panicked.
pub const CHILD_PANICKED: i32 = 101;

/// How a forked child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (SIGABRT: a panic while panicking, or an abort).
    Signalled(i32),
    /// It was still running after the limit, and was killed.
    Hung,
}

/// Runs `body` in a forked child, which then leaves with `_exit` and the code `body` returns ([`CHILD_PANICKED`]
/// when it panics), so that the test harness's exit handlers never run there; waits up to `limit` for it and kills
/// a child still running then ([`ChildEnd::Hung`]: a guard against a hang, not a timing check).
///
/// Fork only from a test that holds the binary's other tests off (a lock of its own): a thread of another test
/// holding a lock (stderr's, say) at the fork would leave it locked in the child forever.
pub fn in_child(limit: Duration, body: impl FnOnce() -> i32) -> ChildEnd {
    // SAFETY: fork has no memory-safety preconditions; the child runs `body` and leaves with `_exit`, never
    // returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = catch_unwind(AssertUnwindSafe(body)).unwrap_or(CHILD_PANICKED);
        // SAFETY: ends the child at once, without running the harness's exit handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            if libc::WIFEXITED(status) {
                return ChildEnd::Exited(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return ChildEnd::Signalled(libc::WTERMSIG(status));
            }
        }
        if Instant::now() > deadline {
            // SAFETY: `pid` is our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return ChildEnd::Hung;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_how_the_child_ended() {
        let limit = Duration::from_secs(30);
        assert_eq!(in_child(limit, || 7), ChildEnd::Exited(7));
        assert_eq!(
            in_child(limit, || panic!("on purpose")),
            ChildEnd::Exited(CHILD_PANICKED)
        );
        assert_eq!(
            in_child(limit, || {
                // SAFETY: aborting the child is the point.
                unsafe { libc::abort() }
            }),
            ChildEnd::Signalled(libc::SIGABRT)
        );
    }
}
