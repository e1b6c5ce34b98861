"""The exceptions oversub raises.

Every class is named after the Rust error (or error variant) it stands for and carries the Rust message unchanged as
``str(exc)``. All derive from :class:`oversub.Error`; where a standard exception fits, they derive from it too
(``OutOfMemoryError`` is a ``MemoryError``, ``IoError`` an ``OSError``, ``ViewError`` a ``BufferError``), so
``except MemoryError`` keeps working in code that does not know oversub.

The numbers a program may act on are attributes, so that nobody parses a message: ``OutOfMemoryError.needed_bytes``
(and ``available_bytes``, ``capacity_bytes``), ``QuotaExceededError.needed_bytes`` (``charged_bytes``,
``limit_bytes``), ``IoError.errno`` (the system's error, as for any ``OSError``: ``errno.ENOSPC`` for a full file
system and for a full store, ``errno.EIO``, ...; None where the failure was not the system's), and
``StoreFullError.needed_bytes`` and ``free_bytes``. They are None on an exception raised by hand.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "PagerError",
    "UnknownBufferError",
    "WrongAddressSpaceError",
    "UnpageableError",
    "AlreadyResidentError",
    "AlreadyPagedOutError",
    "OperationInFlightError",
    "NotResidentError",
    "ReadOnlyError",
    "OutOfMemoryError",
    "QuotaExceededError",
    "OutOfBoundsError",
    "InvalidSizeError",
    "ChecksumMismatchError",
    "UnsupportedError",
    "InternalError",
    "ForkError",
    "PoolClosedError",
    "CompletionLostError",
    "TenantError",
    "IoError",
    "StoreFullError",
    "StoreBusyError",
    "StoreRefusedError",
    "ExternalChangedError",
    "AccelError",
    "NoDriverError",
    "DeviceOutOfMemoryError",
    "ViewError",
    "ConfigError",
    "RunError",
    "SimError",
    "SwapSimError",
    "ProfileError",
]


class Error(Exception):
    """Base class of every error raised by oversub."""


# --- the pager (Rust: oversub_core::PagerError) ---------------------------------------------------------------------


class PagerError(Error):
    """The pager refused or failed an operation (Rust ``PagerError``). A refused call changes nothing."""


class UnknownBufferError(PagerError):
    """The buffer was freed, or belongs to another address space (``PagerError::UnknownBuffer``)."""


class WrongAddressSpaceError(PagerError, ValueError):
    """A handle was given to an address space that did not issue it (``PagerError::WrongAddressSpace``)."""


class UnpageableError(PagerError):
    """The buffer is unpageable and cannot be paged (``PagerError::Unpageable``)."""


class AlreadyResidentError(PagerError):
    """Page-in of a buffer that is already resident (``PagerError::AlreadyResident``)."""


class AlreadyPagedOutError(PagerError):
    """Page-out of a buffer that is already paged out (``PagerError::AlreadyPagedOut``)."""


class OperationInFlightError(PagerError):
    """The buffer has a paging operation in flight; wait for its handle first (``PagerError::OperationInFlight``)."""


class NotResidentError(PagerError):
    """The buffer's bytes are not in device memory now, so they cannot be viewed or accessed
    (``PagerError::NotResident``)."""


class ReadOnlyError(PagerError):
    """A write to a read-only buffer whose bytes are already on the store (``PagerError::ReadOnly``)."""


class OutOfMemoryError(PagerError, MemoryError):
    """The pool has not enough free capacity (``PagerError::OutOfMemory``): the operation needed ``needed_bytes``,
    ``available_bytes`` were free of the pool's ``capacity_bytes``."""

    needed_bytes: int | None = None
    available_bytes: int | None = None
    capacity_bytes: int | None = None


class QuotaExceededError(PagerError, MemoryError):
    """A tenant address space is at its resident quota (``PagerError::QuotaExceeded``): the operation needed
    ``needed_bytes`` more, the space holds ``charged_bytes`` of its ``limit_bytes``."""

    needed_bytes: int | None = None
    charged_bytes: int | None = None
    limit_bytes: int | None = None


class OutOfBoundsError(PagerError, IndexError):
    """An access outside the buffer (``PagerError::OutOfBounds``)."""


class InvalidSizeError(PagerError, ValueError):
    """A zero or overflowing size (``PagerError::InvalidSize``)."""


class ChecksumMismatchError(PagerError):
    """The bytes read back at page-in differ from those written at page-out (``PagerError::ChecksumMismatch``)."""


class UnsupportedError(PagerError):
    """The configuration or operation cannot work here (``PagerError::Unsupported``)."""


class InternalError(PagerError):
    """Internal bookkeeping broke an invariant; please report it (``PagerError::Internal``)."""


class ForkError(PagerError, RuntimeError):
    """This process is a fork of the one that made the pool (``PagerError::Forked``): it has the pool's memory but
    not its I/O threads, so it cannot page. Make a new pool in the child, or use multiprocessing's "spawn" or
    "forkserver" start method."""


class PoolClosedError(PagerError, ValueError):
    """The pool was closed (``Pool.close()``, or the end of its ``with`` block); a ``ValueError`` like I/O on a
    closed file. Raised by the Python layer, not by a Rust error."""


class CompletionLostError(PagerError):
    """A transfer's completion never ran to its end (a device backend or I/O thread panicked); the operation failed
    and the buffer kept its earlier state (``PagerError::CompletionLost``)."""


class TenantError(Error):
    """A tenant quota or the tenant planner refused its input (Rust ``TenantError``)."""


# --- storage and devices -------------------------------------------------------------------------------------------


class IoError(Error, OSError):
    """The swap store failed (Rust ``oversub_io::IoError``); ``errno`` is the system's error where it was one
    (``errno.ENOSPC``, ``errno.EIO``, ...), else None."""


class StoreFullError(IoError):
    """The swap store has no room for the buffer (``IoError::StoreFull``); give the pool a larger
    ``store_capacity``. ``errno`` is ``errno.ENOSPC``; ``needed_bytes`` were asked for, ``free_bytes`` were free."""

    needed_bytes: int | None = None
    free_bytes: int | None = None


class StoreBusyError(IoError):
    """Another pool or process holds the store, or the block device is mounted (``IoError::StoreBusy``); the
    message names the holder where the system says."""


class StoreRefusedError(IoError):
    """The store holds something oversub will not overwrite without being told: a file system or partition
    signature, data it did not write, another user's store, or permissions it cannot narrow to 0600
    (``IoError::StoreRefused``). Pass ``force_store=True`` if its contents may be destroyed."""


class ExternalChangedError(IoError):
    """A file read by buffers from ``AddressSpace.alloc_external`` (a checkpoint) was modified after oversub opened it
    (``IoError::ExternalChanged``): its bytes may no longer be the ones the buffers were made from. Open it again
    (and offload again) to use the new contents."""


class AccelError(Error):
    """The device-memory backend failed (Rust ``oversub_accel::AccelError``)."""


class NoDriverError(AccelError):
    """No CUDA driver could be loaded (``AccelError::NoDriver``)."""


class DeviceOutOfMemoryError(AccelError, MemoryError):
    """The device itself ran out of memory (``AccelError::OutOfMemory``)."""


# --- Python-side views ---------------------------------------------------------------------------------------------


class ViewError(Error, BufferError):
    """A view (NumPy array, memoryview, DLPack tensor) is in the way: the buffer cannot be paged out or freed while
    views of it are alive, and a view cannot be made in the asked dtype or shape."""


# --- schedules and simulators --------------------------------------------------------------------------------------


class ConfigError(Error, ValueError):
    """A schedule configuration is not valid (Rust ``oversub_sched::ConfigError``)."""


class RunError(Error):
    """A schedule run failed (Rust ``oversub_sched::RunError``)."""


class SimError(Error):
    """The unified-memory simulator refused its input or failed (Rust ``oversub_sim::uvm::SimError``)."""


class SwapSimError(Error):
    """The swap-space simulator refused its input or failed (Rust ``oversub_sim::swap::SwapSimError``)."""


class ProfileError(Error):
    """A platform profile could not be read or is not valid (Rust ``oversub_profile::ProfileError``)."""
