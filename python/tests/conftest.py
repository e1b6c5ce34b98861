"""Shared fixtures."""

from __future__ import annotations

import signal

import pytest


@pytest.fixture
def ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt during the test, even when the suite was started in the background, where
    the shell hands Python SIGINT ignored (and Python then installs no handler of its own)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
