"""One size parser at every front (issue 36): ``oversub.parse_size`` is Rust's ``oversub_base::size::parse_size``, and
``oversub.lab.paging``, ``oversub.bench``, ``oversub.torch`` and ``Pool(...)`` read sizes through it, so "2Gi" (once
refused by two of them), "1.5" (once truncated to 1 byte by two of them) and the rest mean the same everywhere."""

import pytest

import oversub
from oversub import bench
from oversub.lab import paging

GOOD = {
    "2Gi": 2 << 30,
    "4GiB": 4 << 30,
    "512M": 512 << 20,
    " 512 MiB ": 512 << 20,
    "1.5GiB": 1_610_612_736,
    "100MB": 100_000_000,
    "4096": 4096,
    4096: 4096,
}
# A fraction of a byte, units nobody defines, an exponent, a sign, nothing at all.
BAD = ["1.5", "1.5B", "lots", "4kk", "1e3", "-1", "+5", "", "   ", -1]


def fronts():
    yield "oversub.parse_size", oversub.parse_size
    yield "oversub.lab.paging.parse_size", paging.parse_size
    yield "oversub.bench", bench._parse_size
    try:
        from oversub import torch as ot
    except ImportError:  # oversub.torch needs PyTorch
        return
    yield "oversub.torch", ot._parse_size


FRONTS = dict(fronts())


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("text", GOOD, ids=repr)
def test_every_front_reads_a_size_alike(front, text):
    assert FRONTS[front](text) == GOOD[text]


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("text", BAD, ids=repr)
def test_every_front_refuses_alike(front, text):
    with pytest.raises(ValueError) as caught:
        FRONTS[front](text)
    with pytest.raises(ValueError) as reference:
        oversub.parse_size(text)
    assert str(caught.value) == str(reference.value)


def test_the_message_says_why():
    with pytest.raises(ValueError, match="whole number"):
        oversub.parse_size("1.5")
    with pytest.raises(ValueError, match="unknown unit"):
        oversub.parse_size("4kk")
    with pytest.raises(TypeError, match="size string"):
        oversub.parse_size(1.5)


@pytest.mark.parametrize("text", ["2Gi", "4GiB", "512M"])
def test_pool_reads_the_same_bytes(tmp_path, text):
    # The store is kept small: only the capacity's reading is under test (address space is reserved, not committed).
    with oversub.Pool(text, store=str(tmp_path), store_capacity="64MiB") as pool:
        assert pool.capacity_bytes == GOOD[text]


@pytest.mark.parametrize("text", ["1.5", "lots", ""])
def test_pool_refuses_the_same_strings(tmp_path, text):
    with pytest.raises(ValueError) as caught:
        oversub.Pool(text, store=str(tmp_path))
    with pytest.raises(ValueError) as reference:
        oversub.parse_size(text)
    assert str(reference.value).split(": ", 1)[1] in str(caught.value)
