"""The Kubernetes API client as mlbench uses it: one place that builds a client and calls it.

The kubernetes package is imported lazily (inside the functions), and every call goes through
``call_json``: raw JSON answers (plain dicts, so fields newer than this client pass through) and
``ExecutorError``s that say what we were doing and how to fix it. The executor and the in-cluster
server installer (``clusters.incluster``) both use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlbench_tui.errors import ExecutorError

FIELD_MANAGER = "mlbench"
APPLY_PATCH = "application/apply-patch+yaml"


def api_error(exc: Exception, action: str) -> ExecutorError:
    """A user-facing error for a failed API call (``action`` says what we were doing)."""
    status = getattr(exc, "status", None)
    message = _status_message(exc)
    if status is None or status == 0:
        return ExecutorError(
            f"cannot reach the Kubernetes API while trying to {action}: {message}",
            hint="check the kubeconfig context (kubectl config current-context) and that the cluster is up",
        )
    if status == 401:
        return ExecutorError(
            f"the Kubernetes API rejected our credentials (401) while trying to {action}: {message}",
            hint="refresh the kubeconfig credentials for this context",
        )
    if status == 403:
        return ExecutorError(
            f"forbidden (403): not allowed to {action}: {message}",
            hint="the account needs mlbench's Role (jobs, pods, pods/log, services, configmaps, secrets) "
            "in this namespace: run `mlbench cluster init`",
        )
    if status == 404:
        return ExecutorError(
            f"not found (404) while trying to {action}: {message}",
            hint="does the namespace exist? `mlbench cluster init` creates it",
        )
    if status == 409:
        return ExecutorError(
            f"conflict (409) while trying to {action}: {message}",
            hint="another run or another tool owns this object: cancel that run, or use a new run id",
        )
    if status == 422:
        return ExecutorError(f"the cluster rejected the object (422) while trying to {action}: {message}")
    if status >= 500:
        return ExecutorError(
            f"the Kubernetes API server failed ({status}) while trying to {action}: {message}",
            hint="this is usually transient: try again; if it persists, check the control plane",
        )
    return ExecutorError(f"Kubernetes API error ({status}) while trying to {action}: {message}")


def _status_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except (TypeError, ValueError):
            pass
    reason = getattr(exc, "reason", None)
    return str(reason or exc)


def call_json(
    action: str, fn: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any
) -> Any:
    """Call a client method for its raw JSON (plain dicts, no model validation, so fields newer than
    this client pass through); errors become ``ExecutorError``; 404 is None when ``missing_ok``."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return raw_json(fn(*args, _preload_content=False, **kwargs))
    except ApiException as exc:
        if missing_ok and exc.status == 404:
            return None
        raise api_error(exc, action) from None
    except HTTPError as exc:
        raise api_error(exc, action) from None


def make_api_client(context: str | None = None, kubeconfig: str | None = None) -> Any:
    """An ``ApiClient`` for a kubeconfig context (default: current), or the in-cluster account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError) as exc:
        if context is None and kubeconfig is None:
            try:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                return client.ApiClient(configuration)
            except ConfigException:
                pass
        where = f"context {context!r}" if context else "the current context"
        raise ExecutorError(
            f"cannot load a Kubernetes configuration for {where}: {exc}",
            hint="set KUBECONFIG or pass target.context; `mlbench cluster create kind NAME` writes one",
        ) from None


def raw_json(response: Any) -> Any:
    """The JSON body of a raw (``_preload_content=False``) response: plain dicts, no model
    validation, so fields newer than this client version pass through untouched."""
    try:
        return json.loads(response.data or b"null")
    finally:
        response.release_conn()


# Custom resources mlbench applies: kind -> plural (group and version come from apiVersion).
_CUSTOM_PLURALS = {"MPIJob": "mpijobs"}


def apply_object(api_client: Any, obj: dict[str, Any], *, force: bool = False, **kwargs: Any) -> Any:
    """Server-side apply one object (field manager ``mlbench``); returns it as the server stored it.

    ``kwargs`` go to the client call (e.g. ``_request_timeout``); ``force`` takes over fields
    another manager set (the device plugin's DaemonSet, which clusters may already run).
    """
    from kubernetes import client

    kind, meta = obj["kind"], obj["metadata"]
    name, namespace = meta["name"], meta.get("namespace")
    action = f"apply {kind} {namespace}/{name}" if namespace else f"apply {kind} {name}"
    options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_content_type": APPLY_PATCH, **kwargs}
    if force:
        options["force"] = True
    if kind in _CUSTOM_PLURALS:
        group, version = obj["apiVersion"].split("/")
        patch = client.CustomObjectsApi(api_client).patch_namespaced_custom_object
        plural = _CUSTOM_PLURALS[kind]
        return call_json(action, patch, group, version, namespace, plural, name, obj, **options)
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    batch, rbac = client.BatchV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    if kind == "Namespace":
        return call_json(action, core.patch_namespace, name, obj, **options)
    namespaced = {
        "Job": batch.patch_namespaced_job,
        "Secret": core.patch_namespaced_secret,
        "ConfigMap": core.patch_namespaced_config_map,
        "Service": core.patch_namespaced_service,
        "ServiceAccount": core.patch_namespaced_service_account,
        "PersistentVolumeClaim": core.patch_namespaced_persistent_volume_claim,
        "Deployment": apps.patch_namespaced_deployment,
        "DaemonSet": apps.patch_namespaced_daemon_set,
        "Role": rbac.patch_namespaced_role,
        "RoleBinding": rbac.patch_namespaced_role_binding,
    }
    if kind not in namespaced:
        raise ExecutorError(f"cannot apply objects of kind {kind}")
    return call_json(action, namespaced[kind], name, namespace, obj, **options)
