"""Typed results of the pager: :class:`PoolStats` (``Pool.stats()``), :class:`BufferInfo` (``Buffer.info()``) and
:class:`BufferState` (``Buffer.state``).

They read as attributes (``pool.stats().used_bytes``) and, for code written against the dicts they replace, as
read-only mappings (``pool.stats()["used_bytes"]``, ``dict(info)``, ``info == {...}``); ``as_dict()`` gives a plain
dict. A :class:`BufferState` is a ``str`` enum, so ``buf.state == "resident"`` holds as before.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["BufferInfo", "BufferState", "PoolStats"]


class BufferState(enum.StrEnum):
    """Where a buffer stands; equal to its old string (``BufferState.RESIDENT == "resident"``)."""

    RESIDENT = "resident"
    PAGING_OUT = "paging_out"
    PAGED_OUT = "paged_out"
    PAGING_IN = "paging_in"


class _Record(Mapping[str, Any]):
    """A frozen dataclass that is also a read-only mapping of its fields; optional fields that are None are absent
    from the mapping, as the keys were from the dicts these records replace."""

    __slots__ = ()
    _OPTIONAL: frozenset[str] = frozenset()

    def _keys(self) -> list[str]:
        return [
            f.name
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if not (f.name in self._OPTIONAL and getattr(self, f.name) is None)
        ]

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def as_dict(self) -> dict[str, Any]:
        """The record as a plain dict (what ``stats()``/``info()`` returned before); a state as its string."""
        return {k: (str(v) if isinstance(v, BufferState) else v) for k, v in self.items()}


@dataclasses.dataclass(frozen=True, eq=False)
class PoolStats(_Record):
    """Occupancy of a pool, in bytes; the host-tier fields are None (and absent as keys) without a host tier."""

    capacity_bytes: int
    used_bytes: int
    store_capacity_bytes: int
    store_free_bytes: int
    host_tier_used_bytes: int | None = None
    host_tier_capacity_bytes: int | None = None

    _OPTIONAL = frozenset({"host_tier_used_bytes", "host_tier_capacity_bytes"})


@dataclasses.dataclass(frozen=True, eq=False)
class BufferInfo(_Record):
    """A snapshot of a buffer."""

    nbytes: int
    reserved_bytes: int
    address: int
    state: BufferState
    read_only: bool
    unpageable: bool
    stored: bool
    in_host_tier: bool
    views: int
