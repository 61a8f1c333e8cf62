"""The smoke-kind run's pods, executed here as the kubelet would execute them.

No cluster runs on these machines, so this test takes the manifests of ``specs/smoke-kind.yaml``
and starts each rank's container command as a local process with exactly the environment
Kubernetes would give it (the Secret's token through secretKeyRef, the rank from the completion
index annotation, the ConfigMap mounted as the config file), reporting to a real mlbench server.
Only cluster DNS is replaced: ``<job>-0.<service>`` and the in-cluster server's Service name
resolve to 127.0.0.1 here. It proves the manifests, the worker runtime and the server agree.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes import pod as pod_template

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Any]:
    from mlbench_tui.server.serve import EmbeddedServer

    with EmbeddedServer(tmp_path / "store.db", record=False) as embedded:
        yield embedded


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _container_env(container: dict[str, Any], index: int, secret: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {"JOB_COMPLETION_INDEX": str(index)}
    for item in container["env"]:
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = item["value"]
        elif "fieldRef" in source:
            env[item["name"]] = str(index)
        else:
            ref = source["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"]
            env[item["name"]] = secret["stringData"][ref["key"]]
    return env


def _run_pods(
    job: dict[str, Any], secret: dict[str, Any], config_map: dict[str, Any], server_url: str, tmp_path: Path
) -> list[str]:
    """Starts each pod of the Job as a local process (its command, environment and mounted config
    as rendered; cluster DNS resolved to this machine) and returns each one's output once all
    have exited 0."""
    config = tmp_path / "config.json"
    config.write_text(config_map["data"]["config.json"])
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = [sys.executable, *container["command"][1:]]
    command[command.index(pod_template.CONFIG_FILE)] = str(config)
    port = str(_free_port())
    procs = []
    for index in range(job["spec"]["completions"]):
        env = _container_env(container, index, secret)
        for prefix in ("", "PET_"):  # what the pod has of both (torchrun pods: PET_* alone)
            if f"{prefix}MASTER_ADDR" in env:
                env.update({f"{prefix}MASTER_ADDR": "127.0.0.1", f"{prefix}MASTER_PORT": port})
        env.update(
            MLBENCH_SERVER_URL=server_url,
            MLBENCH_CONFIG=str(config),
            MLBENCH_SPOOL_DIR=str(tmp_path / f"spool-{index}"),
            PATH=os.environ.get("PATH", ""),
            HOME=str(tmp_path),
            PYTHONPATH=os.environ.get("PYTHONPATH", ""),
        )
        procs.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * len(procs), "\n".join(outputs)[-4000:]
    return outputs


@pytest.mark.slow
def test_smoke_kind_pods_run_the_benchmark_and_report_to_the_server(server: Any, tmp_path: Path) -> None:
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import load_paths
    from mlbench_tui.store.api_models import RunCreate

    (loaded,) = load_paths([ROOT / "specs" / "smoke-kind.yaml"])
    (plan,) = expand(loaded.spec)
    client = server.info.client()
    created = client.create_run(RunCreate.from_plan(plan))
    launch = LaunchContext(run_id=created.run.id, server_url=server.url, write_token=created.write_token)
    job, secret, config_map, service = manifests.render(plan, launch)

    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["python", "-m", "mlbench_worker"]
    master = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    in_cluster = (
        f"http://{manifests.IN_CLUSTER_SERVER}.{manifests.namespace_of(plan)}.svc:{manifests.IN_CLUSTER_PORT}"
    )
    env = _container_env(container, 0, secret)
    assert env["MASTER_ADDR"] == master and env["MLBENCH_SERVER_URL"] == in_cluster
    _run_pods(job, secret, config_map, server.url, tmp_path)

    events = client.events(created.run.id).events
    stops = [e.payload for e in events if e.kind == "run_stop"]
    assert stops and all(stop["status"] == "success" for stop in stops), stops
    names = {m.name for m in client.metric_names(created.run.id)}
    assert "allreduce_fp32_latency_p50" in names


@pytest.mark.slow
def test_pods_of_two_ranks_each_run_their_ranks_through_torchrun(server: Any, tmp_path: Path) -> None:
    """hardware.ranks_per_node 2, 4 workers: two pods, each one's torchrun (its command and
    PET_* environment as rendered) starts its node's two ranks, rendezvous with pod 0, and tees
    every line with its rank in front, so the pod's log splits by rank."""
    from mlbench_tui.executors.kubernetes.pod_logs import split_rank
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import validate_data
    from mlbench_tui.store.api_models import RunCreate

    spec = validate_data(
        {
            "apiVersion": "mlbench/v1",
            "kind": "Benchmark",
            "metadata": {"name": "pods"},
            "spec": {
                "task": "0a",
                "workers": 4,
                "hardware": {"cpu": "500m", "ranks_per_node": 2},
                "target": {"kind": "kubernetes", "image": "mlbench-worker:dev"},
                "hyperparameters": {"sizes_max_exp": 2, "num_sizes": 3, "repetitions": 3, "warmup": 1},
            },
        }
    )
    (plan,) = expand(spec)
    client = server.info.client()
    created = client.create_run(RunCreate.from_plan(plan))
    launch = LaunchContext(run_id=created.run.id, server_url=server.url, write_token=created.write_token)
    job, secret, config_map, _ = manifests.render(plan, launch)
    assert job["spec"]["completions"] == 2
    outputs = _run_pods(job, secret, config_map, server.url, tmp_path)

    for index, output in enumerate(outputs):  # each pod's log holds only its own node's ranks
        ranks = {rank for rank, _ in map(split_rank, output.splitlines()) if rank is not None}
        assert ranks <= {2 * index, 2 * index + 1}, output[-2000:]
    assert (0, "[rank 0] run stopped: success (measured 6 (dtype, size) points)") in map(
        split_rank, outputs[0].splitlines()
    )
    events = client.events(created.run.id).events
    stops = sorted(
        (e.rank, e.payload["status"], e.payload["exit_code"]) for e in events if e.kind == "run_stop"
    )
    assert stops == [(rank, "success", 0) for rank in range(4)]
    (environment,) = [e for e in events if e.kind == "environment"]
    placed = [(r["rank"], r["local_rank"]) for r in environment.payload["ranks"]]
    assert placed == [(0, 0), (1, 1), (2, 0), (3, 1)]
