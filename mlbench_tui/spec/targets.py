"""Where a spec's ranks run: the ``target`` section (local processes, a Kubernetes Indexed Job, or
a Slurm batch job), a union discriminated by ``kind`` that also takes the short form ``target: local``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.base import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    HTTP_URL,
    IMAGE_REFERENCE,
    LABEL_KEY,
    LABEL_VALUE,
    LabelKey,
    LabelValue,
    StrictModel,
)
from mlbench_tui.spec.limits import MAX_IMAGE_REFERENCE, MAX_SLURM_GRACE_S, MAX_TOLERATION_SECONDS
from mlbench_tui.spec.sbatch_options import ALIASES, SbatchArgError, parse_entry
from mlbench_tui.spec.shortforms import duration_at_most, duration_schema, show_value


def _kubernetes_name(value: str, pattern: re.Pattern[str], most: int, what: str) -> str:
    if len(value) > most or not pattern.fullmatch(value):
        raise PydanticCustomError(
            "kubernetes_name", "{value} is not a valid {what}", {"value": show_value(value), "what": what}
        )
    return value


def _server_url(value: str | None) -> str | None:
    if value is None:
        return None
    if not HTTP_URL.fullmatch(value):
        raise PydanticCustomError(
            "server_url",
            "server_url {value} is not an http(s) URL such as 'http://login1:8765'",
            {"value": show_value(value)},
        )
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:
        raise PydanticCustomError(
            "server_url",
            "server_url {value} holds credentials: they would be written into manifests, batch scripts and "
            "logs (the ranks get a run token of their own)",
            {"value": show_value(_without_credentials(value)), "hint": "remove 'user:password@'"},
        )
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (port is not None and not 1 <= port <= 65535) or not parts.hostname:
        raise PydanticCustomError(
            "server_url",
            "server_url {value} does not name a host and a port from 1 to 65535",
            {"value": show_value(value)},
        )
    return value


def _without_credentials(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


ServerUrl = Annotated[str | None, AfterValidator(_server_url)]


class Toleration(StrictModel):
    """A Kubernetes toleration for the worker pods (for tainted GPU or spot nodes)."""

    key: str | None = Field(default=None, description="Taint key; empty with operator Exists matches all.")
    operator: Literal["Equal", "Exists"] = Field(default="Equal", description="Equal or Exists.")
    value: str | None = Field(default=None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty tolerates all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TOLERATION_SECONDS,
        description="For NoExecute: how long the pod stays bound after the taint appears.",
    )

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return None if value is None else _kubernetes_name(value, LABEL_KEY, 317, "taint key")

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        return None if value is None else _kubernetes_name(value, LABEL_VALUE, 63, "taint value")


class LocalTarget(StrictModel):
    """Run every rank as a local process (torchrun for gloo/nccl, mpiexec for mpi)."""

    kind: Literal["local"] = Field(description="'local': processes on this machine.")
    server_url: ServerUrl = Field(
        default=None,
        description="Metrics server to report to; default: the one from settings or an embedded server.",
    )


class KubernetesTarget(StrictModel):
    """Run the ranks as a Kubernetes Indexed Job with a headless Service."""

    kind: Literal["kubernetes"] = Field(description="'kubernetes': an Indexed Job in a cluster.")
    context: str | None = Field(default=None, description="kubeconfig context; default: the current context.")
    namespace: str = Field(
        default="mlbench",
        description="Namespace for the Job, Service, Secret and ConfigMap.",
        json_schema_extra={"pattern": DNS1123_LABEL.pattern, "maxLength": 63},
    )
    image: str = Field(
        description="Worker image, e.g. 'mlbench-worker:dev' or 'ghcr.io/org/mlbench-worker:0.1'."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy; default: Kubernetes' own (Always for ':latest')."
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Node labels the pods must match."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints the pods tolerate.")
    service_account: str | None = Field(default=None, description="Service account of the worker pods.")
    server_url: ServerUrl = Field(
        default=None,
        description="Metrics server URL as seen from the pods; default: the in-cluster server.",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if len(value) > MAX_IMAGE_REFERENCE or not IMAGE_REFERENCE.fullmatch(value):
            raise PydanticCustomError(
                "image",
                "image {value} is not an image reference: [registry[:port]/]name[:tag][@digest], the name's "
                "parts in lowercase letters, digits and '._-' (e.g. 'ghcr.io/org/mlbench-worker:0.1')",
                {"value": show_value(value)},
            )
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _kubernetes_name(value, DNS1123_SUBDOMAIN, 253, "service account name (a DNS-1123 subdomain)")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
            raise PydanticCustomError(
                "dns_label", "namespace {value} is not a DNS-1123 label", {"value": show_value(value)}
            )
        return value


_SLURM_CLUSTER_RE = re.compile(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
# Slurm names and feature expressions: no whitespace, quotes or shell syntax, so they stay one
# token in a #SBATCH line.
_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+,-]*$")
_SLURM_CONSTRAINT_RE = re.compile(r"^[A-Za-z0-9_.:&|,*\[\]()!-]+$")
# sbatch options mlbench sets from the spec (or needs left alone, such as those that hold or defer
# a job): an extra_args entry may not set them under any name sbatch reads as them (prefixes,
# aliases, short options).
SLURM_MANAGED_OPTIONS: dict[str, str] = {
    "nodes": "target.nodes",
    "ntasks": "workers",
    "ntasks-per-node": "target.tasks_per_node",
    "ntasks-per-core": "workers and target.tasks_per_node (one Slurm task per rank)",
    "ntasks-per-socket": "workers and target.tasks_per_node (one Slurm task per rank)",
    "ntasks-per-gpu": "workers and target.tasks_per_node (one Slurm task per rank)",
    "ntasks-per-tres": "workers and target.tasks_per_node (one Slurm task per rank)",
    "distribution": "mlbench (rank 0 on the first node)",
    "cpus-per-task": "hardware.cpu",
    "cpus-per-gpu": "hardware.cpu",
    "mem": "hardware.memory",
    "mem-per-cpu": "hardware.memory",
    "mem-per-gpu": "hardware.memory",
    "gpus": "hardware.gpu",
    "gpus-per-node": "hardware.gpu",
    "gpus-per-socket": "hardware.gpu",
    "gpus-per-task": "hardware.gpu",
    "gres": "hardware.gpu",
    "time": "max_time",
    "time-min": "max_time",
    "partition": "target.partition",
    "account": "target.account",
    "qos": "target.qos",
    "constraint": "target.constraint",
    "job-name": "metadata.name",
    "output": "the run directory",
    "error": "the run directory",
    "input": "the run directory",
    "open-mode": "the run directory",
    "chdir": "the run directory",
    "export": "mlbench (the run's token travels in sbatch's environment)",
    "export-file": "mlbench (the run's token travels in sbatch's environment)",
    "parsable": "mlbench",
    "test-only": "mlbench (sbatch must submit the job and return its id)",
    "wait": "mlbench (sbatch must submit the job and return its id)",
    "help": "mlbench (sbatch must submit the job and return its id)",
    "usage": "mlbench (sbatch must submit the job and return its id)",
    "version": "mlbench (sbatch must submit the job and return its id)",
    "clusters": "mlbench (it follows the job on this cluster)",
    "requeue": "mlbench (a benchmark run is never requeued)",
    "no-requeue": "mlbench (a benchmark run is never requeued)",
    "uid": "mlbench (the job runs as you)",
    "gid": "mlbench (the job runs as you)",
    "wrap": "the batch script",
    "array": "the batch script",
    "deadline": "max_time",
}
SLURM_HOLDING_OPTIONS: dict[str, str] = {
    "hold": "a held job does not start until someone releases it, and its run waits all that time",
    "priority": "priority 0 holds a job (and only an operator sets a priority)",
    "begin": "a deferred job starts later than the run it belongs to, which waits all that time",
    "delay-boot": "a job that waits for its nodes to reboot keeps its run waiting",
    "dependency": "a job that waits on another may never start, and its run waits all that time",
    "kill-on-invalid-dep": "a job that waits on another may never start, and its run waits all that time",
}
"""sbatch options that hold or defer a job: refused like the managed ones, with why."""
DEFAULT_SLURM_GRACE_S = 120.0


def _sbatch_option(entry: str) -> str:
    try:
        args = parse_entry(entry)
    except SbatchArgError as exc:
        raise PydanticCustomError("slurm_option", "{why}", {"why": str(exc)}) from None
    for arg in args:
        name = ALIASES.get(arg.name, arg.name)
        if name in SLURM_MANAGED_OPTIONS or name in SLURM_HOLDING_OPTIONS:
            written = "" if arg.written == f"--{name}" else f" (written {arg.written!r})"
            managed = SLURM_MANAGED_OPTIONS.get(name)
            raise PydanticCustomError(
                "slurm_option",
                "extra_args may not set --{name}{written}: {why}",
                {
                    "name": name,
                    "written": written,
                    "why": f"mlbench sets it from {managed}" if managed else SLURM_HOLDING_OPTIONS[name],
                },
            )
    return entry


SbatchOption = Annotated[str, AfterValidator(_sbatch_option)]


SlurmGrace = Annotated[
    float, BeforeValidator(duration_at_most(MAX_SLURM_GRACE_S)), duration_schema(MAX_SLURM_GRACE_S)
]


class SlurmTarget(StrictModel):
    """Run the ranks as one Slurm batch job: one Slurm task per rank, launched by ``srun``."""

    kind: Literal["slurm"] = Field(description="'slurm': a batch job on a Slurm cluster.")
    cluster: str | None = Field(
        default=None,
        description="Cluster recorded with `mlbench cluster add slurm NAME` (its partition, account, "
        "shared directory and server URL are the defaults here); default: the one chosen with "
        "`mlbench cluster use`, else the Slurm configuration of this login node.",
    )
    partition: str | None = Field(
        default=None,
        description="Partition (sbatch --partition).",
        json_schema_extra={"pattern": _SLURM_NAME_RE.pattern},
    )
    account: str | None = Field(
        default=None,
        description="Account charged for the job (sbatch --account).",
        json_schema_extra={"pattern": _SLURM_NAME_RE.pattern},
    )
    qos: str | None = Field(
        default=None,
        description="Quality of service (sbatch --qos).",
        json_schema_extra={"pattern": _SLURM_NAME_RE.pattern},
    )
    constraint: str | None = Field(
        default=None,
        description="Node features the job needs, e.g. 'a100&ib' (sbatch --constraint).",
        json_schema_extra={"pattern": _SLURM_CONSTRAINT_RE.pattern},
    )
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Nodes of the job (sbatch --nodes); nodes x tasks_per_node must equal workers. "
        "Default: workers / tasks_per_node.",
    )
    tasks_per_node: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Ranks per node, one Slurm task each (sbatch --ntasks-per-node), e.g. the GPUs of "
        "a node. Default: hardware.ranks_per_node, else workers / nodes, or 1 when nodes is unset too.",
    )
    extra_args: list[SbatchOption] = Field(
        default_factory=list,
        description="More sbatch options, one per entry ('--name', '--name=value', '--name value', '-X', "
        "'-X value'), e.g. ['--exclusive', '--reservation=bench']; options mlbench sets from the spec are "
        "refused under any name sbatch reads as them, and so are quotes and shell characters.",
    )
    time_limit_grace: SlurmGrace = Field(
        default=DEFAULT_SLURM_GRACE_S,
        description="Added to max_time for the job's time limit (sbatch --time, whole minutes), so a "
        "run that stops itself at max_time (counted after its setup) ends before Slurm kills it.",
    )
    server_url: ServerUrl = Field(
        default=None,
        description="Metrics server URL as seen from the compute nodes; default: the cluster's, else "
        "this host's address when the server listens beyond loopback, else the local URL.",
    )

    @field_validator("cluster")
    @classmethod
    def _cluster_name(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_CLUSTER_RE.fullmatch(value):
            raise PydanticCustomError(
                "slurm_name",
                "cluster {value} is not a cluster name: 1-30 lowercase letters, digits and '-', "
                "starting with a letter (see `mlbench cluster list`)",
                {"value": show_value(value)},
            )
        return value

    @field_validator("partition", "account", "qos")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_NAME_RE.fullmatch(value):
            raise PydanticCustomError(
                "slurm_name",
                "{value} is not a Slurm name: use letters, digits and '_.+-' (commas between "
                "several), no spaces or quotes",
                {"value": show_value(value)},
            )
        return value

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_CONSTRAINT_RE.fullmatch(value):
            raise PydanticCustomError(
                "slurm_constraint",
                "{value} is not a Slurm feature expression: use feature names with & | , * [ ] ( ) "
                "! :, no spaces or quotes",
                {"value": show_value(value)},
            )
        return value

    def layout(self, workers: int, ranks_per_node: int | None = None) -> tuple[int, int]:
        """``(nodes, tasks_per_node)`` for ``workers`` ranks; ValueError when they do not fit.
        ``ranks_per_node`` (``hardware.ranks_per_node``) stands for an unset ``tasks_per_node``,
        at most ``workers`` (a smaller world size runs on one node)."""
        nodes, per_node = self.nodes, self.tasks_per_node
        if per_node is None and ranks_per_node is not None:
            per_node = min(ranks_per_node, workers)
        if nodes is None and per_node is None:
            nodes, per_node = workers, 1
        elif nodes is None:
            assert per_node is not None
            nodes = workers // per_node if workers % per_node == 0 else 0
        elif per_node is None:
            per_node = workers // nodes if workers % nodes == 0 else 0
        if not nodes or not per_node or nodes * per_node != workers:
            asked = self.tasks_per_node or ranks_per_node
            if self.nodes is None:
                what = f"do not fill whole nodes of {asked} task(s) each"
            elif asked is None:
                what = f"do not split evenly over {self.nodes} node(s)"
            else:
                what = (
                    f"cannot be placed as {self.nodes} node(s) x {per_node} task(s) per node "
                    f"(= {self.nodes * per_node} ranks)"
                )
            raise ValueError(
                f"{workers} worker(s) {what}: the slurm target runs one rank per Slurm task, so "
                "nodes x tasks_per_node must equal workers"
            )
        return nodes, per_node


def _target_short_form(value: Any) -> Any:
    return {"kind": value} if isinstance(value, str) else value


Target = Annotated[
    LocalTarget | KubernetesTarget | SlurmTarget,
    Field(discriminator="kind"),
    BeforeValidator(_target_short_form),
]
