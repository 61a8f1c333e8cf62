"""The rank's environment, declared once: every variable a launcher sets for a rank and the worker
reads, by name, and the typed groups the executors write.

Three kinds of names live here: mlbench's own (``MLBENCH_*``: where the config is, where to
report and with which token, where to spool), the rendezvous a launcher gives each rank (torchrun
and ``torch.distributed``'s ``env://``, a Kubernetes Indexed Job with torchrun's ``PET_*``, Open
MPI and PMI, Slurm's ``srun``, TensorFlow's ``TF_CONFIG``) and the thread caps every local rank
gets. The executors write them through ``Reporting``, ``TorchRendezvous`` and ``thread_caps``;
the worker reads them by these names. A spec's ``env`` may set none of ``RESERVED``. Stdlib only:
the engine imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# -- mlbench's own ---------------------------------------------------------------------------

CONFIG = "MLBENCH_CONFIG"
"""The worker config JSON the rank reads (``python -m mlbench_worker --config`` wins)."""
RUN_ID = "MLBENCH_RUN_ID"
"""The run the rank reports to; also the marker that finds a local run's processes."""
SERVER_URL = "MLBENCH_SERVER_URL"
RUN_TOKEN = "MLBENCH_RUN_TOKEN"
"""The run's write token: never printed, never in a manifest or a batch script."""
SPOOL_DIR = "MLBENCH_SPOOL_DIR"
"""Where the rank spools what the server could not take."""
TOKEN = "MLBENCH_TOKEN"
READ_TOKEN = "MLBENCH_READ_TOKEN"
"""The server's admin and read credentials: a rank never gets them (a spec may not set them)."""
INJECT_FAULT = "MLBENCH_INJECT_FAULT"
"""A fault to inject (tests and fault drills): ``rank=R,step=S,mode=...``."""
COLLECTIVE_TIMEOUT_S = "MLBENCH_COLLECTIVE_TIMEOUT_S"
DATA_DIR = "MLBENCH_DATA_DIR"
TF_WORKERS = "MLBENCH_TF_WORKERS"
"""A Kubernetes TensorFlow rank's peers (``host:port,...``), from which it builds ``TF_CONFIG``."""
RANK_ENV_APPLIED = "MLBENCH_RANK_ENV_APPLIED"
"""Set in a rank that started again with its run's code-loading variables (``env_settings``)."""

# -- the emulated network (spec.network on local runs) ---------------------------------------

SERVER_SOCKET = "MLBENCH_SERVER_SOCKET"
"""The metrics server's Unix socket: a rank inside an emulated node reports through it, off the
links it measures (requests still name ``SERVER_URL``'s host)."""
NETNS = "MLBENCH_NETNS"
"""The network namespace file of the rank's emulated node, or a template with ``{node}`` (the
node of the rank: its rank over ``RANKS_PER_NODE``) when one environment serves every rank."""
RANKS_PER_NODE = "MLBENCH_RANKS_PER_NODE"
HOSTS_FILE = "MLBENCH_HOSTS_FILE"
"""The run's hosts file, the rank's /etc/hosts inside its node (its peers' names)."""
LINK_INTERFACE = "MLBENCH_LINK_INTERFACE"
"""The interface whose counters are the rank's link (sampled as ``sys/link_*``)."""

# -- rendezvous: torchrun and torch.distributed's env:// -------------------------------------

RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
GROUP_RANK = "GROUP_RANK"
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
ROLE_RANK = "ROLE_RANK"
ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE"
ROLE_NAME = "ROLE_NAME"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
TORCHELASTIC_MAX_RESTARTS = "TORCHELASTIC_MAX_RESTARTS"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
TORCHELASTIC_USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
TORCHELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
"""Where a failing rank records its exception (torch's error-file format), read by its launcher."""
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
TORCH_NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
"""torchrun gives each rank ``1`` unless its own environment says otherwise."""

# -- rendezvous: a Kubernetes Indexed Job (torchrun's PET_* arguments) -----------------------

JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
PET_NODE_RANK = "PET_NODE_RANK"
PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"

# -- rendezvous: Open MPI and PMI ------------------------------------------------------------

OMPI_RANK = "OMPI_COMM_WORLD_RANK"
OMPI_SIZE = "OMPI_COMM_WORLD_SIZE"
OMPI_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
OMPI_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE"
PMI_RANK = "PMI_RANK"
PMI_SIZE = "PMI_SIZE"
PMIX_RANK = "PMIX_RANK"
MPI_LOCAL_RANK = "MPI_LOCALRANKID"
MPI_LOCAL_SIZE = "MPI_LOCALNRANKS"

# -- rendezvous: Slurm's srun ----------------------------------------------------------------

SLURM_PROCID = "SLURM_PROCID"
SLURM_STEP_ID = "SLURM_STEP_ID"
SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_NODEID = "SLURM_NODEID"
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_STEP_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"
SLURM_TASKS_PER_NODE = "SLURM_TASKS_PER_NODE"
SLURM_LAUNCH_NODE_IPADDR = "SLURM_LAUNCH_NODE_IPADDR"
SLURMD_NODENAME = "SLURMD_NODENAME"

# -- rendezvous: TensorFlow ------------------------------------------------------------------

TF_CONFIG = "TF_CONFIG"

# -- the process -----------------------------------------------------------------------------

PYTHONUNBUFFERED = "PYTHONUNBUFFERED"
OMP_NUM_THREADS = "OMP_NUM_THREADS"
MKL_NUM_THREADS = "MKL_NUM_THREADS"
THREAD_VARIABLES = (OMP_NUM_THREADS, MKL_NUM_THREADS, "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""The thread caps of the math libraries, read when they load: one per local rank's share of cores."""

RANK_VARIABLES = (RANK, OMPI_RANK, PMIX_RANK, PMI_RANK, JOB_COMPLETION_INDEX)
"""Where a launcher puts the global rank, in the order a reader trusts them."""

RESERVED = frozenset(
    {
        RANK,
        WORLD_SIZE,
        LOCAL_RANK,
        LOCAL_WORLD_SIZE,
        MASTER_ADDR,
        MASTER_PORT,
        JOB_COMPLETION_INDEX,
        CONFIG,
        RUN_ID,
        RUN_TOKEN,
        SERVER_URL,
        SPOOL_DIR,
        TOKEN,
        READ_TOKEN,
        SERVER_SOCKET,
        NETNS,
        RANKS_PER_NODE,
        HOSTS_FILE,
        LINK_INTERFACE,
    }
)
"""What the engine sets for every rank (or keeps from it): a spec's ``env`` may not set these."""


def thread_caps(threads: int) -> dict[str, str]:
    """``THREAD_VARIABLES``, each capped at ``threads``."""
    return {name: str(threads) for name in THREAD_VARIABLES}


def rank_of(env: Mapping[str, str]) -> int:
    """The global rank a launcher set (torchrun, Open MPI, PMI, an Indexed Job); 0 if none."""
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class Reporting:
    """Where a rank reads its config and reports, and how it authenticates."""

    config: str
    run_id: str
    server_url: str
    spool_dir: str
    run_token: str | None = None  # None: handed over apart (a Secret, sbatch's environment)

    def to_env(self) -> dict[str, str]:
        env = {
            CONFIG: self.config,
            RUN_ID: self.run_id,
            SERVER_URL: self.server_url,
            SPOOL_DIR: self.spool_dir,
        }
        if self.run_token is not None:
            env[RUN_TOKEN] = self.run_token
        return env


@dataclass(frozen=True)
class TorchRendezvous:
    """One rank's place in a single-node world, as torchrun's local agent gives it."""

    rank: int
    world_size: int
    master_addr: str
    run_id: str
    master_port: int | None = None  # None: set apart (a forked group's launcher holds one)
    local_rank: int | None = None  # default: the rank (one node)
    local_world_size: int | None = None  # default: the world
    error_file: str | None = None

    def to_env(self) -> dict[str, str]:
        local_rank = self.rank if self.local_rank is None else self.local_rank
        local_world = self.world_size if self.local_world_size is None else self.local_world_size
        env = {
            RANK: str(self.rank),
            LOCAL_RANK: str(local_rank),
            WORLD_SIZE: str(self.world_size),
            LOCAL_WORLD_SIZE: str(local_world),
            GROUP_RANK: "0",
            GROUP_WORLD_SIZE: "1",
            ROLE_RANK: str(self.rank),
            ROLE_WORLD_SIZE: str(self.world_size),
            ROLE_NAME: "default",
            MASTER_ADDR: self.master_addr,
            TORCHELASTIC_RESTART_COUNT: "0",
            TORCHELASTIC_MAX_RESTARTS: "0",
            TORCHELASTIC_RUN_ID: self.run_id,
            TORCHELASTIC_USE_AGENT_STORE: "False",  # rank 0 serves the rendezvous store
        }
        if self.master_port is not None:
            env[MASTER_PORT] = str(self.master_port)
        if self.error_file is not None:
            env[TORCHELASTIC_ERROR_FILE] = self.error_file
        return env


RUN_VARIABLES = frozenset(
    {
        PYTHONUNBUFFERED,
        CONFIG,
        RUN_ID,
        SERVER_URL,
        RUN_TOKEN,
        SPOOL_DIR,
        *TorchRendezvous(0, 1, "", "", master_port=0, error_file="").to_env(),
    }
)
"""What an executor sets per run and per rank: read when the rank runs, never when a module is
imported (a warm start forks ranks of many runs from one process that imported the modules)."""
