"""``oversub tasks`` from Python: the same measurement (``oversub_lab::tasks``), nothing printed.

The cgroup case study: real commands under memory cgroup limits planned by contention-aware swap space
management, against the same commands without limits (docs/tasks.md). It needs a memory cgroup controller this
process may use. The built-in tasks run as ``python -m oversub.lab.tasks worker ...``, this module.

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
    """``oversub tasks`` with ``options`` (see the module's documentation); the report as a dict."""
    from .._oversub import lab_run

    return lab_run("tasks", options, [sys.executable, "-m", __name__, "worker"])


def defaults() -> dict[str, Any]:
    """Each option's default, as the command's ``--help`` shows it (``None``: none, or computed at run time)."""
    from .._oversub import lab_defaults

    return lab_defaults("tasks")


def _child(argv: list[str]) -> int:
    """A built-in task's body (``worker file-io --file F --size N --passes P``), inside its cgroup."""
    from .._oversub import lab_child

    checksum = lab_child(argv)
    print(f"file-io: done (checksum {checksum:016x})")
    return 0


class _CallableModule(types.ModuleType):
    """This module, callable: ``oversub.lab.tasks(...)`` is :func:`run`."""

    def __call__(self, **options: Any) -> dict[str, Any]:
        return run(**options)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
