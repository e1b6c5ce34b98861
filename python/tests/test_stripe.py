"""A pool whose swap store is striped over several locations (``store=[d1, d2, ...]``)."""

from __future__ import annotations

import pytest

import oversub

np = pytest.importorskip("numpy")

MiB = 1 << 20


def test_striped_pool_round_trips_a_buffer(tmp_path):
    d1, d2 = tmp_path / "a", tmp_path / "b"
    d1.mkdir()
    d2.mkdir()
    pool = oversub.Pool("32MiB", store=[d1, str(d2)], store_capacity="64MiB", verify_checksums=True)
    assert [p.parent for p in pool.store_paths] == [d1, d2]
    assert pool.store_path == pool.store_paths[0]
    assert pool.stats()["store_capacity_bytes"] >= 64 * MiB
    assert "," in repr(pool)
    space = pool.address_space()
    # Smaller than one 4 MiB stripe unit, and several units ending mid-unit.
    for size in (12345, 11 * MiB + 4097):
        buf = space.alloc(size)
        expected = np.random.default_rng(size).integers(0, 256, size=size, dtype=np.uint8)
        view = buf.numpy()
        view[:] = expected
        del view
        for _ in range(2):
            buf.page_out()
            assert buf.state == "paged_out"
            buf.page_in()
            assert bytes(buf.numpy().tobytes()) == expected.tobytes()
        buf.free()


def test_one_location_in_a_list_is_a_plain_store(tmp_path):
    pool = oversub.Pool("8MiB", store=[tmp_path])
    assert len(pool.store_paths) == 1
    assert pool.store_path.parent == tmp_path


def test_bad_striped_locations_are_clear_errors(tmp_path):
    with pytest.raises(oversub.IoError, match="the same directory"):
        oversub.Pool("8MiB", store=[tmp_path, tmp_path])
    missing = tmp_path / "no" / "such" / "dir" / "swap"
    with pytest.raises(oversub.IoError, match="no/such/dir/swap"):
        oversub.Pool("8MiB", store=[tmp_path, missing])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="empty"):
        oversub.Pool("8MiB", store=[])
    with pytest.raises(TypeError, match="list of paths"):
        oversub.Pool("8MiB", store=[1, 2])
