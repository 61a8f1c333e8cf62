"""The Slurm batch script: golden files, hostile values run through the real bash, the token kept
out, and 1,024-rank scripts that render fast and stay small."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.kube_api import make_launch, make_plan

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.slurm import sbatch
from mlbench_tui.executors.slurm.cluster import SlurmCluster
from mlbench_tui.plan import RunPlan

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "sbatch"
CLUSTER = SlurmCluster(name="hpc", partition="batch", account="proj-7", workdir="/shared/mlbench")
RUN_DIR = "/shared/mlbench/run-0001"
PYTHON = "/opt/venv/bin/python"

CASES: dict[str, dict[str, Any]] = {
    "gloo-cpu-2w": {"target": {}},
    "nccl-gpu-8w": {
        "name": "resnet-nccl-8w",
        "backend": "nccl",
        "workers": 8,
        "max_time_s": 3600.0,
        "resources": {"cpu": "8", "threads_per_rank": 8, "memory": "32Gi", "gpus": 1, "gpu_type": "a100"},
        "env": {"NCCL_DEBUG": "INFO"},
        "target": {
            "tasks_per_node": 4,
            "partition": "gpu",
            "qos": "high",
            "constraint": "a100&ib",
            "extra_args": ["--exclusive", "--reservation=bench"],
            "time_limit_grace": 300.0,
            "server_url": "http://login1.hpc.example:8765",
        },
    },
    "mpi-gres-4w": {
        "name": "allreduce-mpi-4w",
        "task": "0a",
        "task_name": "allreduce",
        "backend": "mpi",
        "goal": None,
        "max_time_s": None,
        "workers": 4,
        "resources": {"cpu": None, "threads_per_rank": 1, "memory": "3Gi", "gpus": 2},
        "target": {"nodes": 2},
        "cluster": {"gpu_option": "gres"},
    },
    # spec.network on a cluster with mlbench's network prolog: whole nodes, the links in the comment
    "gloo-cpu-2w-network": {
        "name": "resnet-gloo-2w-100mbit-5ms",
        "network": {"bandwidth_bps": 100_000_000, "latency_s": 0.005},
        "target": {},
        "cluster": {"network_prolog": True},
    },
}


def slurm_plan(target: dict[str, Any] | None = None, **overrides: Any) -> RunPlan:
    return make_plan(target={"kind": "slurm", **(target or {})}, **overrides)


def _render(case: str, **kwargs: Any) -> sbatch.BatchJob:
    fields = json.loads(json.dumps(CASES[case]))
    cluster = SlurmCluster(**{**CLUSTER.__dict__, **fields.pop("cluster", {})})
    plan = slurm_plan(fields.pop("target"), **fields)
    return sbatch.render(
        plan, make_launch(), cluster, run_dir=RUN_DIR, python=PYTHON, host="login1", **kwargs
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_golden_file(case: str) -> None:
    job = _render(case)
    text = f"# {shlex.join(job.sbatch)}\n{job.script}"
    path = GOLDEN / f"{case}.sh"
    if os.environ.get("MLBENCH_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"batch script drifted from {path}; rerun with MLBENCH_UPDATE_GOLDEN=1"


def test_resources_become_slurm_options() -> None:
    script = _render("nccl-gpu-8w").script
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n" in script
    assert "#SBATCH --cpus-per-task=8\n" in script
    assert "#SBATCH --mem-per-cpu=4096M\n" in script  # 32Gi per rank over 8 CPUs
    assert "#SBATCH --gpus-per-task=a100:1\n" in script
    assert "#SBATCH --time=65\n" in script  # 3600 s + 300 s grace, whole minutes
    assert "#SBATCH --partition=gpu\n#SBATCH --account=proj-7\n#SBATCH --qos=high\n" in script  # spec wins
    assert "--mpi=none" in script and "--cpus-per-task=8 --gpus-per-task=1" in script
    gres = _render("mpi-gres-4w").script
    assert "#SBATCH --mem=6144M\n" in gres  # no CPU count: per node, 2 ranks x 3Gi
    assert "#SBATCH --gres=gpu:4\n" in gres and "--gpus-per-task" not in gres
    assert "--time" not in gres and "--mpi=pmix" in gres


def test_ranks_per_node_becomes_the_tasks_per_node() -> None:
    """hardware.ranks_per_node stands for an unset target.tasks_per_node (one spec, any target)."""
    for workers, layout in ((8, (2, 4)), (2, (1, 2))):
        plan = slurm_plan({}, workers=workers, ranks_per_node=min(4, workers))
        script = sbatch.render(plan, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON).script
        nodes, per_node = layout
        assert f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node={per_node}\n" in script
        assert f"srun --ntasks={workers} --ntasks-per-node={per_node}" in script


def test_the_token_stays_out_of_the_script_and_goes_to_sbatch_environment() -> None:
    job = _render("gloo-cpu-2w")
    assert "tok-secret-abc123" not in job.script and "tok-secret-abc123" not in " ".join(job.sbatch)
    assert job.env == {"MLBENCH_RUN_TOKEN": "tok-secret-abc123"}
    assert "--export=ALL" in job.sbatch


def test_a_wildcard_server_address_becomes_this_host() -> None:
    plan = slurm_plan()
    launch = make_launch().__class__(run_id="r", server_url="http://0.0.0.0:8765", write_token="t")
    assert sbatch.worker_url(plan, SlurmCluster(), launch.server_url, "login1") == "http://login1:8765"
    assert sbatch.reachable_url("http://[::]:8765/", "login1") == "http://login1:8765/"
    assert sbatch.reachable_url("http://127.0.0.1:8765", "login1") == "http://127.0.0.1:8765"
    recorded = SlurmCluster(server_url="http://bench-server:9000")
    assert sbatch.worker_url(plan, recorded, launch.server_url, "login1") == "http://bench-server:9000"


def test_a_layout_the_target_cannot_place_is_refused() -> None:
    plan = slurm_plan({"nodes": 3}, workers=4)
    with pytest.raises(ExecutorError, match="do not split evenly over 3 node"):
        sbatch.render(plan, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON)


def test_a_time_limit_slurm_would_read_as_unlimited_is_refused() -> None:
    plan = slurm_plan(max_time_s=1e30)
    with pytest.raises(ExecutorError, match="more than Slurm's"):
        sbatch.render(plan, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON)


def test_an_environment_name_ending_in_a_newline_is_refused() -> None:
    plan = slurm_plan(env={"FOO\n": "x"})
    with pytest.raises(ExecutorError, match="cannot be set for a Slurm run"):
        sbatch.render(plan, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON)


HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "'; touch {marker}; '",
    '"; touch {marker}; "',
    "a\nb\n#SBATCH --uid=0",
    "${{HOME}} $$ \\ %t %j ~",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_reach_the_ranks_verbatim_through_bash(tmp_path: Path, value: str) -> None:
    """The script runs in the real bash with a stand-in srun that records its argv and environment:
    every value arrives as written and nothing of it runs."""
    marker = tmp_path / "pwned"
    value = value.format(marker=marker)
    run_dir = tmp_path / "shared dir's %j $(x)" / "run-0001"
    (run_dir / "logs").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "srun.json"
    srun = bin_dir / "srun"
    srun.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    srun.chmod(0o755)
    plan = slurm_plan(env={"HOSTILE": value})
    job = sbatch.render(
        plan, make_launch(run_id="run-0001"), SlurmCluster(), run_dir=str(run_dir), python=PYTHON
    )
    subprocess.run(["bash", "-n"], input=job.script, text=True, check=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["bash", "-c", job.script], env=env, cwd=tmp_path, check=True, timeout=30)
    seen = json.loads(record.read_text())
    assert seen["env"]["HOSTILE"] == value
    assert seen["env"]["MLBENCH_CONFIG"] == f"{run_dir}/config.json"
    assert seen["argv"][-6:] == [PYTHON, "-u", "-m", "mlbench_worker", "--config", f"{run_dir}/config.json"]
    # srun expands %-patterns in --output: the directory's own '%' is escaped.
    assert f"--output={str(run_dir).replace('%', '%%')}/logs/rank-%t.log" in seen["argv"]
    assert not marker.exists()


def test_a_thousand_ranks_render_to_a_script_that_does_not_grow_per_rank() -> None:
    small = slurm_plan({"tasks_per_node": 8}, workers=8)
    large = slurm_plan({"tasks_per_node": 8}, workers=1024)
    job = sbatch.render(large, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON)
    assert "#SBATCH --nodes=128\n#SBATCH --ntasks-per-node=8\n" in job.script
    base = sbatch.render(small, make_launch(), CLUSTER, run_dir=RUN_DIR, python=PYTHON).script
    assert len(job.script) - len(base) <= 16  # a few more digits, nothing per rank
    assert len(job.script.encode()) < 4096
