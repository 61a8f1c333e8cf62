"""Slurm clusters as mlbench knows them: recorded with ``mlbench cluster add slurm NAME``.

A Slurm cluster is not created by mlbench; the record says how to use one from this login node:
its default partition, account and QOS, the shared directory the compute nodes see (run files
and per-rank logs go there), the metrics server URL the compute nodes can reach, the
``slurm.conf`` its client tools read (when it is not the login node's default) and the Python
that runs the workers. Records live beside the Kubernetes ones (``cluster list``), and
``cluster use NAME`` makes one the default for specs that say ``target: slurm``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from mlbench_tui.errors import InfraError, UsageError
from mlbench_tui.infra.providers import (
    ClusterRecord,
    ClusterRequest,
    Progress,
    find_record,
    load_records,
    remove_record,
    save_record,
    state_dir,
)

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


def check_options(cluster: SlurmCluster) -> None:
    """Refuse values that cannot go into a batch script (the spec's own rules) or a bad URL."""
    from pydantic import ValidationError

    from mlbench_tui.spec.models import SlurmTarget

    try:
        SlurmTarget.model_validate(
            {"kind": "slurm", "partition": cluster.partition, "account": cluster.account, "qos": cluster.qos}
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UsageError(f"--{error['loc'][-1]}: {error['msg']}") from None
    if cluster.server_url and not cluster.server_url.startswith(("http://", "https://")):
        raise UsageError(f"--server-url {cluster.server_url!r} must start with http:// or https://")
    for option, path in (
        ("--workdir", cluster.workdir),
        ("--conf", cluster.conf),
        ("--python", cluster.python),
    ):
        if path is not None and not Path(path).is_absolute():
            raise UsageError(f"{option} must be an absolute path, got {path!r}")
    if cluster.conf is not None and not Path(cluster.conf).is_file():
        raise UsageError(f"--conf {cluster.conf}: no such file")


def _current_file() -> Path:
    return state_dir() / "clusters" / PROVIDER / ".current"


def current_name() -> str | None:
    """The Slurm cluster chosen with ``cluster use``, if its record still exists."""
    try:
        name = _current_file().read_text(encoding="utf-8").strip()
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


class SlurmProvider:
    """``cluster add|list|use|delete`` for Slurm clusters (records only: nothing is provisioned)."""

    def add(self, cluster: SlurmCluster) -> ClusterRecord:
        """Record (or update) a cluster; returns its record."""
        ClusterRequest(provider=PROVIDER, name=cluster.name)  # the same name rules as other clusters
        if cluster.name == DEFAULT_NAME:
            raise UsageError(
                f"{DEFAULT_NAME!r} names the login node's own Slurm configuration", hint="pick another name"
            )
        check_options(cluster)
        record = ClusterRecord(
            provider=PROVIDER,
            name=cluster.name,
            context=f"slurm:{cluster.name}",
            region=cluster.partition,
            details=cluster.to_details(),
        )
        save_record(record)
        return record

    def create(self, request: ClusterRequest, *, progress: Progress) -> ClusterRecord:
        raise UsageError(
            "mlbench does not create Slurm clusters; it records existing ones",
            hint=f"mlbench cluster add slurm {request.name} --partition PARTITION",
        )

    def delete(self, name: str, *, progress: Progress) -> None:
        """Forget the record (the cluster itself is untouched); idempotent."""
        if remove_record(PROVIDER, name):
            progress(f"forgot Slurm cluster {name} (the cluster itself is untouched)")
        if current_name() is None:
            _current_file().unlink(missing_ok=True)

    def list(self) -> list[ClusterRecord]:
        return load_records(PROVIDER)

    def use(self, name: str) -> str:
        """Make ``name`` the default Slurm cluster; returns its context name."""
        record = find_record(PROVIDER, name)
        if record is None:
            raise InfraError(f"no Slurm cluster named {name!r}", hint="see `mlbench cluster list`")
        path = _current_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name + "\n", encoding="utf-8")
        return record.context

    def current_context(self) -> str | None:
        name = current_name()
        return None if name is None else f"slurm:{name}"
