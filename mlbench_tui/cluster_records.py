"""The local record of clusters: one JSON file per cluster under mlbench's state directory.

``mlbench cluster create|add`` writes a record, ``cluster list|use|delete`` read and remove them
without any cloud tool installed, and the Slurm executor reads the record of the cluster a run
goes to. Plain data and file I/O, below both the executors and clusters.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ClusterRecord:
    """A cluster mlbench created (or recorded, for Slurm): enough to list it, switch to it and
    delete it."""

    provider: str
    name: str
    context: str
    region: str | None = None
    zone: str | None = None
    project: str | None = None
    nodes: int | None = None
    gpu: str | None = None
    machine_type: str | None = None
    spot: bool = False
    created_at: str | None = None
    status: str = "ready"  # "creating", "failed" (a half-created cluster that may cost money), "ready"
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def state_dir() -> Path:
    """mlbench's state directory (``$MLBENCH_HOME/state``, else the platform's user state dir)."""
    from mlbench_tui.settings import Paths

    return Paths.from_env().state_dir


def records_dir() -> Path:
    """Where the records live (one directory per provider)."""
    return state_dir() / "clusters"


def save_record(record: ClusterRecord) -> Path:
    """Write (or overwrite) a cluster record; returns its path."""
    path = records_dir() / record.provider / f"{record.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_records(provider: str | None = None) -> list[ClusterRecord]:
    """All saved records (of one provider when given), sorted by provider and name."""
    root = records_dir()
    if not root.is_dir():
        return []
    pattern = f"{provider}/*.json" if provider else "*/*.json"
    records = []
    for path in sorted(root.glob(pattern)):
        try:
            records.append(ClusterRecord.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue  # a corrupt record must not break `cluster list`
    return records


def find_record(provider: str, name: str) -> ClusterRecord | None:
    """The record of one cluster, or None."""
    for record in load_records(provider):
        if record.name == name:
            return record
    return None


def remove_record(provider: str, name: str) -> bool:
    """Forget a cluster; returns whether a record existed."""
    path = records_dir() / provider / f"{name}.json"
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
