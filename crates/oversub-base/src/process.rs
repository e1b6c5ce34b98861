//! Which process made an object, so that its drop can tell a forked child from its creator.
//!
//! A forked child gets a copy of its parent's memory, so a copy of every object the parent made, but only the
//! thread that called `fork`; it shares the parent's open file descriptions (offsets, `flock` locks) and shared
//! mappings. An object whose drop joins its threads, writes to a shared file or mapping, discards a store or gives
//! back a lock must do none of that in a child: the threads do not exist there (joining them panics or blocks
//! forever), a lock taken by a thread that did not survive the fork stays locked, and the files are the parent's.
//! In a child such a drop leaks what it cannot release safely; the child's memory goes when it exits.

/// The process that made an object: record it when the object is made, ask [`is_current`](Self::is_current) in
/// its drop.
///
/// Processes are told apart by pid. The one case this gets wrong needs the creator to have exited and a
/// descendant of its fork to be given the same pid again, while still holding a copy of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creator {
    pid: u32,
}

impl Creator {
    /// The calling process.
    pub fn current() -> Creator {
        Creator {
            pid: std::process::id(),
        }
    }

    /// The creator's process id.
    pub fn pid(self) -> u32 {
        self.pid
    }

    /// Whether the calling process made the object (false in a forked child).
    pub fn is_current(self) -> bool {
        std::process::id() == self.pid
    }

    /// The calling process's id when it is not the creator (a forked child), else `None`.
    pub fn forked(self) -> Option<u32> {
        let pid = std::process::id();
        (pid != self.pid).then_some(pid)
    }
}

impl Default for Creator {
    fn default() -> Self {
        Creator::current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_creator_is_current_and_a_forked_child_is_not() {
        let me = Creator::current();
        assert!(me.is_current());
        assert_eq!(me.forked(), None);
        assert_eq!(me.pid(), std::process::id());
        // SAFETY: the child only asks two questions (no allocation, no locks) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = if !me.is_current() && me.forked().is_some() {
                0
            } else {
                1
            };
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}"
        );
    }
}
