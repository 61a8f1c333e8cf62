"""GPU placement: rank i takes GPU LOCAL_RANK of the visible ones, a machine with too few GPUs or
the wrong model is refused at start, NCCL is bound to the rank's GPU, and the fingerprint says
which GPU every rank ran on. CUDA itself is replaced by a stand-in query at its boundary."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import ConfigError, parse_config
from mlbench_worker.context import RunContext, init_comm, select_device
from mlbench_worker.devices.placement import GpuInfo, Placement, gpu_index, model_matches
from mlbench_worker.launch.detect import detect_rendezvous
from mlbench_worker.telemetry.fingerprint import fingerprint, node_name, parse_driver_version, rank_facts

GIB = 2**30


class FakeGpus:
    """A machine's visible GPUs as CUDA would list them; remembers which one was made current."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.current: int | None = None

    def count(self) -> int:
        return len(self.names)

    def info(self, index: int) -> GpuInfo:
        return GpuInfo(index, self.names[index], 80 * GIB, f"GPU-{index:04d}")

    def use(self, index: int) -> None:
        self.current = index


def _config(**extra: Any) -> Any:
    return parse_config(
        {"run_id": "r", "task": "0a", "backend": "nccl", "world_size": 4, "device": "cuda", **extra}
    )


TORCHRUN_RANK_3 = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def test_a_rank_takes_the_gpu_of_its_local_rank_within_the_visible_ones() -> None:
    rdv = detect_rendezvous(TORCHRUN_RANK_3)
    assert (rdv.rank, rdv.local_rank, rdv.local_world_size) == (3, 1, 2)
    gpus = FakeGpus("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")  # CUDA_VISIBLE_DEVICES=4,5
    placement = select_device(_config(gpu_type="H100"), rdv, gpus)
    assert placement.device == torch.device("cuda", 1) and gpus.current == 1
    assert placement.gpu is not None and placement.gpu.index == 1 and placement.visible_gpus == 2
    assert placement.mismatch is None
    mpi = detect_rendezvous(
        {
            "OMPI_COMM_WORLD_RANK": "5",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        }
    )
    assert (mpi.local_rank, mpi.local_world_size) == (1, 4)


def test_a_machine_with_fewer_visible_gpus_than_ranks_is_refused_naming_both_numbers() -> None:
    assert gpu_index(0, 1, 1, None) == 0
    with pytest.raises(
        ConfigError,
        match=r"2 ranks run on this machine.*only 1 GPU\(s\) are visible "
        r"\(CUDA_VISIBLE_DEVICES='3'\)",
    ):
        gpu_index(0, 2, 1, "3")  # local rank 0 fails too: its peer would share its GPU
    with pytest.raises(ConfigError, match="no GPU is visible to this rank"):
        gpu_index(0, 1, 0, "")
    rdv = detect_rendezvous(TORCHRUN_RANK_3)
    with pytest.raises(ConfigError, match="2 ranks run on this machine"):
        select_device(_config(), rdv, FakeGpus("NVIDIA A100-SXM4-40GB"))


@pytest.mark.parametrize(
    ("model", "name", "matches"),
    [
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("H100", "NVIDIA H100 PCIe", True),
        ("T4", "Tesla T4", True),
        ("A100", "NVIDIA A100-SXM4-40GB", True),
        ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
        ("A100-80GB", "NVIDIA A100-SXM4-40GB", False),
        ("A10G", "NVIDIA A10G", True),
        ("L4", "NVIDIA L40S", False),
        ("H100", "NVIDIA H200", False),
        ("A100", "Tesla T4", False),
    ],
)
def test_a_model_matches_a_device_name_word_for_word(model: str, name: str, matches: bool) -> None:
    assert model_matches(model, name) is matches


def test_the_wrong_gpu_model_fails_the_rank_unless_the_spec_opts_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rdv = detect_rendezvous({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    t4 = FakeGpus("Tesla T4")
    with pytest.raises(ConfigError) as info:
        select_device(_config(gpu_type="A100"), rdv, t4)
    message = str(info.value)
    assert "rank 0 got GPU 0 'Tesla T4', but the spec asks for A100" in message
    assert "strict: false" in message
    assert t4.current is None  # refused before it took the GPU
    placement = select_device(_config(gpu_type="A100", gpu_type_strict=False), rdv, t4)
    assert placement.device == torch.device("cuda", 0) and placement.mismatch is not None
    assert "spec asks for A100" in capsys.readouterr().err
    assert select_device(_config(), rdv, t4).mismatch is None  # no model asked: any GPU


def test_nccl_binds_the_process_group_to_the_ranks_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_init(**kwargs: Any) -> None:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "init_process_group", fake_init)
    rdv = detect_rendezvous({**TORCHRUN_RANK_3, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    with pytest.raises(Stop):
        init_comm(_config(), rdv, torch.device("cuda", 1))
    assert seen["backend"] == "nccl" and seen["device_id"] == torch.device("cuda", 1)
    with pytest.raises(Stop):
        init_comm(_config(backend="gloo", device="cpu"), rdv, torch.device("cpu"))
    assert seen["backend"] == "gloo" and seen["device_id"] is None


def test_the_fingerprint_lists_every_ranks_gpu_and_counts_the_gpus_used() -> None:
    config = _config(world_size=1)
    rdv = detect_rendezvous({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    gpu = GpuInfo(0, "NVIDIA H100 80GB HBM3", 80 * GIB, "GPU-aaaa")
    ctx = RunContext(
        config=config,
        rendezvous=rdv,
        comm=SingleComm("nccl"),
        device=torch.device("cpu"),  # the facts come from the placement; no CUDA call needed
        reporter=None,  # type: ignore[arg-type]
        placement=Placement(torch.device("cuda", 0), gpu, 8, None),
    )
    mine = rank_facts(ctx)
    assert mine["gpu_model"] == "NVIDIA H100 80GB HBM3" and mine["gpu_count"] == 8
    assert mine["gpu_memory_gib"] == 80.0 and mine["gpu_type_matches"] is True
    other = {**mine, "rank": 1, "local_rank": 1, "gpu_uuid": "GPU-bbbb", "gpu_model": "NVIDIA A100-SXM4-80GB"}
    twin = {**mine, "rank": 2, "hostname": "elsewhere"}  # same uuid string on another host: a new GPU
    info = fingerprint(ctx, [mine, other, twin])
    assert [r["rank"] for r in info["ranks"]] == [0, 1, 2]
    assert info["gpus_used"] == 3
    assert info["gpu_models"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    cpu = RunContext(config, rdv, SingleComm(), torch.device("cpu"), None)  # type: ignore[arg-type]
    assert info["rank_nodes"] == [node_name()] * 3
    assert rank_facts(cpu) == {
        "rank": 0,
        "local_rank": 0,
        "hostname": socket.gethostname(),
        "node": node_name(),
        "device": "cpu",
        "host_allocator_tuned": False,  # a context built by hand: the runtime tuned nothing
    }


def test_the_driver_version_is_read_from_the_kernel_modules_banner() -> None:
    banner = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar 25 00:11:41 UTC 2025\nGCC version:  gcc 12.3.0\n"
    )
    assert parse_driver_version(banner) == "570.133.20"
    assert (
        parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue") == "550.54.15"
    )
    assert parse_driver_version("no driver here") is None
