"""Stops the local Ray cluster a sweep started when the sweep's process dies without stopping it (SIGKILL, OOM).

``oversub.sweep`` starts ``python -m oversub._ray_watchdog DRIVER_PID [CHILD_PID...]`` (the driver's children at
that moment, which are not Ray's) just before ``ray.init()`` (Linux only: it
reads /proc), in a session of its own (a Ctrl-C at the terminal is not for it), with its standard input a pipe that
only the driver holds. Ray ties the processes the driver starts directly to the driver's life, but not theirs
(the raylet's agents and workers stay when the driver is SIGKILLed), hence this process.

- While Ray starts, every new child of the driver is recorded as the cluster's (nothing else of the driver's
  starts processes meanwhile); then the driver writes ``ready SESSION_DIR``. From then on, every descendant of
  those processes is recorded too (pid and start time, so that a reused pid is never mistaken for one of them).
- ``q`` means the driver stopped the cluster itself, or joined one it did not start: exit.
- End of file without ``q`` means the driver died: every recorded process still alive, and every process of this
  user that has the session's folder open or on its command line (the cluster's own: other clusters have other
  session folders), is killed. ``ray stop --force`` is not used: it kills every Ray cluster of the machine.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

POLL_S = 0.2


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything; the fields after its last ')' are plain.
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, start time)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def _descendants(roots: dict[int, int], procs: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Processes under any of `roots` (pid -> start time), the roots included where still the same processes."""
    found = {pid: start for pid, start in roots.items() if procs.get(pid, (0, -1))[1] == start}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, start) in procs.items():
            if ppid in found and pid not in found:
                found[pid] = start
                grew = True
    return found


def _uses_session(pid: int, session: str) -> bool:
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        # The folder itself or a path under it, not a folder whose name merely begins the same.
        if session.encode() + b"/" in cmdline or session.encode() + b"\0" in cmdline:
            return True
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link == session or link.startswith(session + "/"):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def _kill_cluster(known: dict[int, int], session: str | None) -> None:
    me = os.getpid()
    # A few rounds: a process may start another while the first are being killed.
    for _ in range(3):
        procs = _processes()
        targets = set(_descendants(known, procs))
        if session:
            targets |= {pid for pid in procs if pid != me and _uses_session(pid, session)}
        targets.discard(me)
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(POLL_S)


def children(pid: int) -> list[int]:
    """The children of `pid` now (the driver passes its own, which are not Ray's)."""
    return [child for child, (ppid, _) in _processes().items() if ppid == pid]


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = int(argv[0])
    not_ray = {int(a) for a in argv[1:]}
    me = os.getpid()
    known: dict[int, int] = {}
    ready = False
    session: str | None = None
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        readable, _, _ = select.select([fd], [], [], POLL_S)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                _kill_cluster(known, session)
                return 0
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                word, _, rest = line.decode(errors="replace").partition(" ")
                if word == "q":
                    return 0
                if word == "ready":
                    ready, session = True, (rest.strip() or None)
        procs = _processes()
        if not ready:
            known.update({pid: start for pid, (ppid, start) in procs.items()
                          if ppid == driver and pid != me and pid not in not_ray})
        known = _descendants(known, procs) if known else known


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
