"""``mlbench cluster add|list|use|delete`` for Slurm clusters: records of existing clusters
(``executors.slurm_cluster`` says what a record holds and how a run finds its cluster).

Records live beside the Kubernetes ones (``cluster list``), and ``cluster use NAME`` makes one
the default for specs that say ``target: slurm``. Nothing is provisioned.
"""

from __future__ import annotations

from pathlib import Path

from mlbench_tui.cluster_records import ClusterRecord, find_record, load_records, remove_record, save_record
from mlbench_tui.clusters.providers import ClusterRequest, Progress
from mlbench_tui.errors import InfraError, UsageError
from mlbench_tui.executors.slurm.cluster import (
    DEFAULT_NAME,
    PROVIDER,
    SlurmCluster,
    current_file,
    current_name,
)


def check_options(cluster: SlurmCluster) -> None:
    """Refuse values that cannot go into a batch script (the spec's own rules) or a bad URL."""
    from pydantic import ValidationError

    from mlbench_tui.spec.targets import SlurmTarget

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
            current_file().unlink(missing_ok=True)

    def list(self) -> list[ClusterRecord]:
        return load_records(PROVIDER)

    def use(self, name: str) -> str:
        """Make ``name`` the default Slurm cluster; returns its context name."""
        record = find_record(PROVIDER, name)
        if record is None:
            raise InfraError(f"no Slurm cluster named {name!r}", hint="see `mlbench cluster list`")
        path = current_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name + "\n", encoding="utf-8")
        return record.context

    def current_context(self) -> str | None:
        name = current_name()
        return None if name is None else f"slurm:{name}"
