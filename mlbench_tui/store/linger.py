"""When the writer waits for more requests before it commits (the linger), and the arrival rate
that decides it: a policy of its own, read by ``store.writer`` at each group."""

from __future__ import annotations

# A commit costs per transaction (its pages, the WAL append), not per row. While requests arrive
# at LINGER_MIN_RATE per second or more (counted over windows of RATE_WINDOW_S), a group waits up
# to LINGER_S after its first request so that those arriving meanwhile share its commit; a lightly
# loaded server is written at once. A group stops waiting once it is as large as the largest of
# the last PEAK_GROUPS groups: clients that each wait for their answer before sending again (one
# sequential client, or 16) have all arrived by then, and only independent senders (a thousand
# ranks posting on their own clocks) wait out the linger.
LINGER_S = 0.005
PEAK_GROUPS = 32
LINGER_MIN_RATE = 400.0
RATE_WINDOW_S = 0.1


class ArrivalRate:
    """Arrivals per second over the last complete window of at least ``RATE_WINDOW_S`` seconds."""

    def __init__(self) -> None:
        self.rate = 0.0
        self._count = 0
        self._since: float | None = None

    def add(self, now: float) -> None:
        """Count one arrival at ``now`` (seconds, any monotonic clock); a window that ends here is rated."""
        if self._since is None:
            self._since = now
        elapsed = now - self._since
        if elapsed >= RATE_WINDOW_S:  # a quiet spell is one long window: a low rate
            self.rate = self._count / elapsed
            self._count, self._since = 0, now
        self._count += 1
