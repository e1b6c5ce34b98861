"""What calling Python in each slot costs: per-slot ``work_s`` of Python no-op works against a Rust no-op.

``run_schedule(work={name: fn})`` calls ``fn(slot)`` on the lane's thread in each slot: it takes the GIL, makes the
``oversub.Slot`` (a lease per buffer), calls ``fn``, closes the slot and releases the GIL. The executor records each
slot's ``work_s`` (from the work's start to its return), so running the same configuration with

  * ``oversub.NOOP``: a Rust closure that does nothing (the baseline: the executor's own cost),
  * ``lambda slot: None``: a Python no-op,
  * ``lambda slot: slot.buffers[name]``: a Python work that touches its buffers once (NumPy arrays made),

and comparing their ``work_s`` gives the overhead per slot of the Python call, and of the buffer views. The
configuration has many short slots on one CPU and room for every buffer, so no paging happens between slots and
nothing else varies. Warm-up repetitions are not counted.

    python python/examples/bench_work_overhead.py                 # table
    python python/examples/bench_work_overhead.py --json          # the same as JSON
    python python/examples/bench_work_overhead.py --slot-ms 1 --hyperperiods 500 --components 8

Build the package in release mode for meaningful numbers (``pip install ./python`` or ``maturin develop -r``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy  # noqa: F401  (imported before the runs, so no slot pays for it)

import oversub


def config(components: int, slot_ms: float, buffer_kib: int) -> str:
    """`components` components on CPU 0, one slot of `slot_ms` each per table, a buffer each, all resident."""
    text = f'[platform]\ncapacity = "{components * buffer_kib + 64}KiB"\ncpus = 1\ngpus = 1\n'
    period = components * slot_ms
    for i in range(components):
        text += (
            f'\n[[component]]\nname = "c{i}"\nbudget_ms = {slot_ms}\nperiod_ms = {period}\ncpus = [0]\n'
            f'[[component.buffer]]\nname = "state"\nsize = "{buffer_kib}KiB"\n'
        )
    return text


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def touch(slot: oversub.Slot) -> None:
    slot.buffers["state"]


VARIANTS = {
    "rust no-op (oversub.NOOP)": oversub.NOOP,
    "python no-op": lambda slot: None,
    "python slot.buffers[...]": touch,
}


def measure(args: argparse.Namespace) -> dict:
    text = config(args.components, args.slot_ms, args.buffer_kib)
    names = [f"c{i}" for i in range(args.components)]
    out: dict = {
        "mode": args.mode,
        "components": args.components,
        "slot_ms": args.slot_ms,
        "hyperperiods": args.hyperperiods,
        "variants": {},
    }
    for label, fn in VARIANTS.items():
        samples: list[float] = []
        misses = 0
        for _ in range(args.repeat):
            r = oversub.run_schedule(
                text=text,
                mode=args.mode,
                hyperperiods=args.hyperperiods,
                warmup=args.warmup,
                bandwidths=(2e9, 2e9),
                settle_s=0.0,
                pin_threads=args.pin_threads,
                work={n: fn for n in names},
            )
            counted = [s for s in r["slots"] if s["hyperperiod"] >= r["warmup_hyperperiods"]]
            samples += [s["work_s"] * 1e6 for s in counted]
            misses += r["deadline_misses"]
        out["variants"][label] = {
            "slots": len(samples),
            "median_us": statistics.median(samples),
            "p99_us": percentile(samples, 99),
            "mean_us": statistics.fmean(samples),
            "max_us": max(samples),
            "deadline_misses": misses,
        }
    base = out["variants"]["rust no-op (oversub.NOOP)"]
    for v in out["variants"].values():
        v["median_over_rust_us"] = v["median_us"] - base["median_us"]
        v["p99_over_rust_us"] = v["p99_us"] - base["p99_us"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--components", type=int, default=4, help="components (slots per table), default 4")
    p.add_argument("--slot-ms", type=float, default=2.0, help="slot length, ms (default 2)")
    p.add_argument("--hyperperiods", type=int, default=250, help="counted repetitions per run (default 250)")
    p.add_argument("--warmup", type=int, default=5, help="repetitions not counted (default 5)")
    p.add_argument("--repeat", type=int, default=1, help="runs per variant, samples pooled (default 1)")
    p.add_argument("--buffer-kib", type=int, default=64, help="each component's buffer, KiB (default 64)")
    p.add_argument("--mode", default="async", choices=["async", "sync", "demand"])
    p.add_argument("--pin-threads", action="store_true", help="pin the lane's thread to its CPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    out = measure(args)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"per-slot work_s, {args.mode} mode, {args.components} components x {args.slot_ms} ms slots, "
        f"{args.hyperperiods * args.repeat} counted tables per variant"
    )
    head = f"{'variant':<28}{'slots':>7}{'median us':>11}{'p99 us':>10}{'mean us':>10}{'max us':>10}"
    head += f"{'+median':>10}{'+p99':>10}{'misses':>8}"
    print(head)
    print("-" * len(head))
    for label, v in out["variants"].items():
        print(
            f"{label:<28}{v['slots']:>7}{v['median_us']:>11.1f}{v['p99_us']:>10.1f}{v['mean_us']:>10.1f}"
            f"{v['max_us']:>10.1f}{v['median_over_rust_us']:>10.1f}{v['p99_over_rust_us']:>10.1f}"
            f"{v['deadline_misses']:>8}"
        )
    print("(+median, +p99: over the Rust no-op)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
