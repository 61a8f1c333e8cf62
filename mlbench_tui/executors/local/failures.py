"""Why a launcher ended badly, read from its own output: the cause, not the symptom.

The launcher's output (torchrun's error summary, Open MPI's notice, a Python that could not even
start) says which rank ended first and how; the surviving ranks only say that a peer went away.
``launch_failure`` turns that output and the launcher's exit status into one sentence: a rank
killed by a signal is named with its signal, a rank that exited with a code names the code, and a
launcher that failed before any rank started reports its own error line.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

_TORCHRUN_RANK = re.compile(r"\s*rank\s*:\s*(\d+)")
_TORCHRUN_CODE = re.compile(r"\s*exitcode\s*:\s*(-?\d+)")
_MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)")
_MPI_CODE = re.compile(
    r"process rank (\d+) with PID \d+ on node \S+ exited on status (\d+)|"
    r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)"
)
_ERROR_LINE = re.compile(
    r"(Fatal Python error|[A-Za-z_.]*(Error|Exception)\b|error:|ERROR|No such file|not found|"
    r"[Pp]ermission denied|cannot|Killed)"
)


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9 (``signal 64`` for a number this system does not name)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class RankEnd:
    """How the first failing rank ended: by an exit code, or killed by a signal."""

    rank: int
    code: int | None = None
    signal: int | None = None

    def sentence(self, cause: str | None = None) -> str:
        """What happened to the rank, its own last error (``cause``) when it said one, and where
        to read more."""
        where = f"{': ' + cause if cause else ''} (see its log: mlbench logs RUN --rank {self.rank})"
        if self.signal is not None:
            return f"rank {self.rank} was killed by {signal_name(self.signal)} (signal {self.signal}){where}"
        return f"rank {self.rank} exited with code {self.code}{where}"


def _exit(rank: int, code: int) -> RankEnd:
    """A rank's end from a process exit status (negative: killed by that signal, as Python's
    ``returncode`` and torchrun say; 128+N: killed by signal N, as shells say)."""
    if code < 0:
        return RankEnd(rank, signal=-code)
    if code > 128 and code - 128 < 65:
        return RankEnd(rank, code=code, signal=code - 128)
    return RankEnd(rank, code=code)


def first_rank_end(tail: Sequence[str], code: int | None, direct: bool) -> RankEnd | None:
    """The first failing rank and how it ended, from the launcher's last lines; ``direct``: the
    launcher was the run's one rank itself (its exit status is the rank's)."""
    root = [i for i, line in enumerate(tail) if line.startswith("Root Cause")]
    summary = tail[root[-1] :] if root else tail
    rank = next((int(m[1]) for line in summary if (m := _TORCHRUN_RANK.match(line))), None)
    exit_code = next((int(m[1]) for line in summary if (m := _TORCHRUN_CODE.match(line))), None)
    if rank is not None and exit_code is not None:
        return _exit(rank, exit_code)
    text = "\n".join(tail)
    found = _MPI_SIGNAL.search(text)
    if found:
        return RankEnd(int(found[1]), signal=int(found[2]))
    found = _MPI_CODE.search(text)
    if found:
        rank_text, code_text = (found[1], found[2]) if found[1] else (found[3], found[4])
        return _exit(int(rank_text), int(code_text))
    if direct and code is not None:
        return _exit(0, code)
    return None


def own_error(tail: Sequence[str]) -> str | None:
    """The launcher's own error, from its output: its first fatal line and its last error line.
    The executor's own notes in the log (``mlbench: ...``, such as a warm start given up) are not."""
    errors = [
        line.strip() for line in tail if _ERROR_LINE.search(line) and not line.startswith((" ", "mlbench: "))
    ]
    if not errors:
        return None
    first, last = errors[0], errors[-1]
    return first if first == last else f"{first} ({last})"


def launch_failure(tail: Sequence[str], code: int | None, *, direct: bool, ranks_started: bool) -> str:
    """One sentence saying why a launcher that exited with ``code`` failed (see the module doc)."""
    ended = first_rank_end(tail, code, direct)
    if ended is not None:
        return ended.sentence()
    if not ranks_started:
        error = own_error(tail)
        shown = f": {error}" if error else f" (exit code {code})"
        return f"the launcher failed before any rank started{shown} (see: mlbench logs RUN)"
    if code is not None and code < 0:
        return f"the launcher was killed by {signal_name(-code)} (signal {-code})"
    return f"launcher exited with code {code}"
