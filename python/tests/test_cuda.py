"""The CUDA backend from Python. Without a driver: a clear NoDriverError. With one (opt-in, OVERSUB_TEST_CUDA=1):
round trips, the CUDA array interface, DLPack and, when PyTorch is installed, torch.as_tensor without a copy."""

from __future__ import annotations

import ctypes.util
import os

import pytest

import oversub

GPU = os.environ.get("OVERSUB_TEST_CUDA") == "1"
MiB = 1 << 20


def _has_driver() -> bool:
    return ctypes.util.find_library("cuda") is not None or os.path.exists("/usr/lib/x86_64-linux-gnu/libcuda.so.1")


@pytest.mark.skipif(GPU or _has_driver(), reason="a CUDA driver is present")
def test_cuda_without_a_driver_is_a_clear_error(tmp_path):
    with pytest.raises(oversub.NoDriverError) as e:
        oversub.Pool("16MiB", store=tmp_path, device="cuda")
    assert isinstance(e.value, oversub.AccelError)
    assert str(e.value).startswith("no CUDA driver found")


gpu = pytest.mark.skipif(not GPU, reason="GPU tests are opt-in: OVERSUB_TEST_CUDA=1")


@pytest.fixture
def cuda_pool(tmp_path):
    return oversub.Pool("64MiB", store=tmp_path, device="cuda", verify_checksums=True)


@gpu
def test_cuda_round_trip_keeps_bytes_and_address(cuda_pool):
    buf = cuda_pool.address_space().alloc(8 * MiB)
    data = os.urandom(8 * MiB)
    buf.write(data)
    addr = buf.address
    buf.page_out()
    assert buf.state == "paged_out"
    buf.page_in_async().wait()
    assert buf.address == addr
    assert buf.read() == data


@gpu
def test_cuda_views(cuda_pool):
    buf = cuda_pool.address_space().alloc(MiB)
    cai = buf.__cuda_array_interface__
    assert cai["shape"] == (MiB,) and cai["typestr"] == "|u1" and cai["data"][0] == buf.address
    assert buf.__dlpack_device__() == (2, 0)
    with pytest.raises(oversub.ViewError, match="CUDA device memory"):
        memoryview(buf)
    buf.page_out()
    with pytest.raises(oversub.NotResidentError):
        buf.__cuda_array_interface__


@gpu
def test_cuda_torch_zero_copy(cuda_pool):
    torch = pytest.importorskip("torch")
    buf = cuda_pool.address_space().alloc(4 * MiB)
    t = torch.as_tensor(buf, device="cuda")
    assert t.data_ptr() == buf.address and t.numel() == 4 * MiB
    t.view(torch.float32).fill_(1.5)
    torch.cuda.synchronize()
    del t
    buf.page_out()
    buf.page_in()
    d = torch.from_dlpack(buf)
    assert buf.views == 1
    assert float(d.view(torch.float32).sum()) == 1.5 * MiB
    del d
    assert buf.views == 0


@gpu
def test_cuda_page_out_waits_for_the_recorded_use(cuda_pool):
    torch = pytest.importorskip("torch")
    space = cuda_pool.address_space()
    a, b = space.alloc(8 * MiB), space.alloc(8 * MiB)
    ta = torch.as_tensor(a, device="cuda").view(torch.float32)
    tb = torch.as_tensor(b, device="cuda").view(torch.float32)
    ta.fill_(2.0)
    out = torch.empty_like(ta)
    stream = torch.cuda.current_stream()
    for _ in range(20):  # a queue of kernels reading a
        torch.mul(ta, 1.0, out=out)
    a.record_use(stream)
    del ta
    a.page_out()  # waits for the kernels above, not for the device
    for _ in range(20):
        tb.add_(1.0)
    torch.cuda.synchronize()
    assert float(out.sum()) == 2.0 * 2 * MiB
    a.page_in()
    assert float(torch.from_dlpack(a).view(torch.float32)[:4].sum()) == 8.0
