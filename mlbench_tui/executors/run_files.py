"""The records an executor keeps in a run's directory (launch, exit, cancel, job layout, final
state), so another process can read what this one started: typed models and dataclasses, written
whole at once and read back through their type; and the worker config a rank reads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from mlbench_worker.config import WorkerConfig, config_document
from pydantic import TypeAdapter, ValidationError

T = TypeVar("T")


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` at once: a reader sees the old file or the new one, never half; an
    ``OSError`` (a full disk) names ``path``, and no half-written temporary file stays."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def write_record(path: Path, record: Any) -> None:
    """Write a record (a pydantic model or a dataclass) as JSON, at once."""
    write_text(path, TypeAdapter(type(record)).dump_json(record, indent=2).decode())


def read_record(path: Path, kind: type[T]) -> T | None:
    """The record of type ``kind`` at ``path``; None when it is missing, unreadable or not one."""
    try:
        return TypeAdapter(kind).validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def write_config(path: Path, config: WorkerConfig) -> None:
    """The worker config JSON a rank reads (``MLBENCH_CONFIG``)."""
    write_text(path, json.dumps(config_document(config), indent=2, sort_keys=True))
