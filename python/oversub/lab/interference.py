"""``oversub bench interference`` from Python: the same measurement (``oversub_lab::interference``), nothing printed.

How much paging and copies slow CPU tasks that thrash DRAM (the paper's Figs. 14-15), and how the SiΓ
arbiter removes that interference for PREM tasks (SiΓ Figs. 5-8). The PREM task runs in a process of its own:
``python -m oversub.lab.interference prem-task ...``, this module.

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
    """``oversub bench interference`` with ``options`` (see the module's documentation); the report as a dict."""
    from .._oversub import lab_run

    return lab_run("interference", options, [sys.executable, "-m", __name__, "prem-task"])


def defaults() -> dict[str, Any]:
    """Each option's default, as the command's ``--help`` shows it (``None``: none, or computed at run time)."""
    from .._oversub import lab_defaults

    return lab_defaults("interference")


def _child(argv: list[str]) -> int:
    """The PREM task's process (``prem-task --cpu ... --llc ... --data ... --arbiter ...``), served on stdin/stdout."""
    from .._oversub import lab_child

    lab_child(argv)
    return 0


class _CallableModule(types.ModuleType):
    """This module, callable: ``oversub.lab.interference(...)`` is :func:`run`."""

    def __call__(self, **options: Any) -> dict[str, Any]:
        return run(**options)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
