"""Type stubs of the native module (import from ``oversub``)."""

import os
import pathlib
import sys
from collections.abc import Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Protocol, Self, TypeAlias, final, overload

from .records import BufferInfo, BufferState, PoolStats

_Size: TypeAlias = int | str
"""Bytes as an int, or a size string: "4096", "256MiB", "1GiB"."""
_StrPath: TypeAlias = str | os.PathLike[str]

class _DeviceLike(Protocol):
    """What ``device=`` takes besides a string: a ``torch.device`` or anything with ``.type`` and ``.index``."""

    @property
    def type(self) -> str: ...
    @property
    def index(self) -> int | None: ...

_Device: TypeAlias = str | _DeviceLike
""""host"/"cpu", "cuda"/"gpu", "cuda:N", or a ``torch.device``."""

__version__: str

__all__ = [
    "__version__",
    "parse_size",
    "Pool",
    "AddressSpace",
    "Buffer",
    "Handle",
    "ExternalFile",
    "_rust_paging_loop",
    "load_schedule",
    "plan_schedule",
    "run_schedule",
    "sim_uvm",
    "ratio_percent",
    "sim_swap",
    "Slot",
    "SlotView",
    "_NoopWork",
    "NOOP",
    "lab_paging",
    "lab_defaults",
    "lab_run",
    "lab_child",
    "lab_probe",
    "lab_write_profile",
]

def parse_size(size: _Size) -> int:
    """Bytes from an int or a size string ("4GiB", "2Gi", "512M", "100MB", "1.5GiB"), by the parser every front
    shares; ValueError for a fraction of a byte ("1.5"), an unknown unit or a negative int."""

@final
class Pool:
    """A fixed amount of device memory shared by address spaces, with a swap store behind it.

    ``store`` is None (a temporary file in $TMPDIR), a directory (a temporary file there), a file or block device,
    or a list of those: the store is then striped over them (4 MiB units dealt to each in turn, one batch of I/O
    on all of them per transfer), its ``store_capacity`` split evenly among them.

    ``device`` is "host" (or "cpu", or None, the default), "cuda" (or "gpu"), "cuda:N", or a ``torch.device`` (any object with ``.type``
    and ``.index``); ``device_index`` names the CUDA ordinal too and must agree with one given in ``device``.
    ``close()`` (or the end of ``with Pool(...) as pool:``) frees every buffer; later use raises PoolClosedError.
    """

    def __new__(
        cls,
        capacity: _Size,
        store: _StrPath | Sequence[_StrPath] | None = None,
        device: _Device | None = None,
        *,
        store_capacity: _Size | None = None,
        host_tier: _Size | None = None,
        pinned_host_tier: bool = False,
        verify_checksums: bool = True,
        device_index: int | None = None,
        force_store: bool = False,
        scrub_store: bool = True,
        io: Literal["default", "auto"] = "default",
    ) -> Self: ...
    def address_space(self) -> AddressSpace:
        """A new address space: a set of buffers paged together. PoolClosedError after ``close()``."""
    def close(self) -> None:
        """Frees every buffer of the pool and closes it (again: nothing); ViewError, and nothing closed, while a
        buffer has live views. The store is given up at once (scrubbed, unlocked) when nothing is left on it."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> bool: ...
    @property
    def capacity_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def device(self) -> Literal["host", "cuda"]: ...
    @property
    def device_index(self) -> int | None:
        """The CUDA ordinal; None for a host pool."""
    @property
    def store_alignment(self) -> int: ...
    @property
    def store_path(self) -> pathlib.Path:
        """The store's path; the first member's when it is striped over several locations."""
    @property
    def io_point(self) -> dict[str, Any]:
        """Request sizes and queue depths of the store, and their source ("default" or "auto")."""
    @property
    def store_paths(self) -> list[pathlib.Path]:
        """Every file or device the store is striped over, in stripe order (one when it is not striped)."""
    @property
    def transfer_path(self) -> str: ...
    def stats(self) -> PoolStats:
        """capacity_bytes, used_bytes, store_capacity_bytes, store_free_bytes (and the host tier's, if any), as
        attributes or ``stats()["used_bytes"]``."""

@final
class ExternalFile:
    """A file oversub reads but never writes (a model checkpoint), for ``AddressSpace.alloc_external``."""

    def __new__(cls, path: str | os.PathLike[str]) -> Self: ...
    @property
    def path(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def direct(self) -> bool: ...

@final
class AddressSpace:
    """A set of buffers paged together; made by ``Pool.address_space()``."""

    def alloc_external(self, file: ExternalFile | str | os.PathLike[str], offset: int, nbytes: _Size) -> Buffer:
        """A read-only buffer whose stored copy is ``file``'s bytes from ``offset`` (a checkpoint as the store)."""
    def alloc(self, nbytes: _Size, read_only: bool = False, *, unpageable: bool = False) -> Buffer:
        """A resident, zero-filled buffer. Raises OutOfMemoryError when the pool has no room."""
    def page_out_all(self) -> None:
        """Pages out every resident pageable buffer (ViewError, and nothing paged, if one has live views)."""
    def page_in_all(self) -> None:
        """Pages in every paged-out buffer."""
    @property
    def resident_bytes(self) -> int: ...
    def __len__(self) -> int: ...

@final
class Buffer:
    """Device memory that can be paged out to the store and back, keeping its address."""

    def page_out(self) -> None: ...
    def record_use(self, stream: Any) -> None: ...
    def page_in(self) -> None: ...
    def page_out_async(self) -> Handle: ...
    def page_in_async(self) -> Handle: ...
    def free(self) -> None: ...
    def write(self, data: bytes | bytearray | memoryview | Any, offset: int = 0) -> None: ...
    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes: ...
    def readinto(self, b: bytearray | memoryview | Any, offset: int = 0) -> int:
        """Fills the writable, C-contiguous ``b`` from ``offset``; the bytes copied (0 at the end)."""
    def numpy(self, dtype: Any = None, shape: int | Sequence[int] | None = None) -> Any:
        """A zero-copy ``numpy.ndarray`` over the resident host buffer (default: 1-D uint8 of all of it)."""
    @property
    def nbytes(self) -> int: ...
    @property
    def state(self) -> BufferState:
        """A str enum: ``buf.state == "resident"`` holds."""
    @property
    def address(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def device(self) -> Literal["host", "cuda"]: ...
    @property
    def views(self) -> int: ...
    def info(self) -> BufferInfo: ...
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA buffers only (AttributeError for host buffers)."""
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class Handle:
    """An asynchronous page-in or page-out in flight, with ``concurrent.futures.Future``'s interface;
    ``await handle`` suspends until the completion wakes it (no executor thread)."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool:
        """Always False: paging operations cannot be cancelled."""
    def wait(self, timeout: float | None = None) -> None: ...
    def result(self, timeout: float | None = None) -> None:
        """Waits; None, or raises the operation's error or TimeoutError."""
    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Waits; the operation's error (not raised) or None; TimeoutError when not done in time."""
    def add_done_callback(self, fn: Callable[[Handle], object]) -> None:
        """``fn(handle)`` once complete (at once if it is); its exceptions are logged on the "oversub" logger."""
    def __await__(self) -> Generator[Any, None, None]: ...
    @property
    def kind(self) -> Literal["page_in", "page_out"]: ...
    @property
    def buffer(self) -> Buffer: ...

@final
class Slot:
    """One slot of a component's Python work (``run_schedule(work={name: fn})``), valid only during ``fn(slot)``:
    afterwards buffer access raises ``oversub.errors.ViewError`` and ``remaining_s()``/``overrun()`` RuntimeError.
    Every view it hands out keeps its buffer resident; one still alive when ``fn`` returns stops the run."""

    @property
    def component(self) -> str: ...
    @property
    def instance(self) -> int:
        """The how-many-th slot of the component, from 0 (warm-up included); 0 in an init."""
    @property
    def hyperperiod(self) -> int: ...
    @property
    def planned_start_s(self) -> float: ...
    @property
    def deadline_s(self) -> float: ...
    @property
    def is_init(self) -> bool: ...
    @property
    def active(self) -> bool:
        """False once the work function returned."""
    @property
    def buffer_names(self) -> tuple[str, ...]: ...
    @property
    def buffers(self) -> Mapping[str, Any]:
        """Buffer name -> 1-D ``uint8`` ``numpy.ndarray`` over the resident memory (read-only for read-only
        buffers, except in an init). Needs NumPy."""
    def array(self, name: str, dtype: Any, shape: int | Sequence[int] | None = None) -> Any:
        """A typed zero-copy ``numpy.ndarray`` of a buffer; ViewError when the shape needs more bytes than it has."""
    def view(self, name: str) -> SlotView:
        """The buffer-protocol / DLPack exporter of one buffer."""
    def is_read_only(self, name: str) -> bool: ...
    def remaining_s(self) -> float: ...
    def overrun(self) -> bool: ...

@final
class SlotView:
    """One buffer of a running slot: ``memoryview(v)``, ``numpy.from_dlpack(v)``, ``torch.from_dlpack(v)``. Each
    export keeps the buffer resident until released; exporting after the slot raises ViewError."""

    @property
    def name(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@final
class _NoopWork: ...

NOOP: Final[_NoopWork]
"""As a work or init: a Rust closure that does nothing (the baseline for measuring the cost of Python work)."""

_Work: TypeAlias = Callable[[Slot], None] | _NoopWork

def load_schedule(config: _StrPath | None = None, *, text: str | None = None) -> dict[str, Any]:
    """Reads a schedule configuration (a TOML path, or ``text=``): platform, components, table, demand_bytes,
    oversubscription."""

def plan_schedule(
    config: _StrPath | None = None,
    *,
    text: str | None = None,
    mode: Literal["all", "async", "sync", "demand"] = "all",
    profile: _StrPath | None = None,
    bandwidths: tuple[float, float] | None = None,
    demand_bandwidths: tuple[float, float] | None = None,
    inflate: float = 1.0,
) -> dict[str, Any]:
    """Feasibility per mode, paging per slot, minimum period (as ``oversub plan --json``); ``demand_bandwidths``
    prices demand paging at its own speeds, ``inflate`` plans every work that many times as long."""

@overload
def run_schedule(
    config: _StrPath | None = None,
    *,
    text: str | None = None,
    mode: Literal["async", "sync", "demand"] = "async",
    hyperperiods: int = 3,
    warmup: int = 1,
    profile: _StrPath | None = None,
    bandwidths: tuple[float, float] | None = None,
    pin_threads: bool = False,
    at_min_period: bool = False,
    settle_s: float = 0.5,
    work: Mapping[str, _Work] | None = None,
    init: Mapping[str, _Work] | None = None,
    inflate: float = 1.0,
) -> dict[str, Any]: ...
@overload
def run_schedule(
    config: _StrPath | None = None,
    *,
    text: str | None = None,
    mode: Literal["all"],
    hyperperiods: int = 3,
    warmup: int = 1,
    profile: _StrPath | None = None,
    bandwidths: tuple[float, float] | None = None,
    pin_threads: bool = False,
    at_min_period: bool = False,
    settle_s: float = 0.5,
    work: Mapping[str, _Work] | None = None,
    init: Mapping[str, _Work] | None = None,
    inflate: float = 1.0,
) -> dict[Literal["modes"], dict[str, dict[str, Any]]]: ...
def sim_uvm(
    *,
    workloads: str | Sequence[str] | None = None,
    traces: _StrPath | Sequence[_StrPath] | None = None,
    ratios: float | str | Sequence[float | str] | None = None,
    policies: str | Sequence[str] | None = None,
    suite: bool = False,
    quick: bool = False,
    scale: float | None = None,
    seed: int = 1,
    graph: _StrPath | None = None,
    profile: _StrPath | None = None,
    l2: _Size | None = None,
    time_model: Literal["overlap", "serial"] | None = None,
    machine_scale: Literal["capacity", "none"] | None = None,
    decide_with: Literal["paper", "machine"] = "paper",
    eviction: Literal["allocation", "lru"] | None = None,
    eviction_unit: Literal["page", "group", "block"] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The unified-memory migration-policy simulator: runs, speedups, cost_model, ... (as ``oversub sim uvm``)."""

def ratio_percent(value: float | str) -> float:
    """One oversubscription ratio in percent, read as ``sim_uvm`` reads it (``200``, ``"200%"``, ``"2x"``)."""

def sim_swap(
    *,
    scenarios: str | Sequence[str] | None = None,
    scenario_files: _StrPath | Sequence[_StrPath] | None = None,
    suite: bool = False,
    policies: str | Sequence[str] | None = None,
    alpha_rules: str | Sequence[str] | None = None,
    capacity: _Size | None = None,
    sms: int | None = None,
    evictable: Literal["not-transferring", "between-subtasks"] | None = None,
    direct_access: Literal["overlapped", "serial"] | None = None,
    profile: _StrPath | None = None,
    seed: int = 1,
    seeds: int | str | Sequence[int] | None = None,
    priorities: Literal["measured", "contention", "given"] | None = None,
    check: bool = False,
) -> dict[str, Any]:
    """The contention-aware swap-space simulator: scenarios, summaries (as ``oversub sim swap``)."""

def _rust_paging_loop(buffers: list[Buffer], rounds: int) -> tuple[float, int]: ...

# The lab (oversub_lab), called through oversub.lab.paging(...), oversub.probe(...) and oversub.write_profile(...).
def lab_paging(
    size: int | str | None = None,
    samples: int | None = None,
    store: list[str] = ...,
    engine: Literal["auto", "uring", "psync"] | None = None,
    device: Literal["host", "cuda"] | None = None,
    *,
    max_io: int | str | None = None,
    queue_depth: int | None = None,
    cache_drop: Literal["auto", "drop-caches", "fadvise"] | None = None,
    release: Literal["immediate", "lazy", "recycle"] | None = None,
    checksums: bool | None = None,
    stripe_bytes: int | str | None = None,
    io_auto: bool | None = None,
    io_profile: _StrPath | None = None,
    force_store: bool | None = None,
    gpu: int | None = None,
    staging_chunk: int | str | None = None,
    staging_chunks: int | None = None,
    pageable_staging: bool | None = None,
    skip_unified: bool | None = None,
    cufile: bool | None = None,
) -> dict[str, Any]: ...
def lab_defaults(experiment: Literal["paging", "tenants", "interference", "tasks"]) -> dict[str, Any]: ...
def lab_run(
    experiment: Literal["tenants", "interference", "tasks"],
    options: dict[str, Any] | None = None,
    child: list[str] | None = None,
) -> dict[str, Any]: ...
def lab_child(argv: list[str]) -> int | None: ...
def lab_probe(
    quick: bool = True,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    dir: _StrPath | None = None,
) -> dict[str, Any]: ...
def lab_write_profile(profile_json: str, path: _StrPath) -> None: ...
