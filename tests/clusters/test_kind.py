"""The kind provider. No kind or container engine runs on these machines, so the CLI-driving tests
put small executables named ``kind`` and ``docker`` first on PATH that record their argv and
answer like the real tools; a real kind run happens when MLBENCH_TEST_KIND=1 (CI's kind job)."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import yaml

from mlbench_tui.clusters import kind
from mlbench_tui.clusters.providers import ClusterRequest, GpuSpec, load_provider
from mlbench_tui.errors import InfraError

REPO = Path(__file__).resolve().parents[2]

KUBECONFIG_OUT = """apiVersion: v1
kind: Config
clusters:
- name: kind-{name}
  cluster: {{server: "https://127.0.0.1:40123", certificate-authority-data: Q0E=}}
contexts:
- name: kind-{name}
  context: {{cluster: kind-{name}, user: kind-{name}}}
current-context: kind-{name}
users:
- name: kind-{name}
  user: {{client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}
"""


def _tool(bin_dir: Path, name: str, body: str) -> None:
    """A Python executable named ``name`` that logs its argv to calls.jsonl, then runs ``body``
    (which sees ``args``, the argv after the program name, and ``here``, its directory)."""
    path = bin_dir / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, pathlib\n"
        "here = pathlib.Path(__file__).parent\n"
        "args = sys.argv[1:]\n"
        f"with open(here / 'calls.jsonl', 'a') as log: log.write(json.dumps([{name!r}, *args]) + '\\n')\n"
        + textwrap.dedent(body)
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


KIND_FAKE = f"""
clusters = here / "clusters"
if args[:2] == ["get", "clusters"]:
    print(clusters.read_text() if clusters.exists() else "No kind clusters found.", end="")
elif args[:2] == ["create", "cluster"]:
    with open(clusters, "a") as out:
        out.write(args[args.index("--name") + 1] + "\\n")
elif args[:2] == ["get", "kubeconfig"]:
    print({KUBECONFIG_OUT!r}.format(name=args[args.index("--name") + 1]))
"""


@pytest.fixture()
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """kind + docker fakes alone on PATH, and a private kubeconfig."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "kind", KIND_FAKE)
    _tool(bin_dir, "docker", "print('27.0.1' if args[:1] == ['info'] else '[]')\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kube" / "config"))
    return bin_dir


def _calls(bin_dir: Path) -> list[list[str]]:
    return [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]


def test_committed_cluster_yaml_is_the_rendered_two_worker_config() -> None:
    assert (REPO / "infra" / "kind" / "cluster.yaml").read_text() == kind.config_yaml(2)


def test_cluster_config_has_a_control_plane_and_labelled_workers() -> None:
    config = yaml.safe_load(kind.config_yaml(3))
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker", "worker"]
    assert all(n["labels"] == {"mlbench.io/pool": "bench"} for n in config["nodes"][1:])
    with pytest.raises(InfraError, match="at least one worker"):
        kind.cluster_config(0)


def test_registry_loads_the_kind_provider() -> None:
    assert isinstance(load_provider("kind"), kind.KindProvider)


def test_create_drives_kind_merges_context_and_loads_the_image(tools: Path, tmp_path: Path) -> None:
    messages: list[str] = []
    provider = kind.KindProvider(image="mlbench-worker:test")
    record = provider.create(ClusterRequest(provider="kind", name="smoke", nodes=2), progress=messages.append)
    calls = _calls(tools)
    create = next(c for c in calls if c[:3] == ["kind", "create", "cluster"])
    assert create[3:5] == ["--name", "smoke"] and "--wait" in create
    config_arg = create[create.index("--config") + 1]
    assert not Path(config_arg).exists()  # a temporary file, cleaned up
    assert ["kind", "load", "docker-image", "mlbench-worker:test", "--name", "smoke"] in calls
    assert record.context == "mlbench-kind-smoke" and record.nodes == 2
    kubeconfig = yaml.safe_load((tmp_path / "kube" / "config").read_text())
    assert [c["name"] for c in kubeconfig["contexts"]] == ["mlbench-kind-smoke"]
    assert kubeconfig["current-context"] == "mlbench-kind-smoke"
    assert [r.name for r in provider.list()] == ["smoke"]
    assert any("creating kind cluster smoke" in m for m in messages)


def test_create_reuses_an_existing_cluster(tools: Path) -> None:
    (tools / "clusters").write_text("smoke\n")
    kind.KindProvider(image="img:1").create(
        ClusterRequest(provider="kind", name="smoke"), progress=lambda _: None
    )
    assert not [c for c in _calls(tools) if c[:3] == ["kind", "create", "cluster"]]


def test_delete_removes_cluster_context_and_record_and_is_idempotent(tools: Path, tmp_path: Path) -> None:
    provider = kind.KindProvider(image="img:1")
    provider.create(ClusterRequest(provider="kind", name="smoke"), progress=lambda _: None)
    provider.delete("smoke", progress=lambda _: None)
    provider.delete("smoke", progress=lambda _: None)
    deletes = [c for c in _calls(tools) if c[:3] == ["kind", "delete", "cluster"]]
    assert len(deletes) == 2 and deletes[0][3:5] == ["--name", "smoke"]
    kubeconfig = yaml.safe_load((tmp_path / "kube" / "config").read_text())
    assert kubeconfig["contexts"] == []
    assert provider.list() == []


def test_use_switches_the_current_context(tools: Path, tmp_path: Path) -> None:
    provider = kind.KindProvider(image="img:1")
    provider.create(ClusterRequest(provider="kind", name="a"), progress=lambda _: None)
    provider.create(ClusterRequest(provider="kind", name="b"), progress=lambda _: None)
    assert provider.use("a") == "mlbench-kind-a"
    assert yaml.safe_load((tmp_path / "kube" / "config").read_text())["current-context"] == "mlbench-kind-a"


def test_missing_kind_and_engine_are_reported_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing at all
    with pytest.raises(InfraError) as info:
        kind.KindProvider().create(ClusterRequest(provider="kind", name="smoke"), progress=lambda _: None)
    text = info.value.message
    assert "kind is not on PATH" in text and "no container engine" in text
    assert "kind.sigs.k8s.io" in text


def test_stopped_engine_is_reported(tools: Path) -> None:
    _tool(tools, "docker", "sys.exit('Cannot connect to the Docker daemon at unix:///var/run/docker.sock')\n")
    with pytest.raises(InfraError, match="docker is installed but its engine is not running"):
        kind.KindProvider().create(ClusterRequest(provider="kind", name="smoke"), progress=lambda _: None)


def test_failing_kind_create_shows_its_error(tools: Path) -> None:
    _tool(
        tools,
        "kind",
        "if args[:2] == ['get', 'clusters']:\n    print('No kind clusters found.')\n"
        "else:\n    sys.exit('ERROR: failed to create cluster: node(s) already exist for a cluster')\n",
    )
    with pytest.raises(InfraError, match="cannot create kind cluster smoke \\(exit code 1\\)") as info:
        kind.KindProvider().create(ClusterRequest(provider="kind", name="smoke"), progress=lambda _: None)
    assert "node(s) already exist" in info.value.message


def test_gpus_are_refused_for_kind(tools: Path) -> None:
    with pytest.raises(InfraError, match="kind clusters have no GPUs"):
        kind.KindProvider().preflight(ClusterRequest(provider="kind", name="g", gpu=GpuSpec(1, "T4")))


@pytest.mark.cluster
@pytest.mark.skipif(
    not os.environ.get("MLBENCH_TEST_KIND"), reason="set MLBENCH_TEST_KIND=1 where kind and Docker run"
)
def test_real_kind_cluster_lifecycle() -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    provider = kind.KindProvider()
    record = provider.create(ClusterRequest(provider="kind", name=name, nodes=1), progress=print)
    try:
        assert name in kind.existing_clusters()
        assert provider.use(name) == record.context
    finally:
        provider.delete(name, progress=print)
    assert name not in kind.existing_clusters()
