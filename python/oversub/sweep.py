"""Simulator sweeps on one machine or on a Ray cluster, with the same rows either way.

A sweep is a list of runs of ``sim_uvm`` (workload or trace × oversubscription ratio × policy × seed) or
``sim_swap`` (scenario × policy × seed)::

    import oversub.sweep as sw
    sweep = sw.grid(workloads=["bfs", "nw"], ratios=[1.0, 2.0], policies=["lazy-grp-hw", "dynamap"], quick=True)
    result = sw.run(sweep, executor="ray", output="study.jsonl")   # or executor="local" (all cores)
    sw.to_dataframe(result)                                        # one row per run

Runs that share a trace (same source, seed and options) form one **task**, which generates or loads the trace once
and simulates every ratio and policy on it (as a local ``sim_uvm`` call does), so traces are never regenerated per
run. ``executor="local"`` runs tasks on a thread pool (the simulators release the GIL); ``executor="ray"`` runs each
task as a Ray task (``ray.init(address)``; a local Ray cluster when no address is given). Trace files are read by
the task from their path, so on a cluster they must lie on a file system every node sees (NFS, a shared volume);
they are never shipped through Ray's object store. The simulators are deterministic, so a sweep gives identical rows
locally and on Ray; only the timing (``wall_s``, ``sim_s`` per task) differs, and it is kept out of the rows.

With ``output=PATH`` each task's rows are appended to a JSON-lines file as soon as it finishes; running the same
sweep with the same output again skips every run already there, so a killed sweep resumes where it stopped. A task
that fails (a bad trace, a worker killed for memory) is reported with its parameters and does not lose the others.

Ratios are oversubscription fractions here (1.0 = 100%: the problem is twice the GPU memory), as elsewhere in Python;
rows carry both ``ratio`` (fraction) and ``ratio_percent``. Ray is optional: ``pip install "oversub[ray]"``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Run", "Sweep", "grid", "load", "run", "to_dataframe", "format_table", "main"]

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
    (swap); ``ratio`` an oversubscription fraction (uvm only)."""

    sim: str
    source: str
    policy: str
    seed: int = 1
    ratio: float | None = None
    trace: bool = False  # source is a trace file (uvm) or a scenario file (swap)
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """A stable identity, the same on every machine: what resumption matches on."""
        return json.dumps(
            [self.sim, self.source, self.trace, self.seed, self.ratio, self.policy.lower(), list(self.options)],
            sort_keys=True,
            default=str,
        )

    @property
    def task_key(self) -> tuple:
        """Runs with the same task key share a trace and run in one task."""
        return (self.sim, self.source, self.trace, self.seed, self.options)

    def params(self) -> dict[str, Any]:
        d = {"sim": self.sim, "source": self.source, "policy": self.policy, "seed": self.seed}
        if self.ratio is not None:
            d["ratio"] = self.ratio
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


def _check_ratio(r: Any) -> float:
    if isinstance(r, str):
        s = r.strip().lower()
        if s.endswith("%"):
            return float(s[:-1]) / 100
        if s.endswith("x"):
            return float(s[:-1])
        return float(s)
    r = float(r)
    if not (r >= 0 and r < 1000):
        raise ValueError(f"ratio {r} is not an oversubscription fraction (1.0 = 100%)")
    return r


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

    ``sim="uvm"``: ``workloads`` and/or ``traces`` × ``ratios`` (fractions, default ``[1.0, 2.0, 3.0]``; strings
    "200%" or "2x" too) × ``policies`` (default: every policy, "all") × ``seeds``; options: quick, scale, graph,
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
        ratio_l = [_check_ratio(r) for r in _as_list(ratios if ratios is not None else [1.0, 2.0, 3.0])]
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
        ratios = [1.0, 2.0]
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
# Tasks: plain functions of plain data, so Ray can ship them and a thread pool can call them alike.


def _task_spec(runs: list[Run]) -> dict[str, Any]:
    first = runs[0]
    return {
        "sim": first.sim,
        "source": first.source,
        "trace": first.trace,
        "seed": first.seed,
        "options": dict(first.options),
        "ratios": sorted({r.ratio for r in runs if r.ratio is not None}),
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
                ratios=[r * 100 for r in spec["ratios"]],
                policies=spec["policies"],
                seed=spec["seed"],
                threads=1,
                **opts,
            )
            rows, sim_s = [], 0.0
            for row in res["runs"]:
                sim_s += row.get("sim_seconds", 0.0)
                row = {k: v for k, v in row.items() if k not in _TIMING_FIELDS}
                row["ratio_percent"] = row.pop("ratio")
                row["ratio"] = row["ratio_percent"] / 100
                rows.append(row)
            extra = {"speedups": [dict(x, seed=spec["seed"], source=spec["source"]) for x in res["speedups"]]}
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
# Executors


class _Local:
    def __init__(self, workers: int | None):
        self.pool = cf.ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="sweep")

    def submit_all(self, specs: list[dict]) -> Iterable[tuple[int, dict]]:
        futures = {self.pool.submit(_run_task, s): i for i, s in enumerate(specs)}
        for f in cf.as_completed(futures):
            yield futures[f], f.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class _Ray:
    def __init__(self, address: str | None):
        try:
            import ray
        except ImportError as e:
            raise ImportError('executor="ray" needs Ray: pip install "oversub[ray]"') from e
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            self.started = True
        self.remote = ray.remote(num_cpus=1, max_retries=0)(_run_task)

    def submit_all(self, specs: list[dict]) -> Iterable[tuple[int, dict]]:
        refs = {self.remote.remote(s): i for i, s in enumerate(specs)}
        while refs:
            done, _ = self.ray.wait(list(refs), num_returns=1)
            for ref in done:
                i = refs.pop(ref)
                try:
                    yield i, self.ray.get(ref)
                except Exception as e:  # noqa: BLE001  (a worker that died: killed for memory, a node lost)
                    yield i, {"error": f"{type(e).__name__}: {e}".splitlines()[0], "wall_s": 0.0}

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


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
        executor: "local" (a thread pool over this machine's cores) or "ray".
        address: the Ray cluster to join (``ray.init(address)``); None starts a local one (unless Ray is already
            initialised in this process, which is then used as it is).
        output: a JSON-lines file the results are appended to as tasks finish; runs already in it are skipped.
        progress: True for a progress line on stderr (runs done / total, accesses per second), a callable to get
            the same numbers as a dict, False for nothing.
        workers: threads of the local executor (default: one per core).

    Rows are sorted by (sim, source, seed, ratio, policy), so a sweep gives the same list however it ran.
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
    out = open(output, "a", encoding="utf-8") if output else None
    ex = (_Local(workers) if executor == "local" else _Ray(address)) if specs else None
    try:
        if ex is not None:
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
                    "wall_s": res["wall_s"],
                }
                records.append(rec)
                if out:
                    # One line per task: a kill leaves at most a torn last line, which _read_records skips.
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                n = sum(x.get("accesses", 0) for x in res["rows"])
                accesses += n
                report(len(runs), n, start)
    finally:
        if ex is not None:
            ex.close()
        if out:
            out.close()
    # Rows of every task record that covers a run of this sweep; a later record of the same row wins (a task re-run
    # because the sweep grew).
    wanted = {r.key for r in sweep}
    by_row: dict[tuple, dict] = {}
    by_extra: dict[str, dict[tuple, dict]] = {"speedups": {}, "summaries": {}}
    for rec in records:
        if not wanted.intersection(rec["keys"]):
            continue
        for row in rec["rows"]:
            by_row[_row_order(row)] = row
        for kind, items in rec["extra"].items():
            for item in items:
                by_extra.setdefault(kind, {})[tuple(sorted((k, json.dumps(v, default=str)) for k, v in item.items()
                                                           if k not in ("est_time_s", "speedup")))] = item
    rows = list(by_row.values())
    rows.sort(key=_row_order)
    result: dict[str, Any] = {
        "rows": rows,
        "failed": failed,
        "skipped": skipped,
        "runs": total_runs,
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
    return result


def _row_order(row: Mapping[str, Any]) -> tuple:
    return (
        row.get("sim", ""),
        str(row.get("source", "")),
        row.get("seed", 0),
        row.get("ratio", -1.0),
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
    p.add_argument("--ratios", help="comma-separated fractions (1.0 = 100%%), or 100%%, 2x")
    p.add_argument("--policies", default="all", help="comma-separated policies (default all)")
    p.add_argument("--seeds", default="1", help="comma-separated seeds")
    p.add_argument("--suite", action="store_true", help="every workload (uvm) or scenario (swap)")
    p.add_argument("--quick", action="store_true", help="small problem sizes (uvm)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a simulator option (quick, profile, time_model, priorities, ...); may repeat")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray (a local cluster without ADDRESS)")
    p.add_argument("--workers", type=int, help="local threads (default: one per core)")
    p.add_argument("--output", help="JSON-lines file to append results to; finished runs are skipped on a re-run")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
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
                ratios = a.ratios.split(",") if a.ratios else None
                if a.quick:
                    options["quick"] = True
                sweep = grid(sim="uvm", workloads=workloads, traces=a.traces, ratios=ratios,
                             policies=a.policies, seeds=seeds, **options)
            else:
                sweep = grid(sim="swap", scenarios=a.scenarios, policies=a.policies, seeds=seeds, **options)
        result = run(sweep, executor="ray" if a.ray is not None else "local", address=a.ray or None,
                     output=a.output, progress=not a.no_progress, workers=a.workers)
    except (ValueError, ImportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, default=str) if a.json else format_table(result))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
