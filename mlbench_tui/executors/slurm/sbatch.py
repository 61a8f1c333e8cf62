"""The Slurm batch script of one run, rendered by a pure function (golden-tested).

``render(plan, launch, cluster, ...)`` returns a ``BatchJob``: the script, the ``sbatch`` command
that submits it and the environment added to sbatch's own process. The job asks for
``nodes x tasks_per_node`` tasks, one per rank (``hardware.ranks_per_node`` stands for an unset
``tasks_per_node``), and its one step runs ``srun`` on all of them:
``srun`` starts ``python -m mlbench_worker`` per task with its output in ``logs/rank-<task>.log``
under the run directory on the shared filesystem, so the login node reads every rank's log.
The ranks find each other from Slurm's environment (``mlbench_worker.launch.slurm``).

Nothing from the spec reaches shell text unquoted: job options are checked names written as
``#SBATCH`` lines (the spec refuses spaces, quotes and shell characters in them), and every value
in the script body goes through ``shlex.quote``. Paths go to sbatch as arguments, never through a
shell. The run's write token is not in the script: sbatch runs with ``--export=ALL`` and the
token in its environment (``BatchJob.env``), which Slurm hands to the job's tasks.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from mlbench_worker import rank_env

from mlbench_tui import __version__
from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.slurm import network
from mlbench_tui.executors.slurm.cluster import SlurmCluster
from mlbench_tui.plan import RunPlan
from mlbench_tui.spec.limits import SLURM_MAX_TIME_MINUTES
from mlbench_tui.spec.shortforms import memory_bytes
from mlbench_tui.spec.targets import SlurmTarget

SCRIPT_FILE = "job.sbatch"
CONFIG_FILE = "config.json"
BATCH_LOG = "batch.log"  # the batch script's own output (srun's messages)
LOG_DIR = "logs"
TOKEN_VARIABLE = rank_env.RUN_TOKEN
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class BatchJob:
    """A rendered job: the script, where it goes, how it is submitted, and sbatch's extra env."""

    script: str
    run_dir: str
    sbatch: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def script_path(self) -> str:
        return f"{self.run_dir}/{SCRIPT_FILE}"

    @property
    def config_path(self) -> str:
        return f"{self.run_dir}/{CONFIG_FILE}"


def slurm_target(plan: RunPlan) -> SlurmTarget:
    """The plan's Slurm target; a plan for another target is refused."""
    if not isinstance(plan.target, SlurmTarget):
        raise ExecutorError(f"run {plan.name} does not target slurm (target kind {plan.target.kind!r})")
    return plan.target


def time_limit_minutes(max_time_s: float | None, grace_s: float) -> int | None:
    """Slurm's ``--time`` in whole minutes (its unit): max_time plus the grace, rounded up.
    A limit Slurm cannot hold (it would read it as UNLIMITED) is refused."""
    if max_time_s is None:
        return None
    total = max_time_s + grace_s
    if not math.isfinite(total) or total / 60 > SLURM_MAX_TIME_MINUTES:
        raise ExecutorError(
            f"time limit of {total:g} s is more than Slurm's {SLURM_MAX_TIME_MINUTES} minutes",
            hint="lower spec.max_time or spec.target.time_limit_grace",
        )
    return max(1, math.ceil(total / 60))


def reachable_url(url: str, host: str) -> str:
    """``url`` with a wildcard bind address (``0.0.0.0``, ``::``) replaced by ``host``: a server
    listening on every interface is reached through this host's name."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in _WILDCARD_HOSTS:
        return url
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{parts.port}" if parts.port else shown
    return urlunsplit(parts._replace(netloc=netloc))


def worker_url(plan: RunPlan, cluster: SlurmCluster, launch_url: str, host: str) -> str:
    """The metrics server URL the compute nodes use: the target's, the cluster's, else the
    engine's (a wildcard address becomes this host's name)."""
    return slurm_target(plan).server_url or cluster.server_url or reachable_url(launch_url, host)


def _job_options(plan: RunPlan, target: SlurmTarget, cluster: SlurmCluster) -> list[str]:
    nodes, per_node = target.layout(plan.workers, plan.ranks_per_node)
    res = plan.resources
    options = [f"--job-name={plan.name}", f"--nodes={nodes}", f"--ntasks-per-node={per_node}"]
    if res.cpu is not None:
        options.append(f"--cpus-per-task={res.threads_per_rank}")
    if res.memory is not None:
        mib = math.ceil(memory_bytes(res.memory) / 2**20)
        if res.cpu is not None:  # per rank = mem-per-cpu x cpus-per-task
            options.append(f"--mem-per-cpu={math.ceil(mib / res.threads_per_rank)}M")
        else:
            options.append(f"--mem={mib * per_node}M")
    if res.gpus:
        typed = f"{res.gpu_type}:" if res.gpu_type else ""
        if cluster.gpu_option == "gres":
            options.append(f"--gres=gpu:{typed}{res.gpus * per_node}")
        else:
            options.append(f"--gpus-per-task={typed}{res.gpus}")
    minutes = time_limit_minutes(plan.max_time_s, target.time_limit_grace)
    if minutes is not None:
        options.append(f"--time={minutes}")
    for name in ("partition", "account", "qos"):
        value = getattr(target, name) or getattr(cluster, name)
        if value:
            options.append(f"--{name}={value}")
    if target.constraint:
        options.append(f"--constraint={target.constraint}")
    options.append("--no-requeue")  # a benchmark run is never silently restarted
    options.extend(network.sbatch_options(plan.network))  # whole nodes, the links in the job comment
    options.extend(target.extra_args)
    return options


def _step_command(
    plan: RunPlan, target: SlurmTarget, cluster: SlurmCluster, python: str, run_dir: str
) -> list[str]:
    per_node = target.layout(plan.workers, plan.ranks_per_node)[1]
    res = plan.resources
    logs = f"{run_dir}/{LOG_DIR}".replace("%", "%%")  # srun expands %-patterns in --output
    srun = ["srun", f"--ntasks={plan.workers}", f"--ntasks-per-node={per_node}"]
    if res.cpu is not None:  # srun does not inherit --cpus-per-task from the allocation
        srun.append(f"--cpus-per-task={res.threads_per_rank}")
    if res.gpus and cluster.gpu_option == "gpus-per-task":
        srun.append(f"--gpus-per-task={res.gpus}")
    srun += [
        "--distribution=block",  # task t runs on node t // tasks_per_node: rank 0 on the first node
        "--kill-on-bad-exit=1",  # one rank failing stops the others at once
        f"--mpi={'pmix' if plan.backend == 'mpi' else 'none'}",
        f"--output={logs}/rank-%t.log",
        "--open-mode=append",
        "--",
        python,
        "-u",
        "-m",
        "mlbench_worker",
        "--config",
        f"{run_dir}/{CONFIG_FILE}",
    ]
    return srun


def _environment(
    plan: RunPlan, launch: LaunchContext, run_dir: str, server_url: str
) -> list[tuple[str, str]]:
    env = rank_env.thread_caps(plan.resources.threads_per_rank)
    env.update(plan.env)  # the spec's env may set its own thread counts
    env[rank_env.PYTHONUNBUFFERED] = "1"
    reporting = rank_env.Reporting(
        config=f"{run_dir}/{CONFIG_FILE}",
        run_id=launch.run_id,
        server_url=server_url,
        spool_dir=f"{run_dir}/spool",
    )  # the token is in sbatch's environment, never in the script
    env.update(reporting.to_env())
    for name in env:
        if not _ENV_NAME.fullmatch(name) or name == TOKEN_VARIABLE:
            raise ExecutorError(f"environment variable name {name!r} cannot be set for a Slurm run")
    return sorted(env.items())


def render(
    plan: RunPlan,
    launch: LaunchContext,
    cluster: SlurmCluster,
    *,
    run_dir: str,
    python: str,
    host: str = "localhost",
) -> BatchJob:
    """The batch job of one run (pure: same inputs, same script).

    ``run_dir`` is the run's directory on the shared filesystem, ``python`` the interpreter on the
    compute nodes, ``host`` this host's name (for a server listening on every interface).
    """
    target = slurm_target(plan)
    try:
        nodes, per_node = target.layout(plan.workers, plan.ranks_per_node)
    except ValueError as exc:
        raise ExecutorError(str(exc), hint="fix spec.target.nodes / tasks_per_node") from None
    server_url = worker_url(plan, cluster, launch.server_url, host)
    lines = [
        "#!/bin/bash",
        f"# mlbench run {launch.run_id} ({plan.name}): task {plan.task}, backend {plan.backend}, "
        f"{plan.workers} rank(s) = {nodes} node(s) x {per_node} task(s), one Slurm task per rank.",
        f"# Rendered by mlbench-tui {__version__}. The run's write token ({TOKEN_VARIABLE}) comes from",
        "# sbatch's environment (--export=ALL); it is never written here.",
        *(f"#SBATCH {option}" for option in _job_options(plan, target, cluster)),
        "set -eu",
        *(
            f"export {name}={shlex.quote(value)}"
            for name, value in _environment(plan, launch, run_dir, server_url)
        ),
        f"mkdir -p {shlex.quote(f'{run_dir}/{LOG_DIR}')} {shlex.quote(f'{run_dir}/spool')}",
        "exec " + shlex.join(_step_command(plan, target, cluster, python, run_dir)),
    ]
    sbatch = (
        "sbatch",
        "--parsable",
        "--export=ALL",
        f"--chdir={run_dir}",
        f"--output={run_dir.replace('%', '%%')}/{BATCH_LOG}",
        f"{run_dir}/{SCRIPT_FILE}",
    )
    return BatchJob(
        script="\n".join(lines) + "\n",
        run_dir=run_dir,
        sbatch=sbatch,
        env={TOKEN_VARIABLE: launch.write_token},
    )
