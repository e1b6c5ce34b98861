"""One task of a local sweep in a process of its own: ``python -m oversub._sweep_task``.

``oversub.sweep``'s local executor starts one per task and writes the task (a JSON line) to its standard input; the
result comes back as JSON on standard output. A process rather than a thread because a simulation in Rust cannot be
interrupted, while a process can be killed: Ctrl-C stops a sweep at once, and a task killed for memory costs only its
own rows.

The parent keeps our standard input open for the task's whole life, so end of file means that it died (or gave up
on this task): the task then stops at once instead of running on unseen. SIGINT is ignored: a Ctrl-C at the terminal
reaches the whole process group, and the parent, which keeps the finished rows, is the one that stops its tasks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading


def _exit_when_parent_goes() -> None:
    # The descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader holds its lock, which the
    # interpreter's shutdown then cannot take.
    while os.read(0, 4096):
        pass
    os._exit(1)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Byte by byte up to the newline, so that nothing after it is left in a buffer the watching thread cannot see.
    line = bytearray()
    while not line.endswith(b"\n"):
        b = os.read(0, 1)
        if not b:
            return 1
        line += b
    spec = json.loads(line)
    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    from oversub.sweep import _run_task

    sys.stdout.write(json.dumps(_run_task(spec)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
