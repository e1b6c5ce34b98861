"""The peers benchmark (`python -m oversub.lab.paging`) at a tiny size: oversub and the O_DIRECT baseline run, what
they read back is checked inside the run, absent peers are named with a reason."""

import json

import pytest

np = pytest.importorskip("numpy")

from oversub.lab import paging  # noqa: E402


def test_parse_size():
    assert paging.parse_size("1GiB") == 1 << 30
    assert paging.parse_size("4 MiB") == 4 << 20
    assert paging.parse_size(4096) == 4096
    assert paging.parse_size("2Gi") == 2 << 30  # the Rust parser's reading (test_sizes.py)
    with pytest.raises(ValueError, match='cannot read "lots" as a size'):
        paging.parse_size("lots")


def test_run_measures_oversub_and_the_baseline(tmp_path):
    report = paging.run("4MiB", str(tmp_path), repeats=2, peers=False, checksums=(False, True))
    engines = {(r["engine"], r["direction"]) for r in report["rows"]}
    assert ("oversub", "write") in engines and ("oversub", "read") in engines
    if "O_DIRECT" not in report["skipped"]:
        assert ("O_DIRECT", "read") in engines
    for r in report["rows"]:
        assert r["median_s"] > 0 and r["gib_per_s"] > 0 and len(r["samples_s"]) == 2
        assert r["vs_oversub"] is not None
    best = [r for r in report["rows"] if r["family"] == "oversub" and r["best_of_family"]]
    assert sorted(r["direction"] for r in best) == ["read", "write"]
    assert all(abs(r["vs_oversub"] - 1.0) < 1e-9 for r in best)
    assert "oversub" in paging.format_table(report)
    assert list(tmp_path.iterdir()) == []  # every file it made is gone


def test_peers_that_are_missing_are_named(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_peers(name, *args, **kwargs):
        if name.split(".")[0] in ("deepspeed", "kvikio"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_peers)
    report = paging.run("2MiB", str(tmp_path), repeats=1, peers=True, checksums=(False,))
    assert "not installed" in report["skipped"]["DeepSpeed aio"]
    assert "not installed" in report["skipped"]["KvikIO"]
    assert "skipped KvikIO" in paging.format_table(report)


def test_main_json_and_bad_size(tmp_path, capsys):
    assert paging.main(["--size", "2MiB", "--repeats", "1", "--store", str(tmp_path), "--json", "--quiet",
                        "--checksums", "off"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["size_bytes"] == 2 << 20
    assert paging.main(["--size", "3MiB", "--store", str(tmp_path), "--quiet"]) == 2
    assert "multiple of 2 MiB" in capsys.readouterr().err


def test_pool_io_auto_calibrates_the_store(tmp_path):
    import oversub

    pool = oversub.Pool("8MiB", store=str(tmp_path), store_capacity="96MiB", io="auto")
    p = pool.io_point
    assert p["source"] == "auto" and p["calibration_s"] > 0
    assert p["read_block_bytes"] in (1 << 20, 4 << 20, 16 << 20) and p["read_queue_depth"] in (8, 32)
    buf = pool.address_space().alloc("4MiB")
    buf.write(b"x" * 4096)
    buf.page_out()
    buf.page_in()
    assert buf.read(4096) == b"x" * 4096
    assert oversub.Pool("8MiB", store=str(tmp_path)).io_point["source"] == "default"
    with pytest.raises(ValueError, match="io must be"):
        oversub.Pool("8MiB", store=str(tmp_path), io="fast")


# oversub.lab.paging(...): `oversub bench paging` itself (the Rust measurement), its report as a dict.


def test_lab_paging_is_callable_and_reports_like_the_command(tmp_path):
    import oversub
    import oversub.lab

    report = oversub.lab.paging("16MiB", 2, store=tmp_path, cache_drop="fadvise")
    assert report["size_bytes"] == 16 << 20 and report["samples"] == 2
    for name in ("oversub_page_in", "oversub_page_out", "direct_read", "raw_limit_read", "unchecked_page_in"):
        assert report["results"][name]["count"] == 2, name
        assert len(report["samples_s"][name]) == 2
    assert report["members"] == 1 and report["stripe_sweep"] == []
    assert report["ratios"]
    assert list(tmp_path.iterdir()) == []  # its store file is gone
    assert paging.bench is not None and callable(oversub.lab.paging)


def test_lab_paging_refuses_bad_options(tmp_path):
    import oversub

    with pytest.raises(ValueError, match="--samples"):
        oversub.lab.paging("16MiB", 0, store=tmp_path)
    with pytest.raises(ValueError, match='"warp" is not one of auto, uring, psync'):
        oversub.lab.paging("16MiB", 1, store=tmp_path, engine="warp")


def test_probe_and_write_profile(tmp_path):
    import oversub

    results = oversub.probe(only=["copy", "storage"], dir=tmp_path)
    assert results["quick"] is True and results["copy"]["median_bytes_per_s"] > 0
    assert "profile" in results and isinstance(results["profile_notes"], list)
    out = tmp_path / "profile.toml"
    oversub.write_profile(results, out)
    text = out.read_text()
    assert "[profile]" in text
    oversub.write_profile(results["profile"], tmp_path / "again.toml")
    assert (tmp_path / "again.toml").read_text() == text
