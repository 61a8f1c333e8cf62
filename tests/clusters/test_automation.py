"""The Automation API layer without a pulumi CLI: state backend, passphrase, stack config,
component loading, the provider registry, and the NVIDIA device plugin against a real HTTP
Kubernetes API mock."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from support.kube_api import kube_api

from mlbench_tui import cluster_records
from mlbench_tui.clusters import automation, device_plugin, providers
from mlbench_tui.clusters.prices import resolve_shape
from mlbench_tui.clusters.providers import ClusterRequest, GpuSpec
from mlbench_tui.errors import InfraError, UsageError


@pytest.fixture
def clean_pulumi_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"):
        monkeypatch.delenv(var, raising=False)


def test_local_backend_and_generated_passphrase(clean_pulumi_env: None, tmp_path: Path) -> None:
    env = automation.workspace_env()
    backend = Path(env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    assert backend.is_dir() and backend.is_relative_to(cluster_records.state_dir())
    passphrase = Path(env["PULUMI_CONFIG_PASSPHRASE_FILE"])
    assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600
    secret = passphrase.read_text()
    assert len(secret) >= 32 and secret not in "".join(env.values())
    assert automation.workspace_env()["PULUMI_CONFIG_PASSPHRASE_FILE"] == str(passphrase)
    assert passphrase.read_text() == secret  # generated once, reused


def test_user_backend_and_passphrase_win(clean_pulumi_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "hunter2")
    env = automation.workspace_env()
    assert "PULUMI_CONFIG_PASSPHRASE_FILE" not in env and "hunter2" not in env.values()
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://bucket/state")
    env = automation.workspace_env()
    assert env["PULUMI_BACKEND_URL"] == "s3://bucket/state"
    assert "PULUMI_CONFIG_PASSPHRASE_FILE" not in env  # remote backends bring their own secrets provider


def test_gcp_stack_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    request = ClusterRequest("gcp", "test", nodes=2, gpu=GpuSpec(1, "T4"), max_nodes=3, spot=True)
    config = automation.GcpProvider().stack_config(request, resolve_shape("gcp", request.gpu, None))
    assert config["gcp:project"] == config["project"] == "env-project"
    assert config["zone"] == "us-central1-a" and "region" not in config  # zonal by default
    assert config["clusterName"] == "mlbench-test"
    assert (config["machineType"], config["gpuType"], config["gpuCount"]) == (
        "n1-standard-4",
        "nvidia-tesla-t4",
        "1",
    )
    assert (config["nodes"], config["minNodes"], config["maxNodes"], config["spot"]) == (
        "2",
        "2",
        "3",
        "true",
    )
    regional = ClusterRequest("gcp", "r", region="europe-west4", project="p", gpu=None)
    config = automation.GcpProvider().stack_config(regional, resolve_shape("gcp", None, None))
    assert config["region"] == "europe-west4" and "zone" not in config and config["gpuType"] == "none"


def test_gcp_project_from_gcloud_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GOOGLE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert automation.gcp_project() is None
    (tmp_path / "configurations").mkdir()
    (tmp_path / "configurations" / "config_work").write_text("[core]\nproject = from-gcloud\n")
    (tmp_path / "active_config").write_text("work\n")
    assert automation.gcp_project() == "from-gcloud"
    assert automation.gcp_project("explicit") == "explicit"


def test_aws_stack_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    request = ClusterRequest("aws", "test", gpu=GpuSpec(4, "T4"), zone="eu-west-1b")
    config = automation.AwsProvider().stack_config(request, resolve_shape("aws", request.gpu, None))
    assert config["aws:region"] == config["region"] == "eu-west-1"
    assert (config["instanceType"], config["gpuType"], config["gpuCount"]) == ("g4dn.12xlarge", "T4", "4")
    assert config["zone"] == "eu-west-1b"


def test_providers_run_the_installed_mlbench_infra_programs() -> None:
    import mlbench_infra.eks
    import mlbench_infra.gke

    assert automation.GcpProvider().program() is mlbench_infra.gke.program
    assert automation.AwsProvider().program() is mlbench_infra.eks.program


def test_a_missing_program_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlbench_infra.gke", None)  # what an install without it sees
    with pytest.raises(InfraError, match=r"Pulumi program mlbench_infra.gke is not installed") as raised:
        automation.GcpProvider().program()
    assert "reinstall mlbench-tui" in str(raised.value.hint)


def test_provider_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(providers.load_provider("gcp"), automation.GcpProvider)
    assert isinstance(providers.load_provider("aws"), providers.Preflight)
    with pytest.raises(UsageError, match="unknown cluster provider 'azure'"):
        providers.load_provider("azure")
    monkeypatch.setitem(providers.PROVIDERS, "future", "mlbench_tui.clusters.not_written_yet:FutureProvider")
    with pytest.raises(InfraError, match="not available in this installation"):
        providers.load_provider("future")


def test_device_plugin_tolerates_the_gpu_taint_and_applies_idempotently() -> None:
    manifest = device_plugin.manifest()
    spec = manifest["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"mlbench.io/gpu": "true"}
    assert {"key": "mlbench.io/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    with kube_api() as api:
        api.declare("apps/v1/daemonsets", "DaemonSet")
        device_plugin.apply(None, api_client=api.api_client())
        device_plugin.apply(None, api_client=api.api_client())
        stored = api.get("apps/v1/daemonsets", "kube-system", device_plugin.NAME)
        assert stored is not None
        assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == device_plugin.IMAGE
        patches = [r for r in api.requests() if str(r.method).upper().endswith("PATCH")]
        assert len(patches) == 2
        assert all(r.params.get("fieldManager") == "mlbench" for r in patches)
        assert all(r.headers.get("Content-Type", "").startswith("application/apply-patch") for r in patches)
