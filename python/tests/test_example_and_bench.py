"""The layer-by-layer example and the overhead benchmark run end to end (small sizes; no timing is asserted)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("numpy")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "layer_by_layer.py"


def _example():
    spec = importlib.util.spec_from_file_location("layer_by_layer", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_layer_by_layer_runs_both_modes_with_the_same_output(tmp_path):
    ex = _example()
    r = ex.run(layers=6, layer_size=1 << 20, capacity=3 << 20, compute_ratio=0.5, passes=1, store=str(tmp_path))
    assert r["same_output"]
    assert r["oversubscription"] == pytest.approx(2.0)
    for mode in ("on_demand", "foreknowledge"):
        assert r[mode]["total_s"] > 0
    assert r["paging_hidden"] <= 1.0
    assert r["repeats_per_layer"] >= 1 and r["batch"] >= 1


def test_layer_by_layer_cli(tmp_path, capsys):
    ex = _example()
    out = tmp_path / "r.json"
    code = ex.main(
        ["--layers", "4", "--layer-size", "1MiB", "--capacity", "2MiB", "--passes", "1", "--json", str(out)]
    )
    assert code == 0
    assert "prefetch hid" in capsys.readouterr().out
    assert out.read_text().startswith("{")


def test_overhead_benchmark_reports_both_sides(tmp_path):
    from oversub import bench

    r = bench.overhead(buffers=20, size="4KiB", rounds=1, trials=1, store=str(tmp_path), chunk=10)
    assert r["pairs"] == 2
    for key in ("python_us_per_op", "rust_us_per_op", "overhead_us_per_op", "overhead_cpu_us_per_op"):
        assert isinstance(r[key], float)
    assert r["size_bytes"] == 4096


PIPELINE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "pipeline.py"


def test_pipeline_example_gives_the_same_results_with_an_80_percent_pool(tmp_path):
    spec = importlib.util.spec_from_file_location("pipeline", PIPELINE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "pipeline.json"
    code = mod.main(["--quick", "--hyperperiods", "2", "--bandwidths", "1e9", "1e9", "--json", str(out)])
    import json

    r = json.loads(out.read_text())
    assert code == 0 and r["bit_identical"]
    assert r["capacity_bytes"] <= 0.81 * r["demand_bytes"]
    assert r["bytes_paged"]["constrained"] > 0 and r["bytes_paged"]["unconstrained"] == 0
    assert len(r["digests"]["constrained"]) == 5
