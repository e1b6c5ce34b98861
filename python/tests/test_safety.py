"""Issue 17 from Python: nothing leaks when buffers die during operations, stores are exclusive and recognised,
bounds come before allocation, forked children get an error instead of a hang, and waits answer Ctrl-C."""

from __future__ import annotations

import gc
import os
import random
import signal
import threading
import time

import pytest

import oversub
from oversub import _oversub, errors

np = pytest.importorskip("numpy")

MiB = 1 << 20


def settled(pool: oversub.Pool, timeout: float = 60.0) -> dict:
    """The pool's stats once no bytes are charged and the store is empty (background finishes may lag)."""
    deadline = time.monotonic() + timeout
    while True:
        s = pool.stats()
        if s["used_bytes"] == 0 and s["store_free_bytes"] == s["store_capacity_bytes"]:
            return s
        if time.monotonic() > deadline:
            return s
        time.sleep(0.01)


def test_a_buffer_dropped_while_page_in_all_pages_it_is_freed(tmp_path):
    # The leak: the last reference goes while another thread's page_in_all is paging the buffer in.
    pool = oversub.Pool("512MiB", store=tmp_path, store_capacity="1GiB")
    space = pool.address_space()
    for round_ in range(3):
        buf = space.alloc("256MiB")
        buf.numpy()[:: 4096] = round_ + 1
        buf.page_out()
        started = threading.Event()

        def page_all():
            started.set()
            space.page_in_all() if round_ % 2 == 0 else space.page_out_all()

        if round_ % 2 == 1:
            buf.page_in()
        t = threading.Thread(target=page_all)
        t.start()
        started.wait()
        del buf
        gc.collect()
        t.join()
        s = settled(pool)
        assert s["used_bytes"] == 0, s
        assert s["store_free_bytes"] == s["store_capacity_bytes"], s
        assert len(space) == 0


def test_random_operations_from_threads_keep_bytes_and_leak_nothing(tmp_path):
    pool = oversub.Pool("24MiB", store=tmp_path, store_capacity="128MiB")
    space = pool.address_space()
    lock = threading.Lock()
    bufs: list[tuple[oversub.Buffer, np.ndarray]] = []
    tolerated = (
        errors.AlreadyResidentError,
        errors.AlreadyPagedOutError,
        errors.OperationInFlightError,
        errors.NotResidentError,
        errors.OutOfMemoryError,
        errors.UnknownBufferError,
        errors.ViewError,
    )

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(600):
            op = rng.randrange(8)
            with lock:
                pick = bufs[rng.randrange(len(bufs))] if bufs else None
            try:
                if op == 0 and len(bufs) < 12:
                    n = rng.randrange(1, 3 * MiB)
                    b = space.alloc(n)
                    shadow = np.frombuffer(rng.randbytes(n), dtype=np.uint8).copy()
                    b.write(shadow.tobytes())
                    with lock:
                        bufs.append((b, shadow))
                elif op == 1 and pick is not None:
                    with lock:
                        if pick in bufs:
                            bufs.remove(pick)
                        else:
                            continue
                    pick[0].free()
                elif op == 2 and pick is not None:
                    pick[0].page_out()
                elif op == 3 and pick is not None:
                    pick[0].page_in()
                elif op == 4 and pick is not None:
                    h = pick[0].page_in_async() if rng.randrange(2) else pick[0].page_out_async()
                    if rng.randrange(2):
                        h.wait()
                    del h  # an unfinished handle finishes in the background
                elif op == 5:
                    space.page_out_all() if rng.randrange(2) else space.page_in_all()
                elif op == 6 and pick is not None:
                    b, shadow = pick
                    back = np.frombuffer(b.read(), dtype=np.uint8)
                    assert np.array_equal(back, shadow), f"bytes of {b!r} changed"
            except tolerated:
                pass

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b, shadow in bufs:
        deadline = time.monotonic() + 60
        while b.state not in ("resident", "paged_out") and time.monotonic() < deadline:
            time.sleep(0.01)
        if b.state == "paged_out":
            b.page_in()
        assert np.array_equal(np.frombuffer(b.read(), dtype=np.uint8), shadow)
        b.free()
    bufs.clear()
    gc.collect()
    s = settled(pool)
    assert s["used_bytes"] == 0, s
    assert s["store_free_bytes"] == s["store_capacity_bytes"], s


def test_read_checks_bounds_before_allocating(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    b = pool.address_space().alloc(4096)
    with pytest.raises(errors.OutOfBoundsError):
        b.read(256 * MiB)
    with pytest.raises(errors.OutOfBoundsError):
        b.read(1, offset=4096)
    with pytest.raises(errors.OutOfBoundsError):
        b.write(b"x" * 10, offset=4090)
    assert b.read(2, offset=4094) == b"\0\0"
    assert len(b.read()) == 4096


def test_a_dropped_unfinished_handle_finishes_in_the_background(tmp_path):
    pool = oversub.Pool("256MiB", store=tmp_path, store_capacity="512MiB")
    b = pool.address_space().alloc("128MiB")
    b.numpy()[:] = 7
    b.page_out()
    h = b.page_in_async()
    del h  # must not block, and the page-in still completes
    deadline = time.monotonic() + 60
    while b.state != "resident" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.state == "resident"
    assert b.numpy()[12345] == 7
    # A handle dropped with its buffer: both go, nothing stays charged.
    b.page_out()
    h = b.page_in_async()
    del h, b
    gc.collect()
    s = settled(pool)
    assert s["used_bytes"] == 0 and s["store_free_bytes"] == s["store_capacity_bytes"], s


def test_ctrl_c_interrupts_a_wait_and_the_operation_goes_on(tmp_path, ctrl_c):
    pool = oversub.Pool("1GiB", store=tmp_path, store_capacity="2GiB")
    b = pool.address_space().alloc("1GiB")
    b.numpy()[:: 4096] = 3
    interrupted = 0
    for _ in range(5):
        b.page_out()
        h = b.page_in_async()
        timer = threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            h.wait()
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            timer.join()
        # The interrupt may land just after wait() returned; swallow it here, not in the next test.
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        h.wait()  # the operation went on; waiting again finishes it
        assert b.state == "resident"
        assert b.numpy()[4096 * 7] == 3
        if interrupted:
            break
    assert interrupted, "a 1 GiB page-in never outlasted 20 ms, so no wait was interrupted"
    b.free()
    assert settled(pool)["used_bytes"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_fork_error_instead_of_hanging(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    b = pool.address_space().alloc("1MiB")
    pid = os.fork()
    if pid == 0:  # the child: any paging call must fail at once
        code = 1
        try:
            b.page_out()
        except errors.ForkError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung paging an inherited buffer")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's pool is unaffected.
    b.page_out()
    b.page_in()
    assert issubclass(errors.ForkError, RuntimeError)


def test_the_rust_paging_loop_respects_views(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    b = pool.address_space().alloc("1MiB")
    view = b.numpy()
    with pytest.raises(errors.ViewError):
        _oversub._rust_paging_loop([b], 1)
    assert b.state == "resident"
    del view
    _, ops = _oversub._rust_paging_loop([b], 2)
    assert ops == 4


def test_close_gives_the_store_up_for_the_next_pool(tmp_path):
    # Issue 33: a second `with Pool(store=f)` after the first block works, though the first block's objects live on.
    path = tmp_path / "store.swap"
    path.touch()
    with oversub.Pool("8MiB", store=path, store_capacity="16MiB") as first:
        b = first.address_space().alloc("1MiB")
        b.write(b"a" * MiB)
        b.page_out()
    with oversub.Pool("8MiB", store=path, store_capacity="16MiB") as second:
        c = second.address_space().alloc("1MiB")
        c.write(b"b" * MiB)
        c.page_out()
        c.page_in()
        assert c.read() == b"b" * MiB
        # The store is the second pool's now: a third is busy.
        with pytest.raises(errors.StoreBusyError, match=str(os.getpid())):
            oversub.Pool("8MiB", store=path)
    with pytest.raises(errors.PoolClosedError):
        b.page_in()
    del b, first
    gc.collect()
    oversub.Pool("8MiB", store=path).close()


def test_stores_are_exclusive_and_recognised(tmp_path):
    path = tmp_path / "swap.bin"
    first = oversub.Pool("8MiB", store=tmp_path / "new.bin", store_capacity="16MiB")
    assert first.capacity_bytes == 8 * MiB
    # A file holding an ext4 superblock is refused, untouched, unless forced.
    data = bytearray(16 * MiB)
    data[1080:1082] = b"\x53\xef"
    path.write_bytes(bytes(data))
    with pytest.raises(errors.StoreRefusedError, match="ext"):
        oversub.Pool("8MiB", store=path)
    assert path.read_bytes()[1080:1082] == b"\x53\xef"
    pool = oversub.Pool("8MiB", store=path, force_store=True)
    # Held by that pool: a second one is refused, naming us.
    with pytest.raises(errors.StoreBusyError, match=str(os.getpid())):
        oversub.Pool("8MiB", store=path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    del pool
    gc.collect()
    # Closed: ours now, so no force is needed.
    oversub.Pool("8MiB", store=path)
    assert issubclass(errors.StoreBusyError, OSError)


def test_checksums_are_on_by_default(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    b = pool.address_space().alloc("3MiB")
    b.numpy()[:] = 5
    b.page_out()
    b.page_in()
    assert b.numpy()[-1] == 5


def test_a_read_only_buffer_is_never_exported_writable(tmp_path):
    """Issue 33: a read-only buffer exported through legacy DLPack was writable, and the write was lost at the next
    page cycle. Legacy DLPack cannot say read-only, so it is refused; DLPack 1.0 carries the flag."""
    pool = oversub.Pool(capacity=4 * MiB, store=str(tmp_path))
    buf = pool.address_space().alloc(8192, read_only=True)
    buf.write(b"\x07" * 8192)
    buf.page_out()
    buf.page_in()
    with pytest.raises(BufferError, match="legacy DLPack"):
        buf.__dlpack__()
    assert buf.views == 0
    cap = buf.__dlpack__(max_version=(1, 0))
    del cap
    gc.collect()
    a = np.from_dlpack(buf)
    assert not a.flags.writeable
    del a
    gc.collect()
    assert bytes(buf.read(8192)) == b"\x07" * 8192
    with pytest.raises(errors.ViewError, match="negative"):
        buf.numpy(shape=(-2,))
    pool.close()
