"""The JSON records an executor keeps in a run's directory (launch, exit, cancel, job layout),
so another process can read what this one started."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` at once: a reader sees the old record or the new one, never half; an
    ``OSError`` (a full disk) names ``path``, and no half-written temporary file stays."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def read_json(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
