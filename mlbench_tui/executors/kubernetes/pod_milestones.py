"""When a run's pods reached each step of their launch, from the JSON the Kubernetes API returns
(pure): created, bound to a node (the ``PodScheduled`` condition), image pulled (the kubelet's
``Pulled`` event) and container started (``containerStatuses[].state.*.startedAt``).

Each milestone is the earliest over the run's pods, so they lead up to its first rank's process
as the launcher's part of the start does.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from mlbench_tui.lifecycle import LaunchMilestones

PULLED_SELECTOR = "involvedObject.kind=Pod,reason=Pulled"
"""The field selector of the events that say a pod's image is there (pulled, or already present)."""


def api_time(text: object) -> float | None:
    """A Kubernetes timestamp (RFC 3339, ``2026-11-27T22:20:01Z`` or with a fraction) as UNIX
    seconds; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _earliest(times: Iterable[float | None]) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def scheduled_at(pod: dict[str, Any]) -> float | None:
    """When the pod was bound to a node (its ``PodScheduled`` condition turned True)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return api_time(condition.get("lastTransitionTime"))
    return None


def container_started_at(pod: dict[str, Any]) -> float | None:
    """When the pod's first container to start did (running now, or since terminated)."""
    starts = []
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        for key in ("running", "terminated"):
            starts.append(api_time((state.get(key) or {}).get("startedAt")))
    return _earliest(starts)


def pulled_at(events: Iterable[dict[str, Any]], pod_names: set[str]) -> float | None:
    """The earliest ``Pulled`` event of one of ``pod_names`` (``eventTime``, else
    ``firstTimestamp``: a restarted container's later pulls do not count)."""
    times = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != "Pulled" or involved.get("name") not in pod_names:
            continue
        times.append(api_time(event.get("eventTime")) or api_time(event.get("firstTimestamp")))
    return _earliest(times)


def needs_events(pods: Iterable[dict[str, Any]]) -> bool:
    """Whether a pod got far enough (bound to a node) that its image may have been pulled."""
    return any(scheduled_at(pod) is not None for pod in pods)


def pod_milestones(pods: list[dict[str, Any]], events: Iterable[dict[str, Any]] = ()) -> LaunchMilestones:
    """The run's launch milestones from its pods and their events."""
    names = {str((pod.get("metadata") or {}).get("name")) for pod in pods}
    return LaunchMilestones(
        submitted=_earliest(api_time((pod.get("metadata") or {}).get("creationTimestamp")) for pod in pods),
        scheduled=_earliest(scheduled_at(pod) for pod in pods),
        image_pulled=pulled_at(events, names),
        started=_earliest(container_started_at(pod) for pod in pods),
    )
