"""When a Kubernetes run's pods were created, scheduled, had their image pulled and started, as
the executor reads them from the real HTTP Kubernetes API mock (pod conditions, containerStatuses
and the kubelet's Pulled events), and how they split the launcher's part of the run's start."""

from __future__ import annotations

from typing import Any

import pytest
from support.kube_api import KubeApi, make_launch, make_plan, pod

from mlbench_tui.executors.kubernetes.executor import KubernetesExecutor
from mlbench_tui.lifecycle import LaunchMilestones, RunHandle
from mlbench_tui.results.startup import startup_figures
from mlbench_tui.results.time_to_accuracy import EventRecord

NS = "bench"
JOB = "run-0001"
T0 = 1_764_280_000  # 2026-11-27T21:46:40Z


def stamp(offset: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + offset, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def started_pod(
    index: int, created: int, scheduled: int, started: int, phase: str = "Running"
) -> dict[str, Any]:
    """A pod as the scheduler and kubelet leave it: created, bound to a node, its container started."""
    state = {"running": {"startedAt": stamp(started)}}
    if phase == "Succeeded":
        state = {
            "terminated": {"startedAt": stamp(started), "finishedAt": stamp(started + 30), "exitCode": 0}
        }
    body = pod(
        JOB,
        index,
        phase,
        conditions=[
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(scheduled)},
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp(started + 1)},
        ],
        containerStatuses=[{"name": "worker", "ready": True, "state": state}],
    )
    body["metadata"]["creationTimestamp"] = stamp(created)
    return body


def pulled(pod_name: str, at: int, reason: str = "Pulled") -> dict[str, Any]:
    """The kubelet's event for a pod's image (core/v1 Event, as kubectl get events shows it)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_name}.{at}", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": NS},
        "reason": reason,
        "message": 'Successfully pulled image "mlbench-worker" in 8s',
        "firstTimestamp": stamp(at),
        "lastTimestamp": stamp(at),
        "type": "Normal",
    }


@pytest.fixture()
def handle(kube: KubeApi) -> RunHandle:
    return KubernetesExecutor(kube.api_client(), request_timeout=5).submit(make_plan(), make_launch())


def test_pods_conditions_container_starts_and_pulled_events_give_the_milestones(
    kube: KubeApi, handle: RunHandle
) -> None:
    executor = KubernetesExecutor(kube.api_client(), request_timeout=5)
    pending = pod(JOB, 0, "Pending")
    pending["metadata"]["creationTimestamp"] = stamp(1)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", pending)
    status = executor.describe(handle)
    assert status is not None and status.milestones == LaunchMilestones(submitted=T0 + 1)
    # not yet on a node: the events are not asked for
    assert not [r for r in kube.requests() if r.resource is not None and r.resource.plural == "events"]

    kube.put("v1/pods", NS, f"{JOB}-0-abcde", started_pod(0, created=1, scheduled=3, started=13))
    kube.put("v1/pods", NS, f"{JOB}-1-abcde", started_pod(1, created=2, scheduled=4, started=12))
    kube.put("v1/events", NS, "p0", pulled(f"{JOB}-0-abcde", 12))
    kube.put("v1/events", NS, "p1", pulled(f"{JOB}-1-abcde", 11))
    kube.put("v1/events", NS, "other", pulled("someone-elses-pod", 5))  # not this run's
    kube.put("v1/events", NS, "sched", pulled(f"{JOB}-0-abcde", 2, reason="Scheduled"))
    status = executor.describe(handle)
    assert status is not None
    assert status.milestones == LaunchMilestones(
        submitted=T0 + 1, scheduled=T0 + 3, image_pulled=T0 + 11, started=T0 + 12
    )
    # once found, the pull is kept though the events expire, and the containers' ends keep their starts
    for name in ("p0", "p1"):
        kube.delete("v1/events", NS, name)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", started_pod(0, 1, 3, 13, phase="Succeeded"))
    kube.put("v1/pods", NS, f"{JOB}-1-abcde", started_pod(1, 2, 4, 12, phase="Succeeded"))
    final = executor.describe(handle)
    assert final is not None and final.milestones == status.milestones

    # the run was created at T0; its first rank's process started 2 s after the first container
    events = [
        EventRecord("startup", {"rank": 0, "process_start_t": T0 + 14.5, "phases": {"imports": 1.0}}, rank=0),
        EventRecord("startup", {"rank": 1, "process_start_t": T0 + 14.0, "phases": {"imports": 2.0}}, rank=1),
    ]
    figures = startup_figures(events, launched_at=T0, target="kubernetes", milestones=final.milestones)
    assert figures is not None and figures.launcher_s == pytest.approx(14.0)
    assert figures.launcher_parts == pytest.approx(
        {"scheduled": 3.0, "image pulled": 8.0, "pod started": 1.0, "spawn": 2.0}
    )


def test_without_pulled_events_the_pull_joins_the_pod_start(kube: KubeApi, handle: RunHandle) -> None:
    kube.fault("GET", "events", 403, "Forbidden", "events is forbidden")  # no right to list them
    executor = KubernetesExecutor(kube.api_client(), request_timeout=5)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", started_pod(0, created=1, scheduled=2, started=9))
    status = executor.describe(handle)
    assert status is not None and status.state.value == "running"
    assert [r for r in kube.requests() if r.resource is not None and r.resource.plural == "events"]
    assert status.milestones == LaunchMilestones(submitted=T0 + 1, scheduled=T0 + 2, started=T0 + 9)
    events = [EventRecord("startup", {"rank": 0, "process_start_t": T0 + 10.0, "phases": {"imports": 1.0}})]
    figures = startup_figures(events, launched_at=T0, target="kubernetes", milestones=status.milestones)
    assert figures is not None
    assert figures.launcher_parts == pytest.approx(
        {"scheduled": 2.0, "image pulled and pod started": 7.0, "spawn": 1.0}
    )
