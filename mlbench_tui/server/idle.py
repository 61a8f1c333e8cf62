"""When a detached server is idle: no request in flight (an open stream counts until it closes),
no run still going in its store, and neither for ``timeout`` seconds.

``IdleWatch`` is an ASGI middleware that keeps that clock; ``watch_idle`` is the loop (on a
thread of the serving process) that tells the server to stop once the clock ran out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

Clock = Callable[[], float]


class IdleWatch:
    """ASGI middleware: counts HTTP requests in flight and when the last one ended."""

    def __init__(self, app: Any, *, clock: Clock = time.monotonic) -> None:
        self.app = app
        self.clock = clock
        self.in_flight = 0
        self.last_used = clock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.last_used = self.clock()

    def touch(self) -> None:
        """Something the server serves is still going (a run): the idle time starts again."""
        self.last_used = self.clock()

    def idle_for(self) -> float:
        """Seconds since the server was last used (0 while a request or stream is open)."""
        return 0.0 if self.in_flight else max(0.0, self.clock() - self.last_used)


def watch_idle(
    watch: IdleWatch,
    timeout: float,
    runs_going: Callable[[], bool],
    stop: Callable[[], None],
    done: threading.Event,
    check_s: float = 1.0,
) -> None:
    """Call ``stop`` once ``watch`` has been idle for ``timeout`` seconds with no run going;
    returns then, or when ``done`` is set (the server stopped for another reason)."""
    while not done.wait(min(check_s, timeout / 4)):
        if runs_going():
            watch.touch()
        elif watch.idle_for() >= timeout:
            stop()
            return
