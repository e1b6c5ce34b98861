"""``oversub bench tenants`` from Python: the same measurement (``oversub_lab::tenants``), nothing printed.

Several tenants oversubscribing one pool: alone, together under LRU swapping and together under the
contention-aware plan (Yang & Chen, Alg. 1 and 2), and the cold-start FIFO against priority-I/O experiment.

Options are keyword arguments named as the command's flags in snake case (``defaults()`` lists them with the
defaults an option left out takes, the command's, declared once in the lab); sizes may be strings such as
``"64MiB"``, lists give a flag several values. Returns the report as a dict, the JSON ``--json`` writes.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["run", "defaults"]


def run(**options: Any) -> dict[str, Any]:
    """``oversub bench tenants`` with ``options`` (see the module's documentation); the report as a dict."""
    from .._oversub import lab_run

    return lab_run("tenants", options, None)


def defaults() -> dict[str, Any]:
    """Each option's default, as the command's ``--help`` shows it (``None``: none, or computed at run time)."""
    from .._oversub import lab_defaults

    return lab_defaults("tenants")


class _CallableModule(types.ModuleType):
    """This module, callable: ``oversub.lab.tenants(...)`` is :func:`run`."""

    def __call__(self, **options: Any) -> dict[str, Any]:
        return run(**options)


sys.modules[__name__].__class__ = _CallableModule
