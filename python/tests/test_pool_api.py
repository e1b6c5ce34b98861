"""The pool's and buffer's Python conveniences: device= spellings (strings, torch.device-like objects), close() and
with, Buffer.readinto, and typed stats()/info()/state that still read as the dicts and strings they replace."""

from __future__ import annotations

import array
import ctypes.util
import dataclasses
import os
from collections.abc import Mapping

import pytest

import oversub
from oversub import BufferInfo, BufferState, PoolStats

MiB = 1 << 20
GPU = os.environ.get("OVERSUB_TEST_CUDA") == "1"


def _has_driver() -> bool:
    return ctypes.util.find_library("cuda") is not None or os.path.exists("/usr/lib/x86_64-linux-gnu/libcuda.so.1")


class FakeDevice:
    """What torch.device looks like to oversub: .type and .index (torch itself is never imported)."""

    def __init__(self, type: str, index: int | None = None) -> None:
        self.type = type
        self.index = index


# --- device= -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["host", "cpu", "HOST", None, FakeDevice("cpu"), FakeDevice("cpu", 0)])
def test_host_device_spellings(tmp_path, device):
    pool = oversub.Pool("4MiB", store=tmp_path, device=device)
    assert pool.device == "host"
    assert pool.device_index is None


@pytest.mark.skipif(GPU or _has_driver(), reason="a CUDA driver is present")
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "gpu:0", FakeDevice("cuda", 1), FakeDevice("cuda")])
def test_cuda_device_spellings_without_a_driver_are_the_same_clear_error(tmp_path, device):
    with pytest.raises(oversub.NoDriverError) as e:
        oversub.Pool("16MiB", store=tmp_path, device=device)
    assert str(e.value).startswith("no CUDA driver found")


@pytest.mark.skipif(not GPU, reason="GPU tests are opt-in: OVERSUB_TEST_CUDA=1")
@pytest.mark.parametrize("device", ["cuda:0", "gpu", FakeDevice("cuda", 0), FakeDevice("cuda")])
def test_cuda_device_spellings_on_a_gpu(tmp_path, device):
    with oversub.Pool("16MiB", store=tmp_path, device=device) as pool:
        assert pool.device == "cuda" and pool.device_index == 0
        buf = pool.address_space().alloc(MiB)
        buf.write(b"gpu")
        buf.page_out()
        buf.page_in()
        out = bytearray(3)
        assert buf.readinto(out) == 3 and out == b"gpu"


def test_bad_devices_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match='"host" or "cuda"'):
        oversub.Pool("4MiB", store=tmp_path, device="tpu")
    with pytest.raises(ValueError, match='"host" or "cuda"'):
        oversub.Pool("4MiB", store=tmp_path, device=FakeDevice("mps", 0))
    with pytest.raises(ValueError, match="index after ':'"):
        oversub.Pool("4MiB", store=tmp_path, device="cuda:one")
    with pytest.raises(ValueError, match=">= 0"):
        oversub.Pool("4MiB", store=tmp_path, device="cuda:-1")
    with pytest.raises(ValueError, match="device_index says 0"):
        oversub.Pool("4MiB", store=tmp_path, device="cuda:1", device_index=0)
    with pytest.raises(TypeError, match="torch.device"):
        oversub.Pool("4MiB", store=tmp_path, device=3)


def test_a_real_torch_device_is_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    assert oversub.Pool("4MiB", store=tmp_path, device=torch.device("cpu")).device == "host"


# --- close() and with ----------------------------------------------------------------------------------------------


def test_close_frees_everything_and_later_use_is_a_clear_error(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    space = pool.address_space()
    a, b = space.alloc(MiB), space.alloc(2 * MiB)
    b.page_out()
    assert not pool.closed
    pool.close()
    assert pool.closed
    assert pool.used_bytes == 0  # stats still answer
    assert pool.stats().store_free_bytes == pool.stats().store_capacity_bytes
    pool.close()  # again: nothing
    for call in (
        pool.address_space,
        lambda: space.alloc(MiB),
        a.page_out,
        b.page_in,
        a.page_out_async,
        lambda: a.read(4),
        lambda: a.write(b"x"),
        lambda: a.readinto(bytearray(4)),
        space.page_in_all,
    ):
        with pytest.raises(oversub.PoolClosedError, match="pool is closed"):
            call()
    assert issubclass(oversub.PoolClosedError, ValueError)
    assert "closed" in repr(pool)


def test_with_pool_closes_it(tmp_path):
    with oversub.Pool("8MiB", store=tmp_path) as pool:
        buf = pool.address_space().alloc(MiB)
        buf.write(b"abc")
        assert buf.read(3) == b"abc"
    assert pool.closed and pool.used_bytes == 0
    with pytest.raises(oversub.PoolClosedError):
        buf.read(3)


def test_close_refuses_while_views_are_alive(tmp_path):
    np = pytest.importorskip("numpy")
    pool = oversub.Pool("8MiB", store=tmp_path)
    buf = pool.address_space().alloc(MiB)
    arr = buf.numpy()
    with pytest.raises(oversub.ViewError, match="closing the pool"):
        pool.close()
    assert not pool.closed and buf.read(1) == b"\0"
    del arr
    pool.close()
    assert pool.closed
    assert np  # imported for the view


def test_close_with_an_operation_in_flight(tmp_path):
    pool = oversub.Pool("64MiB", store=tmp_path)
    buf = pool.address_space().alloc("32MiB")
    buf.page_out()
    h = buf.page_in_async()
    pool.close()
    h.exception(timeout=30)  # the operation ends in the background (whatever its outcome on a freed buffer)
    assert pool.used_bytes == 0


# --- Buffer.readinto -----------------------------------------------------------------------------------------------


def test_readinto_fills_writable_buffers(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    buf = pool.address_space().alloc(4096)
    data = os.urandom(4096)
    buf.write(data)
    out = bytearray(100)
    assert buf.readinto(out) == 100 and bytes(out) == data[:100]
    assert buf.readinto(out, offset=4050) == 46 and bytes(out[:46]) == data[4050:]  # short at the end
    assert buf.readinto(out, offset=4096) == 0
    big = bytearray(8192)
    assert buf.readinto(big) == 4096 and bytes(big[:4096]) == data
    m = memoryview(bytearray(64))[8:40]
    assert buf.readinto(m, offset=1) == 32 and bytes(m) == data[1:33]
    ints = array.array("I", [0] * 16)  # any element type: filled as bytes
    assert buf.readinto(ints) == 64 and ints.tobytes() == data[:64]
    buf.page_out()
    buf.page_in()
    assert buf.readinto(out) == 100 and bytes(out) == data[:100]  # the bytes came back from the store


def test_readinto_errors(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    buf = pool.address_space().alloc(4096)
    with pytest.raises(TypeError, match="writable"):
        buf.readinto(b"read-only bytes")
    with pytest.raises(TypeError):
        buf.readinto(memoryview(bytearray(64))[::2])  # not contiguous
    with pytest.raises(oversub.OutOfBoundsError):
        buf.readinto(bytearray(4), offset=4097)
    buf.page_out()
    with pytest.raises(oversub.NotResidentError):
        buf.readinto(bytearray(4))


def test_readinto_numpy(tmp_path):
    np = pytest.importorskip("numpy")
    pool = oversub.Pool("8MiB", store=tmp_path)
    buf = pool.address_space().alloc(4096)
    buf.numpy("float32")[:] = np.arange(1024, dtype=np.float32)
    out = np.zeros(1024, dtype=np.float32)
    assert buf.readinto(out) == 4096
    assert (out == np.arange(1024, dtype=np.float32)).all()


# --- typed stats(), info(), state ----------------------------------------------------------------------------------


def test_stats_are_typed_and_still_a_mapping(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path, store_capacity="64MiB")
    buf = pool.address_space().alloc(MiB)
    s = pool.stats()
    assert isinstance(s, PoolStats) and isinstance(s, Mapping)
    assert s.capacity_bytes == s["capacity_bytes"] == 8 * MiB
    assert s.used_bytes >= MiB and s.store_capacity_bytes == 64 * MiB
    assert s.host_tier_used_bytes is None
    assert "host_tier_used_bytes" not in s and set(s) == {
        "capacity_bytes",
        "used_bytes",
        "store_capacity_bytes",
        "store_free_bytes",
    }
    with pytest.raises(KeyError):
        s["host_tier_used_bytes"]
    assert s.get("host_tier_used_bytes") is None
    assert dict(s) == s.as_dict() and s == s.as_dict() and type(s.as_dict()) is dict
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.used_bytes = 0  # type: ignore[misc]
    assert buf.nbytes == MiB  # alive until here
    tiered = oversub.Pool("8MiB", store=tmp_path, host_tier="4MiB").stats()
    assert tiered["host_tier_capacity_bytes"] == tiered.host_tier_capacity_bytes == 4 * MiB


def test_info_and_state_are_typed_and_equal_the_old_strings(tmp_path):
    pool = oversub.Pool("8MiB", store=tmp_path)
    buf = pool.address_space().alloc(MiB, read_only=True)
    assert buf.state is BufferState.RESIDENT
    assert buf.state == "resident" and f"{buf.state}" == "resident" and str(buf.state) == "resident"
    assert buf.state in ("resident", "paged_out")
    buf.page_out()
    info = buf.info()
    assert isinstance(info, BufferInfo)
    assert info.state is BufferState.PAGED_OUT and info["state"] == "paged_out"
    assert info.stored and info["stored"] and info.read_only and not info.unpageable
    assert info.nbytes == MiB and info["reserved_bytes"] == info.reserved_bytes >= MiB
    plain = info.as_dict()
    assert plain["state"] == "paged_out" and type(plain["state"]) is str
    assert set(plain) == {
        "nbytes",
        "reserved_bytes",
        "address",
        "state",
        "read_only",
        "unpageable",
        "stored",
        "in_host_tier",
        "views",
    }
    assert [s.value for s in BufferState] == ["resident", "paging_out", "paged_out", "paging_in"]
