"""Benchmarks of the Python binding: ``python -m oversub.bench overhead --help``.

``overhead`` measures what a call from Python adds to a paging operation: many small buffers are paged out and in
by a Python loop (``buf.page_out()``, ``buf.page_in()``) and by the same loop in Rust calling the pager directly, in
the same run, alternating, on the same buffers. The difference per operation is the binding's overhead (argument
conversion, the GIL released and taken back around the wait, the view-count check, the exception machinery).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time

from . import _oversub
from ._oversub import Pool


def _python_loop(bufs, rounds: int) -> tuple[float, float, int]:
    """(wall seconds, this thread's CPU seconds, operations)."""
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(rounds):
        for b in bufs:
            b.page_out()
        for b in bufs:
            b.page_in()
    return time.perf_counter() - start, time.thread_time() - cpu, 2 * rounds * len(bufs)


def _rust_loop(bufs, rounds: int) -> tuple[float, float, int]:
    # The Rust loop runs in this thread (the GIL is released, the thread stays), so thread_time covers it.
    cpu = time.thread_time()
    wall, ops = _oversub._rust_paging_loop(bufs, rounds)
    return wall, time.thread_time() - cpu, ops


def overhead(
    buffers: int = 1000,
    size: str | int = "4KiB",
    rounds: int = 3,
    trials: int = 7,
    store: str | None = None,
    host_tier: bool = False,
    chunk: int = 50,
) -> dict:
    """Per-operation time of page_out/page_in from Python and from Rust on the same buffers; returns a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Pool(1 << 20, store=store or tmp)
        one = probe.address_space().alloc(size)
        reserved = one.info()["reserved_bytes"]
        del one, probe
        capacity = reserved * buffers + (1 << 20)
        pool = Pool(
            capacity,
            store=store or tmp,
            store_capacity=max(2 * capacity, 64 << 20),
            host_tier=(capacity + (1 << 20)) if host_tier else None,
        )
        space = pool.address_space()
        bufs = [space.alloc(size) for _ in range(buffers)]
        # Warm up both paths (first store writes, page faults on first touch).
        _python_loop(bufs, 1)
        _rust_loop(bufs, 1)
        # Paired, fine-grained alternation: each chunk of buffers is paged by Python, then by Rust, so drift in
        # the machine (a VM's stolen time, the store's write-back) falls on both sides of each pair alike.
        py_us, rust_us, diff_us = [], [], []
        py_cpu_us, rust_cpu_us, diff_cpu_us = [], [], []
        for _ in range(trials):
            for i in range(0, buffers, chunk):
                part = bufs[i : i + chunk]
                ps, pc, pn = _python_loop(part, rounds)
                rs, rc, rn = _rust_loop(part, rounds)
                py_us.append(ps / pn * 1e6)
                rust_us.append(rs / rn * 1e6)
                diff_us.append(py_us[-1] - rust_us[-1])
                py_cpu_us.append(pc / pn * 1e6)
                rust_cpu_us.append(rc / rn * 1e6)
                diff_cpu_us.append(py_cpu_us[-1] - rust_cpu_us[-1])
        diff_us.sort()
        diff_cpu_us.sort()
        return {
            "buffers": buffers,
            "size_bytes": reserved,
            "ops_per_side_of_pair": 2 * rounds * min(chunk, buffers),
            "trials": trials,
            "tier": "host memory" if host_tier else "store",
            "transfer_path": pool.transfer_path,
            "python_us_per_op": statistics.median(py_us),
            "rust_us_per_op": statistics.median(rust_us),
            "overhead_us_per_op": statistics.median(diff_us),  # median of the paired differences
            # The same on the calling thread's CPU time: what the binding adds to the caller's work, without the
            # waits for the I/O side's wake-ups, whose jitter dominates wall time on a VM.
            "python_cpu_us_per_op": statistics.median(py_cpu_us),
            "rust_cpu_us_per_op": statistics.median(rust_cpu_us),
            "overhead_cpu_us_per_op": statistics.median(diff_cpu_us),
            "overhead_cpu_us_q1": diff_cpu_us[len(diff_cpu_us) // 4],
            "overhead_cpu_us_q3": diff_cpu_us[(3 * len(diff_cpu_us)) // 4],
            # the middle half of the paired differences
            "overhead_us_q1": diff_us[len(diff_us) // 4],
            "overhead_us_q3": diff_us[(3 * len(diff_us)) // 4],
            "pairs": len(diff_us),
            "target_us": 5.0,
            "met": statistics.median(diff_us) < 5.0 and statistics.median(diff_cpu_us) < 5.0,
        }


def _table(rows: list[dict]) -> str:
    head = [
        "paged to",
        "size",
        "python µs/op",
        "rust µs/op",
        "overhead µs/op (IQR)",
        "cpu: python",
        "rust",
        "overhead (IQR)",
        "pairs",
        "< 5 µs",
    ]
    lines = [head]
    for r in rows:
        lines.append(
            [
                r["tier"],
                f"{r['size_bytes']} B",
                f"{r['python_us_per_op']:.2f}",
                f"{r['rust_us_per_op']:.2f}",
                f"{r['overhead_us_per_op']:.2f} ({r['overhead_us_q1']:.2f}..{r['overhead_us_q3']:.2f})",
                f"{r['python_cpu_us_per_op']:.2f}",
                f"{r['rust_cpu_us_per_op']:.2f}",
                f"{r['overhead_cpu_us_per_op']:.2f} ({r['overhead_cpu_us_q1']:.2f}..{r['overhead_cpu_us_q3']:.2f})",
                str(r["pairs"]),
                "met" if r["met"] else "MISSED",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = []
    for i, row in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oversub.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ov = sub.add_parser(
        "overhead",
        help="what a Python call adds to a paging operation, against Rust in the same run",
        description=__doc__.split("\n\n")[1],
    )
    ov.add_argument("--buffers", type=int, default=1000, help="small buffers paged per round (default 1000)")
    ov.add_argument("--size", default="4KiB", help="size of each buffer (default 4KiB)")
    ov.add_argument("--rounds", type=int, default=3, help="out+in rounds per trial (default 3)")
    ov.add_argument("--trials", type=int, default=7, help="passes over all buffers (default 7)")
    ov.add_argument(
        "--chunk", type=int, default=50, help="buffers per Python/Rust pair; medians of the pairs reported"
    )
    ov.add_argument("--store", default=None, help="directory for the swap store (default: a temporary one)")
    ov.add_argument(
        "--tier",
        choices=["store", "host", "both"],
        default="both",
        help="page to the store (O_DIRECT file), to a host-memory tier, or both (default)",
    )
    ov.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    tiers = {"store": [False], "host": [True], "both": [False, True]}[args.tier]
    rows = []
    for host_tier in tiers:
        print(f"measuring, paged to {'host memory' if host_tier else 'the store'}...", file=sys.stderr)
        rows.append(
            overhead(
                args.buffers, args.size, args.rounds, args.trials, args.store, host_tier=host_tier, chunk=args.chunk
            )
        )
    print(_table(rows))
    print(
        "\nwall: per operation, medians of paired chunks; cpu: the calling thread's CPU time (time.thread_time) "
        "per operation"
    )
    print(f"\n{platform.python_implementation()} {platform.python_version()} on {platform.machine()}")
    if args.json:
        text = json.dumps({"overhead": rows}, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
