"""Measurements that put oversub beside the tools a user would otherwise pick, in one run.

``python -m oversub.lab.paging --help``: page-out/page-in of one large buffer by oversub, by plain O_DIRECT
``pwritev``/``preadv``, and (with ``--peers``, when installed) by DeepSpeed's async I/O handle and KvikIO, on the
same store directory, the same buffer size and the same cache drops; medians of several repetitions, interleaved so
that drift in the machine falls on every engine alike; wall time, GiB/s and CPU seconds per GiB paged.
"""

from __future__ import annotations

__all__ = ["paging"]  # imported on use: ``python -m oversub.lab.paging`` must not find it imported already
