"""Which launcher started this rank, and its rendezvous from that launcher's environment.

Four launchers are understood: ``torchrun`` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), a
Kubernetes Indexed Job (JOB_COMPLETION_INDEX plus MASTER_* or PET_*), Slurm's ``srun``
(SLURM_PROCID and the step's node list, see ``launch.slurm``) and Open MPI's ``mpiexec``
(OMPI_COMM_WORLD_*). A process started alone is rank 0 of a world of one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mlbench_worker import rank_env
from mlbench_worker.config import ConfigError
from mlbench_worker.launch.rendezvous import Rendezvous
from mlbench_worker.launch.slurm import slurm_rendezvous


def _int_env(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None
    return None


def detect_rendezvous(env: Mapping[str, str] | None = None) -> Rendezvous:
    """Read the launcher's environment; a process started alone is rank 0 of a world of one."""
    env = os.environ if env is None else env
    addr = env.get(rank_env.MASTER_ADDR) or env.get(rank_env.PET_MASTER_ADDR)
    port = _int_env(env, rank_env.MASTER_PORT, rank_env.PET_MASTER_PORT)
    if rank_env.RANK in env and rank_env.WORLD_SIZE in env:
        rank = _int_env(env, rank_env.RANK) or 0
        world = _int_env(env, rank_env.WORLD_SIZE) or 1
        local = _int_env(env, rank_env.LOCAL_RANK) or 0
        local_world = _int_env(env, rank_env.LOCAL_WORLD_SIZE) or 1
        return Rendezvous(rank, world, local, addr, port, "torchrun", local_world)
    if rank_env.JOB_COMPLETION_INDEX in env:
        rank = _int_env(env, rank_env.JOB_COMPLETION_INDEX) or 0
        world_env = _int_env(env, rank_env.WORLD_SIZE)
        nnodes = _int_env(env, rank_env.PET_NNODES)
        if world_env is None and nnodes is None:
            raise ConfigError("an Indexed Job rank needs WORLD_SIZE or PET_NNODES in its environment")
        nproc = _int_env(env, rank_env.PET_NPROC_PER_NODE) or 1
        world = world_env if world_env is not None else (nnodes or 1) * nproc
        local = _int_env(env, rank_env.LOCAL_RANK) or 0
        local_world = _int_env(env, rank_env.LOCAL_WORLD_SIZE) or 1
        return Rendezvous(rank, world, local, addr, port, "indexed-job", local_world)
    if rank_env.OMPI_RANK not in env:  # mpiexec's ranks stay MPI ranks inside a Slurm step
        slurm = slurm_rendezvous(env)
        if slurm is not None:
            return slurm
    mpi_rank = _int_env(env, rank_env.OMPI_RANK, rank_env.PMI_RANK, rank_env.PMIX_RANK)
    if mpi_rank is not None:
        world = _int_env(env, rank_env.OMPI_SIZE, rank_env.PMI_SIZE) or 1
        local = _int_env(env, rank_env.OMPI_LOCAL_RANK, rank_env.MPI_LOCAL_RANK) or 0
        local_world = _int_env(env, rank_env.OMPI_LOCAL_SIZE, rank_env.MPI_LOCAL_SIZE) or 1
        return Rendezvous(mpi_rank, world, local, addr, port, "mpi", local_world)
    return Rendezvous(0, 1, 0, addr, port, "single")
