"""oversub.sweep: grids (ratios in percent), identical rows locally and on Ray, resumption after a killed run, a
failing task's report, Ctrl-C that stops a sweep at once and keeps what finished, and a killed driver's Ray cluster
stopped with it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import oversub
import oversub.sweep as sw

SMALL = dict(workloads=["bfs", "nw"], ratios=[100, 200], policies=["lazy-grp-hw", "dynamap"], quick=True)


def test_grid_axes_and_validation():
    g = sw.grid(**SMALL)
    assert len(g) == 8 and len(g.tasks()) == 2  # one task per trace: each generated once
    assert {r.ratio_percent for r in g} == {100, 200}
    assert [r.ratio_percent for r in sw.grid(workloads="bfs", ratios=["200%", "3x", "150,250"], policies="dynamap")] \
        == [200, 300, 150, 250]
    assert {r.ratio_percent for r in sw.grid(workloads="bfs")} == {100, 200, 300}
    with pytest.raises(ValueError, match="unknown option"):
        sw.grid(workloads="bfs", quik=True)
    with pytest.raises(ValueError, match="nothing to sweep"):
        sw.grid()
    with pytest.raises(ValueError, match="no ratios"):
        sw.grid(sim="swap", ratios=[100])
    assert len({r.key for r in g}) == len(g)


def test_ratios_are_percent_as_in_sim_uvm(capsys):
    """grid(ratios=[200]) is 200%, as oversub.sim_uvm(ratios=[200]) and the command line's --ratio 200 (it was
    20000% when grid took fractions); rows name the unit."""
    g = sw.grid(workloads="nw", ratios=[200], policies="dynamap", quick=True)
    assert [r.ratio_percent for r in g] == [200]
    row = sw.run(g, progress=False, workers=1)["rows"][0]
    direct = oversub.sim_uvm(workloads="nw", ratios=[200], policies="dynamap", quick=True)["runs"][0]
    assert row["ratio_percent"] == direct["ratio_percent"] == 200 and "ratio" not in row
    assert row["est_time_s"] == direct["est_time_s"]
    # A bare number that can only be a fraction is refused, with what was meant.
    for bad, meant in ((2, 200), (2.0, 200), ("3", 300), (0.5, 50)):
        with pytest.raises(ValueError, match=rf"ratios are percent as in the paper: did you mean {meant}\?"):
            sw.grid(workloads="nw", ratios=[bad])
    assert [r.ratio_percent for r in sw.grid(workloads="nw", ratios="5%")] == [5]  # explicit percent is taken
    with pytest.raises(ValueError, match="bad ratio"):
        sw.grid(workloads="nw", ratios=["lots"])
    assert sw.main(["uvm", "--workloads", "nw", "--ratios", "2", "--no-progress"]) == 2
    assert "did you mean 200?" in capsys.readouterr().err


def test_toml_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[grid]]\nworkloads = ["bfs"]\nratios = [100]\npolicies = ["dynamap"]\nquick = true\n'
                 '[[grid]]\nsim = "swap"\nscenarios = ["fig4a"]\npolicies = ["baseline"]\n')
    g = sw.load(f)
    assert [r.sim for r in g] == ["uvm", "swap"]
    f.write_text('[[grid]]\nworkloads = ["bfs"]\nratio = [100]\n')
    with pytest.raises(ValueError, match="number 1"):
        sw.load(f)


def test_local_rows_are_deterministic_and_sorted(tmp_path):
    a = sw.run(sw.grid(**SMALL), progress=False)
    b = sw.run(sw.grid(**SMALL), progress=False, workers=1)
    assert a["rows"] == b["rows"] and a["speedups"] == b["speedups"]
    assert len(a["rows"]) == 8 and not a["failed"]
    assert all("sim_seconds" not in r for r in a["rows"])  # timing stays out of the rows
    order = [(r["source"], r["ratio_percent"]) for r in a["rows"]]
    assert order == sorted(order)
    assert len(a["sim_seconds"]) == len(a["rows"]) and all(t > 0 for t in a["sim_seconds"])
    assert "DynaMap" in sw.format_table(a)


def test_swap_sweep():
    r = sw.run(sw.grid(sim="swap", scenarios="fig4a", policies=["baseline", "proposed"]), progress=False)
    assert {row["policy"] for row in r["rows"]} >= {"baseline", "proposed"}
    assert r["summaries"] and r["summaries"][0]["name"] == "fig4a"


def test_a_failing_task_is_reported_and_the_others_kept(tmp_path):
    bad = tmp_path / "missing.trace"
    g = sw.grid(workloads="bfs", traces=[bad], ratios=[100], policies="dynamap", quick=True)
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
            "100,200", "--policies", "lazy-grp-hw,dynamap", "--quick", "--workers", "1", "--no-progress",
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
    grid = sw.grid(workloads=["bfs", "nw", "atax", "gaussian"], ratios=[100, 200],
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
        g = sw.grid(**SMALL) + sw.grid(workloads="bfs", traces=["/nonexistent/trace"], ratios=[100],
                                       policies="dynamap", quick=True)
        local = sw.run(g, progress=False)
        remote = sw.run(g, executor="ray", progress=False)
        assert remote["rows"] == local["rows"] and remote["speedups"] == local["speedups"]
        assert len(remote["failed"]) == 1 and remote["failed"][0]["task"]["source"] == "/nonexistent/trace"
    finally:
        ray.shutdown()


def test_cli_module_reports_bad_input(capsys):
    assert sw.main(["uvm", "--workloads", "bfs", "--ratios", "100", "--policies", "dynamap", "--quick",
                    "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]
    assert sw.main(["uvm", "--no-progress"]) == 2
    assert "nothing to sweep" in capsys.readouterr().err


def _processes_with_env(token: str) -> list[int]:
    """Processes whose environment holds `token` (the sweep's task processes inherit it)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def _wait_for_lines(path, proc, n=1, timeout=240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no finished task in {path} (the sweep ended with {proc.poll()})")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="looks for left-over processes in /proc")
def test_ctrl_c_stops_a_local_sweep_at_once_and_keeps_what_finished(tmp_path):
    out = tmp_path / "study.jsonl"
    token = f"OVERSUB_SWEEP_TEST={os.getpid()}-{time.monotonic_ns()}"
    # Hundreds of tasks of seconds each (every policy at two ratios): many minutes of work, interrupted after the
    # first task finishes, while the other worker is in the middle of a simulation.
    script = (
        "import json, signal, oversub.sweep as sw\n"
        # As at a terminal, even where the test suite itself runs with SIGINT ignored (see conftest.ctrl_c).
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "g = sw.grid(workloads='all', ratios=[100, 200], seeds=range(1, 40), quick=True)\n"
        "try:\n"
        f"    sw.run(g, output={str(out)!r}, progress=False, workers=2)\n"
        "except sw.SweepInterrupted as e:\n"
        "    print(json.dumps({'rows': len(e.result['rows']), 'interrupted': e.result['interrupted']}), flush=True)\n"
        "    raise\n"
    )
    key, value = token.split("=")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, **{key: value}), text=True)
    try:
        _wait_for_lines(out, proc)
        assert _processes_with_env(token), "no task process seen"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    # The target is a second; the bound is generous for a loaded test machine.
    assert stopped_s < 10, f"the sweep took {stopped_s:.1f} s to stop after SIGINT"
    sys.stderr.write(f"local sweep stopped {stopped_s:.2f} s after SIGINT\n")
    # An uncaught KeyboardInterrupt subclass ends Python with status 1 and its traceback (only the exact class
    # ends it by SIGINT).
    assert proc.returncode == 1, (proc.returncode, stderr)
    assert "oversub.sweep.SweepInterrupted: sweep interrupted:" in stderr and "runs finished" in stderr, stderr
    kept = json.loads(stdout.splitlines()[-1])
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert kept["interrupted"] and kept["rows"] == sum(len(r["rows"]) for r in records) > 0
    time.sleep(0.5)
    assert not _processes_with_env(token), "task processes outlived the sweep"
    # What finished is not run again.
    g = sw.grid(workloads="all", ratios=[100, 200], seeds=range(1, 40), quick=True)
    done = {k for r in records for k in r["keys"]}
    assert done and done <= {r.key for r in g}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watchdog and this test read /proc")
def test_a_killed_driver_stops_the_ray_cluster_it_started(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'oversub[ray]')")
    out = tmp_path / "study.jsonl"
    script = (
        "import oversub.sweep as sw\n"
        "g = sw.grid(workloads='all', ratios=[100, 200], policies=['lazy-grp-hw', 'dynamap'], seeds=range(1, 40),"
        " quick=True)\n"
        f"sw.run(g, executor='ray', output={str(out)!r}, progress=False)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_lines(out, proc)
        cluster = _descendants(proc.pid)
        names = " ".join(cmd for _, _, cmd in cluster)
        assert "raylet" in names and "ray::" in names, names
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(cluster):
        time.sleep(0.2)
    assert not _alive(cluster), f"still running 30 s after the driver was killed: {_alive(cluster)}"


def _stat(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> list[tuple[int, int, str]]:
    """(pid, start time, command line) of every process under `root`."""
    procs = {int(n): st for n in os.listdir("/proc") if n.isdigit() and (st := _stat(int(n))) is not None}
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, start) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                todo.append(pid)
    out = []
    for pid, start in found.items():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append((pid, start, f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            continue
    return out


def _alive(procs: list[tuple[int, int, str]]) -> list[str]:
    """Those of `procs` still running (same start time: not a reused pid; zombies are dead)."""
    left = []
    for pid, start, cmd in procs:
        st = _stat(pid)
        if st is None or st[1] != start:
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(line.startswith("State:") and "Z" in line for line in f):
                    continue
        except OSError:
            continue
        left.append(f"{pid} {cmd.strip()}")
    return left
