"""Handle as a future: result/exception with timeouts, add_done_callback (order, at once when done, exceptions
logged), and await driven by the completion rather than a thread per handle."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading

import pytest

import oversub

MiB = 1 << 20


@pytest.fixture
def pool(tmp_path):
    return oversub.Pool(capacity="64MiB", store=tmp_path, store_capacity="256MiB")


def _corrupt_store_pool(tmp_path):
    """A pool whose one paged-out buffer fails its page-in (the store was overwritten behind its back)."""
    path = tmp_path / "store.swap"
    with open(path, "wb") as f:
        f.truncate(32 * MiB)
    pool = oversub.Pool("8MiB", store=path, verify_checksums=True)
    buf = pool.address_space().alloc(MiB)
    buf.write(b"precious")
    buf.page_out()
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff" * (32 * MiB), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    return pool, buf


def test_result_returns_none_and_times_out(pool):
    buf = pool.address_space().alloc("48MiB")
    buf.numpy()[::4096] = 5
    timed_out = 0
    for _ in range(5):
        buf.page_out()
        h = buf.page_in_async()
        assert not h.cancelled()
        try:
            h.result(timeout=0)
        except TimeoutError as e:
            timed_out += 1
            assert "page_in" in str(e)
        assert h.result() is None
        assert h.result(timeout=0) is None  # done: no wait, the same outcome
        assert h.exception() is None
        assert h.done()
        if timed_out:
            break
    assert timed_out, "a 48 MiB page-in always completed before result(timeout=0) looked"
    with pytest.raises(ValueError, match="timeout"):
        h.result(timeout=-1)


def test_exception_and_result_report_the_failure(tmp_path):
    pool, buf = _corrupt_store_pool(tmp_path)
    h = buf.page_in_async()
    exc = h.exception(timeout=30)
    assert isinstance(exc, oversub.ChecksumMismatchError)
    with pytest.raises(oversub.ChecksumMismatchError):
        h.result()
    seen = []
    done = threading.Event()
    buf.page_in_async().add_done_callback(lambda h: (seen.append(h.exception()), done.set()))
    assert done.wait(30)
    assert isinstance(seen[0], oversub.ChecksumMismatchError)


def test_done_callbacks_run_once_in_order_after_completion(pool):
    buf = pool.address_space().alloc("32MiB")
    buf.page_out()
    h = buf.page_in_async()
    calls = []
    finished = threading.Event()

    def cb(tag):
        def f(handle):
            # Called with the handle, the operation finished: result() does not block.
            calls.append((tag, handle is h, handle.done(), handle.result(timeout=0)))
            if tag == 3:
                finished.set()

        return f

    for tag in (1, 2, 3):
        h.add_done_callback(cb(tag))
    assert finished.wait(30)
    assert calls == [(1, True, True, None), (2, True, True, None), (3, True, True, None)]
    assert buf.state == "resident"
    # Already complete: the callback runs at once, on this thread.
    h.add_done_callback(lambda handle: calls.append(("late", threading.current_thread() is threading.main_thread())))
    assert calls[-1] == ("late", True)
    assert len(calls) == 4  # nobody ran twice


def test_a_handle_kept_only_by_its_callback_still_calls_it(pool):
    buf = pool.address_space().alloc("16MiB")
    buf.page_out()
    finished = threading.Event()
    buf.page_in_async().add_done_callback(lambda handle: finished.set())  # the handle is dropped at once
    gc.collect()
    assert finished.wait(30)
    assert buf.state == "resident"


def test_a_failing_callback_is_logged_and_the_others_still_run(pool, caplog):
    buf = pool.address_space().alloc("16MiB")
    buf.page_out()
    h = buf.page_in_async()
    finished = threading.Event()

    def bad(handle):
        raise ValueError("callback bug")

    h.add_done_callback(bad)
    h.add_done_callback(lambda handle: finished.set())
    with caplog.at_level(logging.ERROR, logger="oversub"):
        assert finished.wait(30)
        h.result()
        # And a failing callback on a complete handle: logged, not raised.
        h.add_done_callback(bad)
    records = [r for r in caplog.records if r.name == "oversub" and "exception calling callback" in r.getMessage()]
    assert len(records) == 2
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in records)
    assert "oversub.Handle(page_in" in records[0].getMessage()


def test_await_uses_no_thread_per_handle(pool):
    space = pool.address_space()
    bufs = [space.alloc(MiB) for _ in range(40)]
    for i, b in enumerate(bufs):
        b.write(bytes([i]) * 16)
    before = threading.active_count()

    async def main():
        loop = asyncio.get_running_loop()
        # No default executor is ever made (run_in_executor would create one).
        await asyncio.gather(*(b.page_out_async() for b in bufs))
        assert all(b.state == "paged_out" for b in bufs)
        peak = threading.active_count()
        for _ in range(3):
            await asyncio.gather(*(b.page_in_async() for b in bufs))
            peak = max(peak, threading.active_count())
            await asyncio.gather(*(b.page_out_async() for b in bufs))
            peak = max(peak, threading.active_count())
        await asyncio.gather(*(b.page_in_async() for b in bufs))
        assert loop._default_executor is None
        return peak

    peak = asyncio.run(main())
    assert peak <= before + 1, (before, peak)  # at most the callback thread, should Python have noticed it
    assert all(b.read(16) == bytes([i]) * 16 for i, b in enumerate(bufs))


def test_await_raises_the_failure_and_a_done_handle_at_once(tmp_path):
    pool, buf = _corrupt_store_pool(tmp_path)

    async def failing():
        await buf.page_in_async()

    with pytest.raises(oversub.ChecksumMismatchError):
        asyncio.run(failing())

    good = pool.address_space().alloc(MiB)
    h = good.page_out_async()
    h.result()

    async def done_already():
        await h  # complete before the await: resolved at once
        await h  # and again

    asyncio.run(done_already())
    assert good.state == "paged_out"


def test_a_cancelled_await_leaves_the_operation_to_finish(pool):
    buf = pool.address_space().alloc("32MiB")
    buf.page_out()

    async def main():
        h = buf.page_in_async()
        task = asyncio.ensure_future(_await(h))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        h.result(timeout=30)

    asyncio.run(main())
    assert buf.state == "resident"


async def _await(h):
    await h
