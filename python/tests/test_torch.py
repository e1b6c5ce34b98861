"""PyTorch on the CPU: zero-copy tensors from host buffers, counted as views (skipped without torch)."""

from __future__ import annotations

import gc

import pytest

import oversub

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")


def test_from_numpy_and_dlpack_share_the_buffer(tmp_path):
    buf = oversub.Pool("8MiB", store=tmp_path).address_space().alloc(64 * 64 * 4)
    t = torch.from_numpy(buf.numpy("float32", (64, 64)))
    t.fill_(2.0)
    with pytest.raises(oversub.ViewError):
        buf.page_out()
    del t
    gc.collect()
    d = torch.from_dlpack(buf)
    assert d.data_ptr() == buf.address and d.dtype == torch.uint8
    d.view(torch.float32)[:4] = 7.0
    assert buf.views == 1
    del d
    gc.collect()
    buf.page_out()
    buf.page_in()
    assert buf.numpy("float32")[:5].tolist() == [7.0, 7.0, 7.0, 7.0, 2.0]
