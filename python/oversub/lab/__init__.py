"""The lab's experiments from Python, each the function the ``oversub`` command calls: ``oversub.lab.paging(...)``
(``bench paging``), ``oversub.lab.tenants(...)`` (``bench tenants``), ``oversub.lab.interference(...)`` (``bench
interference``), ``oversub.lab.tasks(...)`` (``tasks``), ``probe(...)`` and ``write_profile(...)`` (``probe``).

Measurements that put oversub beside the tools a user would otherwise pick, in one run:

``python -m oversub.lab.paging --help``: page-out/page-in of one large buffer by oversub, by plain O_DIRECT
``pwritev``/``preadv``, and (with ``--peers``, when installed) by DeepSpeed's async I/O handle and KvikIO, on the
same store directory, the same buffer size and the same cache drops; medians of several repetitions, interleaved so
that drift in the machine falls on every engine alike; wall time, GiB/s and CPU seconds per GiB paged.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["paging", "tenants", "interference", "tasks", "probe", "write_profile"]  # the experiments are imported
# on use: ``python -m oversub.lab.paging`` (or ``.interference``, ``.tasks``, run as child processes) must not find
# its module imported already

_EXPERIMENTS = ("paging", "tenants", "interference", "tasks")


def __getattr__(name: str) -> Any:
    if name in _EXPERIMENTS:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def probe(quick: bool = True, only: list[str] | None = None, skip: list[str] | None = None,
          dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """``oversub probe`` from Python (the quick plan by default): the results as a dict (the JSON of ``--json``),
    with the platform profile made of them under ``"profile"`` and what could not go in under ``"profile_notes"``.
    ``only``/``skip`` name probes: ``tlb``, ``faults``, ``shootdown``, ``btree``, ``copy``, ``storage``, ``gpu``;
    ``dir`` is where the storage probe's file goes (default: the temporary directory)."""
    from .._oversub import lab_probe

    return lab_probe(quick, only, skip, None if dir is None else os.fspath(dir))


def write_profile(results_or_profile: dict[str, Any], path: str | os.PathLike) -> None:
    """Writes the platform profile of :func:`probe`'s results (or a profile dict) to ``path`` as TOML, the file
    ``oversub probe --out`` writes and ``plan``, ``run``, ``sim uvm`` and ``sim swap`` read."""
    import json

    from .._oversub import lab_write_profile

    # A profile has a "profile" table of its own (its [profile] header): results are told apart by their notes.
    is_results = "profile_notes" in results_or_profile
    profile = results_or_profile["profile"] if is_results else results_or_profile
    lab_write_profile(json.dumps(profile), os.fspath(path))
