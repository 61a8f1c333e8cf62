"""Merging a cluster's kubeconfig into the user's file, switching and removing contexts."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from mlbench_tui.clusters import kubeconfig
from mlbench_tui.errors import InfraError

CLUSTER_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: gke_p_us-central1-a_mlbench-test
  cluster: {server: 'https://203.0.113.10', certificate-authority-data: Q0E=}
contexts:
- name: gke_p_us-central1-a_mlbench-test
  context: {cluster: gke_p_us-central1-a_mlbench-test, user: gke_p_us-central1-a_mlbench-test}
current-context: gke_p_us-central1-a_mlbench-test
users:
- name: gke_p_us-central1-a_mlbench-test
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: gke-gcloud-auth-plugin}
"""

EXISTING = """apiVersion: v1
kind: Config
clusters:
- name: kind-dev
  cluster: {server: 'https://127.0.0.1:6443'}
contexts:
- name: kind-dev
  context: {cluster: kind-dev, user: kind-dev}
current-context: kind-dev
users:
- name: kind-dev
  user: {token: abc}
"""


def _read(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_merge_keeps_other_contexts_and_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kube" / "config"
    path.parent.mkdir()
    path.write_text(EXISTING)
    monkeypatch.setenv("KUBECONFIG", f"{path}:{tmp_path / 'other'}")
    assert kubeconfig.kubeconfig_path() == path

    kubeconfig.merge_context(CLUSTER_KUBECONFIG, "mlbench-gcp-test")
    kubeconfig.merge_context(CLUSTER_KUBECONFIG, "mlbench-gcp-test")  # idempotent: replaced, not duplicated
    data = _read(path)
    assert [c["name"] for c in data["contexts"]] == ["kind-dev", "mlbench-gcp-test"]
    assert data["current-context"] == "mlbench-gcp-test"
    ours = next(c for c in data["clusters"] if c["name"] == "mlbench-gcp-test")
    assert ours["cluster"]["server"] == "https://203.0.113.10"
    assert next(c for c in data["contexts"] if c["name"] == "mlbench-gcp-test")["context"] == {
        "cluster": "mlbench-gcp-test",
        "user": "mlbench-gcp-test",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert kubeconfig.current_context() == "mlbench-gcp-test"

    kubeconfig.use_context("kind-dev")
    assert kubeconfig.current_context() == "kind-dev"
    with pytest.raises(InfraError, match="not in"):
        kubeconfig.use_context("mlbench-gcp-nope")

    assert kubeconfig.remove_context("mlbench-gcp-test") is True
    assert kubeconfig.remove_context("mlbench-gcp-test") is False
    data = _read(path)
    assert [c["name"] for c in data["clusters"]] == ["kind-dev"]
    assert [u["name"] for u in data["users"]] == ["kind-dev"]


def test_merge_creates_the_file_and_rejects_broken_input(tmp_path: Path) -> None:
    path = tmp_path / "config"
    kubeconfig.merge_context(CLUSTER_KUBECONFIG, "mlbench-aws-x", path=path)
    assert kubeconfig.current_context(path=path) == "mlbench-aws-x"
    with pytest.raises(InfraError, match="one context"):
        kubeconfig.merge_context("apiVersion: v1\ncontexts: []\n", "x", path=path)
    with pytest.raises(InfraError, match="incomplete"):
        kubeconfig.merge_context("contexts:\n- name: a\n  context: {cluster: a, user: a}\n", "x", path=path)
