"""Which Slurm cluster a run goes to and how its client tools are called: the record that
``mlbench cluster add slurm NAME`` writes, read by the Slurm executor.

A Slurm cluster is not created by mlbench; the record says how to use one from this login node:
its default partition, account and QOS, the shared directory the compute nodes see (run files
and per-rank logs go there), the metrics server URL the compute nodes can reach, the
``slurm.conf`` its client tools read (when it is not the login node's default) and the Python
that runs the workers. ``cluster use NAME`` makes one the default for specs that say
``target: slurm``; without one, runs use the login node's own Slurm configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from mlbench_tui.cluster_records import ClusterRecord, find_record, records_dir
from mlbench_tui.errors import InfraError

PROVIDER = "slurm"
DEFAULT_NAME = "default"  # no record: the login node's own Slurm configuration
GpuOption = Literal["gpus-per-task", "gres"]


@dataclass(frozen=True)
class SlurmCluster:
    """How to submit to one Slurm cluster (every field optional but the name)."""

    name: str = DEFAULT_NAME
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    workdir: str | None = None  # shared directory for run files; default: mlbench's runs directory
    server_url: str | None = None  # metrics server as the compute nodes see it
    conf: str | None = None  # SLURM_CONF for the client tools; default: theirs
    python: str | None = None  # interpreter on the compute nodes; default: this one
    gpu_option: GpuOption = "gpus-per-task"  # or 'gres' (--gres=gpu:N per node) for older setups
    network_prolog: bool = False  # the site installed mlbench's network prolog (spec.network runs)

    def client_env(self) -> dict[str, str]:
        """The environment the Slurm client tools run with (SLURM_CONF when recorded)."""
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def to_details(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}

    @classmethod
    def from_record(cls, record: ClusterRecord) -> SlurmCluster:
        known = {f.name for f in fields(cls)} - {"name"}
        details = {k: v for k, v in record.details.items() if k in known}
        return cls(name=record.name, **details)


def current_file() -> Path:
    """The file that names the cluster ``cluster use`` chose."""
    return records_dir() / PROVIDER / ".current"


def current_name() -> str | None:
    """The Slurm cluster chosen with ``cluster use``, if its record still exists."""
    try:
        name = current_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return name if name and find_record(PROVIDER, name) is not None else None


def resolve_cluster(name: str | None) -> SlurmCluster:
    """The recorded cluster ``name``; without a name, the current one, else the login node's
    own Slurm configuration (an unnamed default)."""
    wanted = name or current_name()
    if wanted is None:
        return SlurmCluster()
    record = find_record(PROVIDER, wanted)
    if record is None:
        raise InfraError(
            f"no Slurm cluster named {wanted!r}",
            hint=f"record it with `mlbench cluster add slurm {wanted} --partition ...` "
            "(see `mlbench cluster list`)",
        )
    return SlurmCluster.from_record(record)
