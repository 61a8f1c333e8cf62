"""Reading the worker configuration: the file named by ``--config`` or ``MLBENCH_CONFIG``.

The configuration's types, serialiser and parser are the wire's (``mlbench_worker.wire``); this
module only turns a file into a decoded document for ``parse_config``, with one clear line
(``ConfigError``) for a file that is missing or not JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlbench_worker.wire import ConfigError, WorkerConfig, parse_config


def load_config(path: str | os.PathLike[str]) -> WorkerConfig:
    """Read and validate the config file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read worker config {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"worker config {path} is not valid JSON: {exc}") from None
    return parse_config(doc)
