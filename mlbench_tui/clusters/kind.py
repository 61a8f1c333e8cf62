"""KIND clusters for laptops and CI: ``mlbench cluster create|delete|list|use kind NAME``.

Drives the ``kind`` CLI (argv lists, never a shell) with a cluster config rendered here (one
control plane and N workers labelled as the benchmark pool), merges the cluster's kubeconfig into
the user's as ``mlbench-kind-NAME`` (kind's own ``kind-NAME`` context is not written), and loads
the worker image into the nodes so pods start without a registry. Missing tools (kind, a running
Docker or Podman engine) are reported together, each with how to get it.
"""

from __future__ import annotations

import datetime
import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from mlbench_tui import __version__
from mlbench_tui.cluster_records import ClusterRecord, find_record, load_records, remove_record, save_record
from mlbench_tui.clusters.providers import (
    ClusterRequest,
    Progress,
    context_name,
)
from mlbench_tui.errors import InfraError
from mlbench_tui.executors.kubernetes.placement import BENCH_POOL_LABEL

KIND_API = "kind.x-k8s.io/v1alpha4"
DEFAULT_IMAGE = f"mlbench-worker:{__version__}"
KIND_INSTALL = "install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
ENGINE_INSTALL = "install Docker (https://docs.docker.com/engine/install/) or Podman, and start it"
CREATE_TIMEOUT_S = 900


def cluster_config(workers: int) -> dict[str, Any]:
    """The kind Cluster config: a control plane plus ``workers`` nodes in the benchmark pool."""
    if workers < 1:
        raise InfraError(f"a kind cluster needs at least one worker node (got {workers})")
    labels = {BENCH_POOL_LABEL[0]: BENCH_POOL_LABEL[1]}
    nodes: list[dict[str, Any]] = [{"role": "control-plane"}]
    nodes += [{"role": "worker", "labels": dict(labels)} for _ in range(workers)]
    return {"kind": "Cluster", "apiVersion": KIND_API, "nodes": nodes}


def config_yaml(workers: int) -> str:
    """``cluster_config`` as YAML (what ``infra/kind/cluster.yaml`` holds for 2 workers)."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buffer = io.StringIO()
    yaml.dump(cluster_config(workers), buffer)
    header = "# KIND cluster for mlbench smoke runs (`mlbench cluster create kind NAME --workers N`).\n"
    return header + buffer.getvalue()


def engine_env() -> dict[str, str]:
    """kind's environment: Podman when it is the only engine (kind's experimental provider)."""
    env = dict(os.environ)
    if shutil.which("docker") is None and shutil.which("podman") is not None:
        env.setdefault("KIND_EXPERIMENTAL_PROVIDER", "podman")
    return env


def _engine() -> str | None:
    return shutil.which("docker") or shutil.which("podman")


def check_tools() -> list[str]:
    """Problems that stop kind from working here, each with a fix (empty when all is well)."""
    problems: list[str] = []
    if shutil.which("kind") is None:
        problems.append(f"kind is not on PATH ({KIND_INSTALL})")
    engine = _engine()
    if engine is None:
        problems.append(f"no container engine: kind needs Docker or Podman ({ENGINE_INSTALL})")
    else:
        try:
            probe = subprocess.run(
                [engine, "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            running = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            running = False
        if not running:
            problems.append(f"{Path(engine).name} is installed but its engine is not running (start it)")
    return problems


def _run(argv: list[str], action: str, *, timeout: float = 300, stdin: str | None = None) -> str:
    """Run a tool; a failure becomes an InfraError carrying the tail of its stderr."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=engine_env(), input=stdin, check=False
        )
    except FileNotFoundError:
        raise InfraError(f"cannot {action}: {argv[0]} is not installed", hint=KIND_INSTALL) from None
    except subprocess.TimeoutExpired:
        raise InfraError(
            f"cannot {action}: `{' '.join(argv[:3])}` did not finish in {timeout:.0f}s"
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise InfraError(f"cannot {action} (exit code {done.returncode}):\n{tail}")
    return done.stdout


def existing_clusters() -> list[str]:
    """Clusters kind knows about (``kind get clusters``)."""
    out = _run(["kind", "get", "clusters"], "list kind clusters", timeout=60)
    return [
        line.strip() for line in out.splitlines() if line.strip() and not line.startswith("No kind clusters")
    ]


def image_present(image: str) -> bool:
    engine = _engine()
    if engine is None:
        return False
    probe = subprocess.run([engine, "image", "inspect", image], capture_output=True, timeout=60, check=False)
    return probe.returncode == 0


def load_image(name: str, image: str, *, progress: Progress) -> None:
    """Copy a locally built image into every node of cluster ``name``."""
    progress(f"loading image {image} into kind cluster {name}")
    _run(["kind", "load", "docker-image", image, "--name", name], f"load {image} into kind cluster {name}")


class KindProvider:
    """The ``kind`` cluster provider (see ``mlbench_tui.clusters.providers.Provider``)."""

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get("MLBENCH_WORKER_IMAGE") or DEFAULT_IMAGE

    def preflight(self, request: ClusterRequest) -> None:
        if request.gpu is not None:
            raise InfraError(
                "kind clusters have no GPUs",
                hint="drop --gpu for kind, or create a gcp/aws cluster for GPU benchmarks",
            )
        problems = check_tools()
        if problems:
            raise InfraError(
                "cannot create a kind cluster; missing:\n" + "\n".join(f"  - {p}" for p in problems)
            )

    def create(self, request: ClusterRequest, *, progress: Progress) -> ClusterRecord:
        from mlbench_tui.clusters.kubeconfig import merge_context

        self.preflight(request)
        name, context = request.name, context_name("kind", request.name)
        with tempfile.TemporaryDirectory(prefix="mlbench-kind-") as tmp:
            config_path, kubeconfig = Path(tmp) / "cluster.yaml", Path(tmp) / "kubeconfig"
            if name in existing_clusters():
                progress(f"kind cluster {name} already exists; reusing it")
            else:
                config_path.write_text(config_yaml(request.nodes), encoding="utf-8")
                progress(f"creating kind cluster {name}: 1 control plane + {request.nodes} worker(s)")
                _run(
                    [
                        "kind",
                        "create",
                        "cluster",
                        "--name",
                        name,
                        "--config",
                        str(config_path),
                        "--kubeconfig",
                        str(kubeconfig),
                        "--wait",
                        "180s",
                    ],
                    f"create kind cluster {name}",
                    timeout=CREATE_TIMEOUT_S,
                )
            text = _run(
                ["kind", "get", "kubeconfig", "--name", name], f"read the kubeconfig of kind cluster {name}"
            )
        path = merge_context(text, context)
        progress(f"kubeconfig context {context} written to {path}")
        if image_present(self.image):
            load_image(name, self.image, progress=progress)
        else:
            build = f"docker build -f workers/Dockerfile -t {self.image} ."
            load = f"kind load docker-image {self.image} --name {name}"
            progress(
                f"worker image {self.image} is not built here, so it is not loaded; run:\n  {build} && {load}"
            )
        record = ClusterRecord(
            provider="kind",
            name=name,
            context=context,
            nodes=request.nodes,
            created_at=datetime.datetime.now(tz=datetime.UTC).isoformat(timespec="seconds"),
            details={"image": self.image},
        )
        save_record(record)
        return record

    def delete(self, name: str, *, progress: Progress) -> None:
        from mlbench_tui.clusters.kubeconfig import remove_context

        progress(f"deleting kind cluster {name}")
        if shutil.which("kind") is not None:
            with tempfile.TemporaryDirectory(prefix="mlbench-kind-") as tmp:
                # kind deletes the cluster's nodes; its own kubeconfig entry goes to a scratch file.
                _run(
                    [
                        "kind",
                        "delete",
                        "cluster",
                        "--name",
                        name,
                        "--kubeconfig",
                        str(Path(tmp) / "kubeconfig"),
                    ],
                    f"delete kind cluster {name}",
                )
        elif find_record("kind", name) is not None:
            raise InfraError(f"cannot delete kind cluster {name}: kind is not on PATH", hint=KIND_INSTALL)
        remove_context(context_name("kind", name))
        remove_record("kind", name)

    def list(self) -> list[ClusterRecord]:
        return load_records("kind")

    def use(self, name: str) -> str:
        from mlbench_tui.clusters.kubeconfig import use_context

        record = find_record("kind", name)
        context = record.context if record is not None else context_name("kind", name)
        use_context(context)
        return context
