"""Counting the GPUs a local run sees, against a fake ``nvidia-smi`` and a fake driver directory,
and ``mlbench plan``/``apply`` refusing a run that needs more before anything starts."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from mlbench_tui.executors.local.gpus import machine_gpus

UUIDS = ["GPU-1d6a0d3e-0000-aaaa", "GPU-9f31c2b7-1111-bbbb", "GPU-44e0aa51-2222-cccc", "GPU-c0ffee00-3333"]


def fake_smi(directory: Path, count: int, *, fails: bool = False) -> Path:
    """An ``nvidia-smi`` that lists ``count`` H100s as ``-L`` does (or fails as it does without a
    driver)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia-smi"
    if fails:
        body = (
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
        )
    else:
        lines = [f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[i]})" for i in range(count)]
        body = "".join(f"echo '{line}'\n" for line in lines)
    path.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 2\n{body}')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_proc(directory: Path, count: int) -> Path:
    """``/proc/driver/nvidia/gpus`` as the driver lays it out: a directory per PCI bus id."""
    for i in range(count):
        gpu = directory / f"0000:{0x18 + i:02x}:00.0"
        gpu.mkdir(parents=True)
        (gpu / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t {UUIDS[i]}\nBus Type: \t PCIe\n"
        )
    return directory


NO_SMI = {"PATH": "/nonexistent"}


@pytest.mark.parametrize(
    ("visible", "count"),
    [
        (None, 4),
        ("0", 1),
        ("1,3", 2),
        ("", 0),
        ("-1", 0),
        ("0,7,1", 1),  # CUDA stops at the first entry that names no device
        ("2,2", 1),
        ("GPU-9f31c2b7,GPU-c0ffee", 2),  # UUID prefixes
        ("GPU-does-not-exist", 0),
    ],
)
def test_cuda_visible_devices_narrows_what_the_driver_lists(
    tmp_path: Path, visible: str | None, count: int
) -> None:
    env = {"PATH": str(fake_smi(tmp_path / "bin", 4).parent)}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    gpus = machine_gpus(env, proc_dir=tmp_path / "no-proc")
    assert gpus.uuids == tuple(UUIDS) and gpus.visible == count


def test_the_driver_directory_serves_when_nvidia_smi_is_missing_or_fails(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "gpus", 2)
    assert machine_gpus(NO_SMI, proc_dir=proc).visible == 2
    failing = fake_smi(tmp_path / "bin", 0, fails=True)
    gpus = machine_gpus({"CUDA_VISIBLE_DEVICES": "1"}, smi=str(failing), proc_dir=proc)
    assert gpus.uuids == tuple(UUIDS[:2]) and gpus.visible == 1
    assert gpus.describe() == f"1 GPU (CUDA_VISIBLE_DEVICES='1' of 2 found in {proc})"


def test_no_driver_at_all_shows_no_gpu_and_says_why(tmp_path: Path) -> None:
    gpus = machine_gpus(NO_SMI, proc_dir=tmp_path / "none")
    assert gpus.visible == 0
    assert gpus.describe() == f"no GPU (no NVIDIA driver: no nvidia-smi on PATH, no {tmp_path / 'none'})"


NCCL_SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: dup
spec:
  task: 0a
  workers: [1, 2]
  backend: nccl
  hardware:
    gpu: 1xH100
  target: local
"""


@pytest.fixture
def nccl_spec(tmp_path: Path) -> Path:
    path = tmp_path / "dup.yaml"
    path.write_text(NCCL_SPEC)
    return path


def _cli(*args: str) -> Callable[[pytest.CaptureFixture[str]], tuple[int, str, str]]:
    def run(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        from mlbench_tui.cli import main

        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_plan_and_apply_refuse_two_ranks_on_one_gpu_before_anything_starts(
    tmp_path: Path, nccl_spec: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin', 2).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    expected = (
        "run dup-nccl-2w needs 2 GPUs (2 rank(s) x 1 GPU) but this machine shows "
        "1 GPU (CUDA_VISIBLE_DEVICES='1' of 2 found by nvidia-smi -L)"
    )
    for command in (
        ("plan", str(nccl_spec)),
        ("apply", str(nccl_spec)),
        ("apply", "--dry-run", str(nccl_spec)),
    ):
        code, out, err = _cli(*command)(capsys)
        assert code == 1 and out == "", (command, out, err)
        assert f"error: {expected}" in err and "Traceback" not in err
    assert not (Path(os.environ["MLBENCH_HOME"]) / "mlbench.db").exists()  # nothing started

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # both GPUs: the sweep fits
    code, out, err = _cli("plan", str(nccl_spec))(capsys)
    assert code == 0 and "dup-nccl-2w" in out, err
