"""Kubernetes manifests for one run, rendered by pure functions (golden-tested).

``render(plan, launch)`` returns the objects of one run in apply order: the owner first (the Indexed
``Job``, or the Kubeflow ``MPIJob`` for the mpi backend), then the ``Secret`` with the run's write
token, the ``ConfigMap`` with the worker config and the plan, and the headless ``Service`` that
gives rank 0 a stable DNS name. One pod per node: with ``ranks_per_node`` above 1 the pod's torchrun
starts that node's ranks (one GPU each), so they share NVLink and memory; a GPU run selects nodes
labelled with its GPU model. No object per rank, so 1,024 ranks render as fast as 2. Every object
carries the ``app.kubernetes.io/*`` labels and ``mlbench.io/run-id``; the executor sets
``ownerReferences`` to the owner once it has a uid, so deleting the Job removes everything.
Nothing here talks to a cluster or imports the kubernetes client.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from mlbench_worker.wire import config_document

from mlbench_tui import __version__
from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.placement import GPU_LABEL, GPU_MODEL_LABEL, GPU_TOLERATIONS, gpu_model_label
from mlbench_tui.executors.pod_logs import RANK_LOG_PREFIX_TEMPLATE
from mlbench_tui.plan import RunPlan, worker_settings
from mlbench_tui.spec.targets import KubernetesTarget

# Names and paths shared with the executor and the in-cluster server.
LABEL_RUN_ID = "mlbench.io/run-id"
ANNOTATION_RUN_ID = "mlbench.io/run-id"
ANNOTATION_MANIFEST_HASH = "mlbench.io/manifest-hash"
ANNOTATION_TOKEN = "mlbench.io/token"
ANNOTATION_RANKS_PER_NODE = "mlbench.io/ranks-per-node"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTAINER = "worker"
CONFIG_DIR = "/etc/mlbench"
CONFIG_FILE = f"{CONFIG_DIR}/config.json"
DATASET_MOUNT = "/mnt/dataset"
SECRET_TOKEN_KEY = "token"
MASTER_PORT = 29500
DEFAULT_TTL_S = 24 * 3600
GPU_TYPE_LABEL = "mlbench.io/gpu-type"
MPIJOB_API = "kubeflow.org/v2beta1"
REDACTED_NOTE = "set by `mlbench apply` (the run's write token is never printed)"
# In-cluster server Service (installed by mlbench_tui.infra.incluster); workers report here
# unless the target names another URL that pods can reach.
IN_CLUSTER_SERVER = "mlbench-server"
IN_CLUSTER_PORT = 8080

# Pod hostnames are "<job>-<index>" and must stay within a 63-character DNS label.
_NAME_MAX = 52
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


def object_name(run_id: str) -> str:
    """The DNS-1035 name shared by a run's objects, derived from the run id alone (stable)."""
    name = _NOT_DNS.sub("-", run_id.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"mlb-{name}".rstrip("-")
    if len(name) > _NAME_MAX:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
        name = f"{name[: _NAME_MAX - 9].rstrip('-')}-{digest}"
    return name


def label_value(text: str) -> str:
    """``text`` as a valid label value (63 chars, alphanumeric at both ends)."""
    value = _NOT_LABEL.sub("-", text).strip("-._")
    if len(value) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        value = f"{value[:54].rstrip('-._')}-{digest}"
    return value


def target_of(plan: RunPlan) -> KubernetesTarget:
    """The plan's Kubernetes target; a plan for another target is refused."""
    if not isinstance(plan.target, KubernetesTarget):
        raise ExecutorError(
            f"run {plan.name} targets {plan.target.kind}, not kubernetes",
            hint="set target.kind: kubernetes (with its image) in the spec",
        )
    return plan.target


def namespace_of(plan: RunPlan) -> str:
    """The namespace a plan runs in."""
    return target_of(plan).namespace


def secret_name(run_id: str) -> str:
    return f"{object_name(run_id)}-token"


def config_map_name(run_id: str) -> str:
    return f"{object_name(run_id)}-config"


def labels(plan: RunPlan, run_id: str, component: str) -> dict[str, str]:
    """The labels every object of a run carries (selectors use only ``mlbench.io/run-id``)."""
    out = {
        "app.kubernetes.io/name": "mlbench",
        "app.kubernetes.io/instance": object_name(run_id),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "mlbench",
        "app.kubernetes.io/managed-by": "mlbench",
        "app.kubernetes.io/version": label_value(__version__),
        LABEL_RUN_ID: label_value(run_id),
        "mlbench.io/task": label_value(plan.task),
        "mlbench.io/backend": plan.backend,
        "mlbench.io/spec": label_value(plan.spec_name),
    }
    for key, value in sorted(plan.labels.items()):
        out.setdefault(key, label_value(value))
    return out


def _meta(plan: RunPlan, launch: LaunchContext, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace_of(plan),
        "labels": labels(plan, launch.run_id, component),
        "annotations": {ANNOTATION_RUN_ID: launch.run_id, "mlbench.io/run-name": plan.name},
    }


def worker_server_url(plan: RunPlan, launch: LaunchContext) -> str:
    """The URL pods report to: the target's ``server_url``, else the launch URL unless it is a
    loopback address (unreachable from pods), in which case the in-cluster server's Service."""
    explicit = target_of(plan).server_url
    if explicit:
        return explicit
    host = urlsplit(launch.server_url).hostname or ""
    if launch.server_url and host not in ("localhost", "::1") and not host.startswith("127."):
        return launch.server_url
    return f"http://{IN_CLUSTER_SERVER}.{namespace_of(plan)}.svc:{IN_CLUSTER_PORT}"


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


def _torchrun_pod(plan: RunPlan) -> bool:
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


def _env(plan: RunPlan, launch: LaunchContext, name: str) -> list[dict[str, Any]]:
    """Reporting, rendezvous (torch env:// and torchrun's PET_*) and thread settings."""

    def rank_ref() -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}

    master = f"{name}-0.{name}"
    threads = str(plan.resources.threads_per_rank)
    nodes, per_node = node_layout(plan)
    env: list[dict[str, Any]] = [
        {"name": "MLBENCH_CONFIG", "value": CONFIG_FILE},
        {"name": "MLBENCH_SERVER_URL", "value": worker_server_url(plan, launch)},
        {"name": "MLBENCH_RUN_ID", "value": launch.run_id},
        {
            "name": "MLBENCH_RUN_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret_name(launch.run_id), "key": SECRET_TOKEN_KEY}},
        },
        {"name": "MLBENCH_SPOOL_DIR", "value": "/tmp/mlbench-spool"},
    ]
    if not _torchrun_pod(plan):  # the pod is the rank; with torchrun, torchrun sets these per rank
        env += [
            {"name": "RANK", "valueFrom": rank_ref()},
            {"name": "LOCAL_RANK", "value": "0"},
            {"name": "WORLD_SIZE", "value": str(plan.workers)},
            {"name": "MASTER_ADDR", "value": master},
            {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        ]
    env += [
        {"name": "PET_NODE_RANK", "valueFrom": rank_ref()},
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(per_node)},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "OMP_NUM_THREADS", "value": threads},
        {"name": "MKL_NUM_THREADS", "value": threads},
    ]
    if _torchrun_pod(plan):
        env.append({"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": RANK_LOG_PREFIX_TEMPLATE})
    if plan.framework == "tensorflow":
        # MultiWorkerMirroredStrategy: each rank builds TF_CONFIG from this list and its RANK
        # (one template for all pods of the Indexed Job); the rendezvous port serves TF's gRPC.
        peers = ",".join(f"{name}-{i}.{name}:{MASTER_PORT}" for i in range(plan.workers))
        env.append({"name": "MLBENCH_TF_WORKERS", "value": peers})
    taken = {item["name"] for item in env}
    env += [{"name": k, "value": str(v)} for k, v in sorted(plan.env.items()) if k not in taken]
    return env


def _volumes(plan: RunPlan, launch: LaunchContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "config",
            "configMap": {
                "name": config_map_name(launch.run_id),
                "items": [{"key": "config.json", "path": "config.json"}],
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


def _container(plan: RunPlan, launch: LaunchContext, name: str, command: list[str]) -> dict[str, Any]:
    _, mounts = _volumes(plan, launch)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": target_of(plan).image,
        "imagePullPolicy": target_of(plan).image_pull_policy or "IfNotPresent",
        "command": command,
        "env": _env(plan, launch, name),
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    quantities = _quantities(plan)
    if quantities:
        container["resources"] = quantities
    return container


def _pod_spec(plan: RunPlan, launch: LaunchContext, name: str, command: list[str]) -> dict[str, Any]:
    volumes, _ = _volumes(plan, launch)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": name,
        # Workers never call the Kubernetes API: no token in the pod.
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "containers": [_container(plan, launch, name, command)],
        "volumes": volumes,
    }
    if target_of(plan).service_account:
        spec["serviceAccountName"] = target_of(plan).service_account
    selector = _node_selector(plan)
    if selector:
        spec["nodeSelector"] = selector
    tolerations = _tolerations(plan)
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


MAX_DEADLINE_S = 2**63 - 1  # activeDeadlineSeconds is an int64
MAX_CONFIG_MAP_BYTES = 1024 * 1024  # Kubernetes refuses a larger ConfigMap


def _deadline(plan: RunPlan) -> int | None:
    if not plan.max_time_s:
        return None
    if not math.isfinite(plan.max_time_s) or plan.max_time_s > MAX_DEADLINE_S:
        raise ExecutorError(
            f"max_time of {plan.max_time_s:g} s does not fit Kubernetes' activeDeadlineSeconds",
            hint="lower spec.max_time",
        )
    return max(1, math.ceil(plan.max_time_s))


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


def job(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """The Indexed Job: one pod per node (completion index = node rank; with one rank per node,
    the rank), no silent retries."""
    name = object_name(launch.run_id)
    nodes, per_node = node_layout(plan)
    template_labels = labels(plan, launch.run_id, "worker")
    if plan.resources.gpus and plan.resources.gpu_type:
        template_labels[GPU_TYPE_LABEL] = label_value(plan.resources.gpu_type.lower())
    command = node_command() if _torchrun_pod(plan) else worker_command()
    spec: dict[str, Any] = {
        "completions": nodes,
        "parallelism": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": DEFAULT_TTL_S,
        "template": {
            "metadata": {"labels": template_labels, "annotations": {ANNOTATION_RUN_ID: launch.run_id}},
            "spec": _pod_spec(plan, launch, name, command),
        },
    }
    deadline = _deadline(plan)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    meta = _meta(plan, launch, name, "run")
    meta["annotations"][ANNOTATION_RANKS_PER_NODE] = str(per_node)  # pod_status.layout_of reads it
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def mpijob(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """An MPIJob for the Kubeflow MPI Operator (v2beta1): a launcher runs ``mpirun`` over the workers."""
    name = object_name(launch.run_id)
    nodes, per_node = node_layout(plan)
    launcher_cmd = ["mpirun", "-n", str(plan.workers), "--bind-to", "none", *worker_command()]
    worker_spec = _pod_spec(plan, launch, name, ["/usr/sbin/sshd", "-De", "-f", "/home/mlbench/.sshd_config"])
    launcher_spec = _pod_spec(plan, launch, name, launcher_cmd)
    # The launcher only starts processes; GPUs belong to the workers.
    launcher_spec["containers"][0].pop("resources", None)
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": "Running",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": DEFAULT_TTL_S,
    }
    deadline = _deadline(plan)
    if deadline is not None:
        run_policy["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": MPIJOB_API,
        "kind": "MPIJob",
        "metadata": _meta(plan, launch, name, "run"),
        "spec": {
            "slotsPerWorker": per_node,
            "runPolicy": run_policy,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "sshAuthMountPath": "/home/mlbench/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": labels(plan, launch.run_id, "launcher")},
                        "spec": launcher_spec,
                    },
                },
                "Worker": {
                    "replicas": nodes,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": labels(plan, launch.run_id, "worker")},
                        "spec": worker_spec,
                    },
                },
            },
        },
    }


def secret(plan: RunPlan, launch: LaunchContext, *, redact: bool = False) -> dict[str, Any]:
    """The run's write token; ``redact`` drops the value (for printing) and says who sets it."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(plan, launch, secret_name(launch.run_id), "token"),
        "type": "Opaque",
    }
    if redact:
        obj["metadata"]["annotations"][ANNOTATION_TOKEN] = REDACTED_NOTE
    else:
        obj["stringData"] = {SECRET_TOKEN_KEY: launch.write_token}
    return obj


def config_map(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """The worker config the pods read, plus the resolved plan for the record; one larger than
    Kubernetes takes is refused here rather than by the API server after the Job exists."""
    data = {
        "config.json": json.dumps(run_worker_config(plan, launch), indent=2, sort_keys=True),
        "plan.json": json.dumps(plan.model_dump(mode="json"), indent=2, sort_keys=True),
    }
    size = sum(len(key) + len(value.encode()) for key, value in data.items())
    if size > MAX_CONFIG_MAP_BYTES:
        raise ExecutorError(
            f"run {plan.name}: its config is {size} bytes, more than the 1 MiB a Kubernetes ConfigMap holds",
            hint="shorten spec.env or data.options",
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, launch, config_map_name(launch.run_id), "config"),
        "data": data,
    }


def service(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """The headless Service behind ``<job>-<rank>.<service>`` DNS names (rank 0 is the master)."""
    name = object_name(launch.run_id)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan, launch, name, "rendezvous"),
        "spec": {
            "clusterIP": "None",
            # Ranks resolve each other before any readiness: there are no probes.
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN_ID: label_value(launch.run_id), "app.kubernetes.io/component": "worker"},
            "ports": [
                {"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}
            ],
        },
    }


def manifest_hash(objects: list[dict[str, Any]]) -> str:
    """A digest of what is applied, minus the token (so re-applying an unchanged run is a no-op)."""
    stripped = [
        {k: v for k, v in obj.items() if k not in ("stringData", "data") or obj["kind"] != "Secret"}
        for obj in objects
    ]
    return hashlib.sha256(json.dumps(stripped, sort_keys=True).encode()).hexdigest()[:16]


def render(plan: RunPlan, launch: LaunchContext, *, redact: bool = False) -> list[dict[str, Any]]:
    """Every object of one run, owner first. ``redact`` leaves the token out (``mlbench plan``)."""
    owner = mpijob(plan, launch) if plan.backend == "mpi" else job(plan, launch)
    objects = [owner, secret(plan, launch, redact=redact), config_map(plan, launch)]
    if plan.backend != "mpi":  # the MPI Operator makes its own Service
        objects.append(service(plan, launch))
    owner["metadata"]["annotations"][ANNOTATION_MANIFEST_HASH] = manifest_hash(objects)
    return objects


def with_owner(obj: dict[str, Any], owner: dict[str, Any], uid: str) -> dict[str, Any]:
    """A copy of ``obj`` owned by ``owner`` (uid from the API server), so the GC removes it with the run."""
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": uid,
        "controller": False,
        "blockOwnerDeletion": True,
    }
    out: dict[str, Any] = json.loads(json.dumps(obj))
    out["metadata"]["ownerReferences"] = [ref]
    return out


def _represent_str(representer: Any, data: str) -> Any:
    """Multi-line strings (the JSON documents in the ConfigMap) as readable literal blocks."""
    style = "|" if "\n" in data else None
    return representer.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def to_yaml(objects: list[dict[str, Any]], *, header: str | None = None) -> str:
    """Multi-document YAML that ``kubectl apply -f -`` accepts."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.representer.ignore_aliases = lambda *args: True
    yaml.representer.add_representer(str, _represent_str)
    docs: list[str] = []
    for obj in objects:
        stream = io.StringIO()
        yaml.dump(obj, stream)
        docs.append(stream.getvalue())
    text = "---\n" + "---\n".join(docs)
    return f"{header.rstrip()}\n{text}" if header else text


def plan_yaml(plans: list[RunPlan], *, server_url: str = "") -> str:
    """What ``mlbench plan -o yaml`` prints for Kubernetes targets: every run's manifests, the
    run id previewed as the run name and each Secret's token left out (``apply`` creates it)."""
    chunks: list[str] = []
    for plan in plans:
        launch = LaunchContext(run_id=plan.name, server_url=server_url, write_token="")
        header = (
            f"# run {plan.name}: {plan.workers} worker(s), backend {plan.backend}, "
            f"namespace {namespace_of(plan)}\n"
            f"# Secret {secret_name(plan.name)}: token omitted; `mlbench apply` creates and fills it"
        )
        chunks.append(to_yaml(render(plan, launch, redact=True), header=header))
    return "".join(chunks)
