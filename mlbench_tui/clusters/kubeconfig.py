"""Merging a cluster's kubeconfig into the user's, switching and removing contexts.

Cloud clusters come back from Pulumi as a one-context kubeconfig (exec-plugin auth, no static
secrets, but still treated as secret). mlbench merges it into the user's kubeconfig under one
name, ``mlbench-<provider>-<cluster>``, used for the cluster, user and context entries, so it
can be switched to and removed again cleanly. Files are written atomically with mode 0600.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from mlbench_tui.errors import InfraError

_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def kubeconfig_path() -> Path:
    """The kubeconfig file kubectl writes to: the first ``KUBECONFIG`` entry, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((part for part in env.split(os.pathsep) if part), None)
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def exec_kubeconfig(
    name: str,
    server: str,
    ca_data: str,
    *,
    command: str,
    install_hint: str,
    args: tuple[str, ...] = (),
    provide_cluster_info: bool = False,
) -> str:
    """A one-context kubeconfig whose user authenticates through an exec plugin (no static secret).

    ``name`` names the cluster, user and context alike; the cluster programs export this text.
    """
    args_line = f"      args: [{', '.join(args)}]\n" if args else ""
    info_line = "      provideClusterInfo: true\n" if provide_cluster_info else ""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {command}
{args_line}      installHint: {install_hint}
{info_line}      interactiveMode: Never
"""


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    return yaml


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    try:
        data = _yaml().load(path.read_text(encoding="utf-8")) or {}
    except Exception as exc:  # ruamel raises many error types; any means "not a kubeconfig"
        raise InfraError(f"cannot read kubeconfig {path}: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise InfraError(f"{path} is not a kubeconfig file")
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    tmp = path.with_name(f".{path.name}.mlbench-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(buffer.getvalue())
    tmp.replace(path)


def merged(
    existing: dict[str, Any], incoming: dict[str, Any], name: str, *, set_current: bool
) -> dict[str, Any]:
    """``existing`` with the single context of ``incoming`` added (or replaced) under ``name``."""
    contexts = incoming.get("contexts") or []
    if len(contexts) != 1:
        raise InfraError(f"expected a kubeconfig with one context, got {len(contexts)}")
    context = dict(contexts[0].get("context") or {})
    by_name = {
        section: {entry.get("name"): entry for entry in incoming.get(section) or []}
        for section, _ in _SECTIONS
    }
    cluster = by_name["clusters"].get(context.get("cluster"))
    user = by_name["users"].get(context.get("user"))
    if cluster is None or user is None:
        raise InfraError("the cluster's kubeconfig is incomplete (context without its cluster or user)")
    result = removed(existing, name)
    new_entries = {
        "clusters": {"name": name, "cluster": cluster["cluster"]},
        "users": {"name": name, "user": user["user"]},
        "contexts": {"name": name, "context": {**context, "cluster": name, "user": name}},
    }
    for section, _ in _SECTIONS:
        result[section] = [*(result.get(section) or []), new_entries[section]]
    if set_current or not result.get("current-context"):
        result["current-context"] = name
    return result


def removed(existing: dict[str, Any], name: str) -> dict[str, Any]:
    """``existing`` without the cluster, user and context called ``name``."""
    result = dict(existing)
    for section, _ in _SECTIONS:
        result[section] = [entry for entry in existing.get(section) or [] if entry.get("name") != name]
    if result.get("current-context") == name:
        result["current-context"] = ""
    return result


def merge_context(
    kubeconfig_text: str, name: str, *, path: Path | None = None, set_current: bool = True
) -> Path:
    """Merge a cluster's kubeconfig (text) into the user's kubeconfig as context ``name``."""
    try:
        incoming = _yaml().load(kubeconfig_text)
    except Exception:
        raise InfraError("the cluster's kubeconfig output is not valid YAML") from None
    if not isinstance(incoming, dict):
        raise InfraError("the cluster's kubeconfig output is not a kubeconfig")
    target = path or kubeconfig_path()
    _save(target, merged(_load(target), incoming, name, set_current=set_current))
    return target


def remove_context(name: str, *, path: Path | None = None) -> bool:
    """Remove context ``name`` (and its cluster and user); returns whether it was there."""
    target = path or kubeconfig_path()
    if not target.exists():
        return False
    data = _load(target)
    if not any(entry.get("name") == name for entry in data.get("contexts") or []):
        return False
    _save(target, removed(data, name))
    return True


def current_context(*, path: Path | None = None) -> str | None:
    """The current context of the kubeconfig file, or None."""
    target = path or kubeconfig_path()
    if not target.exists():
        return None
    value = _load(target).get("current-context")
    return str(value) if value else None


def use_context(name: str, *, path: Path | None = None) -> Path:
    """Make ``name`` the current context (like ``kubectl config use-context``)."""
    target = path or kubeconfig_path()
    data = _load(target)
    if not any(entry.get("name") == name for entry in data.get("contexts") or []):
        raise InfraError(
            f"context {name!r} is not in {target}",
            hint="re-create the cluster's context with `mlbench cluster create` (it is idempotent)",
        )
    data["current-context"] = name
    _save(target, data)
    return target
