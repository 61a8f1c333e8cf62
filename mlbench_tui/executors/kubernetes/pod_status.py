"""A run's status from its owner object (Job or MPIJob) and its pods: pure functions over the
JSON the Kubernetes API returns, so each rule (stuck pods, failed ranks, deletion) is tested alone."""

from __future__ import annotations

from typing import Any

from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes.pod import COMPLETION_INDEX_ANNOTATION
from mlbench_tui.lifecycle import RankStatus, RunHandle, RunState, RunStatus

# Waiting reasons that will not resolve by themselves: shown as the run's message.
_STUCK = {
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CrashLoopBackOff",
}


def layout_of(owner: dict[str, Any]) -> tuple[int, int]:
    """``(pods, ranks per pod)`` of a run's owner: a Job's completions and its ranks-per-node
    annotation, or an MPIJob's worker replicas and slots per worker."""
    meta, spec = owner.get("metadata") or {}, owner.get("spec") or {}
    if owner.get("kind") == "MPIJob" or "mpiReplicaSpecs" in spec:
        replicas = ((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas")
        return int(replicas or 1), int(spec.get("slotsPerWorker") or 1)
    per_pod = str((meta.get("annotations") or {}).get(manifests.ANNOTATION_RANKS_PER_NODE) or 1)
    return int(spec.get("completions") or 1), int(per_pod) if per_pod.isdigit() else 1


def rank_of(pod: dict[str, Any]) -> int | None:
    """The pod's index among the run's pods (its node rank; its rank with one rank per pod)."""
    meta = pod.get("metadata") or {}
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for key in (COMPLETION_INDEX_ANNOTATION, "training.kubeflow.org/replica-index"):
            value = source.get(key)
            if value is not None and str(value).isdigit():
                return int(value)
    return None


def pod_state(pod: dict[str, Any]) -> tuple[RunState, str | None, int | None]:
    """A pod's phase as a RunState, with the reason a user needs when it is stuck or failed."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    containers = status.get("containerStatuses") or []
    exit_code = None
    for container in containers:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            exit_code = terminated.get("exitCode")
    if phase == "Succeeded":
        return RunState.SUCCEEDED, None, exit_code
    if phase == "Failed":
        reason = status.get("reason") or status.get("message")
        for container in containers:
            terminated = (container.get("state") or {}).get("terminated") or {}
            if terminated:
                reason = f"{terminated.get('reason', 'Error')} (exit code {terminated.get('exitCode')})"
        return RunState.FAILED, reason, exit_code
    if phase == "Running":
        return RunState.RUNNING, None, None
    if phase == "Unknown":
        return RunState.UNKNOWN, status.get("reason"), None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return (
                RunState.PENDING,
                f"{condition.get('reason')}: {condition.get('message', '')}".strip(": "),
                None,
            )
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            text = waiting["reason"]
            if waiting.get("message"):
                text += f": {waiting['message']}"
            return RunState.PENDING, text, None
    return RunState.PENDING, None, None


def run_status(handle: RunHandle, owner: dict[str, Any], pods: list[dict[str, Any]]) -> RunStatus:
    meta, spec, state_obj = owner["metadata"], owner.get("spec") or {}, owner.get("status") or {}
    nodes, per_pod = layout_of(owner)
    workers = nodes * per_pod
    ranks: dict[int, RankStatus] = {}
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        index = rank_of(pod)
        if index is None:
            continue
        state, message, exit_code = pod_state(pod)
        for rank in range(index * per_pod, (index + 1) * per_pod):  # the ranks the pod runs
            ranks[rank] = RankStatus(
                rank=rank,
                state=state,
                host=(pod.get("spec") or {}).get("nodeName"),
                exit_code=exit_code,
                message=message,
            )
    rank_list = [ranks[r] for r in sorted(ranks)]
    conditions = {c.get("type"): c for c in state_obj.get("conditions") or [] if c.get("status") == "True"}
    if meta.get("deletionTimestamp"):
        return RunStatus(handle, RunState.CANCELLED, rank_list, "cancelled: the run is being deleted")
    if "Complete" in conditions or "Succeeded" in conditions:
        return RunStatus(handle, RunState.SUCCEEDED, rank_list, None)
    if "Failed" in conditions:
        cond = conditions["Failed"]
        failed = [r for r in rank_list if r.state is RunState.FAILED]
        detail = f"; rank {failed[0].rank}: {failed[0].message}" if failed and failed[0].message else ""
        return RunStatus(
            handle, RunState.FAILED, rank_list, f"{cond.get('reason')}: {cond.get('message', '')}{detail}"
        )
    failed = [r for r in rank_list if r.state is RunState.FAILED]
    if failed:
        return RunStatus(
            handle, RunState.FAILED, rank_list, f"rank {failed[0].rank} failed: {failed[0].message}"
        )
    if len(rank_list) >= workers and all(r.state is RunState.SUCCEEDED for r in rank_list):
        return RunStatus(handle, RunState.SUCCEEDED, rank_list, None)
    pending = [r for r in rank_list if r.state is RunState.PENDING]
    stuck = [r for r in pending if r.message]
    if stuck:
        first = next((r for r in stuck if r.message and r.message.split(":")[0] in _STUCK), stuck[0])
        message = f"rank {first.rank} pending: {first.message}"
    elif "Suspended" in conditions or spec.get("suspend"):
        message = "suspended"
    else:
        message = None
    if any(r.state is RunState.RUNNING for r in rank_list):  # some ranks may still be starting
        return RunStatus(handle, RunState.RUNNING, rank_list, message)
    return RunStatus(handle, RunState.PENDING, rank_list, message or "waiting for pods to be scheduled")
