"""Simulator sweeps on one machine or on a Ray cluster, with the same rows either way.

A sweep is a list of runs of ``sim_uvm`` (workload or trace × oversubscription ratio × policy × seed) or
``sim_swap`` (scenario × policy × seed)::

    import oversub.sweep as sw
    sweep = sw.grid(workloads=["bfs", "nw"], ratios=[100, 200], policies=["lazy-grp-hw", "dynamap"], quick=True)
    result = sw.run(sweep, executor="ray", output="study.jsonl")   # or executor="local" (all cores)
    sw.to_dataframe(result)                                        # one row per run

Runs that share a trace (same source, seed and options) form one **task**, which generates or loads the trace once
and simulates every ratio and policy on it (as a local ``sim_uvm`` call does), so traces are never regenerated per
run. ``executor="local"`` runs each task in a process of its own, as many at once as there are cores (a simulation
cannot be interrupted, a process can: Ctrl-C stops the sweep at once); ``executor="ray"`` runs each task as a Ray
task (``ray.init(address)``; a local Ray cluster when no address is given, stopped with the sweep even when the
sweep's process is killed). Trace files are read by the task from their path, so on a cluster they must lie on a
file system every node sees (NFS, a shared volume); they are never shipped through Ray's object store. The
simulators are deterministic, so a sweep gives identical rows locally and on Ray; only the timing (``wall_s``,
``sim_s`` per task, ``sim_seconds`` per row) differs, and it is kept out of the rows.

With ``output=PATH`` each task's rows are appended to a JSON-lines file as soon as it finishes; running the same
sweep with the same output again skips every run already there, so a killed sweep resumes where it stopped. A task
that fails (a bad trace, a worker killed for memory) is reported with its parameters and does not lose the others.
Ctrl-C (``KeyboardInterrupt``) stops the sweep within a second and raises :class:`SweepInterrupted`, a
``KeyboardInterrupt`` whose ``result`` holds the finished tasks' rows (as :func:`run` would return them); they are
in ``output`` too.

Ratios are percent, as in the paper and everywhere in oversub (200 = 200%: the problem is three times the GPU
memory): numbers, or strings such as "200%" or "2x". A bare number above 0 and below 10 is refused as a likely
fraction ("did you mean 200?"); write "5%" to mean 5%. Rows carry ``ratio_percent``. Ray is optional:
``pip install "oversub[ray]"``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Run", "Sweep", "SweepInterrupted", "grid", "load", "run", "to_dataframe", "format_table", "main"]

# Options that change a run's result (and so its identity). Anything else is refused, so a typo is not silently
# ignored and two different studies never share an output file's rows.
_UVM_OPTIONS = {
    "quick", "scale", "graph", "profile", "l2", "time_model", "machine_scale", "decide_with", "eviction",
    "eviction_unit",
}
_SWAP_OPTIONS = {
    "alpha_rules", "capacity", "sms", "evictable", "direct_access", "profile", "priorities",
}
# Fields of a simulator row that are measurements of this machine, not results: kept out of the rows.
_TIMING_FIELDS = ("sim_seconds",)


@dataclass(frozen=True)
class Run:
    """One simulation: ``sim`` is "uvm" or "swap"; ``source`` a workload name, a trace path (uvm) or a scenario
    (swap); ``ratio_percent`` the oversubscription ratio in percent (uvm only)."""

    sim: str
    source: str
    policy: str
    seed: int = 1
    ratio_percent: float | None = None
    trace: bool = False  # source is a trace file (uvm) or a scenario file (swap)
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """A stable identity, the same on every machine: what resumption matches on."""
        return json.dumps(
            [self.sim, self.source, self.trace, self.seed, self.ratio_percent, self.policy.lower(), list(self.options)],
            sort_keys=True,
            default=str,
        )

    @property
    def task_key(self) -> tuple:
        """Runs with the same task key share a trace and run in one task."""
        return (self.sim, self.source, self.trace, self.seed, self.options)

    def params(self) -> dict[str, Any]:
        d = {"sim": self.sim, "source": self.source, "policy": self.policy, "seed": self.seed}
        if self.ratio_percent is not None:
            d["ratio_percent"] = self.ratio_percent
        if self.trace:
            d["trace"] = True
        d.update(dict(self.options))
        return d


class Sweep(list):
    """A list of :class:`Run`; ``+`` joins sweeps."""

    def tasks(self) -> list[list[Run]]:
        groups: dict[tuple, list[Run]] = {}
        for r in self:
            groups.setdefault(r.task_key, []).append(r)
        return list(groups.values())

    def __add__(self, other: Iterable[Run]) -> Sweep:
        return Sweep(list(self) + list(other))


def _as_list(v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, (str, bytes, os.PathLike)) or not isinstance(v, Iterable):
        return [v]
    return list(v)


def _ratios_percent(ratios: Any) -> list[float]:
    """Ratios in percent, read by the simulator's own rule (``oversub.sim_uvm`` and the command line read them so
    too); strings may hold several, comma separated."""
    from ._oversub import ratio_percent

    items = [p for item in _as_list(ratios) for p in (item.split(",") if isinstance(item, str) else [item])]
    return [ratio_percent(r.strip() if isinstance(r, str) else r) for r in items if not isinstance(r, str) or r.strip()]


def grid(
    *,
    sim: str = "uvm",
    workloads: str | Sequence[str] | None = None,
    traces: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    scenarios: str | Sequence[str] | None = None,
    scenario_files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    ratios: float | str | Sequence[float | str] | None = None,
    policies: str | Sequence[str] | None = None,
    seeds: int | Sequence[int] = 1,
    **options: Any,
) -> Sweep:
    """Every combination of the given axes.

    ``sim="uvm"``: ``workloads`` and/or ``traces`` × ``ratios`` (percent as in the paper, default ``[100, 200,
    300]``; strings "200%" or "2x" too; a bare number above 0 and below 10 is refused as a likely fraction) ×
    ``policies`` (default: every policy, "all") × ``seeds``; options: quick, scale, graph,
    profile, l2, time_model, machine_scale, decide_with, eviction, eviction_unit (as :func:`oversub.sim_uvm`).
    ``sim="swap"``: ``scenarios`` (names, default every scenario of the suite) and/or ``scenario_files`` ×
    ``policies`` (default "all") × ``seeds``; options as :func:`oversub.sim_swap`.
    """
    if sim not in ("uvm", "swap"):
        raise ValueError(f"sim must be 'uvm' or 'swap', not {sim!r}")
    allowed = _UVM_OPTIONS if sim == "uvm" else _SWAP_OPTIONS
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) for sim {sim}: {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    opts = tuple(sorted((k, v) for k, v in options.items() if v is not None))
    pols = [p.strip() for item in _as_list(policies or "all") for p in str(item).split(",") if p.strip()]
    seeds_l = [int(s) for s in _as_list(seeds)]
    runs = Sweep()
    if sim == "uvm":
        sources = [(str(w), False) for item in _as_list(workloads) for w in str(item).split(",") if w.strip()]
        if any(w == "all" for w, _ in sources):
            sources = [(w, False) for w in ("bfs", "sssp", "nw", "gaussian", "atax", "pagerank", "bst")] + [
                s for s in sources if s[0] != "all"
            ]
        sources += [(os.fspath(t), True) for t in _as_list(traces)]
        if not sources:
            raise ValueError("nothing to sweep: give workloads= and/or traces=")
        ratio_l = _ratios_percent(ratios if ratios is not None else [100, 200, 300])
        if not ratio_l:
            raise ValueError("ratios is empty: give percentages such as [100, 200]")
        for (src, is_trace) in sources:
            for seed in seeds_l:
                for ratio in ratio_l:
                    for pol in pols:
                        runs.append(Run("uvm", src, pol, seed, ratio, is_trace, opts))
    else:
        if ratios is not None:
            raise ValueError("sim swap has no ratios (the scenario sets the memory)")
        sources = [(str(s), False) for item in _as_list(scenarios) for s in str(item).split(",") if s.strip()]
        sources += [(os.fspath(f), True) for f in _as_list(scenario_files)]
        if not sources:
            sources = [("suite", False)]
        for (src, is_file) in sources:
            for seed in seeds_l:
                for pol in pols:
                    runs.append(Run("swap", src, pol, seed, None, is_file, opts))
    return runs


def load(path: str | os.PathLike) -> Sweep:
    """A sweep from a TOML file: one or more ``[[grid]]`` tables whose keys are :func:`grid`'s arguments::

        [[grid]]
        sim = "uvm"
        workloads = ["bfs", "pagerank"]
        ratios = [100, 200]
        policies = ["lazy-grp-hw", "dynamap"]
        quick = true
    """
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    tables = doc.get("grid")
    if not isinstance(tables, list) or not tables:
        raise ValueError(f"{os.fspath(path)}: no [[grid]] table")
    sweep = Sweep()
    for i, t in enumerate(tables):
        try:
            sweep += grid(**t)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{os.fspath(path)}: [[grid]] number {i + 1}: {e}") from None
    return sweep


# ----------------------------------------------------------------------------------------------------------------
# Tasks: plain functions of plain data, so Ray can ship them and a local process can run them alike.


def _task_spec(runs: list[Run]) -> dict[str, Any]:
    first = runs[0]
    return {
        "sim": first.sim,
        "source": first.source,
        "trace": first.trace,
        "seed": first.seed,
        "options": dict(first.options),
        "ratios_percent": sorted({r.ratio_percent for r in runs if r.ratio_percent is not None}),
        "policies": list(dict.fromkeys(r.policy for r in runs)),
        "keys": [r.key for r in runs],
    }


def _run_task(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Runs one task; never raises (a failure comes back as ``{"error": ...}``, so one bad trace does not stop a
    sweep and Ray does not retry what would fail again)."""
    import oversub

    start = time.perf_counter()
    try:
        opts = dict(spec["options"])
        if spec["sim"] == "uvm":
            src = {"traces": [spec["source"]]} if spec["trace"] else {"workloads": [spec["source"]]}
            res = oversub.sim_uvm(
                **src,
                ratios=spec["ratios_percent"],
                policies=spec["policies"],
                seed=spec["seed"],
                threads=1,
                **opts,
            )
            rows, times = [], []
            for row in res["runs"]:
                times.append(row.get("sim_seconds", 0.0))
                rows.append({k: v for k, v in row.items() if k not in _TIMING_FIELDS})
            sim_s = sum(times)
            extra = {"speedups": [dict(x, seed=spec["seed"], source=spec["source"]) for x in res["speedups"]],
                     "sim_seconds": times}
        else:
            src = {"scenario_files": [spec["source"]]} if spec["trace"] else (
                {"suite": True} if spec["source"] == "suite" else {"scenarios": [spec["source"]]}
            )
            res = oversub.sim_swap(**src, policies=spec["policies"], seed=spec["seed"], **opts)
            rows = [dict(r, scenario=r.get("name")) for r in res["scenarios"]]
            sim_s = time.perf_counter() - start
            extra = {"summaries": [dict(x, seed=spec["seed"], source=spec["source"]) for x in res["summaries"]]}
        for row in rows:
            row["sim"] = spec["sim"]
            row["seed"] = spec["seed"]
            row["source"] = spec["source"]
            row.update({f"opt_{k}": v for k, v in opts.items()})
        return {"rows": rows, **extra, "sim_s": sim_s, "wall_s": time.perf_counter() - start}
    except Exception as e:  # noqa: BLE001  (reported with the task's parameters, see the docstring)
        return {"error": f"{type(e).__name__}: {e}", "wall_s": time.perf_counter() - start}


# ----------------------------------------------------------------------------------------------------------------
# Executors: submit_all yields (index, result) as tasks finish, waking at least every _WAKE_S so that a Ctrl-C in
# the main thread is raised there promptly; cancel() stops what is left at once; close() releases the executor.

_WAKE_S = 0.2


def _child_env() -> dict[str, str]:
    """The environment of a child Python: this one, and where this package was not imported from a site folder
    (a source tree put on ``sys.path``), that folder first on its path, so that the child runs the same oversub.
    A site folder is never put first: it would come before the standard library."""
    import site

    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sites = {os.path.abspath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if here not in sites:
        env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


class _Local:
    """Each task in a process of its own (``oversub._sweep_task``), ``workers`` at a time, each driven by a thread
    that waits for its process. A simulation cannot be interrupted, a process can be killed, so cancel() stops the
    sweep at once; and a task killed for memory loses only its own rows."""

    def __init__(self, workers: int | None):
        self.pool = cf.ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="sweep")
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.cancelled = False
        self.env = _child_env()

    def _call(self, spec: dict) -> dict:
        start = time.perf_counter()
        err = tempfile.TemporaryFile()
        with self.lock:
            if self.cancelled:
                err.close()
                return {"error": "cancelled", "wall_s": 0.0}
            proc = subprocess.Popen([sys.executable, "-m", "oversub._sweep_task"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, env=self.env)
            self.procs.add(proc)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(spec).encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                pass  # the task died at once; its status says why
            # Standard input stays open until the task ends: its end of file tells the task that we are gone.
            out = proc.stdout.read()
            code = proc.wait()
        finally:
            with self.lock:
                self.procs.discard(proc)
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        try:
            if code == 0:
                try:
                    return json.loads(out)
                except ValueError:
                    pass
            err.seek(0)
            lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
        finally:
            err.close()
        why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        detail = f": {lines[-1].strip()}" if lines else " (killed for memory?)" if code == -9 else ""
        return {"error": f"the task's process ended with {why}{detail}", "wall_s": time.perf_counter() - start}

    def submit_all(self, specs: list[dict]) -> Iterable[tuple[int, dict]]:
        futures = {self.pool.submit(self._call, s): i for i, s in enumerate(specs)}
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=_WAKE_S, return_when=cf.FIRST_COMPLETED)
            for f in sorted(done, key=futures.__getitem__):
                yield futures[f], f.result()

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            procs = list(self.procs)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            try:
                proc.kill()
            except OSError:
                pass

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class _RayWatchdog:
    """The process that stops the local Ray cluster this process starts if this process dies without stopping it
    (``oversub._ray_watchdog``; Linux only). Start it before ``ray.init()``; then ``ready()`` with the session
    folder, or ``stop()`` when no cluster was started here or once it has been shut down."""

    def __init__(self) -> None:
        from ._ray_watchdog import children

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oversub._ray_watchdog", str(os.getpid()), *map(str, children(os.getpid()))],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_child_env(),
            start_new_session=True,  # a Ctrl-C at the terminal is for the sweep, which then stops Ray itself
        )

    def _say(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def ready(self, session_dir: str | None) -> None:
        self._say(f"ready {session_dir or ''}")

    def stop(self) -> None:
        self._say("q")
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _ray_session_dir(ray: Any) -> str | None:
    """The folder of the local cluster's session (Ray has no public call for it; None if this version differs)."""
    try:
        return ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # noqa: BLE001  (private API: without it only the recorded processes are stopped)
        return None


class _Ray:
    def __init__(self, address: str | None):
        try:
            import ray
        except ImportError as e:
            raise ImportError('executor="ray" needs Ray: pip install "oversub[ray]"') from e
        self.ray = ray
        self.started = False
        self.watchdog: _RayWatchdog | None = None
        self.refs: dict[Any, int] = {}
        if not ray.is_initialized():
            from ._ray_watchdog import children

            watch = sys.platform.startswith("linux")
            before = set(children(os.getpid())) if watch else set()
            self.watchdog = _RayWatchdog() if watch else None
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
            except BaseException:
                if self.watchdog is not None:
                    self.watchdog.stop()
                raise
            self.started = True
            if self.watchdog is not None:
                started_here = set(children(os.getpid())) - before - {self.watchdog.proc.pid}
                if started_here:
                    self.watchdog.ready(_ray_session_dir(ray))
                else:  # joined a cluster someone else runs: not ours to stop
                    self.watchdog.stop()
                    self.watchdog = None
        self.remote = ray.remote(num_cpus=1, max_retries=0)(_run_task)

    def submit_all(self, specs: list[dict]) -> Iterable[tuple[int, dict]]:
        self.refs = {self.remote.remote(s): i for i, s in enumerate(specs)}
        while self.refs:
            done, _ = self.ray.wait(list(self.refs), num_returns=1, timeout=_WAKE_S)
            for ref in done:
                i = self.refs.pop(ref)
                try:
                    yield i, self.ray.get(ref)
                except Exception as e:  # noqa: BLE001  (a worker that died: killed for memory, a node lost)
                    yield i, {"error": f"{type(e).__name__}: {e}".splitlines()[0], "wall_s": 0.0}

    def cancel(self) -> None:
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001  (already finished, or the cluster is going away)
                pass
        self.refs = {}

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
        if self.watchdog is not None:
            self.watchdog.stop()


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or any ``KeyboardInterrupt``) stopped :func:`run`. It is a ``KeyboardInterrupt``, so a script stops
    as it would have; ``result`` is what :func:`run` returns, over the tasks that finished (``result["interrupted"]``
    is True). With ``output=`` their rows are in that file too, and running the same sweep with it again resumes."""

    def __init__(self, result: dict[str, Any], output: str | None):
        self.result = result
        self.output = output
        done = result["runs_done"]
        where = f"; they are in {output} (run again with it to resume)" if output else ""
        super().__init__(f"sweep interrupted: {done} of {result['runs']} runs finished, rows in .result{where}")


# ----------------------------------------------------------------------------------------------------------------


def _read_records(output: str) -> list[dict]:
    """The task records already in an output file (a torn last line of a killed run is ignored)."""
    records = []
    try:
        f = open(output, encoding="utf-8")
    except FileNotFoundError:
        return records
    with f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("type") == "task":
                records.append(rec)
    return records


def _open_output(output: str):
    """The output file, for appending whole lines (a line torn by a kill is ended first, so it costs only itself)."""
    f = open(output, "a+b")
    if f.tell() > 0:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")
    return f


def run(
    sweep: Sequence[Run],
    executor: str = "local",
    address: str | None = None,
    output: str | os.PathLike | None = None,
    progress: bool | Callable[[dict], None] = True,
    workers: int | None = None,
) -> dict[str, Any]:
    """Runs a sweep; returns ``{"rows", "speedups"|"summaries", "failed", "skipped", "tasks", "wall_s", ...}``.

    Args:
        sweep: the runs (:func:`grid`, :func:`load`).
        executor: "local" (this machine's cores, a process per task) or "ray".
        address: the Ray cluster to join (``ray.init(address)``); None starts a local one (unless Ray is already
            initialised in this process, which is then used as it is), which is stopped when the sweep ends, and
            on Linux also when this process is killed.
        output: a JSON-lines file the results are appended to as tasks finish; runs already in it are skipped.
        progress: True for a progress line on stderr (runs done / total, accesses per second), a callable to get
            the same numbers as a dict, False for nothing.
        workers: tasks the local executor runs at once (default: one per core).

    Rows are sorted by (sim, source, seed, ratio_percent, policy), so a sweep gives the same list however it ran;
    ``sim_seconds`` lists each row's simulation time in the same order (None where unknown), kept out of the rows.

    Raises:
        SweepInterrupted: Ctrl-C (a ``KeyboardInterrupt``) stopped the sweep: running tasks are stopped at once
            (killed locally, cancelled on Ray), and the exception's ``result`` is this function's result over the
            tasks that finished, whose rows are also in ``output``.
    """
    sweep = Sweep(sweep)
    if not sweep:
        raise ValueError("the sweep has no runs")
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', not {executor!r}")
    output = os.fspath(output) if output is not None else None
    records = _read_records(output) if output else []
    done_keys = {k for rec in records for k in rec["keys"]}
    all_tasks = sweep.tasks()
    todo = [t for t in all_tasks if any(r.key not in done_keys for r in t)]
    specs = [_task_spec(t) for t in todo]
    skipped = sum(len(t) for t in all_tasks) - sum(len(t) for t in todo)
    total_runs = len(sweep)
    report = _progress_reporter(progress, total_runs, skipped)
    failed: list[dict] = []
    start = time.perf_counter()
    accesses = 0
    interrupted = False
    out = _open_output(output) if output else None
    ex = None
    try:
        if specs:
            ex = _Local(workers) if executor == "local" else _Ray(address)
            try:
                for i, res in ex.submit_all(specs):
                    spec, runs = specs[i], todo[i]
                    if "error" in res:
                        failed.append({"error": res["error"], "task": {k: v for k, v in spec.items() if k != "keys"}})
                        report(len(runs), 0, start, failed=True)
                        continue
                    rec = {
                        "type": "task",
                        "keys": spec["keys"],
                        "params": {k: v for k, v in spec.items() if k != "keys"},
                        "rows": res["rows"],
                        "extra": {k: res[k] for k in ("speedups", "summaries") if k in res},
                        "sim_seconds": res.get("sim_seconds"),
                        "wall_s": res["wall_s"],
                    }
                    records.append(rec)
                    if out:
                        # One line per task, in one write: a kill leaves at most a torn last line, which
                        # _read_records skips.
                        out.write(json.dumps(rec).encode() + b"\n")
                        out.flush()
                    n = sum(x.get("accesses", 0) for x in res["rows"])
                    accesses += n
                    report(len(runs), n, start)
            except KeyboardInterrupt:
                # Stop the rest at once and keep what finished; raised again below, with the result.
                interrupted = True
                ex.cancel()
    finally:
        if ex is not None:
            ex.close()
        if out:
            out.close()
    # Rows of every task record that covers a run of this sweep; a later record of the same row wins (a task re-run
    # because the sweep grew).
    wanted = {r.key for r in sweep}
    by_row: dict[tuple, tuple[dict, float | None]] = {}
    by_extra: dict[str, dict[tuple, dict]] = {"speedups": {}, "summaries": {}}
    runs_done: set[str] = set()
    for rec in records:
        covered = wanted.intersection(rec["keys"])
        if not covered:
            continue
        runs_done |= covered
        times = rec.get("sim_seconds") or []
        for j, row in enumerate(rec["rows"]):
            by_row[_row_order(row)] = (row, times[j] if j < len(times) else None)
        for kind, items in rec["extra"].items():
            for item in items:
                by_extra.setdefault(kind, {})[tuple(sorted((k, json.dumps(v, default=str)) for k, v in item.items()
                                                           if k not in ("est_time_s", "speedup")))] = item
    ordered = [by_row[k] for k in sorted(by_row)]
    result: dict[str, Any] = {
        "rows": [row for row, _ in ordered],
        "sim_seconds": [t for _, t in ordered],
        "failed": failed,
        "skipped": skipped,
        "runs": total_runs,
        "runs_done": len(runs_done),
        "tasks": len(all_tasks),
        "tasks_run": len(specs),
        "executor": executor,
        "wall_s": time.perf_counter() - start,
        "accesses": accesses,
    }
    if any(r.sim == "uvm" for r in sweep):
        result["speedups"] = sorted(
            by_extra["speedups"].values(),
            key=lambda x: (str(x["source"]), x["seed"], x["ratio_percent"], x["label"]),
        )
    if any(r.sim == "swap" for r in sweep):
        result["summaries"] = sorted(by_extra["summaries"].values(), key=lambda x: (str(x["source"]), x["seed"]))
    if interrupted:
        result["interrupted"] = True
        if progress is True:
            print(file=sys.stderr)  # end the progress line
        raise SweepInterrupted(result, output) from None
    return result


def _row_order(row: Mapping[str, Any]) -> tuple:
    return (
        row.get("sim", ""),
        str(row.get("source", "")),
        row.get("seed", 0),
        row.get("ratio_percent", -1.0),
        str(row.get("policy", "")),
        json.dumps({k: v for k, v in row.items() if k.startswith("opt_")}, sort_keys=True, default=str),
    )


def _progress_reporter(progress, total: int, skipped: int):
    state = {"done": skipped}
    if progress is False or progress is None:
        return lambda *a, **k: None

    def report(n_runs: int, n_accesses: int, start: float, failed: bool = False) -> None:
        state["done"] += n_runs
        state["accesses"] = state.get("accesses", 0) + n_accesses
        state["failed"] = state.get("failed", 0) + (n_runs if failed else 0)
        elapsed = max(time.perf_counter() - start, 1e-9)
        info = {
            "runs_done": state["done"],
            "runs_total": total,
            "runs_failed": state["failed"],
            "accesses_per_s": state["accesses"] / elapsed,
            "elapsed_s": elapsed,
        }
        if callable(progress):
            progress(info)
            return
        width = 30
        filled = int(width * info["runs_done"] / max(total, 1))
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {info['runs_done']}/{total} runs"
            + (f", {state['failed']} failed" if state["failed"] else "")
            + f", {info['accesses_per_s'] / 1e6:.1f} M accesses/s, {elapsed:.0f} s",
            end="" if info["runs_done"] < total else "\n",
            file=sys.stderr,
            flush=True,
        )

    return report


def to_dataframe(result: Mapping[str, Any], key: str = "rows") -> Any:
    """The rows (or ``key="speedups"``/``"summaries"``) as a pandas DataFrame."""
    from .frames import to_dataframe as frame

    return frame(result, key)


def format_table(result: Mapping[str, Any]) -> str:
    """The speedup table of a UVM sweep (workload × ratio, one column per policy; as ``oversub sim uvm``) and/or the
    summary of a swap sweep, then the failures."""
    lines: list[str] = []
    sp = result.get("speedups") or []
    if sp:
        labels = list(dict.fromkeys(s["label"] for s in sp))
        seeds = len({s["seed"] for s in sp}) > 1
        head = ["workload", "ratio"] + labels
        table = [head]
        cells: dict[tuple, dict[str, float]] = {}
        for s in sp:
            name = f"{s['workload']} (seed {s['seed']})" if seeds else s["workload"]
            cells.setdefault((name, s["ratio_percent"]), {})[s["label"]] = s["speedup"]
        for (w, r), row in sorted(cells.items()):
            table.append([w, f"{r:g}%"] + [f"{row[x]:.2f}" if x in row else "-" for x in labels])
        widths = [max(len(t[i]) for t in table) for i in range(len(head))]
        lines.append("speedup over LazyGrpHW (estimated time)")
        lines += ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(t, widths)))
                  for t in table]
    for s in result.get("summaries") or []:
        lines.append(
            f"{s.get('name')}: lowest-priority {s.get('lowest')} cut {s.get('lowest_cut_vs_baseline_pct', 0):.1f}% "
            f"vs Baseline (paper {s.get('paper_cut_vs_baseline_pct')}%)"
        )
    if result.get("interrupted"):
        lines.append(f"INTERRUPTED: {result['runs_done']} of {result['runs']} runs finished")
    lines.append(
        f"{len(result['rows'])} rows from {result['runs']} runs in {result['tasks']} tasks "
        f"({result['tasks_run']} run now, {result['skipped']} runs already done), {result['wall_s']:.1f} s on "
        f"{result['executor']}"
    )
    for f in result.get("failed", []):
        t = f["task"]
        lines.append(f"FAILED {t['sim']} {t['source']} seed {t['seed']} policies {','.join(t['policies'])}: {f['error']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m oversub.sweep",
        description="Run a simulator sweep locally or on Ray (the CLI's `oversub sim uvm --ray` comes here).",
    )
    p.add_argument("sim", choices=["uvm", "swap"], help="which simulator")
    p.add_argument("--file", help="a TOML file of [[grid]] tables (instead of the axes below)")
    p.add_argument("--workloads", help="comma-separated workloads, or all")
    p.add_argument("--traces", nargs="*", default=None, help="trace files (on a path every node can read)")
    p.add_argument("--scenarios", help="comma-separated scenarios (swap)")
    p.add_argument("--ratios", help="comma-separated percentages as in the paper (200 = 200%%; 200%% and 2x too)")
    p.add_argument("--policies", default="all", help="comma-separated policies (default all)")
    p.add_argument("--seeds", default="1", help="comma-separated seeds")
    p.add_argument("--suite", action="store_true", help="every workload (uvm) or scenario (swap)")
    p.add_argument("--quick", action="store_true", help="small problem sizes (uvm)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a simulator option (quick, profile, time_model, priorities, ...); may repeat")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray (a local cluster without ADDRESS)")
    p.add_argument("--workers", type=int, help="local tasks at once (default: one per core)")
    p.add_argument("--output", help="JSON-lines file to append results to; finished runs are skipped on a re-run")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true")
    # The CLI's `--ray` passes this and holds our standard input open: its end means the CLI is gone.
    p.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.exit_with_stdin:
        threading.Thread(target=_stop_at_end_of_stdin, daemon=True).start()
    try:
        if a.file:
            sweep = load(a.file)
        else:
            seeds = [int(s) for s in a.seeds.split(",")]
            options: dict[str, Any] = {}
            for item in a.option:
                key, sep, value = item.partition("=")
                if not sep:
                    raise ValueError(f"--option {item!r}: give KEY=VALUE")
                try:
                    options[key.strip()] = json.loads(value)
                except json.JSONDecodeError:
                    options[key.strip()] = value
            if a.sim == "uvm":
                workloads = "all" if a.suite and not a.workloads and not a.traces else a.workloads
                ratios = a.ratios if a.ratios else None
                if a.quick:
                    options["quick"] = True
                sweep = grid(sim="uvm", workloads=workloads, traces=a.traces, ratios=ratios,
                             policies=a.policies, seeds=seeds, **options)
            else:
                sweep = grid(sim="swap", scenarios=a.scenarios, policies=a.policies, seeds=seeds, **options)
        result = run(sweep, executor="ray" if a.ray is not None else "local", address=a.ray or None,
                     output=a.output, progress=not a.no_progress, workers=a.workers)
    except SweepInterrupted as e:
        try:
            print(json.dumps(e.result, default=str) if a.json else format_table(e.result))
            print(f"interrupted: {e}", file=sys.stderr)
        except OSError:
            pass  # nobody reads any more (the command that started us was killed)
        return 130
    except (ValueError, ImportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, default=str) if a.json else format_table(result))
    return 1 if result["failed"] else 0


def _stop_at_end_of_stdin() -> None:
    """Interrupts the sweep (as Ctrl-C would: its cluster and workers are stopped) once standard input ends, and
    exits regardless if that takes more than ten seconds."""
    import _thread

    # The descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader holds its lock, which the
    # interpreter's shutdown then cannot take.
    while os.read(0, 4096):
        pass
    _thread.interrupt_main()
    time.sleep(10)
    os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
