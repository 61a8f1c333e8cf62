"""The benchmark spec language (``apiVersion: mlbench/v1``, ``kind: Benchmark``) as pydantic models.

Models are strict (unknown keys and wrong types are errors) and every field carries a description,
which becomes the JSON Schema and the editor help. Short forms people expect are accepted and
normalized on load: ``max_time: 30m``, ``memory: 12Gi``, ``gpu: 1xT4``, ``workers: 4`` (a sweep of
one), ``target: local``, ``data: synthetic``. Cross-field rules that depend on the task catalog
(backends, precisions, hyperparameter policy) live in ``mlbench_tui.spec.policy`` so each problem
can be reported at its own line.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.gpus import GPU_MODELS, canonical_gpu_model, suggest_gpu_model
from mlbench_tui.spec.shortforms import (
    BACKENDS,
    GPU_RE,
    BackendSweep,
    CpuQuantity,
    Duration,
    FrameworkSweep,
    MemoryQuantity,
    WorkersSweep,
    parse_cpu,
    parse_duration,
    parse_gpu,
    parse_memory,
    show_value,
)
from mlbench_tui.spec.tasks import TASK_KEYS, get_task

API_VERSION = "mlbench/v1"
KIND = "Benchmark"

__all__ = ["BACKENDS", "parse_cpu", "parse_duration", "parse_gpu", "parse_memory"]  # re-exported

GOAL_METRICS: dict[str, Literal["max", "min"]] = {
    "val_global_Prec@1": "max",
    "val_global_Perplexity": "min",
    "val_global_BLEU-Score": "max",
    "val_global_loss": "min",
}

_GPU_TYPE_DOC = f"GPU model, one of {', '.join(GPU_MODELS)} (case and separators are free: 'h100')."

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

# Environment variables the engine sets for every rank; a spec may not override them.
RESERVED_ENV: frozenset[str] = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "JOB_COMPLETION_INDEX",
        "MLBENCH_CONFIG",
        "MLBENCH_RUN_ID",
        "MLBENCH_RUN_TOKEN",
        "MLBENCH_SERVER_URL",
        "MLBENCH_SPOOL_DIR",
        "MLBENCH_TOKEN",
        "MLBENCH_READ_TOKEN",
    }
)


class StrictModel(BaseModel):
    """Base for every spec model: strict types, unknown keys rejected, immutable once loaded."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- sections


class Metadata(StrictModel):
    """Identity of the benchmark: its name (used in run names) plus free-form labels."""

    name: str = Field(
        description="Benchmark name, a DNS-1123 label (lowercase letters, digits and '-', at most 63 "
        "characters); run names are '<name>-<backend>-<workers>w[-r<i>]'."
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Free-form key/value labels, copied to every run and Kubernetes object.",
    )
    description: str | None = Field(
        default=None, description="What this benchmark is for, in a sentence or two."
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if len(value) > 63 or not DNS1123_LABEL.match(value):
            raise PydanticCustomError(
                "dns_label",
                "{value} is not a DNS-1123 label: use at most 63 lowercase letters, digits "
                "and '-', starting and ending with a letter or digit (e.g. '{suggestion}')",
                {"value": show_value(value), "suggestion": _dns_suggestion(value)},
            )
        return value

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if len(key) > 253 or not _LABEL_KEY_RE.match(key):
                raise PydanticCustomError("label", "invalid label key '{key}'", {"key": key})
            if len(val) > 63:
                raise PydanticCustomError("label", "label '{key}' is longer than 63 characters", {"key": key})
        return value


def _dns_suggestion(value: str) -> str:
    text = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-")
    return text or "my-benchmark"


class CustomGoal(StrictModel):
    """An explicit goal: stop when a global validation metric reaches a target."""

    metric: str = Field(description="Global metric to watch, e.g. 'val_global_Prec@1' (percent).")
    target: float = Field(description="Value to reach.")
    direction: Literal["max", "min"] | None = Field(
        default=None,
        description="'max': done when metric >= target; 'min': done when metric <= target. "
        "Defaults to the metric's natural direction (perplexity and loss: min).",
    )

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in GOAL_METRICS:
            raise PydanticCustomError(
                "goal_metric",
                "unknown goal metric {value}: expected one of {expected}",
                {"value": show_value(value), "expected": ", ".join(repr(m) for m in GOAL_METRICS)},
            )
        return value

    def resolved_direction(self) -> Literal["max", "min"]:
        """The explicit direction, or the metric's natural one."""
        return self.direction or GOAL_METRICS[self.metric]


def _goal_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, dict | CustomGoal):
        return "custom"
    return None


Goal = Annotated[
    Annotated[Literal["full", "light"], Tag("preset")] | Annotated[CustomGoal, Tag("custom")],
    Discriminator(
        _goal_tag,
        custom_error_type="goal",
        custom_error_message="goal must be 'full', 'light' or a mapping {metric, target, direction}",
    ),
]


class Gpu(StrictModel):
    """GPUs per rank, and which model they must be."""

    count: int = Field(default=1, ge=0, le=16, description="GPUs per rank.")
    type: str | None = Field(default=None, description=_GPU_TYPE_DOC)
    strict: bool = Field(
        default=True,
        description="With a type: every rank checks at start that its GPU is that model and fails the "
        "run when it is not, so a result labelled A100 never ran on a T4. false: the type is a label, "
        "any GPU runs; the environment fingerprint still records each rank's model.",
    )

    @field_validator("type")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        if value is None:
            return None
        canonical = canonical_gpu_model(value)
        if canonical is not None:
            return canonical
        suggestion = suggest_gpu_model(value)
        raise PydanticCustomError(
            "gpu_model",
            "unknown GPU model {value}: expected one of {expected}",
            {
                "value": show_value(value),
                "expected": ", ".join(GPU_MODELS),
                "hint": f"did you mean '{suggestion}'?"
                if suggestion
                else "give only a count (gpu: 1) to run on any GPU",
            },
        )


GpuField = Annotated[
    Gpu,
    BeforeValidator(parse_gpu),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": 16},
                {"type": "string", "pattern": GPU_RE.pattern},
                {
                    "type": "object",
                    "title": "Gpu",
                    "properties": {
                        "count": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 16,
                            "description": "GPUs per rank.",
                        },
                        "type": {"type": "string", "description": _GPU_TYPE_DOC},
                        "strict": {
                            "type": "boolean",
                            "default": True,
                            "description": "Fail the run when a rank's GPU is not this type (default); "
                            "false: the type is a label only.",
                        },
                    },
                    "additionalProperties": False,
                },
            ],
            "examples": ["1xT4", "2xA100", 1, {"count": 1, "type": "A100", "strict": False}],
        }
    ),
]


class Hardware(StrictModel):
    """Resources of each rank and the numeric precision of training."""

    cpu: CpuQuantity | None = Field(
        default=None,
        description="CPU per rank as a Kubernetes quantity ('2', '500m'). Sets the intra-op threads per "
        "rank (ceil of the cores, at least 1); when unset each rank uses 1 thread.",
    )
    memory: MemoryQuantity | None = Field(default=None, description="Memory per rank, e.g. '12Gi'.")
    gpu: GpuField | None = Field(
        default=None,
        description="GPUs per rank: '1xT4', 'T4', a count, or {count, type, strict}. Unset: CPU only. "
        "Rank i uses GPU LOCAL_RANK of those visible to its machine (CUDA_VISIBLE_DEVICES honoured).",
    )
    precision: Literal["fp32", "bf16", "fp16", "amp"] = Field(
        default="fp32",
        description="Training precision where the task allows it: fp32, bf16, fp16 (GPU only) or amp "
        "(autocast with loss scaling).",
    )

    @property
    def gpus(self) -> int:
        """GPUs per rank (0 when unset)."""
        return self.gpu.count if self.gpu else 0


class Implementation(StrictModel):
    """How a run executes its steps where the task leaves a choice; the math stays the task's."""

    cuda_graphs: bool = Field(
        default=False,
        description="Capture each training step in CUDA graphs (one per phase: forward, loss, backward, "
        "all-reduce, optimizer, metrics) and replay them, so the host no longer launches every kernel. "
        "Needs GPUs and backend nccl; tasks whose batches change shape on almost every step (0a, 4a, 4b) "
        "refuse it. Warm-up and capture count as initialisation, reported apart from time to accuracy.",
    )


class Toleration(StrictModel):
    """A Kubernetes toleration for the worker pods (for tainted GPU or spot nodes)."""

    key: str | None = Field(default=None, description="Taint key; empty with operator Exists matches all.")
    operator: Literal["Equal", "Exists"] = Field(default="Equal", description="Equal or Exists.")
    value: str | None = Field(default=None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty tolerates all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, ge=0, description="For NoExecute: how long the pod stays bound after the taint appears."
    )


class LocalTarget(StrictModel):
    """Run every rank as a local process (torchrun for gloo/nccl, mpiexec for mpi)."""

    kind: Literal["local"] = Field(description="'local': processes on this machine.")
    server_url: str | None = Field(
        default=None,
        description="Metrics server to report to; default: the one from settings or an embedded server.",
    )


class KubernetesTarget(StrictModel):
    """Run the ranks as a Kubernetes Indexed Job with a headless Service."""

    kind: Literal["kubernetes"] = Field(description="'kubernetes': an Indexed Job in a cluster.")
    context: str | None = Field(default=None, description="kubeconfig context; default: the current context.")
    namespace: str = Field(
        default="mlbench", description="Namespace for the Job, Service, Secret and ConfigMap."
    )
    image: str = Field(
        description="Worker image, e.g. 'mlbench-worker:dev' or 'ghcr.io/org/mlbench-worker:0.1'."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy; default: Kubernetes' own (Always for ':latest')."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods must match."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints the pods tolerate.")
    service_account: str | None = Field(default=None, description="Service account of the worker pods.")
    server_url: str | None = Field(
        default=None,
        description="Metrics server URL as seen from the pods; default: the in-cluster server.",
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if len(value) > 63 or not DNS1123_LABEL.match(value):
            raise PydanticCustomError(
                "dns_label", "namespace {value} is not a DNS-1123 label", {"value": show_value(value)}
            )
        return value


_SLURM_CLUSTER_RE = re.compile(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
# Slurm names and feature expressions: no whitespace, quotes or shell syntax, so they stay one
# token in a #SBATCH line.
_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+,-]*$")
_SLURM_CONSTRAINT_RE = re.compile(r"^[A-Za-z0-9_.:&|,*\[\]()!-]+$")
_SLURM_OPTION_RE = re.compile(r"^--[a-z][a-z0-9-]*(=[^\s'\"`$\\;]+)?$")
# sbatch options mlbench sets from the spec: an extra_args entry may not override them.
SLURM_MANAGED_OPTIONS: dict[str, str] = {
    "nodes": "target.nodes",
    "ntasks": "workers",
    "ntasks-per-node": "target.tasks_per_node",
    "cpus-per-task": "hardware.cpu",
    "mem": "hardware.memory",
    "mem-per-cpu": "hardware.memory",
    "gpus-per-task": "hardware.gpu",
    "gres": "hardware.gpu",
    "time": "max_time",
    "partition": "target.partition",
    "account": "target.account",
    "qos": "target.qos",
    "constraint": "target.constraint",
    "job-name": "metadata.name",
    "output": "the run directory",
    "error": "the run directory",
    "chdir": "the run directory",
    "export": "mlbench (the run's token travels in sbatch's environment)",
    "parsable": "mlbench",
    "wrap": "the batch script",
    "array": "the batch script",
}
DEFAULT_SLURM_GRACE_S = 120.0


def _sbatch_option(arg: str) -> str:
    if not _SLURM_OPTION_RE.match(arg):
        raise PydanticCustomError(
            "slurm_option",
            "{value} is not one sbatch option: write '--name' or '--name=value' (long form, no "
            "spaces, quotes or shell characters)",
            {"value": show_value(arg)},
        )
    name = arg[2:].partition("=")[0]
    if name in SLURM_MANAGED_OPTIONS:
        raise PydanticCustomError(
            "slurm_option",
            "extra_args may not set --{name}: mlbench sets it from {source}",
            {"name": name, "source": SLURM_MANAGED_OPTIONS[name]},
        )
    return arg


SbatchOption = Annotated[str, AfterValidator(_sbatch_option)]


class SlurmTarget(StrictModel):
    """Run the ranks as one Slurm batch job: one Slurm task per rank, launched by ``srun``."""

    kind: Literal["slurm"] = Field(description="'slurm': a batch job on a Slurm cluster.")
    cluster: str | None = Field(
        default=None,
        description="Cluster recorded with `mlbench cluster add slurm NAME` (its partition, account, "
        "shared directory and server URL are the defaults here); default: the one chosen with "
        "`mlbench cluster use`, else the Slurm configuration of this login node.",
    )
    partition: str | None = Field(default=None, description="Partition (sbatch --partition).")
    account: str | None = Field(default=None, description="Account charged for the job (sbatch --account).")
    qos: str | None = Field(default=None, description="Quality of service (sbatch --qos).")
    constraint: str | None = Field(
        default=None, description="Node features the job needs, e.g. 'a100&ib' (sbatch --constraint)."
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
        "a node. Default: workers / nodes, or 1 when nodes is unset too.",
    )
    extra_args: list[SbatchOption] = Field(
        default_factory=list,
        description="More sbatch options, one '--name' or '--name=value' each, e.g. ['--exclusive', "
        "'--reservation=bench']; options mlbench sets from the spec are refused.",
    )
    time_limit_grace: Duration = Field(
        default=DEFAULT_SLURM_GRACE_S,
        description="Added to max_time for the job's time limit (sbatch --time, whole minutes), so a "
        "run that stops itself at max_time (counted after its setup) ends before Slurm kills it.",
    )
    server_url: str | None = Field(
        default=None,
        description="Metrics server URL as seen from the compute nodes; default: the cluster's, else "
        "this host's address when the server listens beyond loopback, else the local URL.",
    )

    @field_validator("cluster")
    @classmethod
    def _cluster_name(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_CLUSTER_RE.match(value):
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
        if value is not None and not _SLURM_NAME_RE.match(value):
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
        if value is not None and not _SLURM_CONSTRAINT_RE.match(value):
            raise PydanticCustomError(
                "slurm_constraint",
                "{value} is not a Slurm feature expression: use feature names with & | , * [ ] ( ) "
                "! :, no spaces or quotes",
                {"value": show_value(value)},
            )
        return value

    def layout(self, workers: int) -> tuple[int, int]:
        """``(nodes, tasks_per_node)`` for ``workers`` ranks; ValueError when they do not fit."""
        nodes, per_node = self.nodes, self.tasks_per_node
        if nodes is None and per_node is None:
            nodes, per_node = workers, 1
        elif nodes is None:
            assert per_node is not None
            nodes = workers // per_node if workers % per_node == 0 else 0
        elif per_node is None:
            per_node = workers // nodes if workers % nodes == 0 else 0
        if not nodes or not per_node or nodes * per_node != workers:
            if self.nodes is None:
                what = f"do not fill whole nodes of {self.tasks_per_node} task(s) each"
            elif self.tasks_per_node is None:
                what = f"do not split evenly over {self.nodes} node(s)"
            else:
                what = (
                    f"cannot be placed as {self.nodes} node(s) x {self.tasks_per_node} task(s) per node "
                    f"(= {self.nodes * self.tasks_per_node} ranks)"
                )
            raise ValueError(
                f"{workers} worker(s) {what}: the slurm target runs one rank per Slurm task, so "
                "nodes x tasks_per_node must equal workers"
            )
        return nodes, per_node


def _with_short_form(*names: str) -> Any:
    """A ``json_schema_extra`` that also accepts the string short form (``target: local``)."""

    def extra(schema: dict[str, Any]) -> None:
        keep: dict[str, Any] = {k: schema.pop(k) for k in ("description", "title", "default") if k in schema}
        full = dict(schema)
        schema.clear()
        schema.update(keep)
        schema["anyOf"] = [{"type": "string", "enum": list(names)}, full]

    return extra


def _target_short_form(value: Any) -> Any:
    return {"kind": value} if isinstance(value, str) else value


Target = Annotated[
    LocalTarget | KubernetesTarget | SlurmTarget,
    Field(discriminator="kind"),
    BeforeValidator(_target_short_form),
]


class Data(StrictModel):
    """Where the dataset comes from."""

    source: Literal["synthetic", "path", "download"] = Field(
        description="'synthetic': generated, learnable data for smoke runs; 'path': a prepared dataset "
        "directory; 'download': fetch (with checksums) into a cache directory."
    )
    path: str | None = Field(
        default=None,
        description="Dataset directory (source 'path', required) or cache directory (source 'download', "
        "default: the user cache directory).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Source options, e.g. for synthetic data {train_samples: 2048, val_samples: 512}.",
    )

    @model_validator(mode="after")
    def _path_rules(self) -> Data:
        if self.source == "path" and not self.path:
            raise PydanticCustomError(
                "data_path", "data.source 'path' needs data.path (the dataset directory)"
            )
        if self.source == "synthetic" and self.path:
            raise PydanticCustomError(
                "data_path", "data.path is not used with source 'synthetic': remove it or use source 'path'"
            )
        for key in ("train_samples", "val_samples"):
            val = self.options.get(key)
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
                raise PydanticCustomError(
                    "data_options", "data.options.{key} must be a positive integer", {"key": key}
                )
        return self


def _data_short_form(value: Any) -> Any:
    return {"source": value} if isinstance(value, str) else value


DataField = Annotated[Data, BeforeValidator(_data_short_form)]


def _task_key(value: Any) -> Any:
    if not isinstance(value, str):
        raise PydanticCustomError("task", "task must be a task id or name such as '1a' or 'resnet20-cifar10'")
    task = get_task(value)
    if task is None:
        raise PydanticCustomError(
            "literal_error",
            "unknown task {value}: expected one of {expected}",
            {"value": show_value(value), "raw": value, "expected": ", ".join(repr(k) for k in TASK_KEYS)},
        )
    return task.id


TaskKey = Annotated[
    str,
    BeforeValidator(_task_key),
    WithJsonSchema({"type": "string", "enum": list(TASK_KEYS), "examples": ["1a", "resnet20-cifar10"]}),
]


class BenchmarkBody(StrictModel):
    """What to run, on what, where, and until when."""

    task: TaskKey = Field(description="Official task id or name: " + ", ".join(TASK_KEYS) + ".")
    framework: FrameworkSweep = Field(
        default_factory=lambda: ["pytorch"],
        description="Implementation to run: pytorch, or tensorflow where the task has one (1a), "
        "or a list to compare them: [pytorch, tensorflow].",
    )
    goal: Goal | None = Field(
        default=None,
        description="'full' (the official target), 'light' (a relaxed target) or "
        "{metric, target, direction}. Default: full; tasks without a goal (0a) take none.",
    )
    max_time: Duration | None = Field(
        default=None, description="Stop a run after this much wall time: '30m', '2h', '1h30m' or seconds."
    )
    workers: WorkersSweep = Field(
        default_factory=lambda: [1],
        description="World size, or a list of world sizes to sweep: 4 or [1, 2, 4, 8].",
    )
    backend: BackendSweep = Field(
        default_factory=lambda: ["gloo"],
        description="Communication backend gloo, nccl (GPUs) or mpi, or a list to sweep: [gloo, mpi].",
    )
    hardware: Hardware = Field(default_factory=Hardware, description="Per-rank resources and precision.")
    implementation: Implementation = Field(
        default_factory=Implementation,
        description="Implementation choices, all off by default: {cuda_graphs: true} replays each "
        "training step from CUDA graphs.",
    )
    target: Target = Field(
        default_factory=lambda: LocalTarget(kind="local"),
        description="Where ranks run: 'local', {kind: kubernetes, namespace, image, ...} or "
        "{kind: slurm, cluster, partition, ...}.",
        json_schema_extra=_with_short_form("local", "slurm"),
    )
    data: DataField = Field(
        default_factory=lambda: Data(source="download"),
        description="Dataset source: 'synthetic', 'download' (default) or {source: path, path: DIR}.",
        json_schema_extra=_with_short_form("synthetic", "download"),
    )
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the task's defaults; only what the task's policy allows (batch size and "
        "learning-rate schedule, like MLPerf). See `mlbench tasks`.",
    )
    seed: int = Field(default=42, ge=0, le=2**31 - 1, description="Random seed; repeat i uses seed + i.")
    repeats: int = Field(
        default=1, ge=1, le=100, description="Runs per configuration (scored with an olympic mean)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for every rank."
    )
    price_per_hour: float | None = Field(
        default=None, ge=0, description="Price of the whole run's hardware per hour, for cost to target."
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME_RE.match(name):
                raise PydanticCustomError("env", "invalid environment variable name '{name}'", {"name": name})
            if name in RESERVED_ENV:
                raise PydanticCustomError(
                    "env",
                    "environment variable '{name}' is set by mlbench and cannot be overridden",
                    {"name": name},
                )
        return value


FRAMEWORK_TAGS: dict[str, str] = {"pytorch": "pt", "tensorflow": "tf"}


class BenchmarkSpec(StrictModel):
    """A benchmark spec document: ``apiVersion: mlbench/v1``, ``kind: Benchmark``."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        title="mlbench Benchmark",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    api_version: Literal["mlbench/v1"] = Field(alias="apiVersion", description="Always 'mlbench/v1'.")
    kind: Literal["Benchmark"] = Field(description="Always 'Benchmark'.")
    metadata: Metadata = Field(description="Name, labels and description.")
    spec: BenchmarkBody = Field(description="What to run and where.")

    @property
    def name(self) -> str:
        return self.metadata.name

    def run_suffix(self, framework: str, backend: str, workers: int, repeat: int | None = None) -> str:
        """What follows metadata.name in a run name: ``[-tf|-pt]-<backend>-<workers>w[-r<i>]``.

        The framework appears only when the spec compares frameworks, so single-framework run
        names stay ``<name>-<backend>-<workers>w``; ``repeat`` None gives the longest suffix.
        """
        suffix = f"-{FRAMEWORK_TAGS[framework]}" if len(self.spec.framework) > 1 else ""
        suffix += f"-{backend}-{workers}w"
        if self.spec.repeats > 1:
            suffix += f"-r{self.spec.repeats - 1 if repeat is None else repeat}"
        return suffix

    def normalized(self) -> dict[str, Any]:
        """The spec as plain JSON data, short forms expanded; the input of the spec hash.

        Implementation choices left at their defaults are omitted, so specs written before they
        existed keep their hash (and their stored runs)."""
        doc = self.model_dump(mode="json", by_alias=True)
        if self.spec.implementation == Implementation():
            del doc["spec"]["implementation"]
        return doc
