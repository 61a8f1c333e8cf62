"""Holding back Ctrl-C while a run is created and launched, so an interrupt never strands it.

Between registering a run in the store and knowing its launch, an interrupt would leave a run
row that nothing launches or ends. ``deferred_interrupts`` lets the block finish (the run is then
launched and known, so the interrupt cancels and records it like any other) and raises the
interrupt right after; a second Ctrl-C meanwhile interrupts at once (the server then records
the never-launched run failed once this process is gone).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Defer SIGINT (and SIGTERM where a Python handler turns it into an exception) to the end of
    the block, then raise ``KeyboardInterrupt``; only on the main thread (elsewhere: no effect)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signal.SIGINT]
    if callable(signal.getsignal(signal.SIGTERM)):
        signals.append(signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    caught: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        if caught:  # asked twice: stop now
            raise KeyboardInterrupt
        caught.append(signum)

    for sig in signals:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        raise KeyboardInterrupt
