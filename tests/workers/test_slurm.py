"""A rank started by ``srun``: Slurm's hostlists, the master and port every rank agrees on, and
which launcher wins when several left their variables in the environment."""

from __future__ import annotations

import pytest
from mlbench_worker.config import ConfigError
from mlbench_worker.launch.detect import detect_rendezvous
from mlbench_worker.launch.slurm import expand_hostlist, local_world_size, master_port, slurm_rendezvous

# Rank 3 (the second on its node) of a 4-rank step on two nodes, as srun leaves it
# (node names that resolve: localhost).
STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NODELIST": "localhost,ip6-localhost",
    "SLURM_JOB_NODELIST": "localhost,ip6-localhost",
    "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.7",
}


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("n[1-2,5]", ["n1", "n2", "n5"]),
        ("n1", ["n1"]),
        ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),  # zero padding kept
        ("a[1-2],b,c[7]", ["a1", "a2", "b", "c7"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("node-[9-10].ib", ["node-9.ib", "node-10.ib"]),
        ("", []),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-", "n[3-1]", "n]", "n[a-b]", "n[1,,2]"])
def test_bad_hostlists_are_clear_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="not a Slurm hostlist"):
        expand_hostlist(text)


def test_rank_world_local_rank_master_and_port() -> None:
    rdv = slurm_rendezvous(STEP)
    assert rdv is not None
    assert (rdv.rank, rdv.world_size, rdv.local_rank, rdv.launcher) == (3, 4, 1, "slurm")
    assert rdv.master_addr == "localhost"  # the first node of the step
    assert rdv.master_port == master_port(4242) == 10000 + 4242
    assert detect_rendezvous(STEP) == rdv


@pytest.mark.parametrize(
    ("tasks", "node", "expected"),
    [("2(x2)", "1", 2), ("4,1", "1", 1), ("3(x2),2", "2", 2), ("8", "0", 8), ("", "0", 1)],
)
def test_ranks_on_this_node_come_from_the_steps_tasks_per_node(tasks: str, node: str, expected: int) -> None:
    """Each rank takes GPU LOCAL_RANK of its node, so placement needs how many ranks share the node."""
    env = {**STEP, "SLURM_STEP_TASKS_PER_NODE": tasks, "SLURM_NODEID": node}
    assert local_world_size(env) == expected
    rdv = slurm_rendezvous(env)
    assert rdv is not None and rdv.local_world_size == expected


def test_ports_of_neighbouring_jobs_differ_and_stay_below_the_ephemeral_range() -> None:
    ports = {master_port(job) for job in range(1_000_000, 1_000_100)}
    assert len(ports) == 100 and all(10000 <= p < 30000 for p in ports)


def test_node_names_that_do_not_resolve_use_the_launch_node_address() -> None:
    env = {**STEP, "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_JOB_NODELIST": "n[1-2]"}
    rdv = slurm_rendezvous(env)
    assert rdv is not None and rdv.master_addr == "10.0.0.7"
    env.pop("SLURM_LAUNCH_NODE_IPADDR")
    with pytest.raises(ConfigError, match="'n1', does not resolve"):
        slurm_rendezvous(env)


def test_master_variables_win() -> None:
    rdv = slurm_rendezvous({**STEP, "MASTER_ADDR": "head", "MASTER_PORT": "29400"})
    assert rdv is not None and (rdv.master_addr, rdv.master_port) == ("head", 29400)


def test_outside_a_step_is_not_a_slurm_rank() -> None:
    # A batch script or an salloc shell has SLURM_PROCID but no step: ranks there come from
    # another launcher (or a rank alone).
    batch = {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}
    assert slurm_rendezvous(batch) is None
    assert detect_rendezvous(batch).launcher == "single"


def test_launchers_started_inside_an_allocation_keep_their_own_ranks() -> None:
    torchrun = {**STEP, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "5"}
    assert detect_rendezvous(torchrun).launcher == "torchrun"
    mpiexec = {**STEP, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert (detect_rendezvous(mpiexec).launcher, detect_rendezvous(mpiexec).world_size) == ("mpi", 2)


def test_garbled_slurm_variables_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="SLURM_PROCID='x'"):
        slurm_rendezvous({**STEP, "SLURM_PROCID": "x"})
