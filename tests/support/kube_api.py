"""A real HTTP Kubernetes API on 127.0.0.1 for tests: kmock's emulator plus the few behaviours
the executor relies on that kmock leaves out (server-side apply creating objects, uids and
resourceVersions, pod logs as text with ``follow``, injected API errors). Tests play the
controllers (Job controller, kubelet) by writing pod objects through ``put``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kmock
from kmock._internal import enums, k8s, rendering

from mlbench_tui import __version__
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.plan import DataPlan, GoalPlan, ResourcesPlan, RunPlan

RESOURCES = (
    "batch/v1/jobs",
    "v1/pods",
    "v1/services",
    "v1/configmaps",
    "v1/secrets",
    "v1/serviceaccounts",
    "v1/persistentvolumeclaims",
    "apps/v1/deployments",
    "rbac.authorization.k8s.io/v1/roles",
    "rbac.authorization.k8s.io/v1/rolebindings",
    "v1/namespaces",
    "v1/events",
)
MPIJOBS = "kubeflow.org/v2beta1/mpijobs"


def make_plan(**overrides: Any) -> RunPlan:
    """A resolved 1a plan as ``plan.expand`` would produce it, without needing a spec file."""
    resources = overrides.pop("resources", {})
    data = overrides.pop("data", {})
    target = overrides.pop("target", {})
    if target.get("kind", "kubernetes") == "kubernetes":
        image = f"mlbench-worker:{__version__}"
        target = {"kind": "kubernetes", "namespace": "bench", "image": image, **target}
    task_1a = overrides.get("task", "1a") == "1a"
    fields: dict[str, Any] = {
        "name": "smoke-gloo-2w",
        "spec_name": "smoke",
        "spec_hash": "0" * 64,
        "task": "1a",
        "task_name": "resnet20-cifar10",
        "backend": "gloo",
        "workers": 2,
        "seed": 42,
        "goal": GoalPlan(kind="light", metric="val_global_Prec@1", target=70.0, direction="max"),
        "max_time_s": 1800.0,
        "resources": ResourcesPlan(**{"cpu": "1", "threads_per_rank": 1, "memory": "2Gi", **resources}),
        # the 1a plan's data options and hyperparameters, none for another task unless given (a
        # plan's values are its task's)
        "data": DataPlan(
            **{"source": "synthetic", "options": {"train_samples": 256} if task_1a else {}, **data}
        ),
        "hyperparameters": {"batch_size": 32, "lr": 0.04, "max_epochs": 2} if task_1a else {},
        "target": target,
    }
    fields.update(overrides)
    return RunPlan(**fields)


def make_launch(run_id: str = "run-0001", token: str = "tok-secret-abc123") -> LaunchContext:
    return LaunchContext(run_id=run_id, server_url="http://127.0.0.1:8765", write_token=token)


def format_stamp(stamp: tuple[int, int]) -> str:
    """A (seconds, nanoseconds) stamp as the kubelet writes it with ``timestamps=true``
    (RFC3339Nano in UTC: Go drops the fraction's trailing zeros, and the dot when none is left)."""
    seconds, nanos = stamp
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"


@dataclass
class Fault:
    status: int
    reason: str
    message: str
    times: int | None = None  # None: every matching request


class _Emulator(k8s.KubernetesEmulator):
    """kmock's emulator with server-side apply, uids, faults and pod logs."""

    faults: dict[tuple[str, str], Fault]
    logs: dict[tuple[str, str], list[tuple[int, str]]]  # (time in ns, line) per pod
    finished_logs: set[tuple[str, str]]
    log_faults: dict[tuple[str, str], list[Fault]]
    log_drops: dict[tuple[str, str], int]
    _counter: Any

    namespaces: dict[str, dict[str, Any]]
    port_targets: dict[tuple[str, str], tuple[str, int]]

    def setup(self) -> None:
        self.namespaces = {}
        self.port_targets = {}
        self.faults = {}
        self.logs = {}
        self.finished_logs = set()
        self.log_faults = {}
        self.log_drops = {}
        self._counter = itertools.count(1)
        for resource in RESOURCES:
            self.resources[resource] = kmock.ResourceInfo(namespaced=resource != "v1/namespaces")
        self[kmock.resource("v1/pods"), kmock.subresource("log")] << self._serve_log

    def _create(self, key: Any, body: dict[str, Any]) -> None:
        """Store a new object under ``key`` (a new life of it when it was deleted before)."""
        self._stamp(body)
        if key in self._objects:
            self._objects[key].create(body)
        else:
            self._objects[key] = body

    def _stamp(self, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "Secret" and "stringData" in obj:  # as the API server stores Secrets
            encoded = {
                k: base64.b64encode(str(v).encode()).decode() for k, v in obj.pop("stringData").items()
            }
            obj["data"] = {**(obj.get("data") or {}), **encoded}
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault(
            "creationTimestamp", datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        meta["resourceVersion"] = str(next(self._counter))

    async def _handle(self, request: rendering.Request) -> Any:
        plural = request.resource.plural if request.resource is not None else None
        fault = self.faults.get((request.method.value, str(plural)))
        if fault is not None and (fault.times is None or fault.times > 0):
            if fault.times is not None:
                fault.times -= 1
            raise k8s.KubernetesError(status=fault.status, reason=fault.reason, message=fault.message)
        if (
            request.resource is not None
            and request.action == enums.action.CREATE
            and isinstance(request.data, dict)
        ):
            self._stamp(request.data)
        content_type = request.headers.get("Content-Type", "")
        if request.subresource == "portforward":
            return await self._port_forward(request)
        path = request.url.path.strip("/").split("/")
        if path[:3] == ["api", "v1", "namespaces"] and len(path) == 4:
            return await self._namespace(request, path[3], "apply-patch" in content_type)
        if request.action == enums.action.UPDATE and "apply-patch" in content_type and request.name:
            return await self._apply(request)
        return await super()._handle(request)

    async def _apply(self, request: rendering.Request) -> Any:
        """Server-side apply: create when missing, no-op (same resourceVersion) when unchanged."""
        import aiohttp.web

        assert request.resource is not None
        key: Any = (request.resource, request.namespace, request.name)
        body = copy.deepcopy(request.data)
        body.setdefault("metadata", {})["namespace"] = request.namespace
        body["metadata"]["managedFields"] = [
            {"manager": request.params.get("fieldManager", ""), "operation": "Apply"}
        ]
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                self._create(key, body)
                raw = self._objects[key].last.raw
                await self._buses[request.resource].put({"type": "ADDED", "object": raw})
                return aiohttp.web.json_response(raw, status=201)
            current = self._objects[key].raw
            if body.get("kind") == "Secret" and "stringData" in body:
                stamp_free = {"kind": "Secret", "stringData": body.pop("stringData"), "metadata": {}}
                self._stamp(stamp_free)
                body["data"] = {**(body.get("data") or {}), **stamp_free["data"]}
            merged = _merge(copy.deepcopy(current), body)
            if merged == current:
                return aiohttp.web.json_response(current)
            merged["metadata"]["resourceVersion"] = str(next(self._counter))
            self._objects[key].patch(merged)
            raw = self._objects[key].raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
            return aiohttp.web.json_response(raw)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        """kmock's list, narrowed by ``labelSelector`` and ``fieldSelector`` (equality terms; a
        field is a dotted path such as ``involvedObject.name``) as the API server does."""
        result: Any = await super()._serve_list(request)
        selector = _selector(request.params.get("labelSelector"))
        fields = _selector(request.params.get("fieldSelector"))
        result["items"] = [
            item for item in result["items"] if _matches(item, selector) and _fields_match(item, fields)
        ]
        return result

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        selector = _selector(request.params.get("labelSelector"))
        async for event in super()._serve_watch(request):
            if not isinstance(event, dict) or _matches(event.get("object") or {}, selector):
                yield event

    async def _port_forward(self, request: rendering.Request) -> Any:
        """The pods/portforward websocket (channel protocol v4): channel 0 carries data to and from
        the pod's port, channel 1 errors; here the "pod port" is a real TCP server on 127.0.0.1."""
        import aiohttp
        import aiohttp.web

        assert request._raw_request is not None
        target = self.port_targets.get((str(request.namespace), str(request.name)))
        if target is None:
            raise k8s.KubernetesObjectNotFoundError()
        port = int(request.params["ports"])
        ws = aiohttp.web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request._raw_request)
        await ws.send_bytes(bytes([0]) + port.to_bytes(2, "little"))
        await ws.send_bytes(bytes([1]) + port.to_bytes(2, "little"))
        reader, writer = await asyncio.open_connection(*target)

        async def to_pod() -> None:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY and message.data[:1] == b"\x00":
                    writer.write(message.data[1:])
                    await writer.drain()
            writer.close()

        async def from_pod() -> None:
            while data := await reader.read(65536):
                await ws.send_bytes(b"\x00" + data)
            await ws.close()

        await asyncio.gather(to_pod(), from_pod(), return_exceptions=True)
        return ws

    async def _namespace(self, request: rendering.Request, name: str, apply: bool) -> Any:
        """Namespaces are cluster-scoped; kmock reads /api/v1/namespaces/X as a namespace prefix."""
        import aiohttp.web

        if request.method.value == "PATCH" and apply:
            body = copy.deepcopy(request.data)
            current = self.namespaces.get(name)
            if current is None:
                self._stamp(body)
                self.namespaces[name] = body
                return aiohttp.web.json_response(body, status=201)
            merged = _merge(copy.deepcopy(current), body)
            if merged != current:
                merged["metadata"]["resourceVersion"] = str(next(self._counter))
                self.namespaces[name] = merged
            return aiohttp.web.json_response(self.namespaces[name])
        if request.method.value == "GET" and name in self.namespaces:
            return aiohttp.web.json_response(self.namespaces[name])
        raise k8s.KubernetesObjectNotFoundError()

    async def _serve_log(self, request: rendering.Request) -> rendering.Response:
        """pods/log as the API server answers it: 404 without the pod, 400 while its container
        is waiting to start, else the log (``follow`` streams until the test marks it finished;
        ``timestamps`` prefixes each line with its RFC3339Nano time). Injected faults and
        dropped connections come first."""
        key = (str(request.namespace), str(request.name))
        faults = self.log_faults.get(key)
        if faults:
            fault = faults.pop(0)
            raise k8s.KubernetesError(status=fault.status, reason=fault.reason, message=fault.message)
        pod = await self.fetch("v1/pods", *key)
        if pod is None:
            raise k8s.KubernetesObjectNotFoundError()
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            raise k8s.KubernetesError(
                status=400,
                reason="BadRequest",
                message=f'container "worker" in pod "{key[1]}" is waiting to start: ContainerCreating',
            )
        follow = request.params.get("follow") == "true"
        timestamps = request.params.get("timestamps") == "true"
        since = request.params.get("sinceSeconds")
        oldest = time.time_ns() - int(since) * 10**9 if since else 0
        drops = self.log_drops.get(key, 0)

        async def lines() -> AsyncIterator[bytes]:
            sent = 0
            while True:
                if self.log_drops.get(key, 0) != drops:  # cut the TCP connection mid-response
                    assert request._raw_request is not None and request._raw_request.transport is not None
                    request._raw_request.transport.abort()
                    raise ConnectionResetError("the test dropped this log stream")  # kmock lets it go
                # the lines as of now: the test thread may append more while these are sent
                batch = self.logs.get(key, [])[sent:]
                for stamp, line in batch:
                    if stamp >= oldest:
                        prefix = format_stamp(divmod(stamp, 10**9)) + " " if timestamps else ""
                        yield (prefix + line + "\n").encode()
                sent += len(batch)
                done = not follow or key in self.finished_logs
                if done and sent == len(self.logs.get(key, [])):
                    return
                await asyncio.sleep(0.02)

        return rendering.Response(status=200, headers={"Content-Type": "text/plain"}, payload=lines())

    async def upsert(self, resource: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        res = kmock.resource(resource)
        key = (res, namespace, name)
        async with self._lock:
            if key in self._objects and not self._objects[key].deleted:
                merged = _merge(copy.deepcopy(self._objects[key].raw), copy.deepcopy(obj))
                merged["metadata"]["resourceVersion"] = str(next(self._counter))
                self._objects[key].patch(merged)
                event = "MODIFIED"
            else:
                body = copy.deepcopy(obj)
                body.setdefault("metadata", {}).update({"name": name, "namespace": namespace})
                self._create(key, body)
                event = "ADDED"
            await self._buses[res].put({"type": event, "object": self._objects[key].raw})

    async def discard(self, resource: str, namespace: str, name: str) -> None:
        res = kmock.resource(resource)
        key = (res, namespace, name)
        async with self._lock:
            if key in self._objects and not self._objects[key].deleted:
                raw = self._objects[key].raw
                self._objects[key].delete()
                await self._buses[res].put({"type": "DELETED", "object": raw})

    async def fetch(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = (kmock.resource(resource), namespace, name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return None
            return copy.deepcopy(self._objects[key].raw)

    async def list_names(self, resource: str, namespace: str) -> list[str]:
        res = kmock.resource(resource)
        async with self._lock:
            return sorted(
                n
                for (r, ns, n), obj in self._objects.items()
                if r == res and ns == namespace and not obj.deleted
            )


def _selector(text: str | None) -> dict[str, str]:
    terms = [term.strip() for term in (text or "").split(",") if term.strip()]
    return dict(term.split("=", 1) for term in terms)


def _matches(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _fields_match(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    for path, value in selector.items():
        found: Any = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if str(found) != value:
            return False
    return True


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


class KubeApi:
    """The emulator served over HTTP from a background thread, with a synchronous facade."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kube-api", daemon=True)
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("the Kubernetes API mock did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with _Emulator() as emulator, kmock.Server(emulator) as server:
            emulator.setup()
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def api_client(self) -> Any:
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        return client.ApiClient(config)

    # --- state, as the controllers and kubelet would change it ---
    def put(self, resource: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        self._call(self.emulator.upsert(resource, namespace, name, obj))

    def delete(self, resource: str, namespace: str, name: str) -> None:
        self._call(self.emulator.discard(resource, namespace, name))

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call(self.emulator.fetch(resource, namespace, name))
        return result

    def names(self, resource: str, namespace: str) -> list[str]:
        result: list[str] = self._call(self.emulator.list_names(resource, namespace))
        return result

    def fault(
        self, method: str, plural: str, status: int, reason: str, message: str, times: int | None = None
    ) -> None:
        self.emulator.faults[(method.upper(), plural)] = Fault(status, reason, message, times)

    def log(
        self, namespace: str, pod: str, *lines: str, finished: bool = False, at_ns: int | None = None
    ) -> None:
        """The container writes ``lines`` (stamped now, or all at ``at_ns``)."""
        stamp = time.time_ns() if at_ns is None else at_ns
        self.emulator.logs.setdefault((namespace, pod), []).extend((stamp, line) for line in lines)
        if finished:
            self.emulator.finished_logs.add((namespace, pod))

    def log_fault(self, namespace: str, pod: str, status: int, reason: str, times: int = 1) -> None:
        """The next ``times`` reads of the pod's log fail with ``status``."""
        faults = self.emulator.log_faults.setdefault((namespace, pod), [])
        faults.extend(Fault(status, reason, f"injected {reason}") for _ in range(times))

    def drop_log_streams(self, namespace: str, pod: str) -> None:
        """Cut the open log streams of the pod mid-response (as a restarting API server would)."""
        key = (namespace, pod)
        self.emulator.log_drops[key] = self.emulator.log_drops.get(key, 0) + 1

    def forward_to(self, namespace: str, pod: str, target: tuple[str, int]) -> None:
        """Make pods/portforward of ``pod`` reach ``target`` (a real TCP server on 127.0.0.1)."""
        self.emulator.port_targets[(namespace, pod)] = target

    def declare(self, resource: str, kind: str) -> None:
        self.emulator.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True)

    def requests(self) -> list[rendering.Request]:
        return list(self.emulator._requests)


@contextmanager
def kube_api() -> Iterator[KubeApi]:
    api = KubeApi()
    try:
        yield api
    finally:
        api.close()


def pod(job_name: str, index: int, phase: str, run_id: str = "run-0001", **status: Any) -> dict[str, Any]:
    """A pod as the Job controller and kubelet report it."""
    from mlbench_tui.executors.kubernetes import manifests
    from mlbench_tui.executors.kubernetes import pod as pod_template

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-{index}-abcde",
            "labels": {
                manifests.LABEL_RUN_ID: manifests.label_value(run_id),
                "batch.kubernetes.io/job-completion-index": str(index),
                "app.kubernetes.io/component": "worker",
            },
            "annotations": {pod_template.COMPLETION_INDEX_ANNOTATION: str(index)},
        },
        "spec": {"containers": [{"name": "worker", "image": "x"}], "nodeName": "kind-worker"},
        "status": {"phase": phase, **status},
    }
