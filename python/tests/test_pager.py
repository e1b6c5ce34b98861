"""The pager from Python: round trips through NumPy views, async handles, views and paging, threads, errors."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import re
import threading

import pytest

import oversub
from oversub import errors

np = pytest.importorskip("numpy")

MiB = 1 << 20


@pytest.fixture
def pool(tmp_path):
    return oversub.Pool(capacity="16MiB", store=tmp_path, store_capacity="64MiB", verify_checksums=True)


def test_package_is_the_abi3_extension():
    assert oversub._oversub.__file__.endswith(".abi3.so")
    assert re.fullmatch(r"\d+\.\d+\.\d+", oversub.__version__)


def test_sizes_accept_strings_and_ints(tmp_path):
    p = oversub.Pool("8MiB", store=tmp_path)
    assert p.capacity_bytes == 8 * MiB
    assert oversub.Pool(4 * MiB, store=tmp_path, store_capacity=16 * MiB).capacity_bytes == 4 * MiB
    with pytest.raises(ValueError, match="cannot read"):
        oversub.Pool("8 furlongs")
    with pytest.raises(TypeError, match="size string"):
        oversub.Pool(3.5)
    with pytest.raises(ValueError, match='"host" or "cuda"'):
        oversub.Pool("8MiB", device="tpu")


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float64", "int16"])
@pytest.mark.parametrize("read_only", [False, True])
def test_numpy_round_trip_keeps_every_byte(pool, dtype, read_only):
    space = pool.address_space()
    buf = space.alloc("3MiB", read_only=read_only)
    rng = np.random.default_rng(7)
    expected = rng.integers(0, 256, size=buf.nbytes, dtype=np.uint8)
    view = buf.numpy()
    view[:] = expected
    del view
    for cycle in range(3):
        buf.page_out()
        assert buf.state == "paged_out"
        buf.page_in()
        assert buf.state == "resident"
        typed = buf.numpy(dtype)
        assert typed.dtype == np.dtype(dtype)
        assert bytes(typed.tobytes()) == expected.tobytes(), f"cycle {cycle}"
        del typed
    assert buf.read(16) == expected[:16].tobytes()


def test_numpy_shapes_and_dtypes(pool):
    buf = pool.address_space().alloc(4096 + 10)
    a = buf.numpy("float32", (32, 32))
    assert a.shape == (32, 32) and a.flags.writeable
    a[:] = 2.0
    assert buf.numpy("float32", 1024).sum() == 2048.0
    with pytest.raises(oversub.ViewError, match="not a whole number of float32"):
        buf.numpy("float32")
    with pytest.raises(oversub.ViewError, match="needs 8192 bytes"):
        buf.numpy("float64", (32, 32))
    del a
    # Issue 33: a dimension below -1 was taken as -1 (the whole buffer); two -1s are refused too.
    for shape in [(-2,), (4, -3), (-1, -1)]:
        with pytest.raises(oversub.ViewError, match="shape"):
            buf.numpy(shape=shape)
    assert buf.numpy(shape=(2, -1)).shape == (2, 2053)


def test_address_is_kept_and_memory_given_back(pool):
    space = pool.address_space()
    buf = space.alloc("4MiB")
    addr = buf.address
    used = pool.used_bytes
    buf.page_out()
    assert pool.used_bytes == used - 4 * MiB
    buf.page_in()
    assert buf.address == addr
    assert pool.used_bytes == used


def test_read_only_buffer_is_written_once_and_its_view_is_read_only(pool):
    buf = pool.address_space().alloc(MiB, read_only=True)
    buf.write(b"weights")
    buf.page_out()
    buf.page_in()
    assert buf.info()["stored"]
    view = buf.numpy()
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1
    del view
    with pytest.raises(oversub.ReadOnlyError) as e:
        buf.write(b"x")
    assert str(e.value) == f"buffer {_name(buf)} is read-only and already stored; its bytes cannot change"


def _name(buf) -> str:
    return re.search(r"as\d+/buf\d+", repr(buf)).group(0)


def test_view_of_paged_out_buffer_raises(pool):
    buf = pool.address_space().alloc(MiB)
    buf.page_out()
    msg = f"buffer {_name(buf)} is not resident (paged out)"
    with pytest.raises(oversub.NotResidentError) as e:
        buf.numpy()
    assert str(e.value) == msg
    with pytest.raises(oversub.NotResidentError):
        memoryview(buf)
    with pytest.raises(oversub.NotResidentError):
        np.from_dlpack(buf)
    with pytest.raises(oversub.NotResidentError):
        buf.read(4)
    assert buf.views == 0


def test_live_views_block_page_out_and_free(pool):
    buf = pool.address_space().alloc(MiB)
    a = buf.numpy("float32")
    b = a[10:20]  # derived arrays keep the export alive
    del a
    m = memoryview(buf)
    d = np.from_dlpack(buf)
    assert buf.views == 3
    with pytest.raises(oversub.ViewError, match="has 3 live views") as e:
        buf.page_out()
    assert isinstance(e.value, BufferError)
    with pytest.raises(oversub.ViewError, match="before freeing it"):
        buf.free()
    with pytest.raises(oversub.ViewError):
        buf.page_out_async()
    assert buf.state == "resident"
    del b, m, d
    gc.collect()
    assert buf.views == 0
    buf.page_out()
    assert buf.state == "paged_out"


def test_page_out_all_respects_views(pool):
    space = pool.address_space()
    bufs = [space.alloc(MiB) for _ in range(4)]
    view = bufs[2].numpy()
    with pytest.raises(oversub.ViewError):
        space.page_out_all()
    assert all(b.state == "resident" for b in bufs)  # refused as a whole
    del view
    space.page_out_all()
    assert all(b.state == "paged_out" for b in bufs)
    assert space.resident_bytes == 0
    space.page_in_all()
    assert all(b.state == "resident" for b in bufs)


def test_dlpack_round_trip(pool):
    buf = pool.address_space().alloc(8192)
    t = np.from_dlpack(buf)
    assert t.shape == (8192,) and t.dtype == np.uint8
    t[:] = 9
    assert buf.__dlpack_device__() == (1, 0)
    del t
    gc.collect()
    buf.page_out()
    buf.page_in()
    assert buf.read(4) == b"\x09" * 4
    with pytest.raises(BufferError, match="copy=True"):
        buf.__dlpack__(copy=True)
    # an unconsumed capsule releases its view when collected
    cap = buf.__dlpack__()
    assert buf.views == 1
    del cap
    gc.collect()
    assert buf.views == 0


def test_host_buffer_has_no_cuda_array_interface(pool):
    buf = pool.address_space().alloc(4096)
    assert not hasattr(buf, "__cuda_array_interface__")


def test_async_handles_complete(pool):
    space = pool.address_space()
    bufs = [space.alloc(MiB) for _ in range(6)]
    for i, b in enumerate(bufs):
        b.write(bytes([i]) * 64)
    outs = [b.page_out_async() for b in bufs]
    assert all(h.kind == "page_out" for h in outs)
    for h in outs:
        h.wait()
        assert h.done()
        h.wait()  # waiting again returns the same outcome
    assert all(b.state == "paged_out" for b in bufs)
    ins = [b.page_in_async() for b in bufs]
    while not all(h.done() for h in ins):
        pass
    for i, (h, b) in enumerate(zip(ins, bufs)):
        h.wait(timeout=10)
        assert h.buffer is b
        assert b.read(64) == bytes([i]) * 64
    assert "done" in repr(ins[0])


def test_await_handle(pool):
    space = pool.address_space()
    bufs = [space.alloc(MiB) for _ in range(3)]

    async def main():
        await asyncio.gather(*(b.page_out_async() for b in bufs))
        assert all(b.state == "paged_out" for b in bufs)
        for b in bufs:
            await b.page_in_async()

    asyncio.run(main())
    assert all(b.state == "resident" for b in bufs)


def test_async_handle_raises_the_failure(tmp_path):
    # A store file we can reach behind the pager's back: corrupt what it wrote, and the checksum catches it.
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
    h = buf.page_in_async()
    with pytest.raises(oversub.ChecksumMismatchError) as e:
        h.wait()
    assert re.fullmatch(
        rf"checksum mismatch at page-in of {_name(buf)}: expected 0x[0-9a-f]{{16}}, read 0x[0-9a-f]{{16}}",
        str(e.value),
    )
    # the same error again, and the buffer left paged out rather than holding wrong bytes
    with pytest.raises(oversub.ChecksumMismatchError):
        h.wait()
    assert h.done()
    assert buf.state == "paged_out"
    with pytest.raises(oversub.ChecksumMismatchError):
        asyncio.run(_await(buf.page_in_async()))


async def _await(h):
    await h


def test_wait_timeout_is_checked(pool):
    buf = pool.address_space().alloc(MiB)
    h = buf.page_out_async()
    with pytest.raises(ValueError, match="timeout"):
        h.wait(timeout=-1)
    h.wait(timeout=30)


def test_exception_messages_are_the_rust_ones(pool):
    space = pool.address_space()
    buf = space.alloc(MiB)
    name = _name(buf)
    with pytest.raises(oversub.AlreadyResidentError) as e:
        buf.page_in()
    assert str(e.value) == f"buffer {name} is already resident"
    buf.page_out()
    with pytest.raises(oversub.AlreadyPagedOutError) as e:
        buf.page_out()
    assert str(e.value) == f"buffer {name} is already paged out"
    with pytest.raises(oversub.OutOfMemoryError) as e:
        space.alloc("32MiB")
    assert str(e.value) == (
        f"pool capacity exceeded: needed {32 * MiB} bytes, {16 * MiB} of {16 * MiB} available"
    )
    assert isinstance(e.value, MemoryError) and isinstance(e.value, oversub.PagerError)
    # The numbers as attributes, so that a caller need not parse the message.
    assert (e.value.needed_bytes, e.value.available_bytes, e.value.capacity_bytes) == (32 * MiB, 16 * MiB, 16 * MiB)
    with pytest.raises(oversub.InvalidSizeError):
        space.alloc(0)
    h = buf.page_in_async()
    with pytest.raises(oversub.OperationInFlightError, match=rf"buffer {name} has an operation in flight"):
        buf.page_out()
    h.wait()
    with pytest.raises(oversub.OutOfBoundsError) as e:
        buf.write(b"xy", offset=MiB - 1)
    assert str(e.value) == f"range {MiB - 1}+2 lies outside buffer {name} of {MiB} bytes"
    pinned = space.alloc(4096, unpageable=True)
    with pytest.raises(oversub.UnpageableError):
        pinned.page_out()


def test_store_full_is_an_io_error(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path, store_capacity="4MiB")
    space = pool.address_space()
    a, b = space.alloc("3MiB"), space.alloc("3MiB")
    a.page_out()
    with pytest.raises(oversub.StoreFullError) as e:
        b.page_out()
    assert isinstance(e.value, OSError) and isinstance(e.value, oversub.IoError)
    assert str(e.value).startswith("swap store full: needed")
    # errno as for a full file system (the message stays the Rust one, without an "[Errno 28]" prefix).
    assert e.value.errno == errno.ENOSPC
    assert e.value.needed_bytes == 3 * MiB and e.value.free_bytes < e.value.needed_bytes
    assert b.state == "resident"


def test_io_errors_carry_the_system_errno(tmp_path):
    # A store in a folder that does not exist: the system's ENOENT, as an OSError's errno.
    with pytest.raises(oversub.IoError) as e:
        oversub.Pool("8MiB", store=tmp_path / "missing" / "store.bin")
    assert e.value.errno == errno.ENOENT, (e.value.errno, str(e.value))
    assert not str(e.value).startswith("[Errno")


def test_structured_attributes_default_to_none():
    # Raised by hand (or by a Python layer), the attributes exist and are None, as OSError's errno is.
    assert oversub.OutOfMemoryError("x").needed_bytes is None
    assert oversub.IoError("x").errno is None
    assert oversub.StoreFullError("x").free_bytes is None


def test_free_and_context_manager(pool):
    space = pool.address_space()
    with space.alloc(MiB) as buf:
        assert len(space) == 1
    assert len(space) == 0
    with pytest.raises(oversub.UnknownBufferError):
        buf.page_out()
    other = space.alloc(MiB)
    del other
    gc.collect()
    assert pool.used_bytes == 0


def test_threads_share_one_pool_and_lose_nothing(tmp_path):
    pool = oversub.Pool("24MiB", store=tmp_path, store_capacity="128MiB", verify_checksums=True)
    shared_space = pool.address_space()
    n_threads, per_thread, rounds = 4, 3, 8
    failures: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            space = shared_space if t % 2 == 0 else pool.address_space()
            bufs = [space.alloc(MiB) for _ in range(per_thread)]
            for i, b in enumerate(bufs):
                b.numpy("uint32")[:] = t * 1000 + i
            for r in range(rounds):
                hs = [b.page_out_async() for b in bufs]
                for h in hs:
                    h.wait()
                for b in bufs:
                    b.page_in()
                for i, b in enumerate(bufs):
                    v = b.numpy("uint32")
                    assert (v == t * 1000 + i + r).all(), f"thread {t} buffer {i} round {r}"
                    v += 1
                    del v
            for b in bufs:
                b.free()
        except BaseException as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures
    assert pool.used_bytes == 0
    stats = pool.stats()
    assert stats["store_free_bytes"] == stats["store_capacity_bytes"]


def test_host_tier(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path, host_tier="4MiB")
    buf = pool.address_space().alloc(MiB)
    buf.write(b"tier")
    buf.page_out()
    assert buf.info()["in_host_tier"]
    assert pool.stats()["host_tier_used_bytes"] == MiB
    assert pool.stats()["host_tier_capacity_bytes"] == 4 * MiB
    buf.page_in()
    assert buf.read(4) == b"tier"
    assert pool.stats()["host_tier_used_bytes"] == 0  # a writable buffer gives its copy up when paged in


def test_errors_module_names_every_class():
    for name in errors.__all__:
        cls = getattr(oversub, name)
        assert issubclass(cls, oversub.Error)
        assert cls.__doc__


def test_one_handle_waited_from_many_threads(pool):
    space = pool.address_space()
    bufs = [space.alloc(MiB) for _ in range(4)]
    handles = [b.page_out_async() for b in bufs]
    errors_seen: list[BaseException] = []

    def waiter(h):
        try:
            h.wait()
            assert h.done()
        except BaseException as e:  # noqa: BLE001
            errors_seen.append(e)

    threads = [threading.Thread(target=waiter, args=(h,)) for h in handles for _ in range(3)]
    for t in threads:
        t.start()
    polls = sum(1 for h in handles if h.done())  # done() never blocks, whatever the waiters do
    for t in threads:
        t.join()
    assert not errors_seen
    assert 0 <= polls <= len(handles)
    assert all(b.state == "paged_out" for b in bufs)


def test_a_file_as_the_store_of_read_only_buffers(pool, tmp_path):
    """alloc_external: a buffer over a range of a file oversub does not own (a checkpoint) starts paged out, reads
    the file at page-in, gives only memory back at page-out, never writes the file and refuses writes."""
    data = os.urandom(3 * MiB + 100)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    f = oversub.ExternalFile(path)
    assert f.nbytes == len(data) and str(f.path) == str(path) and "ExternalFile(" in repr(f)
    align = pool.store_alignment
    space = pool.address_space()
    free_before = pool.stats()["store_free_bytes"]
    a = space.alloc_external(f, align, MiB)
    b = space.alloc_external(str(path), 2 * MiB, MiB)  # a path opens the file itself
    assert a.state == "paged_out" and a.read_only
    for _ in range(2):
        for buf, at in ((a, align), (b, 2 * MiB)):
            buf.page_in_async().wait()
            assert buf.read() == data[at: at + MiB]
            with pytest.raises(errors.ReadOnlyError):
                buf.write(b"x")
            buf.page_out()
    assert pool.stats()["store_free_bytes"] == free_before
    assert path.read_bytes() == data
    with pytest.raises(errors.IoError, match="past the end"):
        space.alloc_external(f, 3 * MiB, MiB)
    if align > 1:
        with pytest.raises(errors.IoError, match="not aligned"):
            space.alloc_external(f, 1, MiB)
    path.write_bytes(data[:MiB])  # rewritten in place: size and time change
    with pytest.raises(oversub.ExternalChangedError):
        a.page_in()
    assert a.state == "paged_out"


def test_record_use_on_a_host_pool_checks_the_buffer(pool):
    buf = pool.address_space().alloc(MiB)
    buf.write(b"\x07" * MiB)
    buf.record_use(0)  # host work is done when its call returns: nothing to wait for later

    class Stream:  # what torch.cuda.Stream offers
        cuda_stream = 0

    buf.record_use(Stream())
    with pytest.raises(TypeError, match="CUDA stream"):
        buf.record_use("stream 0")
    buf.page_out()
    with pytest.raises(errors.NotResidentError):
        buf.record_use(0)
    buf.page_in()
    assert buf.read(4) == b"\x07" * 4
