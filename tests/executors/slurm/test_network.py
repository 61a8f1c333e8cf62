"""The Slurm network prolog and epilog, run for real: a job's comment read with the test cluster's
``scontrol``, the shaping put on (and taken off) a link of the test's own (a veth pair, down and
without addresses, standing for a compute node's interface), and every other job, or a comment
that is not digits, left alone."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest
from support.netns import needs_emulation
from support.slurm import SlurmCluster

from mlbench_tui.executors.local.network import links
from mlbench_tui.executors.local.network.layout import Step
from mlbench_tui.executors.slurm.network import EPILOG, PROLOG, job_comment, refusal, sbatch_options
from mlbench_tui.plan import NetworkPlan

NEEDS_ROOT = needs_emulation()  # root makes and shapes a link of its own


@pytest.fixture
def node() -> Iterator[str]:
    """The interface of a compute node: one end of a veth pair of the test's own."""
    name = f"mbs{secrets.token_hex(4)}"
    failed = links.run_steps([Step("ip", ("link", "add", name, "type", "veth", "peer", "name", name + "p"))])
    assert not failed, failed
    try:
        yield name
    finally:
        links.run_steps([Step("ip", ("link", "del", "dev", name))], force=True)


def _job(cluster: SlurmCluster, comment: str | None) -> str:
    argv = ["sbatch", "--parsable", "--hold", "--wrap", "sleep 60"]
    if comment is not None:
        argv.insert(1, f"--comment={comment}")
    return cluster.run(*argv).stdout.strip().split(";")[0]


def _script(cluster: SlurmCluster, node: str, script: str, job: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "SLURM_JOB_ID": job, "MLBENCH_NETWORK_DEVICE": node}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def _qdiscs(node: str) -> str:
    return subprocess.run(
        ["tc", "qdisc", "show", "dev", node], capture_output=True, text=True, check=True
    ).stdout


@NEEDS_ROOT
@pytest.mark.slow
def test_the_prolog_shapes_a_job_that_asks_and_the_epilog_undoes_it(
    slurm_cluster: SlurmCluster, node: str
) -> None:
    job = _job(slurm_cluster, job_comment(NetworkPlan(bandwidth_bps=10_000_000)))
    try:
        done = _script(slurm_cluster, node, PROLOG, job)
        assert done.returncode == 0, done.stderr
        shown = _qdiscs(node)
        assert "tbf 1: root" in shown and "rate 10Mbit" in shown and "ingress ffff:" in shown
        assert "rate 10Mbit" in _qdiscs("mlbench-ifb")  # what arrives, queued at the same rate
        done = _script(slurm_cluster, node, EPILOG, job)
        assert done.returncode == 0, done.stderr
        assert "tbf" not in _qdiscs(node) and "ingress" not in _qdiscs(node)
        assert not os.path.exists("/sys/class/net/mlbench-ifb")
    finally:
        slurm_cluster.run("scancel", job)


@NEEDS_ROOT
@pytest.mark.slow
def test_other_jobs_and_bad_comments_are_left_alone(slurm_cluster: SlurmCluster, node: str) -> None:
    plain = _job(slurm_cluster, None)
    forged = _job(slurm_cluster, "mlbench-network:rate_bps=1$(reboot),delay_us=0")
    try:
        assert _script(slurm_cluster, node, PROLOG, plain).returncode == 0
        assert "tbf" not in _qdiscs(node)
        done = _script(slurm_cluster, node, PROLOG, forged)
        assert done.returncode == 1 and "bad rate" in done.stderr
        assert "tbf" not in _qdiscs(node)
    finally:
        slurm_cluster.run("scancel", plain, forged)


def test_without_the_prolog_a_cluster_refuses_the_network() -> None:
    network = NetworkPlan(bandwidth_bps=100_000_000, latency_s=0.005)
    assert sbatch_options(network) == [
        "--exclusive",
        "--comment=mlbench-network:rate_bps=100000000,delay_us=5000",
    ]
    assert "shapes no links" in (refusal(network, "hpc", has_prolog=False) or "")
    assert refusal(network, "hpc", has_prolog=True) is None
    assert refusal(None, "hpc", has_prolog=False) is None


def test_a_cluster_without_the_prolog_refuses_the_run_and_one_with_it_asks_for_whole_nodes() -> None:
    from support.kube_api import make_plan

    from mlbench_tui.clusters.slurm import SlurmProvider
    from mlbench_tui.errors import ExecutorError
    from mlbench_tui.executors.slurm.cluster import SlurmCluster
    from mlbench_tui.executors.slurm.executor import SlurmExecutor

    plan = make_plan(
        target={"kind": "slurm", "cluster": "hpc"},
        network={"bandwidth_bps": 100_000_000},
        name="resnet-gloo-2w-100mbit",
    )
    SlurmProvider().add(SlurmCluster(name="hpc", partition="batch"))
    with pytest.raises(ExecutorError) as refused:
        SlurmExecutor().check_placement(plan)
    assert "Slurm cluster 'hpc' shapes no links" in refused.value.message
    assert "--network-prolog" in (refused.value.hint or "")
    SlurmProvider().add(SlurmCluster(name="hpc", partition="batch", network_prolog=True))
    SlurmExecutor().check_placement(plan)
    SlurmExecutor().check_placement(make_plan(target={"kind": "slurm", "cluster": "hpc"}))
