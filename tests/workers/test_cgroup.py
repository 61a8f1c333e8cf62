"""A rank's own limits, read from cgroup files laid out as the kernel does (v2 and v1)."""

from __future__ import annotations

from pathlib import Path

from mlbench_worker.telemetry.cgroup import Limits, cgroup_limits

GI = 2**30


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_a_kubernetes_pod_under_cgroup_v2(tmp_path: Path) -> None:
    # a container with its own cgroup namespace sees its cgroup as the root
    _write(tmp_path, "memory.max", str(4 * GI))
    _write(tmp_path, "cpu.max", "150000 100000")
    assert cgroup_limits("0::/\n", tmp_path) == Limits(memory_bytes=4 * GI, cpu_cores=1.5)


def test_unlimited_v2_is_none(tmp_path: Path) -> None:
    _write(tmp_path, "memory.max", "max")
    _write(tmp_path, "cpu.max", "max 100000")
    assert cgroup_limits("0::/\n", tmp_path) == Limits()


def test_the_tightest_limit_on_the_way_to_the_root_applies(tmp_path: Path) -> None:
    # e.g. a Slurm step inside a job: the job's cgroup limits memory, the step's does not
    _write(tmp_path, "job_7/memory.max", str(8 * GI))
    _write(tmp_path, "job_7/step_0/memory.max", "max")
    _write(tmp_path, "job_7/step_0/cpu.max", "400000 100000")
    _write(tmp_path, "job_7/cpu.max", "200000 100000")
    assert cgroup_limits("0::/job_7/step_0\n", tmp_path) == Limits(memory_bytes=8 * GI, cpu_cores=2.0)


def test_a_path_this_namespace_does_not_show_reads_the_mount_itself(tmp_path: Path) -> None:
    _write(tmp_path, "memory.max", str(GI))
    assert cgroup_limits("0::/kubepods.slice/pod1/abc\n", tmp_path).memory_bytes == GI


def test_cgroup_v1(tmp_path: Path) -> None:
    proc = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"
    _write(tmp_path, "memory/docker/abc/memory.limit_in_bytes", str(2 * GI))
    _write(tmp_path, "memory/memory.limit_in_bytes", "9223372036854771712")  # v1's "unlimited"
    _write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000")
    _write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000")
    assert cgroup_limits(proc, tmp_path) == Limits(memory_bytes=2 * GI, cpu_cores=0.5)
    _write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1")
    _write(tmp_path, "memory/docker/abc/memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_limits(proc, tmp_path) == Limits()


def test_no_cgroup_files_means_no_limits(tmp_path: Path) -> None:
    assert cgroup_limits("0::/\n", tmp_path / "absent") == Limits()
    assert cgroup_limits("", tmp_path) == Limits()


def test_this_machine_reads_without_error() -> None:
    limits = cgroup_limits()
    assert limits.memory_bytes is None or limits.memory_bytes > 0
    assert limits.cpu_cores is None or limits.cpu_cores > 0
