"""The in-cluster server install and the port-forward, against a real HTTP Kubernetes API mock."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support.kube_api import KubeApi

from mlbench_tui.clusters import incluster
from mlbench_tui.clusters.providers import load_incluster_installer
from mlbench_tui.errors import InfraError

NS = "mlbench"


def test_cluster_init_finds_the_installer() -> None:
    assert load_incluster_installer() is incluster.install


def test_install_creates_server_store_tokens_and_runner_rbac(kube: KubeApi) -> None:
    incluster.install(None, NS, api_client=kube.api_client())
    assert kube.names("apps/v1/deployments", NS) == ["mlbench-server"]
    assert kube.names("v1/services", NS) == ["mlbench-server"]
    assert kube.names("v1/persistentvolumeclaims", NS) == ["mlbench-store"]
    assert kube.names("v1/serviceaccounts", NS) == ["mlbench-runner"]
    assert kube.names("rbac.authorization.k8s.io/v1/roles", NS) == ["mlbench-runner"]
    assert kube.names("rbac.authorization.k8s.io/v1/rolebindings", NS) == ["mlbench-runner"]
    deployment = kube.get("apps/v1/deployments", NS, "mlbench-server")
    assert deployment is not None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:4] == ["mlbench", "server", "--host", "0.0.0.0"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # one SQLite writer, always
    env = {e["name"]: e for e in container["env"]}
    assert env["MLBENCH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "mlbench-server-tokens",
        "key": "admin-token",
    }
    assert "value" not in env["MLBENCH_TOKEN"]  # never inline
    secret = kube.get("v1/secrets", NS, "mlbench-server-tokens")
    assert secret is not None
    tokens = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert len(tokens["admin-token"]) >= 32 and tokens["admin-token"] != tokens["read-token"]


def test_install_is_idempotent_and_keeps_the_tokens(kube: KubeApi) -> None:
    api = kube.api_client()
    incluster.install(None, NS, api_client=api)
    first = kube.get("v1/secrets", NS, "mlbench-server-tokens")
    versions = {
        n: kube.get("apps/v1/deployments", NS, n)["metadata"]["resourceVersion"] for n in ["mlbench-server"]
    }
    incluster.install(None, NS, api_client=api)
    assert kube.get("v1/secrets", NS, "mlbench-server-tokens") == first
    assert {
        n: kube.get("apps/v1/deployments", NS, n)["metadata"]["resourceVersion"] for n in versions
    } == versions
    applies = [r for r in kube.requests() if r.method.value == "PATCH"]
    assert all(r.params.get("fieldManager") == "mlbench" for r in applies)


def test_runner_role_is_least_privilege_in_one_namespace(kube: KubeApi) -> None:
    incluster.install(None, NS, api_client=kube.api_client())
    role = kube.get("rbac.authorization.k8s.io/v1/roles", NS, "mlbench-runner")
    assert role is not None
    granted = {
        (group, res) for rule in role["rules"] for group in rule["apiGroups"] for res in rule["resources"]
    }
    assert granted == {
        ("batch", "jobs"),
        ("", "pods"),
        ("", "pods/log"),
        ("", "services"),
        ("", "configmaps"),
        ("", "secrets"),
        ("kubeflow.org", "mpijobs"),
        ("batch", "jobs/finalizers"),  # only "update", for blockOwnerDeletion owner references
        ("kubeflow.org", "mpijobs/finalizers"),
    }
    finalizer_rules = [r for r in role["rules"] if r["resources"][0].endswith("/finalizers")]
    assert all(r["verbs"] == ["update"] for r in finalizer_rules)
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "*" not in verbs and not verbs & {"escalate", "bind", "impersonate"}
    pod_rules = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pod_rules[0]["verbs"] == ["get", "list", "watch"]  # read-only on pods
    binding = kube.get("rbac.authorization.k8s.io/v1/rolebindings", NS, "mlbench-runner")
    assert binding is not None and binding["roleRef"]["kind"] == "Role"  # never a ClusterRole


def test_server_objects_validate_against_the_kubernetes_openapi_schema() -> None:
    import kubernetes_validate

    for obj in [*incluster.server_objects(NS), incluster.tokens_secret(NS, "a", "b")]:
        assert kubernetes_validate.validate(obj, "1.30", strict=True) == "1.30"


def test_forbidden_install_is_a_clear_error(kube: KubeApi) -> None:
    kube.fault(
        "PATCH", "roles", 403, "Forbidden", 'roles.rbac.authorization.k8s.io "mlbench-runner" is forbidden'
    )
    with pytest.raises(
        InfraError, match=r"forbidden \(403\): not allowed to apply Role mlbench/mlbench-runner"
    ):
        incluster.install(None, NS, api_client=kube.api_client())


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "ok", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def server_pod(kube: KubeApi) -> Iterator[None]:
    """A running server pod whose port 8080 is a real HTTP server on 127.0.0.1."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    labels = {"app.kubernetes.io/name": "mlbench-server", "app.kubernetes.io/component": "server"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels}, "status": {"phase": "Running"}}
    kube.put("v1/pods", NS, "mlbench-server-7d9f-x2", pod)
    kube.forward_to(NS, "mlbench-server-7d9f-x2", ("127.0.0.1", http.server_address[1]))
    yield
    http.shutdown()


def test_connect_port_forwards_to_the_server_without_kubectl(kube: KubeApi, server_pod: None) -> None:
    import httpx

    api = kube.api_client()
    incluster.install(None, NS, api_client=api)
    with incluster.connect(None, NS, api_client=api) as endpoint:
        assert endpoint.url.startswith("http://127.0.0.1:")
        replies = [httpx.get(f"{endpoint.url}/healthz?n={n}", timeout=5).json() for n in range(3)]
        assert [r["path"] for r in replies] == ["/healthz?n=0", "/healthz?n=1", "/healthz?n=2"]
        secret = kube.get("v1/secrets", NS, "mlbench-server-tokens")
        assert secret is not None
        assert endpoint.admin_token == base64.b64decode(secret["data"]["admin-token"]).decode()
        assert endpoint.admin_token not in repr(endpoint)
    forwards = [r for r in kube.requests() if r.subresource == "portforward"]
    assert len(forwards) == 3 and forwards[0].params["ports"] == "8080"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint.url}/healthz", timeout=2)  # the listener is closed with the block


def test_connect_without_install_says_to_run_cluster_init(kube: KubeApi) -> None:
    api = kube.api_client()
    with (
        pytest.raises(InfraError, match="not installed in namespace mlbench") as info,
        incluster.connect("kind-bench", NS, api_client=api),
    ):
        pass
    assert "mlbench cluster init --context kind-bench" in (info.value.hint or "")


def test_connect_without_a_running_server_pod_is_a_clear_error(kube: KubeApi) -> None:
    api = kube.api_client()
    incluster.install(None, NS, api_client=api)
    with (
        pytest.raises(InfraError, match="no running mlbench server"),
        incluster.connect(None, NS, api_client=api),
    ):
        pass


def test_server_image_follows_mlbench_worker_image(kube: KubeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_WORKER_IMAGE", "mlbench-worker:dev")
    incluster.install(None, NS, api_client=kube.api_client())
    deployment = kube.get("apps/v1/deployments", NS, "mlbench-server")
    assert deployment is not None
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "mlbench-worker:dev"


def test_server_for_target_prefers_an_explicit_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_SERVER_URL", "http://127.0.0.1:8765/")
    monkeypatch.setenv("MLBENCH_TOKEN", "admin-t")
    with incluster.server_for_target(None, NS) as endpoint:
        assert (endpoint.url, endpoint.admin_token, endpoint.read_token) == (
            "http://127.0.0.1:8765",
            "admin-t",
            "admin-t",
        )


def test_server_for_target_port_forwards_to_the_targets_namespace(kube: KubeApi, server_pod: None) -> None:
    import httpx

    api = kube.api_client()
    incluster.install(None, NS, api_client=api)
    with incluster.server_for_target(None, NS, api_client=api) as endpoint:
        assert httpx.get(f"{endpoint.url}/healthz", timeout=5).json()["status"] == "ok"


def test_server_for_plans_uses_the_local_server_for_local_runs() -> None:
    from support.kube_api import make_plan

    with incluster.server_for_plans([make_plan(target={"kind": "local"})]) as endpoint:
        assert endpoint is None


def test_server_for_plans_refuses_runs_spread_over_places() -> None:
    from support.kube_api import make_plan

    plans = [make_plan(), make_plan(target={"namespace": "other"}), make_plan(target={"kind": "local"})]
    with (
        pytest.raises(
            InfraError, match="several places: current context/bench, current context/other, local"
        ),
        incluster.server_for_plans(plans),
    ):
        pass


def test_server_for_plans_port_forwards_for_kubernetes_runs(kube: KubeApi, server_pod: None) -> None:
    import httpx
    from support.kube_api import make_plan

    api = kube.api_client()
    incluster.install(None, NS, api_client=api)
    plans = [make_plan(target={"namespace": NS}), make_plan(name="b", target={"namespace": NS})]
    with incluster.server_for_plans(plans, api_client=api) as endpoint:
        assert endpoint is not None
        assert httpx.get(f"{endpoint.url}/healthz", timeout=5).status_code == 200
        secret = kube.get("v1/secrets", NS, "mlbench-server-tokens")
        assert secret is not None  # apply's client reports with the installed server's admin token
        assert endpoint.admin_token == base64.b64decode(secret["data"]["admin-token"]).decode()
