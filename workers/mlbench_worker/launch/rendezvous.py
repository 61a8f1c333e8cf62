"""A rank's place in the world, as its launcher's environment gives it.

Its own module so that the detection of every launcher (``launch.detect``) and Slurm's reading
(``launch.slurm``), which ``detect`` calls, both import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rendezvous:
    """This rank's place in the world and how to reach rank 0."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None
    master_port: int | None
    launcher: str  # "torchrun", "indexed-job", "slurm", "mpi" or "single"
    local_world_size: int = 1  # ranks on this machine (each takes one GPU)
