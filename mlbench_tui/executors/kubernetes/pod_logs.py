"""Pod log lines as the Kubernetes API streams them: split into lines, timestamps parsed, and a
cursor so that a follow that reconnects (a dropped connection, a log not there yet) shows each
line once. Pure functions and small state; the API calls live in ``kubernetes.py``."""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Iterator

# RFC 3339 with up to nanoseconds, as the kubelet writes with ``timestamps=true`` (Go's
# RFC3339Nano drops trailing zeros of the fraction, and the dot when nothing is left, so the
# strings do not sort as times: "…:05Z" > "…:05.1Z").
_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")

Stamp = tuple[int, int]  # (seconds since the epoch, nanoseconds)

# A pod that runs several ranks: its torchrun writes each line of rank N as "[rankN]:<line>"
# (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with --tee), so the pod's one log splits by rank.
RANK_LOG_PREFIX_TEMPLATE = "[rank${rank}]:"
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")


def split_rank(line: str) -> tuple[int | None, str]:
    """A line of a pod with several ranks -> (its rank, the text the rank wrote); (None, line)
    for torchrun's own lines."""
    match = _RANK_PREFIX.match(line)
    return (int(match[1]), line[match.end() :]) if match else (None, line)


def parse_stamp(text: str) -> Stamp | None:
    """``2026-11-21T12:00:05.25Z`` -> (seconds, nanoseconds); None when it is not one."""
    match = _STAMP.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds, int(fraction.ljust(9, "0")) if fraction else 0


def split_stamp(line: str) -> tuple[Stamp | None, str]:
    """A ``timestamps=true`` line -> (its stamp, the text the container wrote)."""
    head, _, text = line.partition(" ")
    stamp = parse_stamp(head)
    return (stamp, text) if stamp is not None else (None, line)


def stream_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Byte chunks -> text lines (UTF-8, bad bytes replaced, CR of CRLF dropped, the last line
    kept even without a newline)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace").rstrip("\r")


class LogCursor:
    """Which lines of one container's log were shown: after a reconnect the API replays the log
    from the start (or from ``sinceSeconds``), and only lines past the cursor are new. Lines that
    share a stamp are counted, so two lines written in the same nanosecond both show once."""

    def __init__(self) -> None:
        self.last: Stamp | None = None
        self._shown_at_last = 0  # lines shown so far with stamp == last
        self._seen_at_last = 0  # of those, how many this connection has replayed

    def reconnect(self) -> None:
        self._seen_at_last = 0

    def admit(self, stamp: Stamp | None) -> bool:
        """True when the line with this stamp has not been shown yet (and marks it shown)."""
        if stamp is None:
            return True
        if self.last is None or stamp > self.last:
            self.last, self._shown_at_last, self._seen_at_last = stamp, 1, 1
            return True
        if stamp < self.last:
            return False
        self._seen_at_last += 1
        if self._seen_at_last > self._shown_at_last:
            self._shown_at_last += 1
            return True
        return False
