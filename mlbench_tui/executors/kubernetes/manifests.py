"""Kubernetes manifests for one run, rendered by pure functions (golden-tested).

``render(plan, launch)`` returns the objects of one run in apply order: the owner first (the Indexed
``Job``, or the Kubeflow ``MPIJob`` for the mpi backend), then the ``Secret`` with the run's write
token, the ``ConfigMap`` with the worker config and the plan, and the headless ``Service`` that
gives rank 0 a stable DNS name. One pod per node (its template: ``pod``), so a node's ranks share
NVLink and memory; a GPU run selects nodes labelled with its GPU model. No object per rank, so
1,024 ranks render as fast as 2. Every object
carries the ``app.kubernetes.io/*`` labels and ``mlbench.io/run-id``; the executor sets
``ownerReferences`` to the owner once it has a uid, so deleting the Job removes everything.
Nothing here talks to a cluster or imports the kubernetes client.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any
from urllib.parse import urlsplit

from mlbench_tui import __version__
from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.kubernetes import network, pod
from mlbench_tui.executors.kubernetes.pod import (
    MASTER_PORT,
    SECRET_TOKEN_KEY,
    PodRefs,
    node_command,
    node_layout,
    run_worker_config,
    target_of,
    torchrun_pod,
    worker_command,
)
from mlbench_tui.plan import RunPlan

# Names and paths shared with the executor and the in-cluster server.
LABEL_RUN_ID = "mlbench.io/run-id"
ANNOTATION_RUN_ID = "mlbench.io/run-id"
ANNOTATION_MANIFEST_HASH = "mlbench.io/manifest-hash"
ANNOTATION_TOKEN = "mlbench.io/token"
ANNOTATION_RANKS_PER_NODE = "mlbench.io/ranks-per-node"
DEFAULT_TTL_S = 24 * 3600
GPU_TYPE_LABEL = "mlbench.io/gpu-type"
MPIJOB_API = "kubeflow.org/v2beta1"
REDACTED_NOTE = "set by `mlbench apply` (the run's write token is never printed)"
# In-cluster server Service (installed by mlbench_tui.clusters.incluster); workers report here
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


def _refs(plan: RunPlan, launch: LaunchContext) -> PodRefs:
    name = object_name(launch.run_id)
    return PodRefs(
        name, secret_name(launch.run_id), config_map_name(launch.run_id), worker_server_url(plan, launch)
    )


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


def job(plan: RunPlan, launch: LaunchContext) -> dict[str, Any]:
    """The Indexed Job: one pod per node (completion index = node rank; with one rank per node,
    the rank), no silent retries."""
    name = object_name(launch.run_id)
    nodes, per_node = node_layout(plan)
    template_labels = labels(plan, launch.run_id, "worker")
    if plan.resources.gpus and plan.resources.gpu_type:
        template_labels[GPU_TYPE_LABEL] = label_value(plan.resources.gpu_type.lower())
    command = node_command() if torchrun_pod(plan) else worker_command()
    spec: dict[str, Any] = {
        "completions": nodes,
        "parallelism": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": DEFAULT_TTL_S,
        "template": {
            "metadata": {
                "labels": template_labels,
                "annotations": {ANNOTATION_RUN_ID: launch.run_id, **network.pod_annotations(plan.network)},
            },
            "spec": pod.pod_spec(plan, launch, _refs(plan, launch), command),
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
    refs = _refs(plan, launch)
    nodes, per_node = node_layout(plan)
    launcher_cmd = ["mpirun", "-n", str(plan.workers), "--bind-to", "none", *worker_command()]
    worker_spec = pod.pod_spec(
        plan, launch, refs, ["/usr/sbin/sshd", "-De", "-f", "/home/mlbench/.sshd_config"]
    )
    launcher_spec = pod.pod_spec(plan, launch, refs, launcher_cmd, shaped=False)
    # The launcher only starts processes; GPUs (and the links being measured) belong to the workers.
    launcher_spec["containers"][0].pop("resources", None)
    worker_meta: dict[str, Any] = {"labels": labels(plan, launch.run_id, "worker")}
    if network.pod_annotations(plan.network):
        worker_meta["annotations"] = network.pod_annotations(plan.network)
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
                    "template": {"metadata": worker_meta, "spec": worker_spec},
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
        **network.config_files(plan.network),  # the link-shaping init containers' batch files
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
