"""Issue 33 from Python: a forked child never touches its parent's store.

A child of a process with a pool (``os.fork()``, multiprocessing's "fork" start method, DataLoader workers) has a
copy of the pool and shares the store's open file, but has none of the pool's threads. When the child exits
normally, rebinds ``pool = Pool(...)`` (as ``ForkError`` advises) or closes the pool, it used to scrub the parent's
named store (the parent's paged-out buffers then failed their checksums, or came back zeroed with checksums off) and
die of SIGABRT joining threads that do not exist there. Each test checks the child's exit code and every byte of the
parent's buffers after the child is gone."""

from __future__ import annotations

import gc
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap

import pytest

import oversub
from oversub import errors

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

MiB = 1 << 20
SIZES = (MiB, 3 * MiB + 5, 4096)

# A whole program, so that the child really exits through the interpreter's shutdown (which collects the pool), as
# a user's script does; pytest's own process must not be the one that runs `sys.exit` in a child.
PROGRAM = textwrap.dedent(
    """
    import os, random, sys
    import oversub
    from oversub import errors

    mode, store, checksums = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    SIZES = (1 << 20, 3 * (1 << 20) + 5, 4096)
    pool = oversub.Pool("16MiB", store=store, store_capacity="64MiB", verify_checksums=checksums)
    space = pool.address_space()
    data = [random.Random(i).randbytes(n) for i, n in enumerate(SIZES)]
    bufs = [space.alloc(n) for n in SIZES]
    for b, d in zip(bufs, data):
        b.write(d)
    space.page_out_all()
    pid = os.fork()
    if pid == 0:
        if mode == "rebind":
            try:
                pool = oversub.Pool("16MiB", store=store, store_capacity="64MiB")
            except errors.StoreBusyError as e:
                # The parent's named store: busy, naming the parent.
                if str(os.getppid()) not in str(e):
                    sys.exit(3)
                pool = oversub.Pool("16MiB", store=os.path.dirname(store), store_capacity="64MiB")
            else:
                if not os.path.isdir(store):
                    sys.exit(4)  # a new pool on the parent's named store must be refused
        elif mode == "close":
            pool.close()
            try:
                bufs[0].page_in()
            except errors.PoolClosedError:
                pass
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    space.page_in_all()
    bad = [i for i, (b, d) in enumerate(zip(bufs, data)) if b.read() != d]
    print(f"child exit {code}, buffers changed: {bad}")
    sys.exit(0 if code == 0 and not bad else 1)
    """
)


def store_location(tmp_path, named: bool) -> str:
    if not named:
        return str(tmp_path)
    path = tmp_path / "named.swap"
    path.touch()
    return str(path)


@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "no-checksums"])
@pytest.mark.parametrize("named", [True, False], ids=["named", "temporary"])
@pytest.mark.parametrize("mode", ["exit", "rebind", "close"])
def test_a_child_that_exits_rebinds_or_closes_leaves_the_parents_buffers_intact(tmp_path, mode, named, checksums):
    store = store_location(tmp_path, named)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode, store, "1" if checksums else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "child exit 0, buffers changed: []" in done.stdout
    # A panic in a drop during the child's shutdown is printed, not always seen in its exit code.
    assert "panicked" not in done.stderr and "PanicException" not in done.stderr, done.stderr


def _drop_everything(state: dict) -> None:
    """A multiprocessing worker that drops the pool, its space and its buffers it inherited; exit code 3 when a drop
    raised (a Rust panic in a drop reaches Python as an unraisable PanicException)."""
    raised = []
    sys.unraisablehook = raised.append
    state.clear()
    gc.collect()
    if raised:
        sys.exit(3)


def _paged_out_pool(store: str, checksums: bool) -> tuple[dict, list[bytes]]:
    """A pool, its space and buffers of known bytes, all paged out, held only by the returned dict (no local
    variable of the test may keep a buffer, or the worker's copy of the pool would never be dropped)."""
    state: dict = {}
    state["pool"] = oversub.Pool("16MiB", store=store, store_capacity="64MiB", verify_checksums=checksums)
    state["space"] = state["pool"].address_space()
    data = [random.Random(i).randbytes(n) for i, n in enumerate(SIZES)]
    state["bufs"] = [state["space"].alloc(n) for n in SIZES]
    for i, d in enumerate(data):
        state["bufs"][i].write(d)
    state["space"].page_out_all()
    return state, data


@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "no-checksums"])
@pytest.mark.parametrize("named", [True, False], ids=["named", "temporary"])
def test_a_multiprocessing_fork_worker_that_drops_the_pool_leaves_the_parent_intact(tmp_path, named, checksums):
    # Everything lives in `state` only, so that the worker's `clear()` drops the last references of its copies.
    state, data = _paged_out_pool(store_location(tmp_path, named), checksums)
    worker = multiprocessing.get_context("fork").Process(target=_drop_everything, args=(state,))
    worker.start()
    worker.join(120)
    if worker.exitcode is None:
        worker.kill()
        worker.join()
        pytest.fail("the worker hung dropping the pool it inherited")
    assert worker.exitcode == 0
    state["space"].page_in_all()
    for i, (b, d) in enumerate(zip(state["bufs"], data)):
        assert b.read() == d, f"buffer {i} changed"
    # The parent's store is still its own: a second pool on a named store is busy, naming this process.
    if named:
        with pytest.raises(errors.StoreBusyError, match=str(os.getpid())):
            oversub.Pool("16MiB", store=state["pool"].store_path)
