"""The pod template of a run: what each pod runs, with which resources, where it may land, its
environment (reporting, rendezvous, threads) and its volumes (pure functions; ``manifests`` puts
the template into the run's Job or MPIJob). One pod per node: with ``ranks_per_node`` above 1 the
pod's torchrun starts that node's ranks (one GPU each)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mlbench_worker import rank_env
from mlbench_worker.config import config_document

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.kubernetes import network
from mlbench_tui.executors.kubernetes.placement import (
    GPU_LABEL,
    GPU_MODEL_LABEL,
    GPU_TOLERATIONS,
    gpu_model_label,
)
from mlbench_tui.executors.kubernetes.pod_logs import RANK_LOG_PREFIX_TEMPLATE
from mlbench_tui.plan import RunPlan, worker_settings
from mlbench_tui.spec.targets import KubernetesTarget

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTAINER = "worker"
CONFIG_DIR = "/etc/mlbench"
CONFIG_FILE = f"{CONFIG_DIR}/config.json"
DATASET_MOUNT = "/mnt/dataset"
SECRET_TOKEN_KEY = "token"
MASTER_PORT = 29500


@dataclass(frozen=True)
class PodRefs:
    """What a run's pods refer to by name: the run's objects (the headless Service is ``name``)
    and the server they report to."""

    name: str
    secret: str
    config_map: str
    server_url: str


def target_of(plan: RunPlan) -> KubernetesTarget:
    """The plan's Kubernetes target; a plan for another target is refused."""
    if not isinstance(plan.target, KubernetesTarget):
        raise ExecutorError(
            f"run {plan.name} targets {plan.target.kind}, not kubernetes",
            hint="set target.kind: kubernetes (with its image) in the spec",
        )
    return plan.target


def _dataset(plan: RunPlan) -> tuple[str, str] | None:
    """(claim, subpath) when ``data.path`` is ``pvc://CLAIM/SUBPATH``."""
    path = plan.data.path or ""
    if not path.startswith("pvc://"):
        return None
    claim, _, sub = path[len("pvc://") :].partition("/")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", claim):
        raise ExecutorError(
            f"data.path {path!r} does not name a PersistentVolumeClaim",
            hint="use pvc://CLAIM/SUBPATH with a lowercase claim name",
        )
    if ".." in sub.split("/"):
        raise ExecutorError(f"data.path {path!r} leaves the volume", hint="remove '..' from the subpath")
    return claim, sub.strip("/")


def run_worker_config(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """The worker config as seen inside the pod (a PVC dataset path becomes its mount path)."""
    settings = worker_settings(plan, launch.run_id)
    dataset = _dataset(plan)
    if dataset is not None:
        _, sub = dataset
        mounted = dataclasses.replace(settings.data, path=f"{DATASET_MOUNT}/{sub}".rstrip("/"))
        settings = dataclasses.replace(settings, data=mounted)
    return config_document(settings)


def node_layout(plan: RunPlan) -> tuple[int, int]:
    """``(nodes, ranks_per_node)``: one pod per node, ``plan.ranks_per_node`` ranks in each (1 when
    unset); a world size that does not fill whole pods is refused (the spec's policy says so first)."""
    per_node = plan.ranks_per_node or 1
    if plan.workers % per_node:
        raise ExecutorError(
            f"{plan.workers} workers do not fill whole nodes of {per_node} ranks",
            hint=f"use world sizes up to {per_node} or multiples of it",
        )
    return plan.workers // per_node, per_node


def torchrun_pod(plan: RunPlan) -> bool:
    """Whether a pod's torchrun starts its node's ranks (several per pod on gloo or nccl)."""
    return node_layout(plan)[1] > 1 and plan.backend != "mpi"


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)([A-Za-z]*)$")


def _times(quantity: str, count: int) -> str:
    """A Kubernetes quantity ``count`` times over (``500m`` x 4 -> ``2000m``, ``12Gi`` x 4 -> ``48Gi``)."""
    if count == 1:
        return quantity
    match = _QUANTITY.fullmatch(quantity)
    if match is None:  # the spec's short forms only make plain and suffixed decimals
        raise ExecutorError(f"cannot scale the quantity {quantity!r} to {count} ranks per pod")
    total = Decimal(match[1]) * count
    return f"{total.normalize():f}{match[2]}"


def _quantities(plan: RunPlan) -> dict[str, Any]:
    """A pod's resources: every rank's share times the ranks it runs; a GPU run's GPUs through
    ``nvidia.com/gpu`` (the device plugin hands the pod exactly those, rank i takes the i-th)."""
    res = plan.resources
    per_node = node_layout(plan)[1]
    amounts: dict[str, str] = {}
    if res.cpu:
        amounts["cpu"] = _times(res.cpu, per_node)
    if res.memory:
        amounts["memory"] = _times(res.memory, per_node)
    if res.gpus:
        amounts["nvidia.com/gpu"] = str(res.gpus * per_node)
    # requests == limits: Guaranteed QoS keeps a benchmark's timings free of noisy neighbours.
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _tolerations(plan: RunPlan) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if plan.resources.gpus:
        out.extend(dict(item) for item in GPU_TOLERATIONS)
    for item in target_of(plan).tolerations:
        toleration = item.model_dump(exclude_none=True)
        if "toleration_seconds" in toleration:
            toleration["tolerationSeconds"] = toleration.pop("toleration_seconds")
        if toleration not in out:
            out.append(toleration)
    return out


def _node_selector(plan: RunPlan) -> dict[str, str]:
    """GPU runs go to the GPU pool (``placement.GPU_LABEL``) and, when they name a GPU model
    (strictly), to nodes labelled with it (``placement.GPU_MODEL_LABEL``); then the target's own
    selector."""
    selector: dict[str, str] = {}
    res = plan.resources
    if res.gpus:
        selector[GPU_LABEL[0]] = GPU_LABEL[1]
        model = gpu_model_label(res.gpu_type) if res.gpu_type and res.gpu_type_strict else None
        if model is not None:
            selector[GPU_MODEL_LABEL] = model
    selector.update(target_of(plan).node_selector)
    return selector


def _env(plan: RunPlan, launch: LaunchContext, refs: PodRefs) -> list[dict[str, Any]]:
    """Reporting, rendezvous (torch env:// and torchrun's PET_*) and thread settings."""

    def rank_ref() -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}

    name = refs.name
    master = f"{name}-0.{name}"
    threads = str(plan.resources.threads_per_rank)
    nodes, per_node = node_layout(plan)
    env: list[dict[str, Any]] = [
        {"name": rank_env.CONFIG, "value": CONFIG_FILE},
        {"name": rank_env.SERVER_URL, "value": refs.server_url},
        {"name": rank_env.RUN_ID, "value": launch.run_id},
        {
            "name": rank_env.RUN_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": refs.secret, "key": SECRET_TOKEN_KEY}},
        },
        {"name": rank_env.SPOOL_DIR, "value": "/tmp/mlbench-spool"},
    ]
    if not torchrun_pod(plan):  # the pod is the rank; with torchrun, torchrun sets these per rank
        env += [
            {"name": rank_env.RANK, "valueFrom": rank_ref()},
            {"name": rank_env.LOCAL_RANK, "value": "0"},
            {"name": rank_env.WORLD_SIZE, "value": str(plan.workers)},
            {"name": rank_env.MASTER_ADDR, "value": master},
            {"name": rank_env.MASTER_PORT, "value": str(MASTER_PORT)},
        ]
    env += [
        {"name": rank_env.PET_NODE_RANK, "valueFrom": rank_ref()},
        {"name": rank_env.PET_NNODES, "value": str(nodes)},
        {"name": rank_env.PET_NPROC_PER_NODE, "value": str(per_node)},
        {"name": rank_env.PET_MASTER_ADDR, "value": master},
        {"name": rank_env.PET_MASTER_PORT, "value": str(MASTER_PORT)},
        {"name": rank_env.OMP_NUM_THREADS, "value": threads},
        {"name": rank_env.MKL_NUM_THREADS, "value": threads},
    ]
    if torchrun_pod(plan):
        env.append(
            {"name": rank_env.TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, "value": RANK_LOG_PREFIX_TEMPLATE}
        )
    if plan.network is not None:  # the ranks sample the pod's link: what the limits let through
        env.append({"name": rank_env.LINK_INTERFACE, "value": network.POD_INTERFACE})
    if plan.framework == "tensorflow":
        # MultiWorkerMirroredStrategy: each rank builds TF_CONFIG from this list and its RANK
        # (one template for all pods of the Indexed Job); the rendezvous port serves TF's gRPC.
        peers = ",".join(f"{name}-{i}.{name}:{MASTER_PORT}" for i in range(plan.workers))
        env.append({"name": rank_env.TF_WORKERS, "value": peers})
    taken = {item["name"] for item in env}
    env += [{"name": k, "value": str(v)} for k, v in sorted(plan.env.items()) if k not in taken]
    return env


def _volumes(plan: RunPlan, refs: PodRefs) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "config",
            "configMap": {
                "name": refs.config_map,
                "items": [
                    {"key": key, "path": key} for key in ("config.json", *network.config_files(plan.network))
                ],
            },
        },
        # Data loader workers exchange batches through /dev/shm; the container default is 64 MiB.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "spool", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "spool", "mountPath": "/tmp/mlbench-spool"},
    ]
    dataset = _dataset(plan)
    if dataset is not None:
        claim, _ = dataset
        volumes.append({"name": "dataset", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "dataset", "mountPath": DATASET_MOUNT, "readOnly": True})
    return volumes, mounts


def _container(plan: RunPlan, launch: LaunchContext, refs: PodRefs, command: list[str]) -> dict[str, Any]:
    _, mounts = _volumes(plan, refs)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": target_of(plan).image,
        "imagePullPolicy": target_of(plan).image_pull_policy or "IfNotPresent",
        "command": command,
        "env": _env(plan, launch, refs),
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    quantities = _quantities(plan)
    if quantities:
        container["resources"] = quantities
    return container


def pod_spec(
    plan: RunPlan, launch: LaunchContext, refs: PodRefs, command: list[str], *, shaped: bool = True
) -> dict[str, Any]:
    """A pod of the run running ``command``; a ``shaped`` pod (a worker's) gets the init containers
    that limit its links, where the spec's network needs them."""
    volumes, mounts = _volumes(plan, refs)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": refs.name,
        # Workers never call the Kubernetes API: no token in the pod.
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "containers": [_container(plan, launch, refs, command)],
        "volumes": volumes,
    }
    target = target_of(plan)
    shapers = network.init_containers(
        plan.network, target.image, target.image_pull_policy or "IfNotPresent", mounts[0], CONFIG_DIR
    )
    if shaped and shapers:
        spec["initContainers"] = shapers
    if target_of(plan).service_account:
        spec["serviceAccountName"] = target_of(plan).service_account
    selector = _node_selector(plan)
    if selector:
        spec["nodeSelector"] = selector
    tolerations = _tolerations(plan)
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def worker_command() -> list[str]:
    return ["python", "-m", "mlbench_worker", "--config", CONFIG_FILE]


def node_command() -> list[str]:
    """A node's pod with several ranks: torchrun starts them (nodes, ranks per node, node rank and
    rendezvous from the ``PET_*`` environment), never restarts one, and tees each rank's output
    to the pod's log with its rank in front (``RANK_LOG_PREFIX_TEMPLATE``)."""
    return [
        "python",
        "-m",
        "torch.distributed.run",
        "--max-restarts=0",
        "--tee=3",
        "-m",
        *worker_command()[2:],
    ]
