"""oversub: use more accelerator memory than the machine has.

oversub pages whole buffers between device memory and a swap store (host memory, NVMe), ahead of need when a
schedule says what runs next. This package binds the Rust runtime::

    import oversub
    pool = oversub.Pool(capacity="4GiB", store="/mnt/nvme", device="host")   # or "cuda", "cuda:1", a torch.device
    space = pool.address_space()
    w = space.alloc("256MiB", read_only=True)       # model weights: written to the store once
    w.numpy("float32")[:] = 1.0                      # a zero-copy NumPy view while resident
    w.page_out()                                     # memory given back
    h = w.page_in_async()                            # read runs in the background...
    h.wait()                                         # ...or h.result(timeout), `await h`, add_done_callback

Errors are exceptions of :mod:`oversub.errors`, named after the Rust errors and carrying their messages. The
schedule runtime and the simulators are here too (:func:`run_schedule`, :func:`plan_schedule`, :func:`sim_uvm`,
:func:`sim_swap`), returning plain dicts; :func:`to_dataframe` turns their rows into a pandas DataFrame.
``run_schedule(config, work={"A": fn})`` runs your own code in component A's slots: ``fn(slot)`` gets an
:class:`Slot` whose ``buffers`` are zero-copy NumPy views of A's resident memory.
"""

from __future__ import annotations

from . import errors
from ._oversub import (
    NOOP,
    AddressSpace,
    Buffer,
    ExternalFile,
    Handle,
    Pool,
    Slot,
    SlotView,
    __version__,
    load_schedule,
    parse_size,
    plan_schedule,
    run_schedule,
    sim_swap,
    sim_uvm,
)
from .errors import *  # noqa: F401,F403  (the exception classes, also as oversub.<Name>)
from .errors import Error
from .frames import to_dataframe
from .records import BufferInfo, BufferState, PoolStats
from .lab import probe, write_profile

__all__ = [
    "Pool",
    "AddressSpace",
    "Buffer",
    "ExternalFile",
    "Handle",
    "Slot",
    "SlotView",
    "NOOP",
    "parse_size",
    "load_schedule",
    "plan_schedule",
    "run_schedule",
    "sim_uvm",
    "sim_swap",
    "to_dataframe",
    "PoolStats",
    "BufferInfo",
    "BufferState",
    "probe",
    "write_profile",
    "Error",
    "errors",
    "__version__",
]
__all__ += [name for name in errors.__all__ if name not in __all__]
