"""A failed rank's error file: the exception it ended with, where its launcher looks for it.

torchrun gives each rank ``TORCHELASTIC_ERROR_FILE`` and names the root cause of a failed run from
the first of those files; a forked group's launcher (``mlbench_worker.launch.rank_group``) does the same.
The file is torch's format (``{"message": {"message": ..., "extraInfo": {"py_callstack": ...,
"timestamp": ...}}}``, so torchrun's summary shows it too) with two additions in ``extraInfo``:
whether the rank only noticed that a peer had died, and the time to the microsecond, so the
launcher can tell the cause from its consequences. Stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankError:
    """What a rank's error file says."""

    message: str
    time: float
    peer_failure: bool = False


def record(exc: BaseException, traceback_text: str, *, peer_failure: bool, path: str | None = None) -> None:
    """Write ``exc`` to the rank's error file (``TORCHELASTIC_ERROR_FILE``; nothing without one)."""
    from mlbench_worker import rank_env

    target = path or os.environ.get(rank_env.TORCHELASTIC_ERROR_FILE)
    if not target:
        return
    now = time.time()
    doc = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {
                "py_callstack": traceback_text,
                "timestamp": str(int(now)),
                "time": now,
                "peer_failure": peer_failure,
            },
        }
    }
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        tmp = f"{target}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, target)


def read(path: str) -> RankError | None:
    """The error a rank recorded at ``path`` (torch's format, ours or torch's own); None if none."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    outer = doc.get("message") if isinstance(doc, dict) else None
    if isinstance(outer, str):  # torch's older format: the message alone
        return RankError(message=outer, time=_number(doc.get("timestamp"), 0.0))
    if not isinstance(outer, dict) or not isinstance(outer.get("message"), str):
        return None
    info = outer.get("extraInfo")
    extra: dict[str, Any] = info if isinstance(info, dict) else {}
    when = _number(extra.get("time"), _number(extra.get("timestamp"), 0.0))
    return RankError(message=outer["message"], time=when, peer_failure=extra.get("peer_failure") is True)


def _number(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default
