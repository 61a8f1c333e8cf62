"""The Kubernetes executor against a real cluster: real server-side apply, real owner-reference
garbage collection, real pods. Runs only when MLBENCH_TEST_KUBECONFIG names a kubeconfig
(optionally MLBENCH_TEST_CONTEXT, MLBENCH_TEST_NAMESPACE, MLBENCH_TEST_IMAGE); CI's kind job and
developers with a KIND cluster set it."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.kube_api import make_launch, make_plan

from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes.client import call_json, make_api_client
from mlbench_tui.executors.kubernetes.executor import KubernetesExecutor
from mlbench_tui.lifecycle import RunState

KUBECONFIG = os.environ.get("MLBENCH_TEST_KUBECONFIG")
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not KUBECONFIG, reason="set MLBENCH_TEST_KUBECONFIG to run against a real cluster"),
]
NAMESPACE = os.environ.get("MLBENCH_TEST_NAMESPACE", "mlbench-test")
IMAGE = os.environ.get("MLBENCH_TEST_IMAGE", "mlbench-worker:dev")


@pytest.fixture(scope="module")
def api() -> Any:
    client = make_api_client(os.environ.get("MLBENCH_TEST_CONTEXT"), KUBECONFIG)
    from kubernetes import client as k8s

    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    call_json(
        "create the test namespace",
        k8s.CoreV1Api(client).patch_namespace,
        NAMESPACE,
        namespace,
        field_manager="mlbench-tests",
        _content_type="application/apply-patch+yaml",
    )
    return client


@pytest.fixture()
def run_id(api: Any) -> Iterator[str]:
    rid = f"test-{uuid.uuid4().hex[:10]}"
    yield rid
    KubernetesExecutor(api).cancel(f"kubernetes://{NAMESPACE}/{rid}")


def _plan() -> Any:
    return make_plan(target={"namespace": NAMESPACE, "image": IMAGE, "image_pull_policy": "IfNotPresent"})


def _get(api: Any, kind: str, name: str) -> dict[str, Any] | None:
    from kubernetes import client

    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    read = {
        "Job": batch.read_namespaced_job,
        "Secret": core.read_namespaced_secret,
        "ConfigMap": core.read_namespaced_config_map,
        "Service": core.read_namespaced_service,
    }[kind]
    found: dict[str, Any] | None = call_json(f"read {kind}", read, name, NAMESPACE, missing_ok=True)
    return found


def test_submit_is_idempotent_and_cancel_garbage_collects_everything(api: Any, run_id: str) -> None:
    executor = KubernetesExecutor(api)
    launch = make_launch(run_id=run_id)
    handle = executor.submit(_plan(), launch)
    name = manifests.object_name(run_id)
    names = {
        "Job": name,
        "Secret": manifests.secret_name(run_id),
        "ConfigMap": manifests.config_map_name(run_id),
        "Service": name,
    }
    objects = {kind: _get(api, kind, n) for kind, n in names.items()}
    assert all(objects.values())
    uid = objects["Job"]["metadata"]["uid"]  # type: ignore[index]
    for kind in ("Secret", "ConfigMap", "Service"):
        assert objects[kind]["metadata"]["ownerReferences"][0]["uid"] == uid  # type: ignore[index]
    versions = {kind: obj["metadata"]["resourceVersion"] for kind, obj in objects.items()}  # type: ignore[index]
    executor.submit(_plan(), launch)  # unchanged: server-side apply is a no-op
    assert {kind: _get(api, kind, n)["metadata"]["resourceVersion"] for kind, n in names.items()} == versions  # type: ignore[index]

    deadline = time.monotonic() + 120
    status = executor.describe(handle)
    while status is not None and len(status.ranks) < 2 and time.monotonic() < deadline:
        time.sleep(1)
        status = executor.describe(handle)
    assert status is not None and len(status.ranks) == 2, status

    executor.cancel(handle)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(_get(api, kind, n) for kind, n in names.items()):
        time.sleep(1)
    assert not any(_get(api, kind, n) for kind, n in names.items()), "owner references did not clean up"
    assert executor.describe(handle) is None


def test_pending_pods_report_a_reason(api: Any, run_id: str) -> None:
    executor = KubernetesExecutor(api)
    plan = make_plan(
        target={
            "namespace": NAMESPACE,
            "image": "registry.invalid/mlbench/none:0",
            "image_pull_policy": "Always",
        }
    )
    handle = executor.submit(plan, make_launch(run_id=run_id))
    deadline = time.monotonic() + 120
    message = None
    for status in executor.watch(handle, timeout=120, poll=2):
        message = status.message
        if (
            status.state is RunState.PENDING
            and message
            and ("ErrImagePull" in message or "ImagePullBackOff" in message)
        ):
            break
        if time.monotonic() > deadline:
            break
    assert message and ("ErrImagePull" in message or "ImagePullBackOff" in message), message
