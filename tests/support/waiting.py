"""Waiting for something a test's real processes will do: a bound for a hang, never a timing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 180.0, poll: float = 0.1) -> T:
    """``condition()``'s first truthy value, polled every ``poll`` seconds; fails naming ``what``
    after ``timeout`` seconds (a hang guard: what the test asserts does not depend on speed)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)
