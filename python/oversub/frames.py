"""pandas views of the dicts that the schedule runtime and the simulators return.

Only :func:`to_dataframe` lives here; pandas is imported when it is called, so ``import oversub`` never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["to_dataframe"]


def _list_keys(result: Mapping[str, Any]) -> list[str]:
    return [k for k, v in result.items() if isinstance(v, (list, tuple, Mapping))]


def to_dataframe(result: Any, key: str | None = None) -> Any:
    """A :class:`pandas.DataFrame` with one row per record of a result.

    Args:
        result: a list of row dicts (``run_schedule(...)["slots"]``), or a result dict together with ``key``.
        key: the entry of ``result`` that holds the rows: ``"slots"`` or ``"ops"`` of a ``run_schedule`` result,
            ``"runs"`` or ``"speedups"`` of ``sim_uvm``, ``"scenarios"`` or ``"summaries"`` of ``sim_swap``. An
            entry that is a dict of dicts (``plan_schedule(...)["modes"]``) gives one row per inner dict, indexed
            by its key.

    Returns:
        pandas.DataFrame: one row per record, one column per field (nested lists and dicts stay as objects).

    Raises:
        ImportError: pandas is not installed.
        KeyError: ``key`` is not in ``result``.
        TypeError: the rows are not dicts, or ``result`` is a dict and no ``key`` was given.
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_dataframe needs pandas: pip install pandas") from e

    data = result
    if key is not None:
        if not isinstance(result, Mapping):
            raise TypeError(f"key={key!r} needs a result dict, not {type(result).__name__}")
        if key not in result:
            raise KeyError(f"{key!r} is not in the result; it has {', '.join(map(repr, result))}")
        data = result[key]
    if isinstance(data, Mapping):
        if key is None:
            keys = ", ".join(map(repr, _list_keys(data))) or "none"
            raise TypeError(f"to_dataframe of a result dict needs key=, the entry that holds the rows ({keys})")
        if all(isinstance(v, Mapping) for v in data.values()):
            frame = pd.DataFrame.from_dict({k: dict(v) for k, v in data.items()}, orient="index")
            frame.index.name = key
            return frame
        raise TypeError(f"{key!r} holds neither a list of row dicts nor a dict of dicts")
    if isinstance(data, (str, bytes)):
        raise TypeError("to_dataframe needs a list of row dicts, not a string")
    try:
        rows = list(data)
    except TypeError:
        raise TypeError(f"to_dataframe needs a list of row dicts, not {type(data).__name__}") from None
    for row in rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"to_dataframe needs a list of row dicts; found a {type(row).__name__}")
    return pd.DataFrame([dict(r) for r in rows])
