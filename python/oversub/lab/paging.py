"""Paging beside its peers: ``python -m oversub.lab.paging [--peers] [--size 1GiB] [--store DIR]``.

One buffer of ``size`` bytes is written to a file in ``store`` and read back, by each engine in turn:

- **oversub**: a writable buffer of a host :class:`oversub.Pool` paged out and in (``page_out``/``page_in``, and
  ``page_out_async().wait()``/``page_in_async().wait()``), with and without checksum verification. Page-out
  includes giving the memory back to the pool, page-in taking it again (what a user of the pager pays).
- **O_DIRECT**: one ``pwritev``/``preadv`` call on a file opened ``O_DIRECT`` into a page-aligned buffer, what a
  user writes by hand.
- **DeepSpeed aio** (``--peers``, when ``deepspeed`` is installed and its async I/O op builds: ``libaio-dev``):
  ``AsyncIOBuilder().load().aio_handle(block_size, queue_depth, single_submit=False, overlap_events=True,
  intra_op_parallelism=threads)`` over the grid the issue names (1 and 8 MiB blocks, 1 and 2 threads, queue depth
  8 and 32), ``sync_pwrite``/``sync_pread`` and ``async_*`` + ``wait``, into a locked buffer from
  ``new_cpu_locked_tensor``. DeepSpeed ZeRO-Infinity's defaults are block 1 MiB, queue depth 8, 1 thread.
- **KvikIO** (``--peers``, when ``kvikio`` imports): ``CuFile.write``/``CuFile.read`` of a host NumPy array (KvikIO's
  POSIX path; GPUDirect Storage needs a GPU and ``cufile``, and is not what runs here).

Every repetition runs every engine once, in the same order, so drift in the machine (a VM's stolen time, the host's
disk cache) falls on all of them alike; each engine's timed pass follows an untimed write and read of its own file
(``--no-warm`` skips it: on a VM whose disk the host caches, the first read of a file after other files were written
is several times slower whichever engine does it); the page cache is dropped (``/proc/sys/vm/drop_caches`` as root, else
``posix_fadvise(DONTNEED)`` on the engine's file) before every timed write and read. Reported per engine and
direction: the median wall time of the repetitions, GiB/s, and CPU seconds per GiB (this process's user + system
time over all its threads, ``getrusage(RUSAGE_SELF)``), and each engine's rate as a ratio to oversub's. The data read
back is checked against what was written on the first repetition (sampled pages, outside the timing).

The module is also callable: ``oversub.lab.paging(size="256MiB", samples=5, store=None, engine="auto",
device="host", ...)`` (or :func:`bench`, the same function) runs ``oversub bench paging`` itself, the same Rust
function the command runs, and returns its report as a dict (the JSON of ``--json``).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import _oversub

GIB = 1 << 30
MIB = 1 << 20
# The one size parser of every front (Rust's, as ``oversub.parse_size``): "2Gi", "512M", "1.5GiB" mean the same bytes
# here as in ``Pool(capacity=...)`` and ``oversub bench paging --size``; "1.5" (a fraction of a byte) is refused.
parse_size = _oversub.parse_size


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Engine:
    """One way of moving the buffer: ``write()`` stores it, ``read()`` brings it back into the same memory."""

    name: str
    config: str
    write: Callable[[], None]
    read: Callable[[], None]
    files: list[str]
    sample: Callable[[], bytes]  # sampled bytes of the buffer, to check what a read brought back
    clear: Callable[[], None]  # overwrite the buffer (outside timing) so a read that does nothing is caught
    close: Callable[[], None] = lambda: None
    family: str = ""
    write_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    write_cpu_s: list[float] = field(default_factory=list)
    read_cpu_s: list[float] = field(default_factory=list)
    # Async engines: how long the submitting call took to return (page_in_async, async_pread), per direction;
    # the time the caller's thread is held, which prefetching ahead of compute depends on.
    submit_s: dict[str, list[float]] = field(default_factory=lambda: {"write": [], "read": []})


def _pattern(size: int):
    import numpy as np

    # Distinct per 8 bytes, so a read from the wrong offset is caught by the sampled check.
    return (np.arange(size // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.uint8)


def _sampler(arr) -> Callable[[], bytes]:
    step = 4096 * 257  # one 64-byte sample every ~1 MiB, at shifting page offsets
    return lambda: b"".join(bytes(arr[i : i + 64]) for i in range(0, len(arr) - 64, step))


def _oversub_engines(size: int, store: str, source, checksums: tuple[bool, ...]) -> list[Engine]:
    import numpy as np

    from .. import Pool

    engines = []
    for verify in checksums:
        pool = Pool(size + 64 * MIB, store=store, store_capacity=size + 128 * MIB, verify_checksums=verify)
        buf = pool.address_space().alloc(size)
        arr = buf.numpy(np.uint8)
        arr[:] = source
        del arr

        def view(buf=buf):
            return buf.numpy(np.uint8)

        def sample(view=view):
            a = view()
            try:
                return _sampler(a)()
            finally:
                del a

        def clear():
            pass  # paged out: there is no memory to clear, page-in must bring the bytes back from the store

        label = "checksums" if verify else "no checksums"
        for mode in ("sync", "async"):
            submit_s: dict[str, list[float]] = {"write": [], "read": []}
            if mode == "sync":
                w, r = buf.page_out, buf.page_in
            else:
                def w(buf=buf, submit_s=submit_s):
                    t = time.perf_counter()
                    h = buf.page_out_async()
                    submit_s["write"].append(time.perf_counter() - t)
                    h.wait()

                def r(buf=buf, submit_s=submit_s):
                    t = time.perf_counter()
                    h = buf.page_in_async()
                    submit_s["read"].append(time.perf_counter() - t)
                    h.wait()
            engines.append(
                Engine(
                    name="oversub",
                    config=f"{mode}, {label}, {pool.transfer_path}",
                    write=w,
                    read=r,
                    files=[],
                    sample=sample,
                    clear=clear,
                    close=(lambda buf=buf, pool=pool: buf.free()) if mode == "async" else (lambda: None),
                    family="oversub",
                    submit_s=submit_s,
                )
            )
    return engines


def _odirect_engine(size: int, store: str, source, skipped: dict[str, str]) -> list[Engine]:
    import numpy as np

    path = os.path.join(store, f"oversub-lab-odirect-{os.getpid()}.dat")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError as e:
        skipped["O_DIRECT"] = f"the store's file system refuses O_DIRECT ({e.strerror}); oversub falls back to buffered I/O there"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return []
    mem = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
    arr = np.frombuffer(mem, dtype=np.uint8)
    arr[:] = source
    view = memoryview(mem)

    def write():
        done = os.pwritev(fd, [view], 0)
        if done != size:
            raise OSError(f"short write: {done} of {size} bytes")

    def read():
        done = os.preadv(fd, [view], 0)
        if done != size:
            raise OSError(f"short read: {done} of {size} bytes")

    def clear():
        arr[:] = 0

    def close():
        os.close(fd)
        os.unlink(path)

    return [Engine("O_DIRECT", "one pwritev/preadv", write, read, [path], _sampler(arr), clear, close, "baseline")]


def _deepspeed_engines(size: int, store: str, source, skipped: dict[str, str]) -> list[Engine]:
    try:
        import contextlib

        import torch

        # Its accelerator detection logs a warning to stdout while it imports, before its logger can be pointed
        # elsewhere below; --json puts the report on stdout.
        with contextlib.redirect_stdout(sys.stderr):
            from deepspeed.ops.op_builder import AsyncIOBuilder
    except Exception as e:  # noqa: BLE001 (any import failure means: not installed here)
        skipped["DeepSpeed aio"] = f"not installed ({type(e).__name__}: {e}); pip install 'oversub[peers]'"
        return []
    try:
        # DeepSpeed's logger writes to stdout, where --json puts the report.
        from deepspeed.utils import logger as ds_logger

        for h in ds_logger.handlers:
            if hasattr(h, "setStream"):
                h.setStream(sys.stderr)
    except Exception:  # noqa: BLE001  (only where its log lines go)
        pass
    try:
        builder = AsyncIOBuilder()
        if not builder.is_compatible(verbose=False):
            skipped["DeepSpeed aio"] = "its async I/O op cannot build here (needs libaio: apt-get install libaio-dev)"
            return []
        aio = builder.load(verbose=False)
    except Exception as e:  # noqa: BLE001
        skipped["DeepSpeed aio"] = f"its async I/O op did not load: {type(e).__name__}: {e}"
        return []
    engines = []
    src = torch.from_numpy(source)
    path = os.path.join(store, f"oversub-lab-deepspeed-{os.getpid()}.dat")
    tensor = None
    for block in (1 * MIB, 8 * MIB):
        for depth in (8, 32):
            for threads in (1, 2):
                handle = aio.aio_handle(block, depth, False, True, threads)
                if tensor is None:
                    # One locked buffer for every configuration, as ZeRO-Infinity reuses its swap buffers.
                    tensor = handle.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8))
                    tensor.copy_(src)
                    arr = tensor.numpy()
                for mode in ("sync", "async"):
                    submit_s: dict[str, list[float]] = {"write": [], "read": []}
                    if mode == "sync":
                        def w(h=handle):
                            if h.sync_pwrite(tensor, path) < 0:
                                raise OSError("DeepSpeed sync_pwrite failed")

                        def r(h=handle):
                            if h.sync_pread(tensor, path) < 0:
                                raise OSError("DeepSpeed sync_pread failed")
                    else:
                        def w(h=handle, submit_s=submit_s):
                            t = time.perf_counter()
                            h.async_pwrite(tensor, path)
                            submit_s["write"].append(time.perf_counter() - t)
                            if h.wait() < 0:
                                raise OSError("DeepSpeed async_pwrite failed")

                        def r(h=handle, submit_s=submit_s):
                            t = time.perf_counter()
                            h.async_pread(tensor, path)
                            submit_s["read"].append(time.perf_counter() - t)
                            if h.wait() < 0:
                                raise OSError("DeepSpeed async_pread failed")

                    def clear(arr=arr):
                        arr[:] = 0

                    # ZeRO-Infinity's "aio" defaults: block 1 MiB, queue depth 8, 1 thread, overlap_events.
                    default = (block, depth, threads) == (MIB, 8, 1)
                    engines.append(
                        Engine(
                            "DeepSpeed aio",
                            f"{mode}, block {block // MIB} MiB, depth {depth}, {threads} thread{'s' * (threads > 1)}"
                            + (" (ZeRO default)" if default else ""),
                            w,
                            r,
                            [path],
                            _sampler(arr),
                            clear,
                            family="DeepSpeed aio",
                            submit_s=submit_s,
                        )
                    )

    def close():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    engines[-1].close = close
    return engines


def _kvikio_engines(size: int, store: str, source, skipped: dict[str, str]) -> list[Engine]:
    try:
        import kvikio
        import kvikio.defaults
        import numpy as np
    except Exception as e:  # noqa: BLE001
        skipped["KvikIO"] = f"not installed ({type(e).__name__}: {e}); pip install 'oversub[peers]'"
        return []
    path = os.path.join(store, f"oversub-lab-kvikio-{os.getpid()}.dat")
    arr = np.empty(size, dtype=np.uint8)
    arr[:] = source
    engines = []
    try:
        for threads in (1, 4):
            def set_threads(n=threads):
                try:
                    kvikio.defaults.set({"num_threads": n})
                except (AttributeError, TypeError):
                    kvikio.defaults.num_threads_reset(n)

            def w(set_threads=set_threads):
                set_threads()
                with kvikio.CuFile(path, "w") as f:
                    done = f.write(arr)
                if done != size:
                    raise OSError(f"KvikIO short write: {done} of {size}")

            def r(set_threads=set_threads):
                set_threads()
                with kvikio.CuFile(path, "r") as f:
                    done = f.read(arr)
                if done != size:
                    raise OSError(f"KvikIO short read: {done} of {size}")

            def clear():
                arr[:] = 0

            engines.append(
                Engine("KvikIO", f"host memory, POSIX, {threads} thread{'s' * (threads > 1)}", w, r, [path],
                       _sampler(arr), clear, family="KvikIO")
            )
        w()  # fails here, not mid-run, where KvikIO cannot run at all (e.g. no CUDA runtime)
    except Exception as e:  # noqa: BLE001
        skipped["KvikIO"] = f"could not run on host memory here: {type(e).__name__}: {e}"
        return []

    def close():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    engines[-1].close = close
    return engines


def _drop_caches(files: list[str]) -> str:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError:
        for p in files:
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "fadvise"


def run(
    size: str | int = "1GiB",
    store: str | None = None,
    repeats: int = 5,
    peers: bool = False,
    checksums: tuple[bool, ...] = (False, True),
    progress: Callable[[str], None] | None = None,
    warm: bool = True,
) -> dict[str, Any]:
    """Measures every engine; returns ``{"rows": [...], "skipped": {...}, ...}`` (see the module's doc)."""
    import numpy as np  # noqa: F401  (needed by every engine; fail early with a clear ImportError)

    nbytes = parse_size(size)
    if nbytes <= 0 or nbytes % (1 << 21):
        raise ValueError("size must be a positive multiple of 2 MiB")
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    say = progress or (lambda _msg: None)
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=store, prefix="oversub-lab-") as tmp:
        say(f"preparing a {nbytes / GIB:.2f} GiB pattern")
        source = _pattern(nbytes)
        engines = _oversub_engines(nbytes, tmp, source, checksums)
        engines += _odirect_engine(nbytes, tmp, source, skipped)
        if peers:
            engines += _deepspeed_engines(nbytes, tmp, source, skipped)
            engines += _kvikio_engines(nbytes, tmp, source, skipped)
        expected = _sampler(source)()
        del source
        drop = "none"
        try:
            for rep in range(repeats):
                for i, e in enumerate(engines):
                    say(f"repetition {rep + 1}/{repeats}: {e.name} ({e.config}) [{i + 1}/{len(engines)}]")
                    if warm:
                        # Untimed: on a VM whose disk the host caches, the first read of a file after other files
                        # were written runs at a fraction of the next one's rate (host-cache state, not the
                        # engine), and whichever engine comes first on its file would pay it.
                        e.write()
                        e.read()
                    drop = _drop_caches(e.files)
                    c0, t0 = _cpu_s(), time.perf_counter()
                    e.write()
                    t1, c1 = time.perf_counter(), _cpu_s()
                    if rep == 0:
                        e.clear()
                    drop = _drop_caches(e.files)
                    c2, t2 = _cpu_s(), time.perf_counter()
                    e.read()
                    t3, c3 = time.perf_counter(), _cpu_s()
                    if rep == 0 and e.sample() != expected:
                        raise RuntimeError(f"{e.name} ({e.config}) read back other bytes than it wrote")
                    e.write_s.append(t1 - t0)
                    e.read_s.append(t3 - t2)
                    e.write_cpu_s.append(c1 - c0)
                    e.read_cpu_s.append(c3 - c2)
        finally:
            for e in engines:
                try:
                    e.close()
                except Exception:  # noqa: BLE001  (a failed cleanup must not hide the run's own error)
                    pass
    rows = []
    for e in engines:
        for direction, secs, cpu in (("write", e.write_s, e.write_cpu_s), ("read", e.read_s, e.read_cpu_s)):
            med = statistics.median(secs)
            rows.append(
                {
                    "engine": e.name,
                    "family": e.family,
                    "config": e.config,
                    "direction": direction,
                    "median_s": med,
                    "min_s": min(secs),
                    "max_s": max(secs),
                    "gib_per_s": nbytes / GIB / med,
                    "cpu_s_per_gib": statistics.median(cpu) / (nbytes / GIB),
                    "samples_s": secs,
                    # Async rows: median time for the submitting call to return (warm and timed passes alike).
                    "submit_ms": statistics.median(e.submit_s[direction]) * 1e3 if e.submit_s[direction] else None,
                }
            )
    # Ratios against oversub's best configuration per direction, and the best of each family.
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        key = (r["family"], r["direction"])
        if key not in best or r["gib_per_s"] > best[key]["gib_per_s"]:
            best[key] = r
    for r in rows:
        ref = best.get(("oversub", r["direction"]))
        r["vs_oversub"] = r["gib_per_s"] / ref["gib_per_s"] if ref else None
        r["best_of_family"] = best[(r["family"], r["direction"])] is r
    return {
        "size_bytes": nbytes,
        "repeats": repeats,
        "store_dir": store or tempfile.gettempdir(),
        "cache_drop": drop,
        "warm_pass": warm,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "rows": rows,
        "skipped": skipped,
    }


def format_table(report: dict[str, Any], best_only: bool = False) -> str:
    head = ["engine", "configuration", "direction", "median s", "GiB/s", "CPU s/GiB", "× oversub's rate"]
    lines = [head]
    for direction in ("write", "read"):
        for r in report["rows"]:
            if r["direction"] != direction or (
                best_only and not r["best_of_family"] and "ZeRO default" not in r["config"]
            ):
                continue
            mark = " *" if r["best_of_family"] and r["family"] not in ("", "baseline") else ""
            lines.append(
                [
                    r["engine"] + mark,
                    r["config"],
                    "page-out / write" if direction == "write" else "page-in / read",
                    f"{r['median_s']:.3f}",
                    f"{r['gib_per_s']:.2f}",
                    f"{r['cpu_s_per_gib']:.3f}",
                    f"{r['vs_oversub']:.2f}" if r["vs_oversub"] else "-",
                ]
            )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    size = report["size_bytes"]
    out.append("")
    out.append(
        f"{size / GIB:.2f} GiB buffer, medians of {report['repeats']}, cache dropped before every write and read "
        f"({report['cache_drop']}); * = the best configuration of its engine; ratio = rate / oversub's best rate"
    )
    submits = [
        f"{r['engine']} ({r['config']}) {r['direction']}: {r['submit_ms']:.3f} ms"
        for r in report["rows"]
        if r.get("submit_ms") is not None and (not best_only or r["family"] == "oversub" or r["best_of_family"])
    ]
    if submits:
        out.append("async calls return after (median): " + "; ".join(submits))
    for name, why in report["skipped"].items():
        out.append(f"skipped {name}: {why}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m oversub.lab.paging",
        description="Page-out/page-in of one buffer by oversub, by plain O_DIRECT and (--peers) by DeepSpeed's "
        "async I/O and KvikIO, in one run on the same store.",
    )
    p.add_argument("--size", default="1GiB", help="buffer size (default 1GiB; a multiple of 2 MiB)")
    p.add_argument("--store", default=None, help="directory for the files (default $TMPDIR; use the NVMe's mount)")
    p.add_argument("--repeats", type=int, default=5, help="repetitions per engine; medians are reported (default 5)")
    p.add_argument("--peers", action="store_true", help="add DeepSpeed aio and KvikIO where installed")
    p.add_argument("--checksums", choices=["both", "on", "off"], default="both",
                   help="oversub with checksum verification on, off or both (default both)")
    p.add_argument("--no-warm", action="store_true",
                   help="no untimed write+read of each engine's file right before its timed pass")
    p.add_argument("--all", action="store_true", help="every configuration in the table, not only each best")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    checksums = {"both": (False, True), "on": (True,), "off": (False,)}[a.checksums]
    progress = None if a.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        report = run(a.size, a.store, a.repeats, a.peers, checksums, progress, warm=not a.no_warm)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if a.json else format_table(report, best_only=not a.all))
    return 0


def bench(
    size: str | int | None = None,
    samples: int | None = None,
    store: str | os.PathLike | list | None = None,
    engine: str | None = None,
    device: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """``oversub bench paging`` from Python: the same measurement (``oversub_lab::paging::run``), nothing printed.

    Every option left out (or ``None``) takes the lab's default, which is the command's (``defaults()`` lists
    them). ``store`` is a directory or file (or a list of them, striped; ``None``: a new file in the temporary
    directory); ``engine`` ``"auto"``, ``"uring"`` or ``"psync"``; ``device`` ``"host"`` or ``"cuda"``. The keyword
    ``options`` are the command's other flags in snake case: ``max_io``, ``queue_depth``, ``cache_drop``
    (``"auto"``, ``"drop-caches"``, ``"fadvise"``), ``release`` (``"recycle"``, ``"immediate"``, ``"lazy"``),
    ``checksums``, ``stripe_bytes``, ``io_auto``, ``io_profile``, ``force_store``, ``gpu``, ``staging_chunk``,
    ``staging_chunks``, ``pageable_staging``, ``skip_unified``, ``cufile``. Returns the report as a dict, the JSON
    ``--json`` writes.
    """
    from .._oversub import lab_paging

    if store is None:
        stores = []
    elif isinstance(store, (str, os.PathLike)):
        stores = [os.fspath(store)]
    else:
        stores = [os.fspath(s) for s in store]
    return lab_paging(size, samples, stores, engine, device, **options)


def defaults() -> dict[str, Any]:
    """The defaults :func:`bench` runs with: the lab's ``PagingOptions::default()``, which ``oversub bench paging``
    also declares its flags' defaults from (sizes in bytes, enums by their flag names)."""
    from .._oversub import lab_defaults

    return lab_defaults("paging")


class _CallableModule(types.ModuleType):
    """This module, callable: ``oversub.lab.paging(...)`` is :func:`bench`."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return bench(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
