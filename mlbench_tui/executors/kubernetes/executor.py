"""The Kubernetes executor: runs a plan as an Indexed Job (or an MPIJob) and watches its pods.

Objects are applied with server-side apply (field manager ``mlbench``), so re-applying an
unchanged run is a no-op. A new run's owner is created suspended, the Secret, ConfigMap and
Service are then applied with an ``ownerReference`` to it (the uid exists only once the owner
does), and the owner is resumed: no pod starts before its token and config exist, and deleting
the owner (``cancel``, or the Job's TTL) removes everything. The kubernetes client is imported
lazily and the ``ApiClient`` is injectable (tests pass one pointed at a mock API server).
"""

from __future__ import annotations

import io
import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import DryRun, Executor, LaunchContext, log_filter
from mlbench_tui.executors.kubernetes import manifests, pod_logs
from mlbench_tui.executors.kubernetes.client import api_error, apply_object, call_json, make_api_client
from mlbench_tui.executors.kubernetes.pod import CONTAINER
from mlbench_tui.executors.kubernetes.pod_milestones import PULLED_SELECTOR, needs_events, pod_milestones
from mlbench_tui.executors.kubernetes.pod_status import layout_of, rank_of, run_status
from mlbench_tui.lifecycle import RunHandle, RunStatus
from mlbench_tui.plan import RunPlan
from mlbench_tui.spec.targets import KubernetesTarget

SCHEME = "kubernetes"
MPI_OPERATOR_INSTALL = (
    "install the Kubeflow MPI Operator (v2beta1 API): kubectl apply --server-side -f "
    "https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/mpi-operator.yaml "
    "— or run with backend gloo"
)


# Following a log, these mean "not yet" or "not now" (400: the container is still being created;
# 404: its pod was replaced or the log is not there yet); the follower retries them.
_TRANSIENT_LOG_STATUS = {400, 404, 429, 500, 502, 503, 504}
_RETRY_FIRST_S = 0.25
_RETRY_MAX_S = 5.0


class _TransientLogError(Exception):
    def __init__(self, error: ExecutorError) -> None:
        super().__init__(error.message)
        self.error = error


def _labelled(pod: int, per_pod: int, line: str) -> tuple[int, str]:
    """``(rank, text)`` of a line of pod ``pod``: with one rank per pod the pod's rank; with
    several, the rank torchrun wrote in front of it (-1 for torchrun's own lines, named by pod)."""
    if per_pod == 1:
        return pod, line
    rank, text = pod_logs.split_rank(line)
    return (rank, text) if rank is not None else (-1, f"[pod {pod}] {line}")


class PodLogTailer:
    """One follower thread per pod (waiting for it to start); its lines queue up for ``poll``
    as ``(rank, text)`` (``_labelled``)."""

    def __init__(self, executor: KubernetesExecutor, handle: RunHandle, pods: int, per_pod: int) -> None:
        self._lines: queue.Queue[tuple[int, str]] = queue.Queue()
        self._threads = [
            threading.Thread(
                target=self._follow, args=(executor, handle, i, per_pod), name=f"k8s-tail-{i}", daemon=True
            )
            for i in range(pods)
        ]
        for thread in self._threads:
            thread.start()

    def _follow(self, executor: KubernetesExecutor, handle: RunHandle, pod: int, per_pod: int) -> None:
        try:
            for line in executor._pod_lines(handle, pod, True, None):
                self._lines.put(_labelled(pod, per_pod, line))
        except ExecutorError as exc:
            self._lines.put((-1, f"log of pod {pod} unavailable: {exc.message}"))

    def poll(self, *, final: bool = False, since: float | None = None) -> list[tuple[int, str]]:
        """New lines since the last call; ``final`` first lets the followers reach the end."""
        if final:
            deadline = time.monotonic() + 10
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        out: list[tuple[int, str]] = []
        while True:
            try:
                out.append(self._lines.get_nowait())
            except queue.Empty:
                return out


@dataclass(frozen=True)
class KubernetesRequest:
    """The objects to apply for a run, in order: its owner (the Job or MPIJob) first."""

    manifests: tuple[dict[str, Any], ...]

    def lines(self) -> list[str]:
        """Each object as a YAML document (the Secret's token as the dry run's placeholder)."""
        from ruamel.yaml import YAML

        yaml = YAML()
        yaml.default_flow_style = False
        lines = []
        for manifest in self.manifests:
            buf = io.StringIO()
            yaml.dump(manifest, buf)
            lines.extend(["---", buf.getvalue().rstrip()])
        return lines


class KubernetesExecutor(Executor[KubernetesRequest]):
    """Runs plans on a Kubernetes cluster."""

    name = SCHEME
    in_cluster_server = True

    @classmethod
    def network_notes(cls, plans: Sequence[RunPlan]) -> list[str]:
        return [
            "network: pods carry the bandwidth CNI plugin's annotations; latency (and bandwidth with "
            "kubernetes_bandwidth: tc) is set by an init container running tc with NET_ADMIN"
        ]

    plan_outputs = ("yaml",)

    def __init__(
        self,
        api_client: Any | None = None,
        *,
        context: str | None = None,
        kubeconfig: str | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self._api_client = api_client
        self._context = context
        self._kubeconfig = kubeconfig
        self._timeout = request_timeout
        self._mpi_available: bool | None = None
        self._pulled: dict[str, list[dict[str, Any]]] = {}  # Pulled events per run handle, once seen

    # --- clients ---
    def _client(self, plan: RunPlan | None = None) -> Any:
        if self._api_client is None:
            context = self._context
            if context is None and plan is not None and isinstance(plan.target, KubernetesTarget):
                context = plan.target.context
            self._api_client = make_api_client(context, self._kubeconfig)
        return self._api_client

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._client())

    def _batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self._client())

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._client())

    def _call(
        self, action: str, fn: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        return call_json(action, fn, *args, missing_ok=missing_ok, _request_timeout=self._timeout, **kwargs)

    # --- plan and launch ---
    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun[KubernetesRequest]:
        objects = manifests.render(plan, launch)
        return DryRun(executor=self.name, plan=plan, launch=launch, request=KubernetesRequest(tuple(objects)))

    def render_plans(self, plans: Sequence[RunPlan], output: str) -> str | None:
        """``-o yaml`` of plans that all target Kubernetes: the manifests ``kubectl apply -f -``
        accepts (tokens left out); other plans keep the generic YAML."""
        if output == "yaml" and plans and all(isinstance(p.target, KubernetesTarget) for p in plans):
            return manifests.plan_yaml(list(plans))
        return None

    def mpi_operator_installed(self) -> bool:
        """Whether the cluster serves the MPIJob API (discovery is readable by every account)."""

        if self._mpi_available is None:
            group, version = manifests.MPIJOB_API.split("/")
            found = self._call(
                "discover the MPIJob API", self._custom().get_api_resources, group, version, missing_ok=True
            )
            resources = (found or {}).get("resources") or []
            self._mpi_available = any(r.get("name") == "mpijobs" for r in resources)
        return self._mpi_available

    def schedule(self, dryrun: DryRun[KubernetesRequest]) -> RunHandle:
        plan, objects = dryrun.plan, [dict(obj) for obj in dryrun.request.manifests]
        if not objects:
            raise ExecutorError("nothing to schedule: the dry run has no manifests")
        self._client(plan)
        owner, children = objects[0], objects[1:]
        namespace = owner["metadata"]["namespace"]
        handle = RunHandle(self.name, namespace, dryrun.launch.run_id)
        if owner["kind"] == "MPIJob" and not self.mpi_operator_installed():
            raise ExecutorError(
                "the mpi backend on Kubernetes needs the Kubeflow MPI Operator, whose MPIJob API "
                f"({manifests.MPIJOB_API}) is not installed in this cluster",
                hint=MPI_OPERATOR_INSTALL,
            )
        existing = self._get_owner(owner["kind"], namespace, owner["metadata"]["name"])
        if existing is not None:
            self._check_same_run(existing, owner)
            uid = existing["metadata"]["uid"]
        else:
            uid = self._apply(_suspended(owner, True))["metadata"]["uid"]
        for child in children:
            self._apply(manifests.with_owner(child, owner, uid))
        self._apply(_suspended(owner, False))
        return handle

    def _check_same_run(self, existing: dict[str, Any], owner: dict[str, Any]) -> None:
        """Re-applying the same run is fine; a different run under the same name is a conflict."""
        have = existing["metadata"].get("annotations") or {}
        want = owner["metadata"]["annotations"]
        name, namespace = owner["metadata"]["name"], owner["metadata"]["namespace"]
        if have.get(manifests.ANNOTATION_RUN_ID) != want[manifests.ANNOTATION_RUN_ID]:
            raise ExecutorError(
                f"conflict: {owner['kind']} {namespace}/{name} already exists and belongs to run "
                f"{have.get(manifests.ANNOTATION_RUN_ID) or 'of another tool'}",
                hint="delete it, or use another namespace",
            )
        if have.get(manifests.ANNOTATION_MANIFEST_HASH) != want[manifests.ANNOTATION_MANIFEST_HASH]:
            raise ExecutorError(
                f"conflict: run {want[manifests.ANNOTATION_RUN_ID]} already exists in {namespace} with a "
                "different plan; a run cannot change once started",
                hint=f"cancel it first (kubernetes://{namespace}/{want[manifests.ANNOTATION_RUN_ID]}) "
                "or start a new run",
            )

    def _get_owner(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        action = f"read {kind} {namespace}/{name}"
        if kind == "MPIJob":
            group, version = manifests.MPIJOB_API.split("/")
            fn = self._custom().get_namespaced_custom_object
            found: dict[str, Any] | None = self._call(
                action, fn, group, version, namespace, "mpijobs", name, missing_ok=True
            )
            return found
        found = self._call(action, self._batch().read_namespaced_job, name, namespace, missing_ok=True)
        return found

    def _apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one object; returns the object as the server stored it."""
        stored: dict[str, Any] = apply_object(self._client(), obj, _request_timeout=self._timeout)
        return stored

    # --- watching ---
    def describe(self, handle: RunHandle | str) -> RunStatus | None:
        handle = _resolve(handle)
        owner = self._owner(handle)
        if owner is None:
            return None
        pods = self._pods(handle.where, handle.run_id)
        status = run_status(handle, owner, pods)
        status.milestones = pod_milestones(pods, self._pulled_events(handle, pods))
        return status

    def _pulled_events(self, handle: RunHandle, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ``Pulled`` events of the run's pods: asked once a pod is on a node, until one is
        found (then kept: events expire after an hour); none where they cannot be read."""
        known = self._pulled.get(str(handle))
        if known is not None or not needs_events(pods):
            return known or []
        try:
            found = self._call(
                f"list the Pulled events in {handle.where}",
                self._core().list_namespaced_event,
                handle.where,
                field_selector=PULLED_SELECTOR,
            )
        except ExecutorError:  # e.g. no right to list events: the pull joins the next part
            return []
        names = {(p.get("metadata") or {}).get("name") for p in pods}
        events = [e for e in found.get("items") or [] if (e.get("involvedObject") or {}).get("name") in names]
        if events:
            self._pulled[str(handle)] = events
        return events

    def _owner(self, handle: RunHandle) -> dict[str, Any] | None:
        """The run's Job (or MPIJob), when it exists and belongs to this run."""
        name, namespace = manifests.object_name(handle.run_id), handle.where
        owner = self._get_owner("Job", namespace, name)
        if owner is None and self._mpi_known():
            owner = self._get_owner("MPIJob", namespace, name)
        if owner is None:
            return None
        if (owner["metadata"].get("annotations") or {}).get(manifests.ANNOTATION_RUN_ID) != handle.run_id:
            return None
        return owner

    def _mpi_known(self) -> bool:
        try:
            return self.mpi_operator_installed()
        except ExecutorError:
            return False

    def _pods(self, namespace: str, run_id: str) -> list[dict[str, Any]]:
        selector = f"{manifests.LABEL_RUN_ID}={manifests.label_value(run_id)}"
        found = self._call(
            f"list pods of run {run_id} in {namespace}",
            self._core().list_namespaced_pod,
            namespace,
            label_selector=selector,
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    def watch(
        self, handle: RunHandle | str, timeout: float | None = None, poll: float = 2.0
    ) -> Iterator[RunStatus]:
        """Statuses as they change, until the run is terminal (or gone, or ``timeout`` passes).

        Pod events from a watch wake the loop; ``poll`` bounds the wait between checks so Job
        conditions (deadline exceeded, completion) are seen even without a pod event.
        """
        handle = _resolve(handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[Any, ...] | None = None
        while True:
            status = self.describe(handle)
            if status is None:
                return
            key = (status.state, status.message, tuple((r.rank, r.state, r.message) for r in status.ranks))
            if key != last:
                last = key
                yield status
            if status.state.is_terminal():
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            wait = poll if deadline is None else max(0.05, min(poll, deadline - time.monotonic()))
            self._wait_for_pod_event(handle, wait)

    def _wait_for_pod_event(self, handle: RunHandle, wait: float) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        selector = f"{manifests.LABEL_RUN_ID}={manifests.label_value(handle.run_id)}"
        seen = {
            p["metadata"]["name"]: p["metadata"].get("resourceVersion")
            for p in self._pods(handle.where, handle.run_id)
        }
        watcher = watch.Watch()
        started = time.monotonic()
        try:
            for event in watcher.stream(
                self._core().list_namespaced_pod,
                handle.where,
                label_selector=selector,
                timeout_seconds=max(1, math.ceil(wait)),
                _request_timeout=wait,
                deserialize=False,
            ):
                meta = (event.get("object") or {}).get("metadata") or {}
                if event.get("type") in ("DELETED", "ERROR") or seen.get(meta.get("name")) != meta.get(
                    "resourceVersion"
                ):
                    break
                if time.monotonic() - started >= wait:
                    break
        except (ApiException, HTTPError, OSError):
            time.sleep(min(wait, 0.5))  # a dropped watch is not an error: describe() re-checks
        finally:
            watcher.stop()

    # --- logs ---
    def log_iter(
        self,
        handle: RunHandle | str,
        rank: int | None = None,
        follow: bool = False,
        since: float | None = None,
        regex: str | None = None,
    ) -> Iterator[str]:
        """Log lines of one rank (or of every rank, prefixed ``[rank N]``) from its pod's log."""
        handle = _resolve(handle)
        pattern = log_filter(regex)
        status = self.describe(handle)
        if status is None:
            raise ExecutorError(f"unknown run {handle}")
        per_pod = self._layout(handle)[1]
        known = {r.rank for r in status.ranks}
        if rank is not None:
            if rank not in known and not follow:
                raise ExecutorError(f"run {handle} has no rank {rank}", hint=f"ranks: {sorted(known)}")
            for line in self._rank_lines(handle, rank, per_pod, follow, since):
                if pattern is None or pattern.search(line):
                    yield line
            return
        pods = sorted({r // per_pod for r in known})
        for r, text in self._merged_lines(handle, pods, per_pod, follow, since):
            if pattern is None or pattern.search(text):
                yield f"[rank {r}] {text}" if r >= 0 else text

    def _rank_lines(
        self, handle: RunHandle, rank: int, per_pod: int, follow: bool, since: float | None
    ) -> Iterator[str]:
        """One rank's lines: its pod's whole log, or the lines torchrun marked with its rank."""
        for got, text in self._merged_lines(handle, [rank // per_pod], per_pod, follow, since):
            if got == rank:
                yield text

    def _merged_lines(
        self, handle: RunHandle, pods: list[int], per_pod: int, follow: bool, since: float | None
    ) -> Iterator[tuple[int, str]]:
        """``(rank, text)`` of the pods' logs: pod after pod, or as they come when following."""
        if not follow or len(pods) == 1:
            for pod in pods:
                for line in self._pod_lines(handle, pod, follow, since):
                    yield _labelled(pod, per_pod, line)
            return
        lines: queue.Queue[tuple[int, str | None, Exception | None]] = queue.Queue()

        def pump(pod: int) -> None:
            try:
                for line in self._pod_lines(handle, pod, True, since):
                    lines.put((pod, line, None))
                lines.put((pod, None, None))
            except Exception as exc:
                lines.put((pod, None, exc))

        for pod in pods:
            threading.Thread(target=pump, args=(pod,), name=f"k8s-log-{pod}", daemon=True).start()
        open_pods = len(pods)
        while open_pods:
            pod, text, error = lines.get()
            if error is not None:
                raise error
            if text is None:
                open_pods -= 1
            else:
                yield _labelled(pod, per_pod, text)

    def _started_pod(self, handle: RunHandle, index: int, follow: bool) -> dict[str, Any] | None:
        """Pod ``index`` of the run once its container has started (waits while pending when following)."""
        while True:
            pods = [p for p in self._pods(handle.where, handle.run_id) if rank_of(p) == index]
            started = [
                p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            ]
            if started:
                return started[-1]
            if not follow:
                return None
            status = self.describe(handle)
            if status is None or status.state.is_terminal():
                return None
            time.sleep(0.5)

    def _pod_lines(self, handle: RunHandle, index: int, follow: bool, since: float | None) -> Iterator[str]:
        """Pod ``index``'s log lines. Following, it reconnects across a dropped connection or a
        transient API error (the log not there yet, 429, 5xx) with timestamps on, showing each
        line once, until the container's stream ends (as ``kubectl logs -f``) or the run is over."""
        if not follow:
            pod = self._started_pod(handle, index, False)
            if pod is not None:
                yield from self._read_log(handle, pod, False, since, timestamps=False)
            return
        cursor = pod_logs.LogCursor()
        final = False  # the run is over: one last plain read picks up what a drop cut off
        delay = _RETRY_FIRST_S
        while True:
            pod = self._started_pod(handle, index, not final)
            if pod is None:
                return
            cursor.reconnect()
            try:
                for line in self._read_log(handle, pod, not final, since, timestamps=True):
                    stamp, text = pod_logs.split_stamp(line)
                    if cursor.admit(stamp):
                        delay = _RETRY_FIRST_S
                        yield text
                return
            except _TransientLogError as exc:
                if final:
                    raise exc.error from None
                status = self.describe(handle)
                final = status is None or status.state.is_terminal()
                if not final:
                    time.sleep(delay)
                    delay = min(delay * 2, _RETRY_MAX_S)

    def _read_log(
        self, handle: RunHandle, pod: dict[str, Any], follow: bool, since: float | None, *, timestamps: bool
    ) -> Iterator[str]:
        """Lines of the worker container's log; transient failures raise ``_TransientLogError``."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs: dict[str, Any] = {
            "container": CONTAINER,
            "follow": follow,
            "_preload_content": False,
        }
        if timestamps:
            kwargs["timestamps"] = True
        if since is not None:
            kwargs["since_seconds"] = max(1, math.ceil(time.time() - since))
        name = pod["metadata"]["name"]
        action = f"read the log of pod {handle.where}/{name}"
        try:
            response = self._core().read_namespaced_pod_log(name, handle.where, **kwargs)
        except (ApiException, HTTPError) as exc:
            error = api_error(exc, action)
            status = getattr(exc, "status", None)
            if isinstance(exc, HTTPError) or status in _TRANSIENT_LOG_STATUS:
                raise _TransientLogError(error) from None
            raise error from None
        try:
            yield from pod_logs.stream_lines(response.stream(4096))
        except HTTPError as exc:  # the connection dropped mid-stream
            raise _TransientLogError(api_error(exc, action)) from None
        finally:
            response.release_conn()

    def log_tailer(self, handle: RunHandle | str) -> PodLogTailer:
        """Follows every pod's log in the background; ``poll`` drains new ``(rank, line)``s (the
        runner ships them into the store, as it does with local rank log files)."""
        handle = _resolve(handle)
        if self.describe(handle) is None:
            raise ExecutorError(f"unknown run {handle}")
        return PodLogTailer(self, handle, *self._layout(handle))

    def _layout(self, handle: RunHandle) -> tuple[int, int]:
        """``(pods, ranks per pod)`` of the run (``pod_status.layout_of`` its owner)."""
        owner = self._owner(handle)
        return layout_of(owner) if owner is not None else (0, 1)

    # --- cancel ---
    def cancel(self, handle: RunHandle | str) -> None:
        """Delete the run's owner with foreground propagation (pods first, then the rest); idempotent."""
        from kubernetes import client

        handle = _resolve(handle)
        name, namespace = manifests.object_name(handle.run_id), handle.where
        body = client.V1DeleteOptions(propagation_policy="Foreground")
        found = self._call(
            f"delete Job {namespace}/{name}",
            self._batch().delete_namespaced_job,
            name,
            namespace,
            body=body,
            missing_ok=True,
        )
        if found is not None or not self._mpi_known():
            return
        group, version = manifests.MPIJOB_API.split("/")
        self._call(
            f"delete MPIJob {namespace}/{name}",
            self._custom().delete_namespaced_custom_object,
            group,
            version,
            namespace,
            "mpijobs",
            name,
            body=body,
            missing_ok=True,
        )


def _resolve(handle: RunHandle | str) -> RunHandle:
    resolved = RunHandle.parse(handle) if isinstance(handle, str) else handle
    if resolved.scheme != SCHEME:
        raise ExecutorError(
            f"not a Kubernetes run: {resolved}", hint="handles look like kubernetes://NAMESPACE/RUN_ID"
        )
    return resolved


def _suspended(owner: dict[str, Any], suspend: bool) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(owner))
    if out["kind"] == "MPIJob":
        out["spec"]["runPolicy"]["suspend"] = suspend
    else:
        out["spec"]["suspend"] = suspend
    return out
