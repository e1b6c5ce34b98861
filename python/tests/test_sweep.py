"""oversub.sweep: grids, identical rows locally and on Ray, resumption after a killed run, a failing task's report."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import oversub.sweep as sw

SMALL = dict(workloads=["bfs", "nw"], ratios=[1.0, 2.0], policies=["lazy-grp-hw", "dynamap"], quick=True)


def test_grid_axes_and_validation():
    g = sw.grid(**SMALL)
    assert len(g) == 8 and len(g.tasks()) == 2  # one task per trace: each generated once
    assert {r.ratio for r in g} == {1.0, 2.0}
    assert sw.grid(workloads="bfs", ratios=["200%", "3x"], policies="dynamap")[0].ratio == 2.0
    with pytest.raises(ValueError, match="unknown option"):
        sw.grid(workloads="bfs", quik=True)
    with pytest.raises(ValueError, match="nothing to sweep"):
        sw.grid()
    with pytest.raises(ValueError, match="no ratios"):
        sw.grid(sim="swap", ratios=[1.0])
    assert len({r.key for r in g}) == len(g)


def test_toml_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[grid]]\nworkloads = ["bfs"]\nratios = [1.0]\npolicies = ["dynamap"]\nquick = true\n'
                 '[[grid]]\nsim = "swap"\nscenarios = ["fig4a"]\npolicies = ["baseline"]\n')
    g = sw.load(f)
    assert [r.sim for r in g] == ["uvm", "swap"]
    f.write_text('[[grid]]\nworkloads = ["bfs"]\nratio = [1.0]\n')
    with pytest.raises(ValueError, match="number 1"):
        sw.load(f)


def test_local_rows_are_deterministic_and_sorted(tmp_path):
    a = sw.run(sw.grid(**SMALL), progress=False)
    b = sw.run(sw.grid(**SMALL), progress=False, workers=1)
    assert a["rows"] == b["rows"] and a["speedups"] == b["speedups"]
    assert len(a["rows"]) == 8 and not a["failed"]
    assert all("sim_seconds" not in r for r in a["rows"])  # timing stays out of the rows
    assert [(r["source"], r["ratio"]) for r in a["rows"]] == sorted((r["source"], r["ratio"]) for r in a["rows"])
    assert "DynaMap" in sw.format_table(a)


def test_swap_sweep():
    r = sw.run(sw.grid(sim="swap", scenarios="fig4a", policies=["baseline", "proposed"]), progress=False)
    assert {row["policy"] for row in r["rows"]} >= {"baseline", "proposed"}
    assert r["summaries"] and r["summaries"][0]["name"] == "fig4a"


def test_a_failing_task_is_reported_and_the_others_kept(tmp_path):
    bad = tmp_path / "missing.trace"
    g = sw.grid(workloads="bfs", traces=[bad], ratios=[1.0], policies="dynamap", quick=True)
    r = sw.run(g, progress=False, output=tmp_path / "out.jsonl")
    assert len(r["failed"]) == 1
    assert r["failed"][0]["task"]["source"] == str(bad) and "SimError" in r["failed"][0]["error"]
    assert [row["source"] for row in r["rows"]] == ["bfs"]
    assert "FAILED uvm" in sw.format_table(r)
    # The failed task is tried again on a re-run; the finished one is not.
    again = sw.run(g, progress=False, output=tmp_path / "out.jsonl")
    assert again["tasks_run"] == 1 and again["skipped"] == 1


def test_resumes_after_a_killed_run(tmp_path):
    out = tmp_path / "study.jsonl"
    args = [sys.executable, "-m", "oversub.sweep", "uvm", "--workloads", "bfs,nw,atax,gaussian", "--ratios",
            "1.0,2.0", "--policies", "lazy-grp-hw,dynamap", "--quick", "--workers", "1", "--no-progress",
            "--output", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = out.read_text().count("\n")
    assert lines >= 1
    grid = sw.grid(workloads=["bfs", "nw", "atax", "gaussian"], ratios=[1.0, 2.0],
                   policies=["lazy-grp-hw", "dynamap"], quick=True)
    resumed = sw.run(grid, progress=False, output=out)
    assert resumed["skipped"] >= 4 and resumed["tasks_run"] <= 4 - lines
    clean = sw.run(grid, progress=False)
    assert resumed["rows"] == clean["rows"]
    with open(out, "a") as f:  # a torn last line (a kill mid-write) is ignored
        f.write('{"type": "task", "keys": [')
    assert sw.run(grid, progress=False, output=out)["rows"] == clean["rows"]


def test_ray_gives_the_local_rows():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'oversub[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        g = sw.grid(**SMALL) + sw.grid(workloads="bfs", traces=["/nonexistent/trace"], ratios=[1.0],
                                       policies="dynamap", quick=True)
        local = sw.run(g, progress=False)
        remote = sw.run(g, executor="ray", progress=False)
        assert remote["rows"] == local["rows"] and remote["speedups"] == local["speedups"]
        assert len(remote["failed"]) == 1 and remote["failed"][0]["task"]["source"] == "/nonexistent/trace"
    finally:
        ray.shutdown()


def test_cli_module_reports_bad_input(capsys):
    assert sw.main(["uvm", "--workloads", "bfs", "--ratios", "1.0", "--policies", "dynamap", "--quick",
                    "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]
    assert sw.main(["uvm", "--no-progress"]) == 2
    assert "nothing to sweep" in capsys.readouterr().err
