"""Run a PyTorch model whose weights do not fit: ``import oversub.torch as ot; ot.offload(model, capacity="2GiB")``.

The model's parameters and buffers are split into groups (by default its repeated blocks). Each group is packed
into one oversub buffer, written to the swap store once (read-only for inference), and paged in when the group's
``forward`` is about to run. The first forward pass records the order in which the groups ran; later passes start
the page-ins of the next groups ahead of need (``lookahead``), and when the pool is full the group evicted is the
resident one whose next use in the recorded order is furthest away (Belady), so the part of a model that fits stays
resident across passes: once the order is known, the groups that fit beside two rotating ones stay resident for the
whole pass, and the others rotate through the rest. With ``host_memory`` (by default on a CUDA device, what the
host's RAM has to spare) the groups are kept in a host tier, pinned, and paged in from RAM instead of the store.
A pass that departs from the recorded order continues on demand and is recorded instead::

    import oversub.torch as ot
    model = build_model()                                   # weights on "cpu", or on "meta" + a checkpoint
    ot.offload(model, capacity="2GiB", store="/mnt/nvme")   # checkpoint="model.safetensors" for a meta model
    with torch.no_grad():
        for batch in loader:
            out = model(batch)                              # the next blocks' weights paged in ahead of use
    print(ot.stats(model))                                  # bytes paged, waits, share of paging hidden, trace
    ot.restore(model)                                       # an ordinary resident model again

Inference only: the weights are read-only buffers, a pass runs with autograd off, and ``trainable=True`` raises
NotImplementedError. ``model.state_dict()`` / ``save_pretrained`` page the groups in and return copies of the real
weights; ``.half()``/``.to(dtype)``/``load_state_dict`` are refused (:class:`ModelChangeError`). See docs/torch.md
(Hugging Face models are covered there).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import json
import math
import os
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import errors as _errors
from ._oversub import ExternalFile, Pool
from ._oversub import parse_size as _parse_size

__all__ = [
    "offload",
    "stats",
    "restore",
    "is_offloaded",
    "Offloaded",
    "OffloadError",
    "GroupTooLargeError",
    "StoreTooSmallError",
    "ConcurrentUseError",
    "TensorReplacedError",
    "WeightsInUseError",
    "CheckpointError",
    "NotOffloadedError",
    "ModelChangeError",
    "StorePathError",
    "state_dict",
    "named_parameters",
]

_ATTR = "_oversub_offload"
_ALIGN = 64
_MIB = 1 << 20


# --- errors -----------------------------------------------------------------------------------------------------------


class OffloadError(_errors.Error):
    """Base class of the errors of :mod:`oversub.torch`; each names the module concerned."""


class GroupTooLargeError(OffloadError, MemoryError):
    """A group's weights are larger than the pool's capacity (raised by :func:`offload`, before anything moves)."""


class StoreTooSmallError(OffloadError, OSError):
    """The swap store cannot hold the weights of every group (raised by :func:`offload`; the model is unchanged)."""


class ConcurrentUseError(OffloadError, RuntimeError):
    """An offloaded model (or one of its groups) was called from a second thread while a first was running it."""


class TensorReplacedError(OffloadError, RuntimeError):
    """A parameter or buffer oversub manages was replaced (``module.weight = ...`` or ``param.data = ...``) behind
    its back; restore the model first (:func:`restore`), change it, and offload it again."""


class WeightsInUseError(OffloadError, BufferError):
    """A group's weights cannot be released: a tensor made from them is still alive (an autograd graph kept by a
    pass run without ``torch.no_grad()``, or a tensor you kept)."""


class CheckpointError(OffloadError, ValueError):
    """The checkpoint does not match the model (a missing tensor, a wrong shape, an unreadable file)."""


class NotOffloadedError(OffloadError, ValueError):
    """:func:`stats` or :func:`restore` on a model that :func:`offload` did not offload (or that was restored)."""


class ModelChangeError(OffloadError, RuntimeError):
    """A call that would change an offloaded model's weights in place (``.half()``, ``.to(dtype)``, ``.cuda()``,
    ``load_state_dict``) was refused before it changed anything: the weights are packed in paged buffers of their
    dtype and device. ``ot.restore(model)``, change the model, then ``ot.offload`` it again."""


class StorePathError(OffloadError, FileNotFoundError):
    """The ``store`` given to :func:`offload` names a place that does not exist (raised before anything moves)."""


# --- sizes ------------------------------------------------------------------------------------------------------------

# Sizes are read by the one parser every front shares (Rust's ``oversub.parse_size``), imported above.


def _round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


# The host tier's granule (the core's TIER_ALIGN), and what host_memory="auto" leaves free of MemAvailable.
_TIER_ALIGN = 4096
_HOST_HEADROOM_MIN = 2 << 30


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where it cannot be read)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _auto_host_memory() -> int:
    """The host tier ``host_memory="auto"`` may take: ``MemAvailable`` less an eighth of ``MemTotal`` (at least 2
    GiB), left for the process's own memory (activations, the CUDA context, torch) and the rest of the machine."""
    info = _meminfo()
    avail, total = info.get("MemAvailable"), info.get("MemTotal")
    if avail is None or total is None:
        return 0
    return max(0, avail - max(total // 8, _HOST_HEADROOM_MIN))


def _fmt(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", _MIB), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


# --- safetensors, read without loading a whole file -------------------------------------------------------------------

_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E4M3", "float8_e4m3fn"),
                     ("F8_E5M2", "float8_e5m2"), ("C64", "complex64")):
    if hasattr(torch, _attr):
        _ST_DTYPES[_name] = getattr(torch, _attr)


@dataclass
class _StEntry:
    path: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute offset of the tensor's bytes in the file
    nbytes: int


def _read_safetensors_index(paths: Sequence[str]) -> dict[str, _StEntry]:
    """Tensor name -> where its bytes are, from the headers of safetensors files (nothing else is read)."""
    index: dict[str, _StEntry] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                (hlen,) = struct.unpack("<Q", f.read(8))
                if hlen > 100 * _MIB:
                    raise ValueError(f"header of {hlen} bytes")
                header = json.loads(f.read(hlen))
        except (OSError, ValueError, struct.error) as e:
            raise CheckpointError(f"{path} is not a readable safetensors file: {e}") from e
        base = 8 + hlen
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in _ST_DTYPES:
                raise CheckpointError(f"{path}: tensor {name} has dtype {meta['dtype']}, which oversub cannot read")
            begin, end = meta["data_offsets"]
            index[name] = _StEntry(path, _ST_DTYPES[meta["dtype"]], tuple(meta["shape"]), base + begin, end - begin)
    return index


def _checkpoint_files(checkpoint: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    if isinstance(checkpoint, (str, os.PathLike)):
        path = os.fspath(checkpoint)
        if path.endswith(".json") and os.path.isfile(path):
            # A sharded checkpoint's index (model.safetensors.index.json): its weight_map names the shards.
            try:
                with open(path) as f:
                    weight_map = json.load(f)["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{path} is not a safetensors index (a JSON file with a weight_map): {e}") from e
            base = os.path.dirname(path)
            files = sorted({os.path.join(base, f) for f in weight_map.values()})
            missing = [f for f in files if not os.path.exists(f)]
            if missing:
                raise CheckpointError(f"{path} names shard {missing[0]}, which does not exist")
            return files
        if os.path.isdir(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
            if not files:
                raise CheckpointError(f"no .safetensors file in {path}")
            return files
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint {path} does not exist")
        return [path]
    return [os.fspath(p) for p in checkpoint]


class _CheckpointReader:
    """Reads one tensor at a time straight into the memory it belongs in (``preadv`` into the buffer's view), so
    neither the whole checkpoint nor a mapping of it is ever in this process's memory."""

    def __init__(self, files: list[str]):
        self.index = _read_safetensors_index(files)
        self._fds: dict[str, int] = {}

    def _fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def check(self, name: str, shape: tuple[int, ...], what: str) -> _StEntry:
        e = self.index.get(name)
        if e is None:
            raise CheckpointError(f"{what} {name} is not in the checkpoint")
        if tuple(e.shape) != tuple(shape):
            raise CheckpointError(f"{what} {name}: the checkpoint has shape {list(e.shape)}, the model {list(shape)}")
        return e

    def read_into(self, name: str, dst: torch.Tensor) -> None:
        """Fills ``dst`` (contiguous, of the model's dtype and shape) with the checkpoint's tensor ``name``."""
        e = self.index[name]
        fd = self._fd(e.path)
        if e.dtype == dst.dtype and dst.device.type == "cpu" and dst.is_contiguous():
            target = dst
        else:
            target = torch.empty(e.shape, dtype=e.dtype)
        if e.nbytes:
            view = memoryview(target.view(-1).view(torch.uint8).numpy()) if target.numel() else memoryview(b"")
            done = 0
            while done < e.nbytes:
                n = os.preadv(fd, [view[done:]], e.start + done)
                if n <= 0:
                    raise CheckpointError(f"{e.path}: short read of {name} ({done} of {e.nbytes} bytes)")
                done += n
        if target is not dst:
            dst.copy_(target)

    def load(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        e = self.index[name]
        t = torch.empty(e.shape, dtype=dtype)
        self.read_into(name, t)
        return t

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


# --- groups -----------------------------------------------------------------------------------------------------------


@dataclass
class _Slot:
    """One tensor of a group: its place in the group's buffer and every (module, attribute) that holds it."""

    tensor: torch.Tensor  # the Parameter or buffer object oversub swaps the ``.data`` of
    qualname: str
    refs: list[tuple[nn.Module, str, bool]]  # (module, attribute name, is a parameter)
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int = 0
    nbytes: int = 0
    requires_grad: bool = False
    placeholder: torch.Tensor | None = None
    part: int = 0  # which buffer of a group read from several checkpoint files (_Parts) holds it
    initial: torch.Tensor | None = None  # a buffer's value at its first page-in (to see a write in forward)


_OUT, _IN_FLIGHT, _RESIDENT = "paged_out", "paging_in", "resident"
# Checkpoint ranges are rounded out to this when the file is a group's store: the direct-I/O alignment of every
# store oversub makes on common disks (checked against the pool's own at load).
_EXTERNAL_ALIGN = 4096


@dataclass
class _Group:
    index: int
    name: str
    module: nn.Module
    recurse: bool
    slots: list[_Slot] = field(default_factory=list)
    nbytes: int = 0
    reserved: int = 0
    buf: Any = None
    state: str = _OUT
    handle: Any = None
    views: bool = False  # the slots' .data are views into the buffer
    in_use: int = 0
    last_used: int = 0
    prefetched: bool = False  # resident through a prefetch not yet used
    inflight_since: float = 0.0
    # counters
    page_ins: int = 0
    wait_s: float = 0.0
    calls: int = 0
    loaded: bool = False  # the slots' tensors were moved into the buffer
    external: tuple[str, int] | None = None  # (checkpoint file, aligned offset): the file is this group's store
    tier: str = "store"  # where its paged-out bytes are: "host" (the host tier), "store", or "checkpoint"
    pinned: bool = False  # kept resident for the whole pass (the fixed part of the residency; see _plan_residency)
    # Its compute in the last pass: from its forward's start (weights resident) to its end, less the waits inside.
    compute_s: float | None = None
    run_t0: float = 0.0
    run_w0: float = 0.0
    # A group whose tensors lie in several checkpoint files (shards): one external buffer per file range, and
    # tail_bytes for a copied buffer holding the tensors no file range can back (see _place_across_files).
    parts: list[tuple[str, int, int]] | None = None
    tail_bytes: int = 0


class _PartsHandle:
    """The page-ins of a :class:`_Parts`, waited for together."""

    def __init__(self, handles: list):
        self.handles = handles

    def done(self) -> bool:
        return all(h.done() for h in self.handles)

    def wait(self) -> None:
        err = None
        for h in self.handles:
            try:
                h.wait()
            except _errors.Error as e:
                err = err or e
        if err is not None:
            raise err


class _Parts:
    """The buffers of one group read from several files, paged together: what a group's ``buf`` needs of a Buffer
    (page in and out, free, views, info). The reads of the parts run at once."""

    def __init__(self, bufs: list):
        self.bufs = bufs

    @property
    def views(self) -> int:
        return sum(b.views for b in self.bufs)

    def info(self) -> dict[str, Any]:
        return {"reserved_bytes": sum(b.info()["reserved_bytes"] for b in self.bufs), "in_host_tier": False}

    def page_in_async(self) -> _PartsHandle:
        handles = []
        try:
            for b in self.bufs:
                with contextlib.suppress(_errors.AlreadyResidentError):  # left resident by a failed page-in
                    handles.append(b.page_in_async())
        except BaseException:
            with contextlib.suppress(_errors.Error):
                _PartsHandle(handles).wait()
            raise
        return _PartsHandle(handles)

    def page_in(self) -> None:
        self.page_in_async().wait()

    def page_out(self) -> None:
        for b in self.bufs:
            with contextlib.suppress(_errors.AlreadyPagedOutError):
                b.page_out()

    def free(self) -> None:
        err = None
        for b in self.bufs:
            try:
                b.free()
            except _errors.Error as e:
                err = err or e
        if err is not None:
            raise err


def _module_tensors(module: nn.Module, recurse: bool):
    """(submodule, attribute, tensor, is_param) for the tensors of ``module`` (its subtree when ``recurse``)."""
    mods = module.modules() if recurse else [module]
    for m in mods:
        for name, p in m._parameters.items():
            if p is not None:
                yield m, name, p, True
        for name, b in m._buffers.items():
            if b is not None:
                yield m, name, b, False


def _resident_buffer(sub: nn.Module, attr: str, is_param: bool) -> bool:
    """Buffers that stay resident instead of joining a group: non-persistent ones (computed by the module, such as
    a rotary embedding's ``inv_freq`` or GPT-Neo's causal mask: never in a checkpoint) and the running statistics of
    a norm layer (BatchNorm updates them in place in ``train()``; a read-only group would lose the update when it
    is evicted). Both are small."""
    if is_param:
        return False
    if attr in getattr(sub, "_non_persistent_buffers_set", ()):
        return True
    return isinstance(sub, nn.modules.batchnorm._NormBase)


def _tensor_bytes(module: nn.Module, recurse: bool = True) -> int:
    seen, total = set(), 0
    for _, _, t, _ in _module_tensors(module, recurse):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _containers(model: nn.Module) -> list[nn.Module]:
    """ModuleLists and Sequentials with at least two children that hold tensors."""
    out = []
    for m in model.modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)):
            if sum(1 for c in m.children() if _tensor_bytes(c) > 0) >= 2:
                out.append(m)
    return out


def _select_groups(model: nn.Module, group, kept: set[int]) -> list[tuple[nn.Module, bool]]:
    """The group modules (and whether each group takes its whole subtree) for ``group``."""
    if callable(group) and not isinstance(group, str):
        mods = list(group(model))
        for m in mods:
            if not isinstance(m, nn.Module):
                raise TypeError(f"group callable returned {type(m).__name__}, not an nn.Module")
        return [(m, True) for m in mods]
    if group == "leaf":
        return [(m, False) for m in model.modules() if _tensor_bytes(m, recurse=False) > 0]
    if group not in ("auto", "block"):
        raise ValueError(f"group must be 'auto', 'block', 'leaf' or a callable, not {group!r}")
    containers = [c for c in _containers(model) if id(c) not in kept]
    if group == "block":
        chosen, inside = [], set()
        for c in containers:  # model.modules() is preorder: an outer container comes before those inside it
            if id(c) in inside:
                continue
            chosen.append(c)
            inside.update(id(m) for m in c.modules())
    else:
        chosen = [max(containers, key=_tensor_bytes)] if containers else []
    blocks = [b for c in chosen for b in c.children() if _tensor_bytes(b) > 0]
    if group == "block" or not blocks:
        if not blocks and group == "auto":
            # No repeated blocks: every module with at least 1 MiB of its own tensors is a group.
            return [(m, False) for m in model.modules() if _tensor_bytes(m, recurse=False) >= _MIB]
        return [(b, True) for b in blocks]
    # "auto": the blocks, and every other module whose own tensors are at least half a median block (an embedding,
    # a language-model head); smaller ones stay resident.
    sizes = sorted(_tensor_bytes(b) for b in blocks)
    threshold = max(sizes[len(sizes) // 2] // 2, 1)
    inside = {id(m) for b in blocks for m in b.modules()}
    extra = [m for m in model.modules()
             if id(m) not in inside and _tensor_bytes(m, recurse=False) >= threshold]
    return [(b, True) for b in blocks] + [(m, False) for m in extra]


# --- models as transformers builds them -------------------------------------------------------------------------------


def _tie_declared(model: nn.Module) -> None:
    """Ties the weights a Hugging Face model declares tied (``_tied_weights_keys``: the LM head and the input
    embedding) when it was built without them tied, as under ``accelerate.init_empty_weights()``: a checkpoint holds
    one copy, and the two must be one tensor (kept resident) rather than two, one of them missing."""
    tie = getattr(model, "tie_weights", None)
    if not callable(tie) or not getattr(model, "_tied_weights_keys", None):
        return
    if not any(p.device.type == "meta" for p in model.parameters()):
        return  # built for real: tied as its config says already (a user's own untying is left alone)
    try:
        tie()
    except Exception as e:  # noqa: BLE001 - a model's own tie failing leaves the weights untied, as given
        warnings.warn(f"oversub.torch: {type(model).__name__}.tie_weights() failed ({e}); its tied weights are "
                      "loaded separately", stacklevel=4)


def _compute_meta_buffers(model: nn.Module) -> None:
    """Gives the non-persistent buffers of a model built on ``meta`` their values. A checkpoint never holds them
    (``rotary_emb.inv_freq``, GPT-Neo's causal mask): their module computes them in ``__init__``. For a Hugging Face
    model its ``_init_weights(module)`` computes them again, as ``from_pretrained`` does; a buffer nothing writes
    raises :class:`CheckpointError` (it would hold garbage)."""
    owners = [(m, [a for a in m._non_persistent_buffers_set
                   if m._buffers.get(a) is not None and m._buffers[a].device.type == "meta"])
              for m in model.modules()]
    owners = [(m, attrs) for m, attrs in owners if attrs]
    if not owners:
        return
    init = getattr(model, "_init_weights", None)
    for m, attrs in owners:
        fresh = {}
        for a in attrs:
            b = m._buffers[a]
            fresh[a] = torch.empty(b.shape, dtype=b.dtype)
            m._buffers[a] = fresh[a]
        versions = {a: t._version for a, t in fresh.items()}
        if callable(init) and not m._parameters:  # a module of its own parameters would also be re-initialised
            with torch.no_grad():
                init(m)
        unwritten = [a for a in attrs if m._buffers[a] is fresh[a] and fresh[a]._version == versions[a]]
        if unwritten:
            for a in attrs:
                m._buffers[a] = torch.empty(fresh[a].shape, dtype=fresh[a].dtype, device="meta")
            name = next(n for n, x in model.named_modules() if x is m)
            raise CheckpointError(
                f"{name or '(root)'}.{unwritten[0]} is a non-persistent buffer on the meta device: no checkpoint holds "
                "it and oversub cannot compute it. Build the model under accelerate.init_empty_weights() (buffers "
                "stay real) or on the CPU, or set the buffer before offloading")


# --- the offloaded model ----------------------------------------------------------------------------------------------


class Offloaded:
    """What :func:`offload` returns (and attaches to the model): the pool, the groups, the hooks, the trace."""

    def __init__(self, model: nn.Module, *, capacity: int, store, device: str, lookahead, order, trainable: bool,
                 store_capacity: int | None, verify_checksums: bool, copy_checkpoint: bool = False,
                 host_memory: int | str = "auto", device_headroom: int = 256 << 20):
        self.model = model
        self.capacity = capacity
        self.capacity_given = capacity  # what the caller gave; self.capacity may shrink below it (_fit_device)
        self.device_headroom = device_headroom
        self.store = store
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', not {device!r}")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", 0)
        if lookahead != "auto" and (not isinstance(lookahead, int) or lookahead < 0):
            raise ValueError(f"lookahead must be 'auto' or an int >= 0, not {lookahead!r}")
        self.lookahead = lookahead
        self.trainable = trainable
        self.store_capacity = store_capacity
        self.verify_checksums = verify_checksums
        self.copy_checkpoint = copy_checkpoint
        if host_memory != "auto":
            try:
                host_memory = _parse_size(host_memory)
            except (ValueError, TypeError) as e:
                raise ValueError(f"host_memory must be 'auto', a size or 0, not {host_memory!r} ({e})") from None
        self.host_memory = host_memory
        self.host_tier_bytes = 0  # the host tier's size, decided in _plan_host_tier
        self.groups: list[_Group] = []
        self.kept_bytes = 0
        self.pool = None
        self.space = None
        self._hooks: list[Any] = []
        self._lock = threading.Lock()
        self._pass_thread: int | None = None
        self._pass_depth = 0
        self._implicit: _Group | None = None  # a group called outside a pass of the root
        self._tick = 0
        self._explicit_order = order
        # the trace and where this pass is in it
        self.trace: list[int] | None = None
        self._uses: dict[int, list[int]] = {}
        self._pass_seq: list[int] = []
        self._following = False
        self._pos = 0
        self._pass_t0 = 0.0
        self._pass_snap: dict[str, float] = {}
        self._closed = False
        self._warned_grad = False
        self._grad_prev = True
        self._guarded: list[nn.Module] = []
        self._names: dict[int, list[str]] = {}
        self.c: dict[str, float] = dict(
            passes=0, traces_recorded=0, divergences=0, bytes_paged_in=0, bytes_paged_out=0, bytes_written=0,
            page_ins_on_demand=0, page_ins_prefetched=0, bytes_on_demand=0, bytes_prefetched=0, hits=0,
            evictions=0, wait_s=0.0, on_demand_s=0.0, prefetch_wait_s=0.0, prefetch_errors=0, load_s=0.0,
            groups_in_checkpoint=0, groups_in_host_tier=0, bytes_from_host_tier=0, bytes_from_store=0,
            buffers_kept_resident=0, lookahead_changes=0, capacity_changes=0,
        )
        self._device_free_min: int | None = None  # the least free device memory seen at a pass's start
        self.per_pass: list[dict[str, Any]] = []
        self._auto_depth = 0  # lookahead="auto": the depth the capacity allows (0 on demand is the other choice)
        self._plans: dict[int, tuple[set[int], float]] = {}  # lookahead -> (pinned groups, bytes a pass on demand)
        self._estimates: dict[int, float] = {}  # lookahead -> estimated seconds a pass (see _adapt_lookahead)
        # lookahead -> what its last pass took in the groups (compute + waits) over its estimate: corrects the model
        self._calibration: dict[int, float] = {}
        self._raw_estimates: dict[int, float] = {}
        self._pass_compute = 0.0

    # -- set-up ----------------------------------------------------------------------------------------------------

    def _build(self, group, keep, checkpoint) -> None:
        model = self.model
        _tie_declared(model)
        _compute_meta_buffers(model)
        names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        kept_mods = set()
        for k in keep or ():
            m = model.get_submodule(k) if isinstance(k, str) else k
            if not isinstance(m, nn.Module):
                raise TypeError(f"keep: {k!r} is not a module or a module name")
            kept_mods.update(id(x) for x in m.modules())
        chosen, seen_mod = [], set()
        for m, recurse in _select_groups(model, group, kept_mods):
            if id(m) in kept_mods or id(m) in seen_mod:
                continue
            if id(m) not in names:
                raise ValueError(f"group module {type(m).__name__} is not part of the model")
            seen_mod.add(id(m))
            chosen.append((m, recurse))
        # Which groups hold each tensor; a tensor also held outside its group (tied weights) stays resident.
        holders: dict[int, set[int]] = {}
        for gi, (m, recurse) in enumerate(chosen):
            for _, _, t, _ in _module_tensors(m, recurse):
                holders.setdefault(id(t), set()).add(gi)
        for gi, (m, recurse) in enumerate(chosen):
            for gj, (m2, r2) in enumerate(chosen):
                if gi < gj and recurse and r2 and (any(x is m2 for x in m.modules()) or
                                                   any(x is m for x in m2.modules())):
                    raise ValueError(f"groups overlap: {names[id(m)] or '(root)'} and {names[id(m2)] or '(root)'}")
        outside: set[int] = set()
        grouped_mods: set[int] = set()
        for m, recurse in chosen:
            grouped_mods.update(id(x) for x in (m.modules() if recurse else [m]))
        for m in model.modules():
            if id(m) in grouped_mods:
                continue
            for _, _, t, _ in _module_tensors(m, False):
                outside.add(id(t))
        qual: dict[int, str] = {}
        self._names: dict[int, list[str]] = {}  # every name of a tensor: a tied weight has several
        for n, t in model.named_parameters(remove_duplicate=False):
            qual.setdefault(id(t), n)
            self._names.setdefault(id(t), []).append(n)
        for n, t in model.named_buffers(remove_duplicate=False):
            qual.setdefault(id(t), n)
            self._names.setdefault(id(t), []).append(n)
        for gi, (m, recurse) in enumerate(chosen):
            g = _Group(index=len(self.groups), name=names[id(m)] or "(root)", module=m, recurse=recurse)
            by_id: dict[int, _Slot] = {}
            for sub, attr, t, is_param in _module_tensors(m, recurse):
                if len(holders[id(t)]) > 1 or id(t) in outside or _resident_buffer(sub, attr, is_param):
                    continue
                s = by_id.get(id(t))
                if s is None:
                    s = by_id[id(t)] = _Slot(t, qual.get(id(t), f"{g.name}.{attr}"), [], t.dtype, tuple(t.shape))
                    g.slots.append(s)
                s.refs.append((sub, attr, is_param))
            if not g.slots:
                continue
            off = 0
            for s in g.slots:
                align = max(_ALIGN, torch.empty((), dtype=s.dtype).element_size())
                off = _round_up(off, align)
                s.offset = off
                s.nbytes = math.prod(s.shape) * torch.empty((), dtype=s.dtype).element_size()
                off += s.nbytes
            g.nbytes = max(off, 1)
            self.groups.append(g)
        grouped = {id(s.tensor) for g in self.groups for s in g.slots}
        kept_tensors = {}
        for m in model.modules():
            for sub, attr, t, is_param in _module_tensors(m, False):
                if id(t) not in grouped:
                    kept_tensors.setdefault(id(t), (sub, attr, t, is_param))
        self.kept_bytes = sum(t.numel() * t.element_size() for _, _, t, _ in kept_tensors.values())
        if not self.groups:
            raise ValueError("no group to offload: the model has no parameters or buffers outside `keep`")
        gran = 4096 if self.device.type == "cpu" else 2 * _MIB
        largest = max(self.groups, key=lambda g: g.nbytes)
        if _round_up(largest.nbytes, gran) > self.capacity:
            raise GroupTooLargeError(
                f"group {largest.name} ({type(largest.module).__name__}) needs {_fmt(largest.nbytes)}, more than the "
                f"capacity of {_fmt(self.capacity)}: give a larger capacity or smaller groups (group='leaf' or a "
                "callable)")
        total_store = sum(_round_up(g.nbytes, 2 * _MIB) for g in self.groups)
        if self.store_capacity is not None and self.store_capacity < sum(_round_up(g.nbytes, 4096) for g in self.groups):
            acc, first = 0, None
            for g in self.groups:
                acc += _round_up(g.nbytes, 4096)
                if acc > self.store_capacity and first is None:
                    first = g
            raise StoreTooSmallError(
                f"the store ({_fmt(self.store_capacity)}) cannot hold the weights of the {len(self.groups)} groups "
                f"({_fmt(acc)}); group {first.name} is the first that does not fit")
        # Read the checkpoint's headers and check every tensor the model needs before anything moves.
        reader = None
        meta_kept = [(sub, attr, t, p) for sub, attr, t, p in kept_tensors.values() if t.device.type == "meta"]
        if checkpoint is not None:
            reader = _CheckpointReader(_checkpoint_files(checkpoint))
            for g in self.groups:
                for s in g.slots:
                    reader.check(s.qualname, s.shape, f"{g.name}:")
            for sub, attr, t, _ in meta_kept:
                names = self._names.get(id(t), [attr])
                found = next((n for n in names if n in reader.index), names[0])
                qual[id(t)] = found  # a tied weight: the name the checkpoint holds it under
                reader.check(found, tuple(t.shape), "resident tensor")
        else:
            missing = [s.qualname for g in self.groups for s in g.slots if s.tensor.device.type == "meta"]
            missing += [qual.get(id(t), attr) for sub, attr, t, _ in meta_kept]
            if missing:
                raise CheckpointError(
                    f"{len(missing)} tensors are on the meta device and no checkpoint was given (first: "
                    f"{missing[0]}): pass checkpoint='model.safetensors'")
        self._plan_host_tier()
        if reader is not None and not self.copy_checkpoint and not self.trainable:
            self._place_in_checkpoint(reader)
        copied = [g for g in self.groups if g.external is None and g.tier != "host"]
        total_store = sum(_round_up(g.tail_bytes if g.parts is not None else g.nbytes, 2 * _MIB)
                          for g in copied) if copied else _MIB
        try:
            self._create_pool(total_store)
            self._load(reader, kept_tensors, qual)
        except BaseException:
            self._undo()
            raise
        finally:
            if reader is not None:
                reader.close()
        if self.lookahead == "auto":
            # Two groups ahead of the running one when the pool holds less than half the groups (slack for jitter
            # in the reads), one when it holds more (so the part that fits stays resident: a deeper window makes
            # groups just used the victims of groups further ahead, which are then read again; unlimited, it reads
            # every group every pass), none when it holds one group. Measured in docs/torch.md.
            # Once the order is known and a pass measured, _adapt_lookahead chooses between this depth and none.
            fits = self.capacity // max(g.reserved for g in self.groups)
            self._lookahead = self._auto_depth = max(0, min(1 if 2 * fits >= len(self.groups) else 2, fits - 1))
        else:
            self._lookahead = self.lookahead
        if self._explicit_order is not None:
            self._set_trace(self._resolve_order(self._explicit_order, names))
        self._install_hooks()

    def _plan_host_tier(self) -> None:
        """Sizes the host tier and marks the groups it will hold (``tier = "host"``): the groups in their order, as
        many as fit in ``host_memory`` (``"auto"``: on a CUDA device, what ``MemAvailable`` leaves after
        :data:`_HOST_HEADROOM`; on the CPU backend, none). Those groups are written to the tier at load (a checkpoint
        is read once into it, not used in place) and paged in from it; the store backs the rest."""
        need = sum(_round_up(g.nbytes, _TIER_ALIGN) for g in self.groups)
        if self.host_memory == "auto":
            budget = _auto_host_memory() if self.device.type == "cuda" else 0
        else:
            budget = int(self.host_memory)
        budget = min(budget, need)
        acc = 0
        for g in self.groups:
            size = _round_up(g.nbytes, _TIER_ALIGN)
            if acc + size > budget:
                break  # the tier fills in the groups' order: a later group that would fit is not taken out of turn
            acc += size
            g.tier = "host"
        self.host_tier_bytes = acc

    def _place_in_checkpoint(self, reader: _CheckpointReader) -> None:
        """Marks the groups whose checkpoint bytes can be their buffer: every tensor in one file with the model's
        dtype, together (the span holds at most 1/8 of other bytes), at offsets torch can view with that dtype, and
        the aligned range inside the file and the capacity. Their slots get the offsets of the file's layout."""
        gran = 4096 if self.device.type == "cpu" else 2 * _MIB
        sizes: dict[str, int] = {}
        for g in self.groups:
            if g.tier == "host":
                continue  # read once from the checkpoint into the host tier, then paged in from there
            entries = [reader.index[s.qualname] for s in g.slots]
            path = entries[0].path
            if any(e.dtype != s.dtype for e, s in zip(entries, g.slots)):
                continue
            if any(e.path != path for e in entries):
                self._place_across_files(g, entries, sizes, gran)
                continue
            lo = min(e.start for e in entries)
            hi = max(e.start + e.nbytes for e in entries)
            lo_a, hi_a = lo - lo % _EXTERNAL_ALIGN, _round_up(hi, _EXTERNAL_ALIGN)
            size = sizes.setdefault(path, os.path.getsize(path))
            if hi_a > size:
                # The group's last tensors are in the file's last partial block: the rest is read in place if
                # those are at most a quarter of the group (the end of a shard; a small tail is not worth a buffer).
                self._place_across_files(g, entries, sizes, gran, max_tail=g.nbytes // 4)
                continue
            if hi - lo > g.nbytes + g.nbytes // 8 + _EXTERNAL_ALIGN:
                continue
            if any((e.start - lo_a) % torch.empty((), dtype=e.dtype).element_size() for e in entries):
                continue
            if _round_up(hi_a - lo_a, gran) > self.capacity:
                continue
            for s, e in zip(g.slots, entries):
                s.offset = e.start - lo_a
            g.nbytes = hi_a - lo_a
            g.external = (path, lo_a)

    def _place_across_files(self, g: _Group, entries: list[_StEntry], sizes: dict[str, int], gran: int,
                            max_tail: int | None = None) -> None:
        """A group whose tensors lie in several files (a layer straddling two shards of a sharded checkpoint), or
        in one file whose last partial block holds some of them: one external buffer per file, over that file's
        tensors of the group, each range tested as a single-file group's is. Tensors a range cannot back (in a
        file's last partial 4 KiB block, which a direct read cannot end in, or scattered) go to one small buffer
        copied into the store at load (``tail_bytes``, at most ``max_tail`` or the group is copied whole)."""
        by_file: dict[str, list[tuple[_Slot, _StEntry]]] = {}
        for s, e in zip(g.slots, entries):
            by_file.setdefault(e.path, []).append((s, e))
        parts: list[tuple[str, int, int, list[tuple[_Slot, _StEntry]]]] = []
        tail: list[_Slot] = []
        for path, items in by_file.items():
            size = sizes.setdefault(path, os.path.getsize(path))
            inside = [(s, e) for s, e in items if _round_up(e.start + e.nbytes, _EXTERNAL_ALIGN) <= size]
            tail += [s for s, e in items if _round_up(e.start + e.nbytes, _EXTERNAL_ALIGN) > size]
            if not inside:
                continue
            lo = min(e.start for _, e in inside)
            hi = max(e.start + e.nbytes for _, e in inside)
            lo_a, hi_a = lo - lo % _EXTERNAL_ALIGN, _round_up(hi, _EXTERNAL_ALIGN)
            nb = sum(e.nbytes for _, e in inside)
            if hi - lo > nb + nb // 8 + _EXTERNAL_ALIGN or any(
                    (e.start - lo_a) % torch.empty((), dtype=e.dtype).element_size() for _, e in inside):
                tail += [s for s, _ in inside]
                continue
            parts.append((path, lo_a, hi_a - lo_a, inside))
        if not parts:
            return
        off, tail_at = 0, []
        for s in tail:
            off = _round_up(off, max(_ALIGN, torch.empty((), dtype=s.dtype).element_size()))
            tail_at.append(off)
            off += s.nbytes
        tail_bytes = max(off, 1) if tail else 0
        need = sum(_round_up(n, gran) for _, _, n, _ in parts) + _round_up(tail_bytes, gran)
        if need > self.capacity or (max_tail is not None and tail_bytes > max_tail):
            return  # copied whole, at the offsets _build laid out
        for s, at in zip(tail, tail_at):
            s.offset, s.part = at, len(parts)
        for i, (_, lo_a, _, inside) in enumerate(parts):
            for s, e in inside:
                s.offset, s.part = e.start - lo_a, i
        g.parts = [(path, lo_a, n) for path, lo_a, n, _ in parts]
        g.tail_bytes = tail_bytes
        g.nbytes = sum(n for _, _, n in g.parts) + tail_bytes

    def _create_pool(self, store_bytes: int) -> None:
        kwargs: dict[str, Any] = dict(
            store=self.store, device="host" if self.device.type == "cpu" else "cuda",
            store_capacity=self.store_capacity or store_bytes + 2 * _MIB, verify_checksums=self.verify_checksums)
        if self.device.type == "cuda":
            kwargs["device_index"] = self.device.index or 0
        if self.host_tier_bytes:
            kwargs.update(host_tier=self.host_tier_bytes, pinned_host_tier=self.device.type == "cuda")
        try:
            try:
                self.pool = Pool(self.capacity, **kwargs)
            except _errors.Error as e:
                if not self.host_tier_bytes or self.host_memory != "auto" or isinstance(e, _errors.IoError):
                    raise
                # The tier could not be allocated (or pinned): the store backs every group instead.
                warnings.warn(f"oversub.torch: no host tier of {_fmt(self.host_tier_bytes)} ({e}); every group "
                              "is paged from the store", stacklevel=4)
                self.host_tier_bytes = 0
                del kwargs["host_tier"], kwargs["pinned_host_tier"]
                store_bytes = sum(_round_up(g.tail_bytes if g.parts is not None else g.nbytes, 2 * _MIB)
                                  for g in self.groups if g.external is None)
                kwargs["store_capacity"] = self.store_capacity or store_bytes + 2 * _MIB
                self.pool = Pool(self.capacity, **kwargs)
        except _errors.IoError as e:
            if "os error 28" in str(e) or "No space" in str(e):
                raise StoreTooSmallError(
                    f"the store at {self.store or '$TMPDIR'} cannot hold the weights ({_fmt(store_bytes)}) of "
                    f"{type(self.model).__name__}: {e}") from e
            # The pager's own message may not name the store: say which one.
            raise type(e)(f"the store at {self.store or '$TMPDIR'}: {e}") from e
        self.space = self.pool.address_space()

    def _placeholder(self, dtype: torch.dtype, shape) -> torch.Tensor:
        """What a paged-out tensor holds: one element (NaN for floats, so a use outside its group's forward
        shows), broadcast to the tensor's shape."""
        try:
            fill = float("nan") if (dtype.is_floating_point or dtype.is_complex) else 0
            one = torch.full((), fill, dtype=dtype, device=self.device)
        except (RuntimeError, TypeError):
            one = torch.zeros((), dtype=dtype, device=self.device)
        return one.expand(shape)

    def _load(self, reader: _CheckpointReader | None, kept_tensors, qual) -> None:
        t0 = time.perf_counter()
        pending: list[tuple[_Group, Any]] = []  # page-outs in flight, oldest first
        try:
            self._load_groups(reader, pending)
        finally:
            for _, h in pending:  # on success they are done already; on failure let them end before undoing
                with contextlib.suppress(_errors.Error):
                    h.wait()
        self._load_kept(reader, kept_tensors, qual)
        self.c["load_s"] = time.perf_counter() - t0

    def _load_groups(self, reader: _CheckpointReader | None, pending: list) -> None:
        used = 0
        files: dict[str, Any] = {}
        if _EXTERNAL_ALIGN % self.pool.store_alignment and any(
                g.external is not None or g.parts is not None for g in self.groups):
            # The ranges were rounded to less than a direct read of this store needs.
            raise CheckpointError(
                f"the store's alignment ({self.pool.store_alignment} bytes) does not divide {_EXTERNAL_ALIGN}: "
                "pass copy_checkpoint=True")
        for g in self.groups:
            for s in g.slots:
                s.requires_grad = s.tensor.requires_grad
                s.placeholder = self._placeholder(s.dtype, s.shape)
            if g.parts is not None:
                while pending:  # the tail buffer needs room: let the page-outs in flight end
                    og, h = pending[0]
                    try:
                        h.wait()
                    except _errors.StoreFullError as e:
                        raise StoreTooSmallError(f"the store is full at group {og.name}: {e}") from e
                    pending.pop(0)
                used = 0
                self._load_parts(g, files, reader)
                continue
            if g.external is not None:
                path, at = g.external
                if path not in files:
                    files[path] = ExternalFile(path)
                g.buf = self.space.alloc_external(files[path], at, g.nbytes)
                g.reserved = g.buf.info()["reserved_bytes"]
                self._take_placeholders(g)
                g.loaded = True
                g.state = _OUT
                self.c["groups_in_checkpoint"] += 1
                continue
            while pending and used + _round_up(g.nbytes, 4096) > self.capacity:
                og, h = pending[0]
                try:
                    h.wait()
                except _errors.StoreFullError as e:
                    raise StoreTooSmallError(f"the store is full at group {og.name}: {e}") from e
                pending.pop(0)
                used -= og.reserved
            try:
                g.buf = self.space.alloc(g.nbytes, read_only=not self.trainable)
            except _errors.OutOfMemoryError:
                while pending:
                    pending[0][1].wait()
                    pending.pop(0)
                used = 0
                g.buf = self.space.alloc(g.nbytes, read_only=not self.trainable)
            g.reserved = g.buf.info()["reserved_bytes"]
            used += g.reserved
            with torch.no_grad(), torch.inference_mode(False):
                base = torch.from_dlpack(g.buf)
                for s in g.slots:
                    dst = base[s.offset: s.offset + s.nbytes].view(s.dtype).view(s.shape)
                    if reader is not None:
                        if self.device.type == "cpu":
                            reader.read_into(s.qualname, dst)
                        else:
                            dst.copy_(reader.load(s.qualname, s.dtype))
                    else:
                        dst.copy_(s.tensor.data)
                    del dst
                del base
                self._take_placeholders(g)
                g.loaded = True
            try:
                pending.append((g, g.buf.page_out_async()))
            except _errors.StoreFullError as e:
                raise StoreTooSmallError(f"the store is full at group {g.name}: {e}") from e
            g.state = _OUT
            self.c["bytes_written"] += g.nbytes
        while pending:
            g, h = pending[0]
            try:
                h.wait()
            except _errors.StoreFullError as e:
                raise StoreTooSmallError(f"the store is full at group {g.name}: {e}") from e
            pending.pop(0)
        # Where each group's bytes now are, as the pager placed them (the tier takes a page-out while it has room;
        # a read-only buffer keeps that copy for good, so a group's tier never changes).
        for g in self.groups:
            if g.external is not None or g.parts is not None:
                g.tier = "checkpoint"
            else:
                g.tier = "host" if g.buf.info()["in_host_tier"] else "store"
        self.c["groups_in_host_tier"] = sum(g.tier == "host" for g in self.groups)

    def _load_parts(self, g: _Group, files: dict, reader: _CheckpointReader) -> None:
        bufs = []
        try:
            for path, at, n in g.parts:
                if path not in files:
                    files[path] = ExternalFile(path)
                bufs.append(self.space.alloc_external(files[path], at, n))
            if g.tail_bytes:
                tail = self.space.alloc(g.tail_bytes, read_only=True)
                bufs.append(tail)
                with torch.no_grad(), torch.inference_mode(False):
                    base = torch.from_dlpack(tail)
                    for s in g.slots:
                        if s.part == len(g.parts):
                            dst = base[s.offset: s.offset + s.nbytes].view(s.dtype).view(s.shape)
                            if self.device.type == "cpu":
                                reader.read_into(s.qualname, dst)
                            else:
                                dst.copy_(reader.load(s.qualname, s.dtype))
                            del dst
                    del base
                tail.page_out()
                self.c["bytes_written"] += g.tail_bytes
        except BaseException:
            for b in bufs:
                with contextlib.suppress(_errors.Error):
                    b.free()
            raise
        g.buf = _Parts(bufs)
        g.reserved = g.buf.info()["reserved_bytes"]
        self._take_placeholders(g)
        g.loaded = True
        g.state = _OUT
        self.c["groups_in_checkpoint"] += 1

    def _take_placeholders(self, g: _Group) -> None:
        """The group's tensors hold placeholders from now on (its buffer is paged out); a meta tensor is replaced by
        a new Parameter (or buffer tensor) in every module that holds it."""
        with torch.no_grad(), torch.inference_mode(False):
            for s in g.slots:
                if s.tensor.device != self.device:
                    # A meta tensor cannot take CPU data (nor a CPU one CUDA data): a new Parameter (or buffer
                    # tensor) takes its place in every module that holds it.
                    if isinstance(s.tensor, nn.Parameter):
                        new = nn.Parameter(s.placeholder, requires_grad=False)
                    else:
                        new = s.placeholder.detach()
                    for sub, attr, is_param in s.refs:
                        (sub._parameters if is_param else sub._buffers)[attr] = new
                    s.tensor = new
                else:
                    s.tensor.data = s.placeholder
                if not self.trainable and isinstance(s.tensor, nn.Parameter):
                    s.tensor.requires_grad_(False)

    def _load_kept(self, reader: _CheckpointReader | None, kept_tensors, qual) -> None:
        # Resident tensors outside the groups: loaded from the checkpoint when they are on meta, moved to a CUDA
        # device when that is where the model runs.
        for sub, attr, t, is_param in kept_tensors.values():
            name = qual.get(id(t), attr)
            if reader is not None and name in reader.index:
                data = reader.load(name, t.dtype).to(self.device)
            elif t.device != self.device:
                data = t.data.to(self.device)
            else:
                continue
            new = nn.Parameter(data, requires_grad=t.requires_grad) if is_param else data
            if t.device.type != "meta":
                with torch.no_grad():
                    t.data = data  # the same object keeps its identity
                continue
            for m in self.model.modules():
                for d in (m._parameters, m._buffers):
                    for k, v in list(d.items()):
                        if v is t:
                            d[k] = new

    def _resolve_order(self, order, names) -> list[int]:
        by_mod = {id(g.module): g.index for g in self.groups}
        by_name = {g.name: g.index for g in self.groups}
        out = []
        for o in order:
            if isinstance(o, nn.Module) and id(o) in by_mod:
                out.append(by_mod[id(o)])
            elif isinstance(o, str) and o in by_name:
                out.append(by_name[o])
            elif isinstance(o, int) and 0 <= o < len(self.groups):
                out.append(o)
            else:
                raise ValueError(f"order: {o!r} is not a group (groups: {', '.join(list(by_name)[:8])}...)")
        return out

    def _install_hooks(self) -> None:
        m = self.model
        self._hooks.append(m.register_forward_pre_hook(self._root_pre, with_kwargs=True))
        for g in self.groups:
            self._hooks.append(g.module.register_forward_pre_hook(lambda mod, args, g=g: self._group_pre(g, args)))
            self._hooks.append(g.module.register_forward_hook(lambda mod, args, out, g=g: self._group_post(g),
                                                              always_call=True))
        self._hooks.append(m.register_forward_hook(self._root_post, always_call=True))
        # state_dict() and load_state_dict(): each module that holds a group's tensor gets a hook for its own
        # tensors, so the call works on the model or on any module inside it.
        owners: dict[int, tuple[nn.Module, _Group, list[tuple[str, _Slot]]]] = {}
        for g in self.groups:
            for s in g.slots:
                for sub, attr, _ in s.refs:
                    owners.setdefault(id(sub), (sub, g, []))[2].append((attr, s))
        post = getattr(nn.Module, "register_state_dict_post_hook", None)
        for sub, g, own in owners.values():
            def hook(mod, sd, prefix, meta, g=g, own=own):
                return self._state_dict_post(g, own, sd, prefix)

            self._hooks.append(post(sub, hook) if post is not None else sub._register_state_dict_hook(hook))
            self._hooks.append(sub._register_load_state_dict_pre_hook(
                lambda sd, prefix, *rest, sub=sub, own=own: self._load_state_dict_pre(sub, own, sd, prefix)))
        # .half(), .to(dtype), .cuda(), ...: every module above or inside a group checks before anything converts.
        # The slots under each module, gathered up the tree by name (linear in the modules, not quadratic).
        by_name = dict(m.named_modules())
        under: dict[str, list[_Slot]] = {}
        for n, sub in by_name.items():
            if id(sub) in owners:
                own = [s for _, s in owners[id(sub)][2]]
                parts = n.split(".") if n else []
                for k in range(len(parts) + 1):
                    under.setdefault(".".join(parts[:k]), []).extend(own)
        self._guarded = []
        for n, slots in under.items():
            mod = by_name[n]
            mod.__dict__["_apply"] = (lambda fn, recurse=True, mod=mod, slots=slots:
                                      self._guarded_apply(mod, slots, fn, recurse))
            self._guarded.append(mod)

    def _state_dict_post(self, g: _Group, own: list[tuple[str, _Slot]], sd: dict, prefix: str) -> None:
        """A module's ``state_dict()`` entries for a group's tensors get the real weights: the group is paged in
        (if it is not resident) and each tensor copied out, so the state dict holds no view of the group's buffer
        (it could not be evicted while one is alive) and no placeholder."""
        keys = [(prefix + attr, s) for attr, s in own if prefix + attr in sd]
        if not keys or self._closed:
            return
        with self._paged_in(g, "state_dict()"), torch.no_grad(), torch.inference_mode(False):
            for key, s in keys:
                real = s.tensor.detach().clone()
                if isinstance(sd[key], nn.Parameter):  # keep_vars=True: a Parameter, but a copy
                    real = nn.Parameter(real, requires_grad=s.requires_grad)
                sd[key] = real

    def _load_state_dict_pre(self, sub: nn.Module, own, sd, prefix: str) -> None:
        hit = [prefix + attr for attr, _ in own if prefix + attr in sd]
        if hit and not self._closed:
            raise ModelChangeError(
                f"load_state_dict() into an offloaded {type(self.model).__name__} ({hit[0]} and {len(hit) - 1} more "
                "of its weights are in read-only paged buffers; writing them would be lost at the next eviction): "
                "ot.restore(model), load, then ot.offload(model, ...) again, or offload with checkpoint=...")

    def _guarded_apply(self, mod: nn.Module, slots: list[_Slot], fn, recurse: bool = True):
        if not self._closed:
            for s in slots:
                out = fn(s.placeholder)
                if out.dtype != s.dtype or out.device != self.device or tuple(out.shape) != s.shape:
                    raise ModelChangeError(
                        f"{type(mod).__name__}: converting an offloaded model ({s.qualname}: {s.dtype} on "
                        f"{self.device} -> {out.dtype} on {out.device}) is refused: its weights are packed in paged "
                        "buffers of their dtype and device. Convert before offloading, or ot.restore(model), convert, "
                        "and ot.offload(model, ...) again")
        return nn.Module._apply(mod, fn) if recurse else nn.Module._apply(mod, fn, recurse)  # no `recurse` before 2.1

    @contextlib.contextmanager
    def _paged_in(self, g: _Group, who: str):
        """Keeps ``g`` resident (paged in on demand if it is not) for the block, outside a pass of the model."""
        self._check_open()
        me = threading.get_ident()
        mine = self._pass_thread == me
        if not mine:
            self._claim(who)
        try:
            self._ensure_resident(g)
            g.in_use += 1
            try:
                yield
            finally:
                g.in_use -= 1
        finally:
            if not mine:
                self._pass_thread = None

    # -- passes and the trace --------------------------------------------------------------------------------------

    def _set_trace(self, trace: list[int]) -> None:
        self.trace = list(trace)
        self._uses = {}
        for pos, gi in enumerate(self.trace):
            self._uses.setdefault(gi, []).append(pos)
        self._plans = {}
        self._plan_residency()

    def _measured(self) -> tuple[float, list[float | None], dict[int, float]] | None:
        """The read bandwidth of page-ins on demand so far (bytes/s), each group's compute in its last call, and
        per lookahead the ratio of its last pass's time in the groups to its estimate; None before any page-in on
        demand was timed."""
        c = self.c
        if c["on_demand_s"] <= 0 or c["bytes_on_demand"] <= 0:
            return None
        return c["bytes_on_demand"] / c["on_demand_s"], [g.compute_s for g in self.groups], dict(self._calibration)

    def _plan_for(self, la: int) -> tuple[set[int], float]:
        """The fixed set _plan_residency picks for lookahead ``la`` and, for ``la == 0``, the bytes a pass then reads
        on demand (simulated); cached per trace. Leaves ``g.pinned`` as that plan has it."""
        if la not in self._plans:
            self._lookahead = la
            self._plan_residency()
            pinned = {g.index for g in self.groups if g.pinned}
            self._plans[la] = (pinned, self._simulate_on_demand(pinned) if la == 0 else 0.0)
        return self._plans[la]

    def _adapt_lookahead(self) -> None:
        """lookahead="auto": prefetch (the depth the capacity allows) or page in on demand, whichever the last
        pass's measurements say is faster. Prefetch overlaps a group's read with the compute before it, but its
        window takes room from the fixed part, so each pass reads one group more; when the compute per group is
        small against its read (the paging is the bottleneck), that extra read costs more than the overlap saves.
        Estimated seconds a pass, with each group's read at the measured bandwidth ``bw`` and its compute as
        measured in the last pass: with prefetch, every rotating group costs max(read, compute) and a group of
        the fixed part its compute; on demand, the bytes the simulation of the pass reads cost their read, every
        group its compute. Compute outside the groups is the same either way and not counted. Each estimate is
        then scaled by what the last pass at that depth took in the groups (compute and waits) over its estimate
        (overlap is never perfect: a prefetch waits behind the one before it), so a close call is settled by what
        each choice was seen to do."""
        if self.lookahead != "auto" or not self.trace or self._auto_depth == 0:
            return
        m = self._measured()
        if m is None:
            return
        bw, comp, calibration = m
        raw = self._estimate(bw, comp)
        if raw is None:
            return
        cur = self._lookahead
        self._raw_estimates = raw
        # A depth not yet tried takes the factor of the one tried: most of a factor is the error in the measured
        # bandwidth, common to both, and an untried depth must not look better only for lack of a correction.
        default = calibration.get(cur, 1.0)
        est = {la: e * calibration.get(la, default) for la, e in raw.items()}
        self._estimates = est
        best = cur if est.get(cur, math.inf) <= min(est.values()) else min(est, key=lambda k: est[k])
        self._apply_plan(best)
        if best != cur:
            self.c["lookahead_changes"] += 1

    def _estimate(self, bw: float, comp: list[float | None]) -> dict[int, float] | None:
        """Seconds a pass in the groups with prefetch and on demand (see :meth:`_adapt_lookahead`); None until every
        group of the trace has a measured compute. Leaves the plan in force as it was."""
        distinct = set(self.trace or ())
        if not distinct or any(comp[gi] is None for gi in distinct):
            return None
        cur = self._lookahead
        est: dict[int, float] = {}
        for la in (0, self._auto_depth):
            pinned, sim_bytes = self._plan_for(la)
            if la == 0:
                est[la] = (sim_bytes / bw if math.isfinite(sim_bytes) else math.inf) + sum(comp[gi] for gi in distinct)
            else:
                est[la] = sum(comp[gi] if gi in pinned else max(self.groups[gi].nbytes / bw, comp[gi])
                              for gi in distinct)
        self._apply_plan(cur)
        return est

    def _calibrate(self) -> None:
        """After a pass that followed the trace with lookahead="auto": the ratio of what it took in the groups
        (their compute and the waits) to its estimate from its own measurements, kept for its depth."""
        if self.lookahead != "auto" or not self._following or not self.trace or self._auto_depth == 0:
            return
        c = self.c
        if c["on_demand_s"] <= 0 or c["bytes_on_demand"] <= 0:
            return
        raw = self._estimate(c["bytes_on_demand"] / c["on_demand_s"], [g.compute_s for g in self.groups])
        if raw and raw.get(self._lookahead, 0) > 0:
            spent = self._pass_compute + c["wait_s"] - self._pass_snap.get("wait_s", 0.0)
            self._calibration[self._lookahead] = spent / raw[self._lookahead]

    def _apply_plan(self, la: int) -> None:
        pinned, _ = self._plan_for(la)
        self._lookahead = la
        for g in self.groups:
            g.pinned = g.index in pinned

    def _window_bytes(self, rotating: set[int]) -> int:
        """Room the rotating groups need at once: the most bytes of two consecutive distinct rotating groups of the
        cyclic trace (the running group and the next one, paged in while it runs; one group with ``lookahead=0``).
        A deeper lookahead prefetches into what the rotating part has to spare beyond that: the bytes kept resident
        count for more than slack in the prefetch, when the read of a group takes longer than its compute."""
        trace, reserved = self.trace, [g.reserved for g in self.groups]
        rot = [gi for gi in trace if gi in rotating]
        if not rot:
            return 0
        k, best = min(self._lookahead, 1) + 1, 0
        for start in range(len(rot)):
            seen: set[int] = set()
            total = 0
            for j in range(len(rot)):
                gi = rot[(start + j) % len(rot)]
                if gi in seen:
                    continue
                seen.add(gi)
                total += reserved[gi]
                if len(seen) == k:
                    break
            best = max(best, total)
        return best

    def _plan_residency(self) -> None:
        """Chooses the groups that stay resident for the whole pass (``pinned``) from the trace: as many as fit in
        the capacity beside the window the others rotate through (:meth:`_window_bytes`), taking first the groups
        used most often per pass, then the largest, then those nearest the ends of the pass (an embedding, a
        language-model head). A pinned group is read once; the others are read each pass, in the rotating part of
        the pool, where Belady (furthest next use) picks the victims and keeps what the leftover room holds. Bytes
        read per pass then approach model - capacity + window."""
        for g in self.groups:
            g.pinned = False
        if not self.trace:
            return
        counts: dict[int, int] = {}
        for gi in self.trace:
            counts[gi] = counts.get(gi, 0) + 1
        T = len(self.trace)
        first = {gi: uses[0] for gi, uses in self._uses.items()}
        order = sorted(counts, key=lambda gi: (-counts[gi], -self.groups[gi].reserved,
                                               min(first[gi], T - 1 - self._uses[gi][-1]), gi))
        rotating = set(counts)
        pinned_bytes = 0
        for gi in order:
            g = self.groups[gi]
            if pinned_bytes + g.reserved > self.capacity:
                continue
            rotating.discard(gi)
            w = self._window_bytes(rotating)
            if pinned_bytes + g.reserved + w > self.capacity:
                rotating.add(gi)
                continue
            g.pinned = True
            pinned_bytes += g.reserved
        if self._lookahead == 0:
            # On demand, Belady alone keeps more than a fixed set when the groups are of one size (N(N-C)/(N-1)
            # misses a pass against N-C+1), but not when large groups come in a row at the ends of the pass (an
            # embedding, then the layers, then a head: each pass reads the whole model at a third of it as
            # capacity). Keep the fixed set only where a simulation of the pass says it reads fewer bytes.
            pinned = {g.index for g in self.groups if g.pinned}
            if pinned and self._simulate_on_demand(pinned) >= self._simulate_on_demand(set()):
                for g in self.groups:
                    g.pinned = False

    def _simulate_on_demand(self, pinned: set[int], passes: int = 4) -> float:
        """Bytes paged in by the last of ``passes`` passes of the trace on demand (``lookahead=0``), as
        :meth:`_ensure_resident` and :meth:`_make_room` would page: furthest next use evicted first, ``pinned``
        groups only when nothing else can go. ``inf`` where the trace cannot run so (nested groups)."""
        reserved = [g.reserved for g in self.groups]
        resident: set[int] = set()
        used, last = 0, 0
        for _ in range(passes):
            last = 0
            for p, gi in enumerate(self.trace):
                if gi in resident:
                    continue
                while self.capacity - used < reserved[gi]:
                    cands = [x for x in resident if x not in pinned] or list(resident)
                    if not cands:
                        return math.inf
                    victim = max(cands, key=lambda x: self._next_use(x, p + 1))
                    resident.discard(victim)
                    used -= reserved[victim]
                resident.add(gi)
                used += reserved[gi]
                last += reserved[gi]
        return last

    def _next_use(self, gi: int, pos: int) -> float:
        """Position of the next use of group ``gi`` at or after ``pos`` in the cyclic trace (inf: never)."""
        uses = self._uses.get(gi)
        if not uses:
            return math.inf
        k = bisect.bisect_left(uses, pos)
        return uses[k] if k < len(uses) else uses[0] + len(self.trace)

    def _claim(self, who: str) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._pass_thread is not None and self._pass_thread != me:
                raise ConcurrentUseError(
                    f"{who} was called from thread {me} while thread {self._pass_thread} is running "
                    f"{type(self.model).__name__}: an offloaded model runs one pass at a time (use one model per "
                    "thread, or a lock)")
            self._pass_thread = me

    def _root_pre(self, module, args, kwargs) -> None:
        self._check_open()
        self._claim(f"{type(module).__name__} (the offloaded model)")
        if self._pass_depth == 0 and self._implicit is None:
            self._start_pass()
            self._no_grad(list(args) + list(kwargs.values()))
        self._pass_depth += 1

    def _no_grad(self, inputs) -> None:
        """A pass runs with autograd off (restored at its end): autograd would keep the group's weights (views of
        its buffer) alive in its graph, so the group could not be evicted, and the gradients through offloaded
        weights would be wrong anyway. Inference then needs no ``torch.no_grad()``. Warns once when an input asks
        for gradients, which the outputs will not carry."""
        self._grad_prev = torch.is_grad_enabled()
        if not self._grad_prev:
            return
        torch.set_grad_enabled(False)
        if not self._warned_grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in inputs):
            self._warned_grad = True
            warnings.warn(
                f"{type(self.model).__name__} is offloaded by oversub.torch, which is for inference: its passes run "
                "as under torch.no_grad(), so the outputs do not require grad (ot.restore(model) to train it)",
                stacklevel=4)

    def _root_post(self, module, args, output) -> None:
        if self._pass_thread != threading.get_ident() or self._pass_depth == 0:
            return  # a call refused by _claim: not this thread's pass
        self._pass_depth -= 1
        if self._pass_depth == 0:
            try:
                self._end_pass()
            finally:
                torch.set_grad_enabled(self._grad_prev)
                if self._implicit is None:
                    self._pass_thread = None

    def _device_free(self) -> int | None:
        """Free device memory now (``cudaMemGetInfo``), or None where the pool's memory is not a device's."""
        if self.device.type != "cuda":
            return None
        return int(torch.cuda.mem_get_info(self.device)[0])

    def _fit_device(self) -> None:
        """Before a pass on a GPU: what torch allocates beside the pool (a ``generate``'s KV cache growing token by
        token, activations) comes out of the same device memory. When the free memory is below
        ``device_headroom``, the pool gives room back: its capacity shrinks by the shortfall (never below its
        largest group), the groups beyond it are evicted (their device memory goes back to the driver) and the
        residency is planned again; when memory is free again (the cache released), the capacity grows back up
        to what was given. Counted in ``stats``: ``capacity_changes``, ``device_free_min_bytes``."""
        free = self._device_free()
        if free is None or self.device_headroom <= 0 or not self.groups:
            return
        self._device_free_min = free if self._device_free_min is None else min(self._device_free_min, free)
        step = 2 * _MIB if self.device.type == "cuda" else 4096  # the pool's granule
        floor = max(g.reserved for g in self.groups)
        # What the pool may hold: the free memory and its own, less the headroom (stable from pass to pass: an
        # eviction raises the free memory by what it gives back).
        avail = free + self._used() - self.device_headroom
        new = max(floor, min(self.capacity_given, avail // step * step))
        if new == self.capacity:
            return
        self.capacity = new
        self.c["capacity_changes"] += 1
        while self._used() > self.capacity:
            for g in [g for g in self.groups if g.state == _IN_FLIGHT]:
                self._land(g)  # prefetches started at the end of the last pass land first
            victims = self._victims(None) or self._victims(None, pinned=True)
            if not victims:
                break
            self._evict(victims[0])
        if self.trace is not None:
            self._plans = {}
            self._plan_residency()

    def _start_pass(self) -> None:
        self._fit_device()
        self._pass_seq = []
        self._following = self.trace is not None
        self._pos = 0
        self._pass_t0 = time.perf_counter()
        self._pass_snap = dict(self.c)
        self._pass_compute = 0.0

    def _end_pass(self) -> None:
        c = self.c
        c["passes"] += 1
        if self._following and self._pos != len(self.trace):
            c["divergences"] += 1  # ended early: an early exit
            self._following = False
        if not self._following and self._pass_seq:
            self._set_trace(self._pass_seq)
            c["traces_recorded"] += 1
        snap = self._pass_snap
        self.per_pass.append({
            "pass": int(c["passes"]),
            "time_s": time.perf_counter() - self._pass_t0,
            "bytes_paged_in": int(c["bytes_paged_in"] - snap.get("bytes_paged_in", 0)),
            "bytes_from_host_tier": int(c["bytes_from_host_tier"] - snap.get("bytes_from_host_tier", 0)),
            "bytes_from_store": int(c["bytes_from_store"] - snap.get("bytes_from_store", 0)),
            "page_ins_on_demand": int(c["page_ins_on_demand"] - snap.get("page_ins_on_demand", 0)),
            "page_ins_prefetched": int(c["page_ins_prefetched"] - snap.get("page_ins_prefetched", 0)),
            "wait_s": c["wait_s"] - snap.get("wait_s", 0.0),
            "followed_trace": self._following,
        })
        del self.per_pass[:-100]
        self._calibrate()
        self._adapt_lookahead()
        # The next pass starts at the top of the trace: prefetch its first groups now.
        self._following = self.trace is not None
        self._pos = 0
        self._prefetch()
        self._following = False

    def _group_pre(self, g: _Group, args: tuple = ()) -> None:
        self._check_open()
        self._claim(f"{g.name} ({type(g.module).__name__})")
        implicit = self._pass_depth == 0 and self._implicit is None
        if implicit:  # the group's module called on its own, outside a pass of the model: on demand
            self._implicit = g
            self._following = False
            self._no_grad(args)
        try:
            g.calls += 1
            if self._pass_depth:
                self._pass_seq.append(g.index)
                if self._following:
                    if self._pos < len(self.trace) and self.trace[self._pos] == g.index:
                        self._pos += 1
                    else:
                        self._following = False  # diverged: on demand for the rest of the pass, which is recorded
                        self.c["divergences"] += 1
            self._check_tensors(g)
            self._ensure_resident(g)
        except BaseException:
            if implicit:
                self._implicit = None
                self._pass_thread = None
                torch.set_grad_enabled(self._grad_prev)
            raise
        g.in_use += 1
        if g.in_use == 1:
            g.run_t0, g.run_w0 = time.perf_counter(), self.c["wait_s"]
        self._prefetch()

    def _group_post(self, g: _Group) -> None:
        if self._pass_thread != threading.get_ident() or g.in_use == 0:
            return
        g.in_use -= 1
        if g.in_use == 0:
            g.compute_s = max(0.0, time.perf_counter() - g.run_t0 - (self.c["wait_s"] - g.run_w0))
            self._pass_compute += g.compute_s
            if self.device.type == "cuda" and g.views:
                self._record_use(g)
        self._tick += 1
        g.last_used = self._tick
        if self._implicit is g and g.in_use == 0:
            self._implicit = None
            self._pass_thread = None
            torch.set_grad_enabled(self._grad_prev)
            return
        self._prefetch()

    # -- residency -------------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError("this model was restored; its offload handle is closed")

    def _check_tensors(self, g: _Group) -> None:
        for s in g.slots:
            for sub, attr, is_param in s.refs:
                cur = (sub._parameters if is_param else sub._buffers).get(attr)
                if cur is not s.tensor:
                    raise TensorReplacedError(
                        f"{s.qualname} of group {g.name} was replaced behind oversub's back (a new "
                        f"{'Parameter' if is_param else 'buffer'} object): ot.restore(model) first, change it, then "
                        "offload again")
            if s.nbytes == 0:
                continue
            expected = (self._part(g, s).address + s.offset) if g.views else s.placeholder.data_ptr()
            if s.tensor.data_ptr() != expected:
                raise TensorReplacedError(
                    f"{s.qualname} of group {g.name} had its data replaced behind oversub's back "
                    "(`.data = ...` or a storage swap): ot.restore(model) first, change it, then offload again")

    def _used(self) -> int:
        return sum(g.reserved for g in self.groups if g.state != _OUT)

    @staticmethod
    def _part(g: _Group, s: _Slot):
        return g.buf.bufs[s.part] if isinstance(g.buf, _Parts) else g.buf

    def _install_views(self, g: _Group) -> None:
        with torch.no_grad(), torch.inference_mode(False):
            bases = [torch.from_dlpack(b) for b in (g.buf.bufs if isinstance(g.buf, _Parts) else [g.buf])]
            for s in g.slots:
                s.tensor.data = bases[s.part][s.offset: s.offset + s.nbytes].view(s.dtype).view(s.shape)
                if s.initial is None and not any(is_param for _, _, is_param in s.refs):
                    s.initial = s.tensor.data.clone()  # buffers are small; the first view holds the stored bytes
            del bases
        g.views = True

    def _record_use(self, g: _Group) -> None:
        """After ``g``'s forward has queued its kernels: its eviction waits for them (an event on the current
        stream), not for the whole device, so the host keeps queueing the next layers while the GPU works."""
        stream = torch.cuda.current_stream(self.device)
        for b in (g.buf.bufs if isinstance(g.buf, _Parts) else [g.buf]):
            b.record_use(stream)

    def _keep_written_buffers(self, g: _Group) -> None:
        """Before ``g`` is evicted: a buffer that its module wrote in ``forward`` (a running statistic of a custom
        module) would be lost with the read-only group, so it leaves the group and stays resident with the value
        written, from now on (warned once). Norm layers' statistics are resident from the start."""
        for s in list(g.slots):
            if s.initial is None or torch.equal(s.tensor.data, s.initial):
                continue
            with torch.no_grad(), torch.inference_mode(False):
                s.tensor.data = s.tensor.data.clone()
            g.slots.remove(s)
            s.initial = None
            self.c["buffers_kept_resident"] += 1
            warnings.warn(f"oversub.torch: buffer {s.qualname} of group {g.name} was written during a pass; it stays "
                          "resident from now on (its group is read-only)", stacklevel=2)

    def _drop_views(self, g: _Group) -> None:
        if not g.views:
            return
        for s in g.slots:
            s.tensor.data = s.placeholder
        g.views = False
        if g.buf.views:
            gc.collect()
        if g.buf.views:
            n = g.buf.views
            self._install_views(g)  # the group stays usable
            raise WeightsInUseError(
                f"the weights of group {g.name} ({type(g.module).__name__}) cannot be released: {n} tensors made from "
                "them are still alive (a weight, or a view of one, kept from a pass: delete it, or keep a .clone())")

    def _evict(self, g: _Group) -> None:
        if g.views:
            self._keep_written_buffers(g)
        self._drop_views(g)
        g.buf.page_out()
        g.state = _OUT
        g.prefetched = False
        self.c["evictions"] += 1
        self.c["bytes_paged_out"] += g.nbytes

    def _victims(self, pos: int | None, pinned: bool = False):
        """Resident groups not in use (those kept for the whole pass when ``pinned``, the others otherwise), best
        victim first: furthest next use (Belady) when a trace is being followed, least recently used otherwise."""
        cands = [g for g in self.groups if g.state == _RESIDENT and g.in_use == 0 and g.pinned == pinned]
        if pos is not None and self.trace is not None:
            cands.sort(key=lambda g: (-self._next_use(g.index, pos), g.last_used))
        else:
            cands.sort(key=lambda g: g.last_used)
        return cands

    def _poll(self) -> None:
        for g in self.groups:
            if g.state == _IN_FLIGHT:
                try:
                    done = g.handle.done()
                except _errors.Error:
                    g.state, g.handle = _OUT, None  # the page-in failed; the group is paged in on demand instead
                    self.c["prefetch_errors"] += 1
                    continue
                if done:
                    g.state, g.handle = _RESIDENT, None

    def _ensure_resident(self, g: _Group) -> None:
        c = self.c
        if g.state == _RESIDENT:
            if g.prefetched:
                g.prefetched = False
            else:
                c["hits"] += 1
        elif g.state == _IN_FLIGHT:
            t0 = time.perf_counter()
            try:
                g.handle.wait()
            except _errors.Error:
                g.state, g.handle = _OUT, None
                c["prefetch_errors"] += 1
            else:
                dt = time.perf_counter() - t0
                g.state, g.handle, g.prefetched = _RESIDENT, None, False
                g.wait_s += dt
                c["wait_s"] += dt
                c["prefetch_wait_s"] += dt
        if g.state == _OUT:
            pos = self._pos if self._following else None
            self._make_room(g, pos, need_it=True)
            t0 = time.perf_counter()
            g.buf.page_in()
            dt = time.perf_counter() - t0
            g.state = _RESIDENT
            g.page_ins += 1
            g.wait_s += dt
            c["wait_s"] += dt
            c["on_demand_s"] += dt
            c["page_ins_on_demand"] += 1
            c["bytes_on_demand"] += g.nbytes
            c["bytes_paged_in"] += g.nbytes
            c["bytes_from_host_tier" if g.tier == "host" else "bytes_from_store"] += g.nbytes
        if not g.views:
            self._install_views(g)

    def _land(self, g: _Group) -> None:
        """Waits for ``g``'s prefetch: resident, or paged out again where it failed (it is paged in on demand)."""
        try:
            g.handle.wait()
            g.state, g.handle = _RESIDENT, None
        except _errors.Error:
            g.state, g.handle = _OUT, None
            self.c["prefetch_errors"] += 1

    def _make_room(self, g: _Group, pos: int | None, need_it: bool, before: float = math.inf) -> bool:
        """Evicts until ``g`` fits. For a prefetch (``need_it`` False) only groups used later than ``before`` go."""
        while self.capacity - self._used() < g.reserved:
            victims = self._victims(pos)
            if victims and (need_it or pos is None or self._next_use(victims[0].index, pos) > before):
                self._evict(victims[0])
                continue
            if not need_it:
                return False
            inflight = [x for x in self.groups if x.state == _IN_FLIGHT]
            if inflight:  # room is held by prefetches: let the first one land, then it can go
                t0 = time.perf_counter()
                self._land(inflight[0])
                self.c["wait_s"] += time.perf_counter() - t0
                continue
            victims = self._victims(pos, pinned=True)  # only a page-in on demand takes a pinned group's room
            if victims:
                self._evict(victims[0])
                continue
            in_use = [x.name for x in self.groups if x.in_use]
            raise OffloadError(
                f"group {g.name} ({_fmt(g.reserved)}) does not fit beside the groups in use at once "
                f"({', '.join(in_use)}) in a capacity of {_fmt(self.capacity)}: nested groups must fit together")
        return True

    def _prefetch(self) -> None:
        if not self._following or not self.trace or self._lookahead == 0:
            return
        self._poll()
        trace, pos, T = self.trace, self._pos, len(self.trace)
        limit = self._lookahead
        seen: set[int] = set()
        for k in range(T):
            gi = trace[(pos + k) % T]
            if gi in seen:
                continue
            seen.add(gi)
            if len(seen) > limit:
                break
            g = self.groups[gi]
            if g.state != _OUT:
                continue
            if not self._make_room(g, pos, need_it=False, before=pos + k):
                break
            try:
                g.handle = g.buf.page_in_async()
            except _errors.Error:
                self.c["prefetch_errors"] += 1
                break
            g.state, g.prefetched, g.inflight_since = _IN_FLIGHT, True, time.perf_counter()
            g.page_ins += 1
            self.c["page_ins_prefetched"] += 1
            self.c["bytes_prefetched"] += g.nbytes
            self.c["bytes_paged_in"] += g.nbytes
            self.c["bytes_from_host_tier" if g.tier == "host" else "bytes_from_store"] += g.nbytes

    # -- stats and restore -----------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        if self._closed:
            raise NotOffloadedError(
                f"{type(self.model).__name__} was restored: this handle is closed and its pool freed (take "
                "ot.stats(model) before ot.restore(model))")
        c = self.c
        bw = c["bytes_on_demand"] / c["on_demand_s"] if c["on_demand_s"] > 0 else None
        hidden = None
        if bw:
            paging = c["on_demand_s"] + c["bytes_prefetched"] / bw
            hidden = max(0.0, 1.0 - (c["on_demand_s"] + c["prefetch_wait_s"]) / paging) if paging > 0 else None
        out: dict[str, Any] = {k: (int(v) if k not in ("wait_s", "on_demand_s", "prefetch_wait_s", "load_s") else v)
                               for k, v in c.items()}
        out.update(
            groups=len(self.groups),
            capacity_bytes=self.capacity,
            capacity_given_bytes=self.capacity_given,
            device_free_min_bytes=self._device_free_min,
            # torch's own device memory beside the pool (a KV cache, activations), on a GPU
            torch_allocated_bytes=int(torch.cuda.memory_allocated(self.device)) if self.device.type == "cuda" else None,
            offloaded_bytes=sum(g.nbytes for g in self.groups),
            kept_bytes=self.kept_bytes,
            host_tier_bytes=self.host_tier_bytes,
            pinned_groups=[g.name for g in self.groups if g.pinned],
            resident_groups=[g.name for g in self.groups if g.state == _RESIDENT],
            lookahead=self._lookahead,
            lookahead_estimates_s=dict(self._estimates),
            lookahead_calibration=dict(self._calibration),
            paging_hidden=hidden,
            page_in_bandwidth=bw,
            wait_s_per_group={g.name: g.wait_s for g in self.groups},
            page_ins_per_group={g.name: g.page_ins for g in self.groups},
            trace=[self.groups[i].name for i in self.trace] if self.trace is not None else None,
            last_pass=self.per_pass[-1] if self.per_pass else None,
            store_path=str(self.pool.store_path) if self.pool is not None else None,
            transfer_path=self.pool.transfer_path if self.pool is not None else None,
        )
        return out

    def _undo(self) -> None:
        """Gives every tensor of every group back as an ordinary tensor and frees the pool (restore, or a failed
        offload)."""
        for g in self.groups:
            if g.state == _IN_FLIGHT:
                try:
                    g.handle.wait()
                    g.state = _RESIDENT
                except _errors.Error:
                    g.state = _OUT
                g.handle = None
        for g in sorted(self.groups, key=lambda g: g.state != _RESIDENT):
            if g.buf is None:
                continue
            if not g.loaded:  # failed while being filled: its tensors still hold their own data
                with contextlib.suppress(_errors.Error):
                    g.buf.free()
                g.buf, g.state = None, _OUT
                continue
            if g.state == _OUT:
                with contextlib.suppress(_errors.AlreadyResidentError):
                    while self.capacity - self._used() < g.reserved:
                        victims = self._victims(None) or self._victims(None, pinned=True)
                        if not victims:
                            break
                        self._evict(victims[0])
                    g.buf.page_in()
                g.state = _RESIDENT
            if not g.views:
                self._install_views(g)
            with torch.no_grad(), torch.inference_mode(False):
                for s in g.slots:
                    s.tensor.data = s.tensor.data.clone()
                    if isinstance(s.tensor, nn.Parameter):
                        s.tensor.requires_grad_(s.requires_grad)
            g.views = False
            gc.collect()
            g.buf.free()
            g.buf, g.state = None, _OUT
        self.groups = []
        self.space = None
        self.pool = None

    def _views_held(self) -> list[str]:
        """The groups whose buffer a tensor outside oversub still views (one kept from a pass, a ``.data`` taken
        while the group was resident): their buffers cannot be freed. Changes nothing."""
        held = []
        for g in self.groups:
            if g.buf is None:
                continue
            had = g.views
            if had:
                for s in g.slots:
                    s.tensor.data = s.placeholder
                g.views = False
            if g.buf.views:
                gc.collect()
            n = g.buf.views
            if had:
                self._install_views(g)
            if n:
                held.append(f"{g.name} ({n})")
        return held

    def restore(self) -> nn.Module:
        """All or nothing: every group's weights are copied out first (paged in one by one); only when all are
        copied do the parameters take the copies, the hooks go and the pool is freed. On any error before that the
        model is still offloaded, and works."""
        if self._closed:
            raise NotOffloadedError(f"{type(self.model).__name__} was restored already; this handle is closed")
        if self._pass_depth or self._implicit is not None:
            raise ConcurrentUseError(f"{type(self.model).__name__} is running; restore it after the pass")
        for g in self.groups:  # let prefetches land: a buffer with a transfer in flight cannot be freed
            if g.state == _IN_FLIGHT:
                try:
                    g.handle.wait()
                    g.state = _RESIDENT
                except _errors.Error:
                    g.state = _OUT
                g.handle = None
        held = self._views_held()
        if held:
            raise WeightsInUseError(
                f"cannot restore {type(self.model).__name__}: tensors made from its offloaded weights are still alive "
                f"(views of groups {', '.join(held[:4])}{' ...' if len(held) > 4 else ''}), for example a tensor "
                "kept from a pass or a parameter's .data taken while resident; delete them (or copy them with "
                ".clone()) and call ot.restore(model) again. The model is still offloaded and works")
        copies: list[list[torch.Tensor]] = []
        for g in sorted(self.groups, key=lambda g: g.state != _RESIDENT):  # resident ones first: no page-in
            with self._paged_in(g, "restore()"), torch.no_grad(), torch.inference_mode(False):
                copies.append((g, [s.tensor.detach().clone(memory_format=torch.contiguous_format)
                                   for s in g.slots]))
        # Committed: nothing below fails on the model's account.
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for mod in self._guarded:
            mod.__dict__.pop("_apply", None)
        self._guarded = []
        with torch.no_grad(), torch.inference_mode(False):
            for g, data in copies:
                for s, d in zip(g.slots, data):
                    s.tensor.data = d
                    if isinstance(s.tensor, nn.Parameter):
                        s.tensor.requires_grad_(s.requires_grad)
                g.views = False
        del copies, data
        gc.collect()
        for g in self.groups:
            with contextlib.suppress(_errors.Error):
                g.buf.free()
            g.buf, g.state = None, _OUT
        self.groups = []
        self.space = None
        self.pool = None
        self._closed = True
        self.model.__dict__.pop(_ATTR, None)
        return self.model


# --- the API ----------------------------------------------------------------------------------------------------------


def offload(
    model: nn.Module,
    capacity: int | str = "2GiB",
    store: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    group: str | Callable[[nn.Module], Iterable[nn.Module]] = "auto",
    lookahead: int | str = "auto",
    keep: Iterable[nn.Module | str] | None = None,
    checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    order: Sequence[nn.Module | str | int] | None = None,
    *,
    trainable: bool = False,
    store_capacity: int | str | None = None,
    verify_checksums: bool = True,
    copy_checkpoint: bool = False,
    host_memory: int | str = "auto",
    device_headroom: int | str = "256MiB",
) -> Offloaded:
    """Offloads ``model``'s weights to an oversub pool of ``capacity`` bytes with a swap store in ``store``.

    - ``group``: ``"auto"`` (the children of the largest ``ModuleList``/``Sequential``, plus any other module whose
      own tensors are at least half a block, such as an embedding or a head), ``"block"`` (the children of every
      outermost ``ModuleList``/``Sequential``), ``"leaf"`` (every module with tensors of its own), or a callable
      ``model -> [modules]``. Tensors in no group, and tensors shared between groups, stay resident; so do the
      modules in ``keep``.
    - ``lookahead``: how many groups ahead of the running one page-ins start, once the order is known (``"auto"``:
      as many as the capacity holds beside the running group; ``0``: on demand only).
    - ``checkpoint``: a safetensors file (or a list, or a directory of them) to load the weights from, one tensor
      at a time, for a model built on the ``meta`` device. Names are the model's ``named_parameters()``/
      ``named_buffers()`` names. The file itself is the store of every group whose tensors lie together in it with
      the model's dtypes: such a group's buffer is the group's byte range of the file (rounded out to the direct-I/O
      alignment), its tensors are views at their offsets, and nothing is copied at start-up (``copy_checkpoint=True``
      copies every group into oversub's store instead, as for a group that does not qualify). oversub's checksums
      do not cover these groups (taking them would read the whole file); a file modified while the model is
      offloaded raises :class:`oversub.ExternalChangedError` at the next page-in.
    - ``order``: the order the groups run in (modules, names or indices), instead of learning it from the first pass.
    - ``host_memory``: host RAM for a tier between the device and the store (``"auto"``, a size, or ``0`` for none).
      The groups that fit (in their order) are written there at load, pinned on a CUDA device, and paged in from
      there; the store backs only the rest. ``"auto"`` on a CUDA device takes what ``MemAvailable`` leaves after an
      eighth of ``MemTotal`` (at least 2 GiB), up to the weights' size; on the CPU backend it is 0 (the device
      memory is host memory already: a tier would only copy RAM to RAM).
    - ``device_headroom``: on a CUDA device, the free device memory kept for what torch allocates beside the pool
      (a ``generate``'s KV cache, activations). Before each pass, if less is free, the pool's capacity shrinks by
      the shortfall (evicting groups, never below the largest group) and grows back, up to ``capacity``, once memory
      is free again. ``0`` keeps the capacity fixed.

    Raises :class:`GroupTooLargeError`, :class:`StoreTooSmallError` or :class:`CheckpointError` before anything
    moves; on any error the model is left as it was. Returns the :class:`Offloaded` handle (also kept on the model).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"offload() needs an nn.Module, not {type(model).__name__}")
    if trainable:
        raise NotImplementedError(
            "oversub.torch offloads weights for inference only: training needs the weights paged in again for the "
            "backward pass and written back after the optimizer step, which is not built yet (docs/torch.md)")
    if getattr(model, _ATTR, None) is not None:
        raise OffloadError(f"{type(model).__name__} is already offloaded (ot.restore(model) first)")
    if store is not None:
        where = os.path.abspath(os.fspath(store))
        if not os.path.exists(where) and not os.path.isdir(os.path.dirname(where)):
            raise StorePathError(
                f"store {os.fspath(store)!r} does not exist and {os.path.dirname(where)!r} is not a directory: pass an "
                "existing directory (a temporary store file is made there), a file, or a block device")
    h = Offloaded(
        model,
        capacity=_parse_size(capacity),
        store=os.fspath(store) if store is not None else None,
        device=str(device),
        lookahead=lookahead,
        order=order,
        trainable=trainable,
        store_capacity=_parse_size(store_capacity) if store_capacity is not None else None,
        verify_checksums=verify_checksums,
        copy_checkpoint=copy_checkpoint,
        host_memory=host_memory,
        device_headroom=_parse_size(device_headroom),
    )
    h._build(group, keep, checkpoint)
    model.__dict__[_ATTR] = h
    return h


def _handle(model: nn.Module) -> Offloaded:
    h = getattr(model, _ATTR, None) if isinstance(model, nn.Module) else None
    if h is None:
        raise NotOffloadedError(f"{type(model).__name__} is not offloaded by oversub.torch.offload")
    return h


def is_offloaded(model: nn.Module) -> bool:
    return isinstance(model, nn.Module) and getattr(model, _ATTR, None) is not None


def stats(model: nn.Module) -> dict[str, Any]:
    """Paging of an offloaded model so far: bytes paged in and out, page-ins on demand and prefetched, hits (groups
    found resident), time waited (in all and per group), the share of paging hidden behind compute, passes,
    divergences, and the trace (group names in the order recorded)."""
    return _handle(model).stats()


def restore(model: nn.Module) -> nn.Module:
    """Undoes :func:`offload`: every weight is copied into an ordinary tensor, the hooks are removed and the pool
    and its store are freed. All or nothing: :class:`WeightsInUseError` (the model still offloaded and working) when
    a tensor made from the offloaded weights is alive. Returns the model."""
    return _handle(model).restore()


def named_parameters(model: nn.Module, *, copy: bool = False) -> Iterable[tuple[str, torch.Tensor]]:
    """``model.named_parameters()`` with the real values, one group in memory at a time: each group is paged in
    (if it is not resident) and kept resident while its parameters are yielded, so a parameter's values are real
    until the iteration moves past its group (``copy=True`` yields copies, real for good). ``model.named_parameters()``
    itself yields the placeholders of paged-out groups: it is not paged in, because transformers iterates it for
    ``model.device`` and ``model.dtype`` on every ``generate``."""
    h = _handle(model)
    h._check_open()
    group_of = {id(s.tensor): g for g in h.groups for s in g.slots}
    with contextlib.ExitStack() as stack:
        held = None
        for name, p in model.named_parameters():
            g = group_of.get(id(p))
            if g is not None and g is not held:
                stack.close()
                stack.enter_context(h._paged_in(g, "named_parameters()"))
                held = g
            yield name, (p.detach().clone() if copy else p)


def state_dict(model: nn.Module, *args, **kwargs) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` of an offloaded model, with the real weights: the groups are paged in one at a time and
    their tensors copied out (``model.state_dict()`` does the same through oversub's hooks; this one also checks
    that the model is offloaded). It holds the whole model in memory, as any state dict does."""
    _handle(model)._check_open()
    return model.state_dict(*args, **kwargs)
