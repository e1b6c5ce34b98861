#!/usr/bin/env python3
"""A model whose weights do not fit the pool, run layer by layer: prefetch (foreknowledge) against on demand.

The weights of every layer are read-only buffers, written to the swap store once. Only a few layers fit the pool,
so each forward pass pages the weights in layer by layer. Two runs, in the same process, on the same weights:

* on demand: page the layer in when it is needed, compute, page it out (read-only: just give the memory back);
* foreknowledge: the layer order is known, so the next layer's page-in is started before the current layer
  computes, and is (mostly) done by the time it is needed.

Compute per layer is calibrated to ``--compute-ratio`` times the measured paging time per layer (1.0: compute
equals paging, where the paper's analysis says prefetching can hide all of it). The report gives both runs' times,
the paging time each layer waited for, and the share of paging the prefetch hid (target: at least 80% when compute
per layer is at least the paging time per layer).

Runs on the CPU with NumPy (or PyTorch with ``--framework torch``), and on a GPU with ``--device cuda`` (PyTorch,
zero-copy through ``__cuda_array_interface__``)::

    python python/examples/layer_by_layer.py                       # 16 layers of 16 MiB, pool of 4 layers
    python python/examples/layer_by_layer.py --device cuda --layers 32 --layer-size 256MiB --capacity 1GiB
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import oversub


class Compute:
    """One layer's work: ``x = tanh(x @ W)``, repeated ``repeats`` times, on NumPy, torch-CPU or torch-CUDA."""

    def __init__(self, framework: str, device: str, dim: int, batch: int):
        self.framework, self.device, self.dim, self.batch = framework, device, dim, batch
        if framework == "torch":
            import torch

            self.torch = torch
            if device != "cuda" and os.environ.get("OPENBLAS_NUM_THREADS") == "1":
                torch.set_num_threads(1)  # as for NumPy: the other core is the pager's
            self.x0 = torch.randn(batch, dim, device="cuda" if device == "cuda" else "cpu") * 0.01
        else:
            import numpy as np

            self.np = np
            self.x0 = (np.random.default_rng(0).standard_normal((batch, dim)) * 0.01).astype(np.float32)

    def weights(self, buf: oversub.Buffer):
        """A zero-copy view of a resident weight buffer as a (dim, dim) float32 matrix."""
        if self.device == "cuda":
            t = self.torch.as_tensor(buf, device="cuda")  # __cuda_array_interface__: uint8, no copy
            return t[: self.dim * self.dim * 4].view(self.torch.float32).view(self.dim, self.dim)
        arr = buf.numpy("float32", (self.dim, self.dim))
        return self.torch.from_numpy(arr) if self.framework == "torch" else arr

    def layer(self, x, w, repeats: int):
        for _ in range(repeats):
            if self.framework == "torch":
                x = self.torch.tanh(x @ w)
            else:
                x = self.np.tanh(x @ w)
        return x

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def build(space: oversub.AddressSpace, layers: int, layer_bytes: int, dim: int, seed: int = 1):
    """Allocates the read-only weight buffers, fills them, and pages each out (stored once) before the next."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = []
    for _ in range(layers):
        buf = space.alloc(layer_bytes, read_only=True)
        w = (rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32)
        if buf.device == "host":
            buf.numpy("float32", (dim, dim))[:] = w
        else:
            buf.write(w.tobytes())
        buf.page_out()
        weights.append(buf)
    return weights


def on_demand(weights, compute: Compute, repeats: int, passes: int) -> dict:
    """Each layer paged in when needed: paging and compute in series."""
    paging_s = compute_s = 0.0
    start = time.perf_counter()
    x = compute.x0
    for _ in range(passes):
        for buf in weights:
            t0 = time.perf_counter()
            buf.page_in()
            t1 = time.perf_counter()
            w = compute.weights(buf)
            x = compute.layer(x, w, repeats)
            compute.sync()
            del w
            t2 = time.perf_counter()
            buf.page_out()  # read-only and stored: the memory is given back, nothing is written
            paging_s += (t1 - t0) + (time.perf_counter() - t2)
            compute_s += t2 - t1
    return {"total_s": time.perf_counter() - start, "paging_s": paging_s, "compute_s": compute_s, "out": x}


def foreknowledge(weights, compute: Compute, repeats: int, passes: int) -> dict:
    """The next layer's page-in starts before the current layer computes; waits measure the paging not hidden."""
    order = [buf for _ in range(passes) for buf in weights]
    wait_s = compute_s = release_s = start_s = 0.0
    start = time.perf_counter()
    x = compute.x0
    pending = order[0].page_in_async()
    for i, buf in enumerate(order):
        t0 = time.perf_counter()
        pending.wait()
        t1 = time.perf_counter()
        if i + 1 < len(order):
            pending = order[i + 1].page_in_async()
        t_started = time.perf_counter()
        start_s += t_started - t1  # starting the read is paging work on the critical path, not compute
        w = compute.weights(buf)
        x = compute.layer(x, w, repeats)
        compute.sync()
        del w
        t2 = time.perf_counter()
        buf.page_out()
        release_s += time.perf_counter() - t2
        wait_s += t1 - t0
        compute_s += t2 - t_started
    return {
        "total_s": time.perf_counter() - start,
        "wait_s": wait_s,
        "start_s": start_s,
        "release_s": release_s,
        "exposed_paging_s": wait_s + start_s + release_s,
        "compute_s": compute_s,
        "out": x,
    }


def calibrate(weights, compute: Compute, ratio: float) -> tuple[int, int, float, float]:
    """Measures paging per layer (page-in + release) and one repeat of compute at the starting batch; picks the
    repeats and the batch (compute scales with it) that make compute ``ratio`` times the paging."""
    paging, per_repeat = [], []
    for buf in weights[: min(4, len(weights))]:
        t0 = time.perf_counter()
        buf.page_in()
        t1 = time.perf_counter()
        w = compute.weights(buf)
        compute.layer(compute.x0, w, 1)  # warm-up
        compute.sync()
        t2 = time.perf_counter()
        compute.layer(compute.x0, w, 3)
        compute.sync()
        t3 = time.perf_counter()
        del w
        buf.page_out()
        paging.append((t1 - t0) + (time.perf_counter() - t3))
        per_repeat.append((t3 - t2) / 3)
    paging.sort()
    per_repeat.sort()
    paging_s = paging[len(paging) // 2]
    repeat_s = per_repeat[len(per_repeat) // 2]
    target_s = ratio * paging_s
    repeats = max(1, int(target_s // repeat_s))
    batch = max(1, round(compute.batch * target_s / (repeats * repeat_s)))
    return repeats, batch, paging_s, repeat_s


def run(
    layers: int = 16,
    layer_size: int = 16 << 20,
    capacity: int | None = None,
    device: str = "host",
    framework: str = "numpy",
    compute_ratio: float = 1.0,
    passes: int = 3,
    batch: int = 64,
    store: str | None = None,
) -> dict:
    """Builds the model, calibrates compute, runs both modes; returns the figures (no printing)."""
    dim = int((layer_size // 4) ** 0.5)
    capacity = capacity or 4 * layer_size
    with tempfile.TemporaryDirectory() as tmp:
        pool = oversub.Pool(
            capacity,
            store=store or tmp,
            device=device,
            store_capacity=layers * layer_size + 4 * layer_size + (64 << 20),
        )
        space = pool.address_space()
        compute = Compute(framework, device, dim, batch)
        weights = build(space, layers, layer_size, dim)
        repeats, batch, _, _ = calibrate(weights, compute, compute_ratio)
        compute = Compute(framework, device, dim, batch)
        demand = on_demand(weights, compute, repeats, passes)
        fk = foreknowledge(weights, compute, repeats, passes)
        same = _same(compute, demand.pop("out"), fk.pop("out"))
        n = layers * passes
        paging_s = demand["paging_s"]
        hidden = 1.0 - fk["exposed_paging_s"] / paging_s if paging_s > 0 else 0.0
        return {
            "layers": layers,
            "layer_bytes": layer_size,
            "model_bytes": layers * layer_size,
            "pool_capacity_bytes": capacity,
            "oversubscription": layers * layer_size / capacity,
            "device": device,
            "framework": framework,
            "transfer_path": pool.transfer_path,
            "passes": passes,
            "repeats_per_layer": repeats,
            "batch": batch,
            "paging_per_layer_s": paging_s / n,
            "compute_per_layer_s": demand["compute_s"] / n,
            "compute_to_paging": (demand["compute_s"] / paging_s) if paging_s > 0 else float("inf"),
            "on_demand": demand,
            "foreknowledge": fk,
            "speedup": demand["total_s"] / fk["total_s"],
            "paging_hidden": hidden,
            # The same share judged by end-to-end time: lower when the paging slows the compute down (on a
            # 2-core machine the I/O and the matmuls share the CPU; on a GPU they do not).
            "paging_hidden_by_total": (demand["total_s"] - fk["total_s"]) / paging_s if paging_s > 0 else 0.0,
            "target_hidden": 0.8,
            "met": hidden >= 0.8 if demand["compute_s"] >= paging_s else None,
            "same_output": same,
        }


def _same(compute: Compute, a, b) -> bool:
    if compute.framework == "torch":
        return bool(compute.torch.allclose(a, b))
    return bool(compute.np.allclose(a, b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=16, help="layers in the model (default 16)")
    p.add_argument("--layer-size", default="16MiB", help="bytes of weights per layer (default 16MiB)")
    p.add_argument("--capacity", default=None, help="pool capacity (default: 4 layers)")
    p.add_argument("--device", choices=["host", "cuda"], default="host", help="host (CPU) or cuda (needs torch)")
    p.add_argument("--framework", choices=["numpy", "torch"], default=None, help="default numpy; torch for cuda")
    p.add_argument(
        "--compute-ratio",
        type=float,
        default=1.0,
        help="compute per layer as a multiple of the paging time per layer (default 1.0)",
    )
    p.add_argument("--passes", type=int, default=3, help="forward passes per run (default 3)")
    p.add_argument("--batch", type=int, default=64, help="activation rows to calibrate with (default 64)")
    p.add_argument("--store", default=None, help="directory for the swap store (default: a temporary one)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON ('-' for stdout)")
    a = p.parse_args(argv)
    framework = a.framework or ("torch" if a.device == "cuda" else "numpy")
    if a.device == "cuda" and framework != "torch":
        p.error("--device cuda computes with PyTorch: use --framework torch")
    r = run(
        layers=a.layers,
        layer_size=oversub.parse_size(a.layer_size),
        capacity=oversub.parse_size(a.capacity) if a.capacity else None,
        device=a.device,
        framework=framework,
        compute_ratio=a.compute_ratio,
        passes=a.passes,
        batch=a.batch,
        store=a.store,
    )
    mib = 1 << 20
    print(
        f"model {r['model_bytes'] // mib} MiB in {r['layers']} read-only layers, pool {r['pool_capacity_bytes'] // mib}"
        f" MiB ({r['oversubscription']:.1f}x oversubscribed), {r['device']}/{r['framework']}, path "
        f"{r['transfer_path']}, {r['passes']} passes"
    )
    print(
        f"per layer: paging {r['paging_per_layer_s'] * 1e3:.1f} ms, compute {r['compute_per_layer_s'] * 1e3:.1f} ms"
        f" ({r['repeats_per_layer']} x matmul of batch {r['batch']}; compute/paging {r['compute_to_paging']:.2f})\n"
    )
    d, f = r["on_demand"], r["foreknowledge"]
    rows = [
        ("run", "total s", "paging not hidden s", "compute s"),
        ("on demand", f"{d['total_s']:.3f}", f"{d['paging_s']:.3f}", f"{d['compute_s']:.3f}"),
        ("foreknowledge", f"{f['total_s']:.3f}", f"{f['exposed_paging_s']:.3f}", f"{f['compute_s']:.3f}"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(widths[j]) for j, c in enumerate(row)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    verdict = {True: "met", False: "MISSED", None: "n/a (compute < paging)"}[r["met"]]
    print(
        f"\nprefetch hid {r['paging_hidden'] * 100:.1f}% of the paging time (target >= 80%: {verdict}); "
        f"by end-to-end time {r['paging_hidden_by_total'] * 100:.1f}%; speed-up {r['speedup']:.2f}x; "
        f"same output: {r['same_output']}"
    )
    if a.json:
        text = json.dumps(r, indent=2)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as fh:
                fh.write(text + "\n")
    return 0 if r["same_output"] else 1


if __name__ == "__main__":
    # One BLAS thread leaves the other core to the pager's I/O, as a GPU leaves the CPU to the copies.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
