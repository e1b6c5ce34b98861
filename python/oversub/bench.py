"""Benchmarks of the Python binding: ``python -m oversub.bench overhead --help``, ``python -m oversub.bench offload``.

``overhead`` measures what a call from Python adds to a paging operation: many small buffers are paged out and in
by a Python loop (``buf.page_out()``, ``buf.page_in()``) and by the same loop in Rust calling the pager directly, in
the same run, alternating, on the same buffers. The difference per operation is the binding's overhead (argument
conversion, the GIL released and taken back around the wait, the view-count check, the exception machinery).

``offload`` runs one model whose weights do not fit the memory it is given (24 x 64 MiB ``nn.Linear`` blocks, and a
randomly initialised transformer from a ``transformers`` config when that is installed) with oversub.torch (on
demand, and with the order learned from the first pass) and with its peers (DeepSpeed ZeRO-3 NVMe parameter offload,
accelerate's disk offload and its safetensors offload index, diffusers' group offloading to disk, an mmap'd
safetensors file) beside all weights resident, each in its own process, the page cache dropped before every pass.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from . import _oversub
from ._oversub import Pool
from ._oversub import parse_size as _parse_size


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


# --- offload: oversub.torch beside its peers ---------------------------------------------------------------------------

_OFFLOAD_METHODS = {
    "resident": "all weights resident (the floor)",
    "oversub-demand": "oversub.torch, lookahead=0 (on demand)",
    "oversub-learned": "oversub.torch, order learned from the first pass (on a GPU: host_memory='auto', the host tier)",
    "oversub-store": "oversub.torch, order learned, host_memory=0: every page-in from the store (GPU only)",
    "deepspeed-zero3-nvme": "DeepSpeed ZeRO-3, offload_param nvme (CPU accelerator, one gloo process)",
    "accelerate-disk": "accelerate disk_offload (np.memmap per weight)",
    "accelerate-safetensors": "accelerate device_map='disk' with the safetensors file as offload index",
    "diffusers-group-disk": "diffusers group offloading, block level, offload_to_disk_path",
    "mmap-safetensors": "the safetensors file mmap'd, tensors viewing the mapping",
    "accelerate-auto": "transformers from_pretrained(device_map='auto', max_memory={'cpu': capacity} (on a GPU "
                       "{device: capacity}, the rest in CPU RAM), offload_folder): accelerate's big-model inference "
                       "as its docs recommend",
    "accelerate-cpu-offload": "accelerate cpu_offload: every weight in CPU RAM, moved to the GPU by each module's "
                              "hook (GPU only)",
    "double-buffer": "a hand-written double buffer: decoder layers in pinned host memory, two device slots, the next "
                     "layer copied on a side stream while the current one computes (what the bus allows; "
                     "transformer models)",
}
# The methods a generate run (--models generate) compares by default: the others page in a way generate does not
# change (the forward rows cover them). On a GPU, issue 34's rows: the host tier and the store, the bus's
# reference (the double buffer) and accelerate's two ways to keep weights in CPU RAM.
_GENERATE_METHODS = ("resident", "oversub-demand", "oversub-learned", "accelerate-auto")
_GENERATE_METHODS_GPU = ("resident", "oversub-learned", "oversub-store", "double-buffer", "accelerate-auto",
                         "accelerate-cpu-offload")
_MIB = 1 << 20
# Methods that cannot compute on a GPU as set up here, with the reason the table gives.
_HOST_ONLY = {
    "deepspeed-zero3-nvme": "set up on DeepSpeed's CPU accelerator with gloo; on a GPU it needs its CUDA engine and "
                            "launcher, not this harness",
    "mmap-safetensors": "an mmap'd file is host memory: a GPU cannot compute on it without a copy per layer",
}


class _Skip(Exception):
    """A method that does not apply to this setting (the reason goes into the table)."""


def _offload_parser(sub) -> None:
    op = sub.add_parser(
        "offload",
        help="oversub.torch against DeepSpeed, accelerate, diffusers and mmap on a model that does not fit",
        description=__doc__.split("\n\n")[2],
    )
    op.add_argument("--models", default="linear,transformer",
                    help="comma list of linear, transformer, generate (default linear,transformer; the last two need "
                         "`transformers`). generate: the transformer (a LlamaForCausalLM from a config, random "
                         "weights, written with save_pretrained) timed on a greedy generate of --gen-tokens tokens "
                         "with the KV cache, each pass one generate; methods default to "
                         + ", ".join(_GENERATE_METHODS))
    op.add_argument("--layers", type=int, default=24, help="linear: blocks (default 24)")
    op.add_argument("--layer-size", default="64MiB", help="linear: bytes of one block's weight (default 64MiB)")
    op.add_argument("--batch", type=int, default=64, help="linear: rows of the input (default 64)")
    op.add_argument("--tf-layers", type=int, default=24, help="transformer: decoder layers (default 24)")
    op.add_argument("--tf-hidden", type=int, default=1024, help="transformer: hidden size (default 1024)")
    op.add_argument("--tf-intermediate", type=int, default=4096, help="transformer: MLP size (default 4096)")
    op.add_argument("--tf-vocab", type=int, default=32000, help="transformer: vocabulary (default 32000)")
    op.add_argument("--tf-tokens", type=int, default=256, help="transformer: tokens of the input (default 256)")
    op.add_argument("--capacity-layers", type=float, default=4.0,
                    help="memory given to the offloading methods, in layers (default 4)")
    op.add_argument("--capacity-fraction", type=float, default=None,
                    help="memory given to the offloading methods as a fraction of the checkpoint (overrides "
                         "--capacity-layers; e.g. 0.333 for a third)")
    op.add_argument("--gen-tokens", type=int, default=16, help="generate: new tokens per pass (default 16)")
    op.add_argument("--gen-prompt", type=int, default=8, help="generate: tokens of the prompt (default 8)")
    op.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                    help="transformer, generate: the weights' dtype (default float32; float16 as models run on a GPU)")
    op.add_argument("--memory-limit", default=None,
                    help="run each method's process in a memory cgroup with this limit (e.g. 1.5GiB; cgroup v1 "
                         "memory.limit_in_bytes or v2 memory.max, swap capped too; needs root). Page cache counts "
                         "against it, so a method reading through the page cache keeps only what fits")
    op.add_argument("--passes", type=int, default=5, help="timed passes after a first, untimed one (default 5)")
    op.add_argument("--store", default="/var/tmp" if os.path.isdir("/var/tmp") else None,
                    help="directory for the checkpoint, the stores and the offload folders (default /var/tmp)")
    op.add_argument("--methods", default=None,
                    help="comma list of methods (default all but accelerate-auto, accelerate-cpu-offload and "
                         "double-buffer; for generate: " + ", ".join(_GENERATE_METHODS) + ", on a GPU "
                         + ", ".join(_GENERATE_METHODS_GPU) + "): " + ", ".join(_OFFLOAD_METHODS))
    op.add_argument("--lookahead", default="auto", help="oversub-learned's lookahead (default auto)")
    op.add_argument("--ds-aio", default="262144,32",
                    help="DeepSpeed's aio block_size,queue_depth (default 262144,32: the NVMe example of "
                         "transformers' DeepSpeed guide; DeepSpeed's own defaults are 1048576,8)")
    op.add_argument("--host-memory", default="auto",
                    help="oversub-learned's and oversub-demand's host_memory (default auto; a size below the weights' "
                         "makes the disk-bound row: the rest pages from the store)")
    op.add_argument("--no-checksums", action="store_true",
                    help="oversub without checksum verification on page-in (default: on, as oversub's default)")
    op.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every method (default 1)")
    op.add_argument("--device", default="cpu",
                    help="where the model computes: cpu (default) or cuda[:N]; on a GPU the weights are paged to the "
                         "device and methods that only run on the host (mmap, DeepSpeed on the CPU) are skipped")
    op.add_argument("--no-drop-caches", action="store_true", help="keep the page cache between passes")
    op.add_argument("--timeout", type=float, default=900, help="seconds a method may take (default 900)")
    op.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' for stdout)")
    op.add_argument("--keep-files", action="store_true", help="keep the checkpoint and offload folders")
    op.add_argument("--worker", help=argparse.SUPPRESS)
    op.add_argument("--work", help=argparse.SUPPRESS)
    op.add_argument("--model", help=argparse.SUPPRESS)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- the models (in the workers) --

@contextlib.contextmanager
def _params_on_meta():
    """Parameters made on the meta device (no memory, no initialisation), buffers as usual (a rotary embedding's
    frequencies are not in a checkpoint): accelerate's ``init_empty_weights()``, without accelerate."""
    import torch
    from torch import nn

    register = nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        with torch.device("cpu"):
            yield
    finally:
        nn.Module.register_parameter = register


def _build_model(spec: dict, on_meta: bool = False):
    import torch
    from torch import nn

    ctx = _params_on_meta() if on_meta else contextlib.nullcontext()
    if spec["kind"] == "linear":

        class Block(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.lin = nn.Linear(d, d)

            def forward(self, x):
                return torch.tanh(self.lin(x))

        class LinearStack(nn.Module):
            def __init__(self, n, d):
                super().__init__()
                self.blocks = nn.ModuleList([Block(d) for _ in range(n)])

            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return x

        with ctx:
            return LinearStack(spec["layers"], spec["dim"])
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=spec["hidden"], intermediate_size=spec["intermediate"],
                      num_hidden_layers=spec["layers"], num_attention_heads=spec["hidden"] // 64,
                      num_key_value_heads=spec["hidden"] // 64, vocab_size=spec["vocab"],
                      max_position_embeddings=max(2048, spec["tokens"]), tie_word_embeddings=False,
                      use_cache=spec["kind"] == "generate")
    with ctx:
        return LlamaForCausalLM(cfg).to(getattr(torch, spec.get("dtype", "float32"))).eval()


def _forward(spec: dict, model, inp):
    if spec["kind"] == "linear":
        return model(inp)
    if spec["kind"] == "generate":
        import torch

        n = spec["gen_tokens"]
        return model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), max_new_tokens=n,
                              min_new_tokens=n, do_sample=False)
    return model(input_ids=inp, use_cache=False).logits


def _prepare(spec: dict, work: str) -> None:
    """Builds the model with its seed, writes its checkpoint (parameters and buffers) and the input."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(spec["seed"])
    model = _build_model(spec)
    if spec["kind"] == "generate":
        # As a user's checkpoint: config.json, generation_config.json and one model.safetensors (persistent
        # tensors only), what from_pretrained and oversub read.
        model.save_pretrained(work, max_shard_size="1000GB")
    else:
        tensors = {n: t.detach().contiguous() for n, t in model.named_parameters()}
        tensors.update({n: t.detach().contiguous() for n, t in model.named_buffers()})
        save_file(tensors, os.path.join(work, "model.safetensors"))
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    if spec["kind"] == "linear":
        inp = torch.randn(spec["batch"], spec["dim"], generator=g)
    elif spec["kind"] == "generate":
        inp = torch.randint(0, spec["vocab"], (1, spec["gen_prompt"]), generator=g)
    else:
        inp = torch.randint(0, spec["vocab"], (1, spec["tokens"]), generator=g)
    torch.save(inp, os.path.join(work, "input.pt"))


def _drop_caches(files: list[str]) -> str:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError:
        for path in files:
            for root, _, names in os.walk(path) if os.path.isdir(path) else [("", None, [path])]:
                for name in names:
                    try:
                        fd = os.open(os.path.join(root, name), os.O_RDONLY)
                    except OSError:
                        continue
                    try:
                        os.fdatasync(fd)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    except OSError:
                        pass
                    finally:
                        os.close(fd)
        return "posix_fadvise"


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _load_from_checkpoint(model, path: str) -> None:
    """Fills a model built on meta from the checkpoint (the whole model in memory: for the resident methods)."""
    from safetensors.torch import load_file
    from torch import nn

    sd = load_file(path)
    for qual, mod in model.named_modules():
        for d, is_param in ((mod._parameters, True), (mod._buffers, False)):
            for name, t in list(d.items()):
                key = f"{qual}.{name}" if qual else name
                if t is not None and key in sd:
                    d[name] = nn.Parameter(sd.pop(key), requires_grad=False) if is_param else sd.pop(key)


def _setup(method: str, spec: dict, work: str, ckpt: str):
    """Returns (module to call, files to drop from the page cache, hooks before each pass, info)."""
    import torch

    capacity = int(spec["capacity"])
    dev = torch.device(spec.get("device", "cpu"))
    if dev.type == "cuda" and method in _HOST_ONLY:
        raise _Skip(_HOST_ONLY[method])
    if dev.type != "cuda" and method == "oversub-store":
        raise _Skip("on the CPU backend oversub-learned has no host tier either (host_memory='auto' is 0 there)")
    info: dict = {"t0": time.perf_counter()}  # reset where loading the weights starts
    before_pass: list = []
    if method == "resident":
        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        _load_from_checkpoint(model, ckpt)
        model.to(dev)
        return model, [ckpt], before_pass, info
    if method.startswith("oversub"):
        import oversub.torch as ot

        model = _build_model(spec, on_meta=True)
        store = os.path.join(work, f"store-{method}")
        os.makedirs(store, exist_ok=True)
        info["t0"] = time.perf_counter()
        la = spec["lookahead"]
        h = ot.offload(model, capacity=capacity, store=store, checkpoint=ckpt, device=str(dev),
                       lookahead=0 if method == "oversub-demand" else (la if la == "auto" else int(la)),
                       verify_checksums=spec["checksums"],
                       host_memory=0 if method == "oversub-store" else spec.get("host_memory", "auto"))
        info["config"] = {"capacity": capacity, "lookahead": "0" if method == "oversub-demand" else str(la),
                          "verify_checksums": spec["checksums"],
                          "host_memory": 0 if method == "oversub-store" else spec.get("host_memory", "auto")}
        info["groups"] = len(h.groups)
        info["kept_bytes"] = h.kept_bytes
        info["transfer_path"] = h.pool.transfer_path
        info["stats"] = lambda: {k: v for k, v in ot.stats(model).items()
                                 if k not in ("wait_s_per_group", "page_ins_per_group", "trace")}
        return model, [ckpt], before_pass, info
    if method == "deepspeed-zero3-nvme":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000), RANK="0",
                          WORLD_SIZE="1", LOCAL_RANK="0")
        import deepspeed
        from safetensors import safe_open

        nvme = os.path.join(work, "deepspeed-nvme")
        os.makedirs(nvme, exist_ok=True)
        probe = _build_model(spec, on_meta=True)
        largest = max(p.numel() for p in probe.parameters())
        layer = spec["layer_params"]
        del probe
        # As DeepSpeed's users are told to configure NVMe parameter offload (the ZeRO-3 NVMe example of
        # transformers' DeepSpeed guide, huggingface.co/docs/transformers/deepspeed, and DeepSpeed's config docs):
        # pinned swap buffers, aio with 256 KiB blocks at queue depth 32, one thread, overlapped events; the swap
        # buffers sized to the largest parameter and as many as the capacity holds (at least the example's 5);
        # prefetch one layer ahead (stage3_prefetch_bucket_size: a layer's parameters) and at most the capacity
        # live. Not tuned on this machine with DeepSpeed's ds_nvme_tune sweep (it takes hours here).
        cfg = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 3,
                "offload_param": {"device": "nvme", "nvme_path": nvme, "pin_memory": True,
                                  "buffer_count": max(5, int(spec["capacity_layers"]) + 1),
                                  "buffer_size": largest, "max_in_cpu": 0},
                "stage3_max_live_parameters": int(spec["capacity_layers"] * layer),
                "stage3_prefetch_bucket_size": int(layer),
                "stage3_max_reuse_distance": 0,
            },
            "aio": {"block_size": spec["ds_aio"][0], "queue_depth": spec["ds_aio"][1], "thread_count": 1,
                    "single_submit": False, "overlap_events": True},
        }
        info["config"] = {"zero_optimization": {k: v for k, v in cfg["zero_optimization"].items()},
                          "aio": cfg["aio"], "deepspeed": deepspeed.__version__}
        info["config"]["zero_optimization"]["offload_param"] = {
            k: v for k, v in cfg["zero_optimization"]["offload_param"].items() if k != "nvme_path"}
        import logging

        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        deepspeed.init_distributed(dist_backend="gloo")
        info["t0"] = time.perf_counter()  # zero.Init's partitioning to NVMe is its loading
        with deepspeed.zero.Init(config_dict_or_path=cfg, remote_device="nvme"):  # no dtype: it would be bf16
            torch.manual_seed(0)
            model = _build_model(spec)
        with safe_open(ckpt, framework="pt") as f, torch.no_grad():
            keys = set(f.keys())
            for name, p in model.named_parameters():
                with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                    p.data.copy_(f.get_tensor(name))
            for name, b in model.named_buffers():
                if name in keys:
                    b.data.copy_(f.get_tensor(name))
        engine, *_ = deepspeed.initialize(model=model, config=cfg)
        engine.eval()
        return engine, [ckpt, nvme], before_pass, info
    if method == "accelerate-disk":
        from accelerate import disk_offload

        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        _load_from_checkpoint(model, ckpt)
        folder = os.path.join(work, "accelerate-disk")
        disk_offload(model, folder, execution_device=dev)
        info["config"] = {"disk_offload": {"offload_dir": "<work>/accelerate-disk", "execution_device": str(dev)}}
        gc.collect()
        return model, [ckpt, folder], before_pass, info
    if method == "accelerate-safetensors":
        from accelerate import dispatch_model, init_empty_weights

        with init_empty_weights():
            model = _build_model(spec)
        info["t0"] = time.perf_counter()
        # The offload index transformers writes for a safetensors checkpoint: every weight read from the file
        # itself (safe_open + get_tensor in each module's pre-forward hook), nothing copied.
        index = {name: {"safetensors_file": ckpt, "weight_name": name, "dtype": str(p.dtype).replace("torch.", "")}
                 for name, p in model.named_parameters()}
        model = dispatch_model(model, device_map={"": "disk"}, main_device=str(dev), offload_index=index)
        info["config"] = {"dispatch_model": {"device_map": {"": "disk"}, "main_device": str(dev),
                                             "offload_index": "every weight from the checkpoint file"}}
        return model, [ckpt], before_pass, info
    if method == "diffusers-group-disk":
        from diffusers.hooks import apply_group_offloading

        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        _load_from_checkpoint(model, ckpt)
        folder = os.path.join(work, "diffusers-groups")
        apply_group_offloading(model, onload_device=dev, offload_device=torch.device("cpu"),
                               offload_type="block_level", num_blocks_per_group=1, offload_to_disk_path=folder)
        info["config"] = {"apply_group_offloading": {"offload_type": "block_level", "num_blocks_per_group": 1,
                                                     "offload_to_disk_path": "<work>/diffusers-groups"}}
        gc.collect()
        return model, [ckpt, folder], before_pass, info
    if method == "accelerate-auto":
        if spec["kind"] != "generate":
            raise _Skip("needs the save_pretrained folder that --models generate writes")
        from transformers import AutoModelForCausalLM

        folder = os.path.join(work, "accelerate-offload")
        # accelerate's big-model inference as its docs and transformers' recommend: device_map="auto" fills the
        # devices in order (here the CPU up to max_memory), the rest goes to "disk"; offload_folder is required
        # then, and for a safetensors checkpoint the disk weights are read from the checkpoint itself (an offload
        # index), not copied there.
        dtype = getattr(torch, spec.get("dtype", "float32"))
        if dev.type == "cuda":  # the device up to the capacity, the rest in CPU RAM (issue 34's row)
            host = 2 * os.path.getsize(ckpt) + (1 << 30)
            kw = dict(device_map="auto", max_memory={dev.index or 0: capacity, "cpu": host}, offload_folder=folder,
                      dtype=dtype)
        else:
            kw = dict(device_map="auto", max_memory={"cpu": capacity}, offload_folder=folder, dtype=dtype)
        info["t0"] = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(work, **kw)
        model.eval()
        placed = getattr(model, "hf_device_map", {})
        info["config"] = {"from_pretrained": {k: str(v) for k, v in kw.items()},
                          "modules_on": {d: sum(1 for v in placed.values() if str(v) == d)
                                         for d in sorted({str(v) for v in placed.values()})}}
        return model, [ckpt, folder], before_pass, info
    if method == "accelerate-cpu-offload":
        if dev.type != "cuda":
            raise _Skip("the weights are in CPU RAM already")
        from accelerate import cpu_offload

        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        _load_from_checkpoint(model, ckpt)
        cpu_offload(model, execution_device=dev)
        info["config"] = {"cpu_offload": {"execution_device": str(dev)}}
        return model, [ckpt], before_pass, info
    if method == "double-buffer":
        if spec["kind"] == "linear":
            raise _Skip("written for a transformer's decoder layers (--models transformer or generate)")
        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        _load_from_checkpoint(model, ckpt)
        db = _DoubleBuffer(model, dev)
        info["config"] = {"slots": 2, "slot_bytes": db.slot_bytes, "pinned": dev.type == "cuda",
                          "layers": len(db.layers)}
        return model, [ckpt], before_pass, info
    if method == "mmap-safetensors":
        import mmap

        from torch import nn

        from .torch import _read_safetensors_index

        model = _build_model(spec, on_meta=True)
        info["t0"] = time.perf_counter()
        index = _read_safetensors_index([ckpt])
        fd = os.open(ckpt, os.O_RDONLY)
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)  # private: torch wants a writable buffer; nothing is written
        os.close(fd)
        quals = {id(m): n for n, m in model.named_modules()}
        for mod in model.modules():
            for d, is_param in ((mod._parameters, True), (mod._buffers, False)):
                for name, t in list(d.items()):
                    if t is None:
                        continue
                    qual = quals[id(mod)]
                    e = index[f"{qual}.{name}" if qual else name]
                    v = torch.frombuffer(mm, dtype=e.dtype, count=max(1, e.nbytes // e.dtype.itemsize),
                                         offset=e.start).view(e.shape) if e.nbytes else torch.empty(e.shape)
                    d[name] = nn.Parameter(v, requires_grad=False) if is_param else v

        def forget():  # the pages of the last pass leave the mapping, as under memory pressure, then the cache
            mm.madvise(mmap.MADV_DONTNEED)

        before_pass.append(forget)
        info["note"] = "mapping's pages dropped (MADV_DONTNEED) before each pass, as under memory pressure"
        return model, [ckpt], before_pass, info
    raise ValueError(f"unknown method {method}")


class _DoubleBuffer:
    """Issue 34's hand-written reference, "what the bus allows": a transformer's decoder layers live in pinned host
    memory, one flat buffer each; two device slots hold two layers. Layer i's pre-hook makes the compute stream
    wait for its slot's copy (an event), points the layer's parameters into the slot, and starts copying layer i+1
    into the other slot on a side stream, once the compute stream has finished the layer that used it (another
    event). Everything else of the model (embeddings, norm, head) is resident on the device. On the CPU the copies
    are synchronous (a check of the hooks, not a method to time there)."""

    def __init__(self, model, dev):
        import torch

        self.dev, self.cuda = dev, dev.type == "cuda"
        base = getattr(model, "model", model)
        self.layers = list(base.layers)
        in_layers = {id(p) for layer in self.layers for p in layer.parameters()}
        for p in model.parameters():  # the rest is resident
            if id(p) not in in_layers:
                p.data = p.data.to(dev)
        for name, b in list(model.named_buffers()):
            mod = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            mod._buffers[name.rpartition(".")[2]] = b.to(dev)
        dtypes = {p.dtype for p in model.parameters()}
        if len(dtypes) != 1:
            raise _Skip(f"one dtype expected for the flat layer buffers, not {sorted(map(str, dtypes))}")
        dtype = dtypes.pop()
        self.host, self.entries = [], []
        for layer in self.layers:
            ps = list(layer.parameters())
            flat = torch.empty(sum(p.numel() for p in ps), dtype=dtype, pin_memory=self.cuda)
            off, entries = 0, []
            for p in ps:
                flat[off: off + p.numel()].copy_(p.data.reshape(-1))
                entries.append((p, off, p.numel(), p.shape))
                off += p.numel()
                p.data = torch.empty(0, dtype=dtype, device=dev)
            self.host.append(flat)
            self.entries.append(entries)
        most = max(len(h) for h in self.host)
        self.slot_bytes = most * self.host[0].element_size()
        self.slots = [torch.empty(most, dtype=dtype, device=dev) for _ in range(2)]
        self.copy_stream = torch.cuda.Stream(dev) if self.cuda else None
        self.copied: list = [None, None]  # the slot's copy is done
        self.freed: list = [None, None]  # the compute stream is past the slot's last layer
        self.loaded: list = [None, None]  # which layer a slot holds
        self.current = 1
        for i, layer in enumerate(self.layers):
            layer.register_forward_pre_hook(lambda mod, args, i=i: self._pre(i))
            layer.register_forward_hook(lambda mod, args, out, i=i: self._post(i))

    def _issue(self, j: int, t: int) -> None:
        import torch

        if self.loaded[t] == j:
            return
        n = len(self.host[j])
        if self.cuda:
            with torch.cuda.stream(self.copy_stream):
                if self.freed[t] is not None:
                    self.copy_stream.wait_event(self.freed[t])
                self.slots[t][:n].copy_(self.host[j], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self.copy_stream)
                self.copied[t] = ev
        else:
            self.slots[t][:n].copy_(self.host[j])
        self.loaded[t] = j

    def _pre(self, i: int) -> None:
        import torch

        s = self.loaded.index(i) if i in self.loaded else 1 - self.current
        self._issue(i, s)
        if self.cuda:
            torch.cuda.current_stream(self.dev).wait_event(self.copied[s])
        slot = self.slots[s]
        for p, off, n, shape in self.entries[i]:
            p.data = slot[off: off + n].view(shape)
        self.current = s
        self._issue((i + 1) % len(self.layers), 1 - s)

    def _post(self, i: int) -> None:
        import torch

        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.dev))
            self.freed[self.current] = ev


def _worker(args) -> int:
    work, method = args.work, args.worker
    with open(os.path.join(work, "spec.json")) as f:
        spec = json.load(f)
    if method == "prepare":
        _prepare(spec, work)
        return 0
    out_path = os.path.join(work, f"result-{method}.json")
    result: dict = {"method": method}
    try:
        import torch

        torch.set_num_threads(spec["threads"])
        ckpt = os.path.join(work, "model.safetensors")
        dev = torch.device(spec.get("device", "cpu"))
        inp = torch.load(os.path.join(work, "input.pt")).to(dev)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        if spec["drop_caches"]:
            _drop_caches([ckpt])  # also writes back what the last method left dirty
        t0 = time.perf_counter()
        try:
            model, files, before_pass, info = _setup(method, spec, work, ckpt)
        except ImportError as e:
            result["skipped"] = f"not installed ({e}); pip install 'oversub[torch-bench]'"
            raise SystemExit(0) from None
        except _Skip as e:
            result["skipped"] = f"not on {dev.type}: {e}"
            raise SystemExit(0) from None
        sync()
        t1 = time.perf_counter()
        result["setup_s"] = t1 - info.pop("t0")  # loading the weights until the first pass can run
        result["build_s"] = t1 - t0  # with the imports and building the model's skeleton
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child shows its parent's peak
        result["peak_rss_setup_bytes"] = _vm_hwm()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5\n")  # reset VmHWM: the peak of the passes alone
        times, reads, waits, dev_used = [], [], [], []
        out = None
        for i in range(spec["passes"] + 1):
            for fn in before_pass:
                fn()
            if spec["drop_caches"]:
                result["cache_drop"] = _drop_caches(files)
            r0 = _read_bytes()
            t = time.perf_counter()
            with torch.no_grad():
                out = _forward(spec, model, inp)
            sync()
            times.append(time.perf_counter() - t)
            if dev.type == "cuda":
                free, total = torch.cuda.mem_get_info(dev)
                dev_used.append(total - free)
            reads.append(_read_bytes() - r0)
            if "stats" in info:
                waits.append(info["stats"]()["last_pass"])
            _log(f"  {method} pass {i}: {times[-1]:.3f} s, {reads[-1] / _MIB:.0f} MiB read")
        if spec["kind"] == "generate" and spec["gen_tokens"] > 1:
            # Prefill alone: a generate of one token (the prompt's pass); decode per token is then the rest of a
            # pass over the other tokens (issue 34: generate N+1 minus generate 1, over N).
            one = dict(spec, gen_tokens=1)
            pre = []
            for i in range(max(1, spec["passes"])):
                for fn in before_pass:
                    fn()
                if spec["drop_caches"]:
                    _drop_caches(files)
                t = time.perf_counter()
                with torch.no_grad():
                    _forward(one, model, inp)
                sync()
                pre.append(time.perf_counter() - t)
            result["prefill_s"] = statistics.median(pre)
            result["decode_s_per_token"] = max(0.0, statistics.median(times[1:]) - result["prefill_s"]) / (
                spec["gen_tokens"] - 1)
            _log(f"  {method} prefill: {result['prefill_s']:.3f} s, decode {result['decode_s_per_token'] * 1000:.1f} "
                 "ms a token")
        out = out.detach().to("cpu").clone()
        torch.save(out, os.path.join(work, f"out-{method}.pt"))
        if dev_used:  # the whole device's use after each pass (oversub's VMM memory is not torch's allocator's)
            result["device_used_bytes"] = max(dev_used)
        result.update(
            first_pass_s=times[0],
            pass_s=times[1:],
            median_s=statistics.median(times[1:]),
            read_bytes=reads[1:],
            median_read_bytes=statistics.median(reads[1:]),
            peak_rss_passes_bytes=_vm_hwm(),
        )
        result["peak_rss_bytes"] = max(result["peak_rss_setup_bytes"], result["peak_rss_passes_bytes"])
        ref_path = os.path.join(work, "out-resident.pt")
        if os.path.exists(ref_path):
            ref = torch.load(ref_path)
            if torch.equal(out, ref):
                result["output"] = "equal"
            else:
                diff = float((out.float() - ref.float()).abs().max())
                # On a GPU the math library may pick another kernel for another weight address (alignment), so
                # results agree to rounding rather than bit for bit; on the CPU any difference is a failure.
                close = dev.type == "cuda" and torch.allclose(out.float(), ref.float(), rtol=1e-5, atol=1e-6)
                result["output"] = f"{'close' if close else 'differs'} (max {diff:.2g})"
        if "stats" in info:
            st = info.pop("stats")()
            result["oversub"] = {k: st[k] for k in ("paging_hidden", "lookahead", "hits", "page_ins_on_demand",
                                                    "page_ins_prefetched", "bytes_paged_in", "load_s",
                                                    "bytes_from_host_tier", "bytes_from_store", "host_tier_bytes",
                                                    "pinned_groups")}
            result["oversub"]["passes"] = waits
        result["info"] = info
    except SystemExit:
        pass
    except BaseException as e:  # noqa: BLE001 (the parent reports it as skipped with the reason)
        import traceback

        traceback.print_exc()
        result["skipped"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


def _offload_spec(args, kind: str) -> dict:
    if kind == "linear":
        dim = int((_parse_size(args.layer_size) // 4) ** 0.5)
        layer_bytes = dim * dim * 4 + dim * 4
        spec = dict(kind="linear", layers=args.layers, dim=dim, batch=args.batch, layer_params=dim * dim + dim)
    else:
        h, i = args.tf_hidden, args.tf_intermediate
        params = 4 * h * h + 3 * h * i + 2 * h
        itemsize = 4 if args.dtype == "float32" else 2
        layer_bytes = itemsize * params
        spec = dict(kind=kind, layers=args.tf_layers, hidden=h, intermediate=i, vocab=args.tf_vocab,
                    tokens=args.tf_tokens, layer_params=params, gen_tokens=args.gen_tokens,
                    gen_prompt=args.gen_prompt, dtype=args.dtype, itemsize=itemsize)
    spec["ds_aio"] = [int(v) for v in args.ds_aio.split(",")]
    spec["host_memory"] = args.host_memory if args.host_memory == "auto" else _parse_size(args.host_memory)
    spec.update(seed=1, threads=args.threads, device=args.device, lookahead=args.lookahead, checksums=not args.no_checksums, passes=args.passes, drop_caches=not args.no_drop_caches,
                capacity_layers=args.capacity_layers, layer_bytes=layer_bytes,
                capacity=int(args.capacity_layers * (layer_bytes + (1 << 16))))
    if args.capacity_fraction is not None:
        if kind == "linear":
            total = args.layers * layer_bytes
        else:
            total = args.tf_layers * layer_bytes + (2 * args.tf_vocab + 1) * args.tf_hidden * spec["itemsize"]
        spec["capacity"] = int(args.capacity_fraction * total)
        spec["capacity_layers"] = round(spec["capacity"] / layer_bytes, 2)
    return spec


def _memory_cgroup(limit: int, name: str) -> str:
    """Makes a memory cgroup below this process's own with ``limit`` (page cache included; swap capped too where
    the kernel accounts it) and returns its directory; a child joins it by writing its pid to cgroup.procs.
    cgroup v2 (memory.max) where the memory controller is on the unified hierarchy, else v1
    (memory.limit_in_bytes)."""
    lines = open("/proc/self/cgroup").read().splitlines()
    v1 = next((ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == "memory"), None)
    unified = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if v1 is None and unified is not None and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        d = os.path.join("/sys/fs/cgroup", unified.lstrip("/"), name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "memory.max"), "w") as f:
            f.write(str(limit))
        with contextlib.suppress(OSError), open(os.path.join(d, "memory.swap.max"), "w") as f:
            f.write("0")
        return d
    if v1 is None:
        raise SystemExit("--memory-limit: no memory cgroup controller found in /proc/self/cgroup")
    d = os.path.join("/sys/fs/cgroup/memory", v1.lstrip("/"), name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    with contextlib.suppress(OSError), open(os.path.join(d, "memory.memsw.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    return d


def _cgroup_peak(d: str) -> dict:
    out = {}
    for key, name in (("peak_bytes", "memory.max_usage_in_bytes"), ("peak_bytes", "memory.peak"),
                      ("limit_hits", "memory.failcnt")):
        with contextlib.suppress(OSError, ValueError), open(os.path.join(d, name)) as f:
            out[key] = int(f.read().split()[0])
    with contextlib.suppress(OSError), open(os.path.join(d, "memory.events")) as f:
        for line in f:
            k, v = line.split()
            if k in ("max", "oom_kill"):
                out[f"events_{k}"] = int(v)
    return out


def _offload_table(rows: list[dict]) -> str:
    head = ["method", "start-up", "first pass", "per pass (median)", "x oversub", "peak RSS passes",
            "peak RSS all", "read/pass", "output"]
    on_gpu = any("device_used_bytes" in r for r in rows)
    if on_gpu:
        head.insert(-1, "GPU memory used")
    lines = [head]
    base = next((r for r in rows if r["method"] == "oversub-learned" and "median_s" in r), None)
    for r in rows:
        if "median_s" not in r:
            continue
        ratio = f"{r['median_s'] / base['median_s']:.2f}" if base else "-"
        row = [
            r["method"], f"{r['setup_s']:.2f} s", f"{r['first_pass_s']:.2f} s",
            f"{r['median_s']:.3f} s ({min(r['pass_s']):.3f}-{max(r['pass_s']):.3f})", ratio,
            f"{r['peak_rss_passes_bytes'] / _MIB:.0f} MiB", f"{r['peak_rss_bytes'] / _MIB:.0f} MiB",
            f"{r['median_read_bytes'] / _MIB:.0f} MiB", r.get("output", "?"),
        ]
        if on_gpu:
            row.insert(-1, f"{r['device_used_bytes'] / _MIB:.0f} MiB" if "device_used_bytes" in r else "-")
        lines.append(row)
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = []
    for i, row in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    skipped = [r for r in rows if "median_s" not in r]
    for r in skipped:
        out.append(f"skipped {r['method']}: {r.get('skipped', 'no result')}")
    return "\n".join(out)


def _offload_main(args) -> int:
    if args.worker:
        return _worker(args)
    import shutil
    import subprocess

    kinds = [k.strip() for k in args.models.split(",") if k.strip()]
    gen = _GENERATE_METHODS_GPU if args.device.startswith("cuda") else _GENERATE_METHODS
    default = gen if kinds == ["generate"] else [m for m in _OFFLOAD_METHODS
                                                 if m not in ("accelerate-auto", "accelerate-cpu-offload",
                                                              "double-buffer")]
    methods = [m.strip() for m in (args.methods or ",".join(default)).split(",") if m.strip()]
    limit = _parse_size(args.memory_limit) if args.memory_limit else None
    if not (args.device == "cpu" or args.device == "cuda" or
            (args.device.startswith("cuda:") and args.device[5:].isdigit())):
        raise SystemExit(f"--device must be cpu or cuda[:N], not {args.device!r}")
    for m in methods:
        if m not in _OFFLOAD_METHODS:
            raise SystemExit(f"unknown method {m!r} (known: {', '.join(_OFFLOAD_METHODS)})")
    if "resident" in methods:
        methods = ["resident"] + [m for m in methods if m != "resident"]
    # This process imports neither torch nor the model: each method's process starts from a small parent (Linux
    # keeps a parent's peak RSS in a child's ru_maxrss across exec; VmHWM is the child's own).
    report: dict = {"models": {}, "methods": _OFFLOAD_METHODS, "threads": args.threads, "device": args.device,
                    "python": platform.python_version(), "memory_limit_bytes": limit}
    code = 0
    for kind in kinds:
        if kind in ("transformer", "generate"):
            try:
                import transformers  # noqa: F401
            except ImportError as e:
                report["models"][kind] = {"skipped": f"transformers not installed ({e})"}
                _log("skipping the transformer: transformers not installed")
                continue
        elif kind != "linear":
            raise SystemExit(f"unknown model {kind!r} (linear, transformer, generate)")
        spec = _offload_spec(args, kind)
        work = tempfile.mkdtemp(prefix=f"oversub-bench-offload-{kind}-", dir=args.store)
        try:
            with open(os.path.join(work, "spec.json"), "w") as f:
                json.dump(spec, f)
            _log(f"{kind}: {spec['layers']} layers of {spec['layer_bytes'] / _MIB:.1f} MiB, capacity "
                 f"{spec['capacity'] / _MIB:.0f} MiB; writing the checkpoint to {work}")
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONWARNINGS="ignore")
            subprocess.run([sys.executable, "-m", "oversub.bench", "offload", "--worker", "prepare", "--work", work],
                           env=env, check=True)
            spec["checkpoint_bytes"] = os.path.getsize(os.path.join(work, "model.safetensors"))
            rows = []
            for method in methods:
                _log(f"{kind}: {method} ({_OFFLOAD_METHODS[method]})")
                cmd = [sys.executable, "-m", "oversub.bench", "offload", "--worker", method, "--work", work]
                cg = _memory_cgroup(limit, f"oversub-bench-{os.getpid()}-{method}") if limit else None

                def join(cg=cg):
                    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                        f.write(str(os.getpid()))

                try:
                    proc = subprocess.run(cmd, env=env, timeout=args.timeout, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True, preexec_fn=join if cg else None)
                    err = proc.stderr
                except subprocess.TimeoutExpired:
                    rows.append({"method": method, "skipped": f"timed out after {args.timeout:.0f} s"})
                    continue
                finally:
                    cg_use = _cgroup_peak(cg) if cg else None
                    if cg:
                        with contextlib.suppress(OSError):
                            os.rmdir(cg)
                for line in err.splitlines():
                    if line.startswith(f"  {method} pass"):
                        _log(line)
                try:
                    with open(os.path.join(work, f"result-{method}.json")) as f:
                        r = json.load(f)
                except (OSError, ValueError):
                    r = {"method": method, "skipped": f"exited {proc.returncode}: {err.strip()[-300:]}"}
                if cg_use is not None:
                    r["cgroup"] = cg_use
                if "skipped" in r:
                    _log(f"  skipped: {r['skipped']}")
                    if r["skipped"].startswith("failed"):
                        _log("\n".join(err.splitlines()[-15:]))
                rows.append(r)
            for r in rows:
                if r["method"].startswith("oversub") and r.get("output", "equal").startswith("differs"):
                    code = 1
            report["models"][kind] = {"spec": spec, "rows": rows}
            print(f"\n{kind}: {spec['layers']} layers x {spec['layer_bytes'] / _MIB:.1f} MiB "
                  f"({spec['checkpoint_bytes'] / _MIB:.0f} MiB checkpoint), capacity {spec['capacity'] / _MIB:.0f} MiB "
                  f"({spec['capacity_layers']:g} layers) on {args.device}, {args.threads} torch thread(s), page cache dropped "
                  f"before each pass: {not args.no_drop_caches}"
                  + (f", each method's process in a memory cgroup of {limit / _MIB:.0f} MiB" if limit else ""))
            print(_offload_table(rows))
            if kind == "generate":
                n = spec["gen_tokens"]
                acc = next((r for r in rows if r["method"] == "accelerate-auto" and "median_s" in r), None)
                for r in rows:
                    if "median_s" not in r:
                        continue
                    r["per_token_s"] = r["median_s"] / n
                    vs = f", accelerate-auto / this {acc['median_s'] / r['median_s']:.2f}x" if acc else ""
                    cgu = r.get("cgroup") or {}
                    peak = f", cgroup peak {cgu['peak_bytes'] / _MIB:.0f} MiB" if "peak_bytes" in cgu else ""
                    split = (f"; prefill {r['prefill_s'] * 1000:.1f} ms, decode {r['decode_s_per_token'] * 1000:.2f} "
                             "ms a token" if "prefill_s" in r else "")
                    print(f"  {r['method']}: {r['per_token_s'] * 1000:.1f} ms a token (generate of {n} tokens "
                          f"after a {spec['gen_prompt']}-token prompt, prefill included){split}{vs}{peak}")
            for r in rows:
                if "oversub" in r:
                    o = r["oversub"]
                    hid = f"{o['paging_hidden']:.0%}" if o["paging_hidden"] is not None else "-"
                    print(f"  {r['method']}: lookahead {o['lookahead']}, paging hidden {hid}, "
                          f"{o['page_ins_prefetched']} prefetched / {o['page_ins_on_demand']} on demand page-ins, "
                          f"{o.get('bytes_from_host_tier', 0) / _MIB:.0f} MiB from the host tier "
                          f"({o.get('host_tier_bytes', 0) / _MIB:.0f} MiB), "
                          f"{o.get('bytes_from_store', 0) / _MIB:.0f} MiB from the store, "
                          f"{len(o.get('pinned_groups') or [])} groups kept resident")
                if r.get("info", {}).get("config") and not r["method"].startswith("oversub"):
                    print(f"  {r['method']} configuration: {json.dumps(r['info']['config'], default=str)}")
                if r.get("info", {}).get("note"):
                    print(f"  {r['method']}: {r['info']['note']}")
        finally:
            if not args.keep_files:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs; x oversub: "
          "median time per pass over oversub-learned's; start-up: loading the weights until the first pass can run")
    if args.json:
        text = json.dumps(report, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return code


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
    _offload_parser(sub)
    args = parser.parse_args(argv)
    if args.command != "overhead":
        return _offload_main(args)
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
