"""The in-cluster metrics server and the RBAC the Kubernetes executor needs, plus a port-forward.

``install(context, namespace)`` (called by ``mlbench cluster init``) applies, idempotently with
server-side apply: the namespace, a least-privilege ServiceAccount/Role/RoleBinding for running
benchmarks (jobs, pods, pods/log, services, configmaps, secrets — and MPIJobs — in that one
namespace), a Secret with the server's admin and read tokens (created once, never rotated by a
re-install), a PVC for the SQLite store, and a one-replica Deployment + Service running
``mlbench server --host 0.0.0.0``. ``connect(context, namespace)`` opens a port-forward to that
server with the kubernetes client's websocket port-forwarding (no kubectl) and yields its URL and
tokens, so ``mlbench apply`` on a laptop can create runs in the in-cluster store.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import select
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlbench_tui import __version__
from mlbench_tui.errors import ExecutorError, InfraError
from mlbench_tui.executors.kubernetes.client import apply_object, call_json, make_api_client
from mlbench_tui.spec.targets import KubernetesTarget

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan

SERVER = "mlbench-server"  # Deployment, Service and pod label (manifests.IN_CLUSTER_SERVER)
SERVER_PORT = 8080
TOKENS_SECRET = "mlbench-server-tokens"
STORE_CLAIM = "mlbench-store"
RUNNER = "mlbench-runner"  # ServiceAccount, Role and RoleBinding for launching runs
DEFAULT_IMAGE = f"mlbench-worker:{__version__}"
STORE_DIR = "/var/lib/mlbench"

# What launching and watching a run needs, and nothing more (see executors/kubernetes.py).
RUNNER_RULES: tuple[dict[str, Any], ...] = (
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # Children carry blockOwnerDeletion owner references to the run's Job or MPIJob; clusters with
    # the OwnerReferencesPermissionEnforcement admission plugin require this to set them.
    {"apiGroups": ["batch"], "resources": ["jobs/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {
        "apiGroups": [""],
        "resources": ["services", "configmaps", "secrets"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["kubeflow.org"],
        "resources": ["mpijobs"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
)


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": SERVER if component == "server" else "mlbench",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "mlbench",
        "app.kubernetes.io/managed-by": "mlbench",
        "app.kubernetes.io/version": __version__,
    }


def _meta(name: str, namespace: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": _labels(component)}


def service_hosts(namespace: str) -> list[str]:
    """``--allow-host`` for each name pods reach the server's Service by (it answers only the
    Host values naming it; a name in a target's ``server_url`` is added with MLBENCH_SERVER_HOSTS)."""
    names = [
        SERVER,
        f"{SERVER}.{namespace}",
        f"{SERVER}.{namespace}.svc",
        f"{SERVER}.{namespace}.svc.cluster.local",
    ]
    return [arg for name in names for arg in ("--allow-host", name)]


def server_objects(
    namespace: str, *, image: str = DEFAULT_IMAGE, storage: str = "1Gi"
) -> list[dict[str, Any]]:
    """Everything ``install`` applies except the tokens Secret, in apply order (pure)."""
    selector = {"app.kubernetes.io/name": SERVER, "app.kubernetes.io/component": "server"}
    token_env = [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": TOKENS_SECRET, "key": key}}}
        for var, key in (("MLBENCH_TOKEN", "admin-token"), ("MLBENCH_READ_TOKEN", "read-token"))
    ]
    container = {
        "name": "server",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "mlbench",
            "server",
            "--host",
            "0.0.0.0",
            "--port",
            str(SERVER_PORT),
            "--db",
            f"{STORE_DIR}/mlbench.db",
            *service_hosts(namespace),
        ],
        "env": [{"name": "MLBENCH_HOME", "value": STORE_DIR}, *token_env],
        "ports": [{"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 20,
            "failureThreshold": 6,
        },
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "store", "mountPath": STORE_DIR}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": _labels("namespace")},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(RUNNER, namespace, "runner")},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(RUNNER, namespace, "runner"),
            "rules": [dict(rule) for rule in RUNNER_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(RUNNER, namespace, "runner"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER},
            "subjects": [{"kind": "ServiceAccount", "name": RUNNER, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": _meta(STORE_CLAIM, namespace, "store"),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(SERVER, namespace, "server"),
            "spec": {
                "replicas": 1,
                # One SQLite writer: never two pods on the store, not even during a rollout.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": _labels("server")},
                    "spec": {
                        "automountServiceAccountToken": False,  # the server never calls the API
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 1000,
                            "runAsGroup": 1000,
                            "fsGroup": 1000,
                        },
                        "containers": [container],
                        "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": STORE_CLAIM}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(SERVER, namespace, "server"),
            "spec": {
                "selector": selector,
                "ports": [{"name": "http", "port": SERVER_PORT, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]


def tokens_secret(namespace: str, admin_token: str, read_token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(TOKENS_SECRET, namespace, "server"),
        "type": "Opaque",
        "stringData": {"admin-token": admin_token, "read-token": read_token},
    }


def _client(context: str | None, api_client: Any | None) -> Any:
    if api_client is not None:
        return api_client
    try:
        return make_api_client(context)
    except ExecutorError as exc:
        raise InfraError(exc.message, hint=exc.hint) from None


def _call(action: str, fn: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
    """The executor's JSON call, with its errors as ``InfraError`` (this is cluster setup)."""
    try:
        return call_json(action, fn, *args, missing_ok=missing_ok, **kwargs)
    except ExecutorError as exc:
        raise InfraError(exc.message, hint=exc.hint) from None


def _apply(api_client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply one of the objects above (field manager ``mlbench``)."""
    try:
        data: dict[str, Any] = apply_object(api_client, obj)
    except ExecutorError as exc:
        raise InfraError(exc.message, hint=exc.hint) from None
    return data


def _read_tokens(api_client: Any, namespace: str) -> tuple[str, str] | None:
    from kubernetes import client

    action = f"read Secret {namespace}/{TOKENS_SECRET}"
    read = client.CoreV1Api(api_client).read_namespaced_secret
    secret = _call(action, read, TOKENS_SECRET, namespace, missing_ok=True)
    if secret is None:
        return None
    data = secret.get("data") or {}
    try:
        return base64.b64decode(data["admin-token"]).decode(), base64.b64decode(data["read-token"]).decode()
    except (KeyError, ValueError):
        return None


def server_image() -> str:
    """The server's image: ``MLBENCH_WORKER_IMAGE`` (e.g. a locally built ``mlbench-worker:dev``
    loaded into kind), else this version's worker image, which ships the mlbench CLI too."""
    return os.environ.get("MLBENCH_WORKER_IMAGE") or DEFAULT_IMAGE


def install(
    context: str | None,
    namespace: str,
    *,
    image: str | None = None,
    api_client: Any | None = None,
) -> None:
    """Install (or update) the in-cluster server and runner RBAC; safe to run again."""
    api = _client(context, api_client)
    objects = server_objects(namespace, image=image or server_image())
    _apply(api, objects[0])  # the namespace first: everything else lives in it
    if _read_tokens(api, namespace) is None:
        # Created once: re-installing must not invalidate the tokens clients already hold.
        _apply(api, tokens_secret(namespace, secrets.token_urlsafe(32), secrets.token_urlsafe(32)))
    for obj in objects[1:]:
        _apply(api, obj)


@dataclass(frozen=True)
class ServerEndpoint:
    """How to reach the in-cluster server from here: a local URL and the server's tokens."""

    url: str
    admin_token: str = field(repr=False)
    read_token: str = field(repr=False)


def _server_pod(api_client: Any, namespace: str) -> str:
    from kubernetes import client

    selector = f"app.kubernetes.io/name={SERVER},app.kubernetes.io/component=server"
    listing = client.CoreV1Api(api_client).list_namespaced_pod
    found = _call(f"find the mlbench server pod in {namespace}", listing, namespace, label_selector=selector)
    pods = (found or {}).get("items") or []
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    if not running:
        raise InfraError(
            f"no running mlbench server in namespace {namespace}",
            hint="install it with `mlbench cluster init`, then check `kubectl -n "
            f"{namespace} get pods -l app.kubernetes.io/name={SERVER}`",
        )
    name: str = running[0]["metadata"]["name"]
    return name


class PortForward:
    """Listens on 127.0.0.1 and tunnels each connection to a pod port over the API's websocket."""

    def __init__(self, api_client: Any, namespace: str, pod: str, port: int, local_port: int = 0) -> None:
        self._api = api_client
        self._namespace, self._pod, self._port = namespace, pod, port
        self._listener = socket.create_server(("127.0.0.1", local_port))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="mlbench-port-forward", daemon=True)
        self.local_port: int = self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def start(self) -> PortForward:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        from kubernetes import client
        from kubernetes.stream import portforward

        forward = None
        try:
            forward = portforward(
                client.CoreV1Api(self._api).connect_get_namespaced_pod_portforward,
                self._pod,
                self._namespace,
                ports=str(self._port),
            )
            remote = forward.socket(self._port)
            remote.setblocking(True)
            _pipe(conn, remote, self._stop)
        except Exception:  # a failed tunnel closes this one connection; the client sees EOF
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            if forward is not None:
                with contextlib.suppress(Exception):
                    forward.close()


def _pipe(a: Any, b: Any, stop: threading.Event) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [a, b]
    while not stop.is_set():
        readable, _, _ = select.select(sockets, [], [], 0.2)
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            (b if sock is a else a).sendall(data)


@contextlib.contextmanager
def connect(
    context: str | None,
    namespace: str,
    *,
    api_client: Any | None = None,
    local_port: int = 0,
) -> Iterator[ServerEndpoint]:
    """Port-forward to the in-cluster server for the duration of the block; yields URL and tokens.

    ``mlbench apply`` uses this for Kubernetes targets without a reachable ``server_url``.
    """
    api = _client(context, api_client)
    tokens = _read_tokens(api, namespace)
    if tokens is None:
        raise InfraError(
            f"the mlbench server is not installed in namespace {namespace}",
            hint="run `mlbench cluster init" + (f" --context {context}" if context else "") + "`",
        )
    forward = PortForward(api, namespace, _server_pod(api, namespace), SERVER_PORT, local_port).start()
    try:
        yield ServerEndpoint(forward.url, *tokens)
    finally:
        forward.close()


@contextlib.contextmanager
def server_for_target(
    context: str | None, namespace: str, *, api_client: Any | None = None
) -> Iterator[ServerEndpoint]:
    """The metrics server of a Kubernetes target as reachable from this machine, for ``apply``.

    ``MLBENCH_SERVER_URL`` (with ``MLBENCH_TOKEN``/``MLBENCH_READ_TOKEN``) wins, as everywhere;
    otherwise the in-cluster server of the target's namespace through a port-forward. Pods report
    to ``target.server_url`` when set, else to the in-cluster Service (see executors/manifests).
    """
    url = os.environ.get("MLBENCH_SERVER_URL")
    if url:
        admin = os.environ.get("MLBENCH_TOKEN", "")
        yield ServerEndpoint(url.rstrip("/"), admin, os.environ.get("MLBENCH_READ_TOKEN", admin))
        return
    with connect(context, namespace, api_client=api_client) as endpoint:
        yield endpoint


@contextlib.contextmanager
def server_for_plans(
    plans: Sequence[RunPlan], *, api_client: Any | None = None
) -> Iterator[ServerEndpoint | None]:
    """For ``apply``: the in-cluster server when the plans target Kubernetes, else None (use the
    local server). Runs of one apply share one store, so they must share context and namespace."""
    kubernetes = [p.target for p in plans if isinstance(p.target, KubernetesTarget)]
    targets = {(target.context, target.namespace) for target in kubernetes}
    if not targets:
        yield None
        return
    places = sorted(f"{ctx or 'current context'}/{ns}" for ctx, ns in targets)
    if any(not isinstance(p.target, KubernetesTarget) for p in plans):
        places.append("local")
    if len(places) > 1:
        raise InfraError(
            "one apply reports to one metrics server, but these runs target several places: "
            + ", ".join(places),
            hint="apply local and Kubernetes specs (or specs for different clusters) separately",
        )
    ((context, namespace),) = targets
    with server_for_target(context, namespace, api_client=api_client) as endpoint:
        yield endpoint
