"""The Slurm executor: one batch job per run, submitted from this (login) node.

``dryrun`` renders the batch script (``sbatch``); ``schedule`` writes it with the
worker config into the run's directory on the shared filesystem and submits it with
``sbatch --parsable``, the run's write token in sbatch's environment only. The handle
``slurm://<job>@<cluster>/<run-id>`` names the job. ``describe`` asks ``squeue`` (which keeps a
finished job for MinJobAge), then accounting (``sacct``, or ``sacct --completion`` on clusters
with a job completion file but no database), and keeps the final state in the run directory so
it stays known when neither has it any more. ``cancel`` is ``scancel`` (idempotent). Each rank
writes ``logs/rank-<r>.log`` there (``srun --output``), read by ``log_iter`` and shipped to the
store by the runner. Every Slurm command runs from an argument list, never through a shell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlbench_worker.config import WorkerConfig
from pydantic import BaseModel

from mlbench_tui.errors import ExecutorError, MlbenchError
from mlbench_tui.executors.api import (
    DryRun,
    Executor,
    LaunchContext,
    RankStatus,
    RunHandle,
    RunState,
    RunStatus,
    heredoc,
    shell_exports,
)
from mlbench_tui.executors.rank_logs import RankLogTailer, follow_rank_logs
from mlbench_tui.executors.run_files import read_record, write_config, write_record
from mlbench_tui.executors.slurm import network, sbatch
from mlbench_tui.executors.slurm import state as slurm_state
from mlbench_tui.executors.slurm.cluster import DEFAULT_NAME, SlurmCluster, resolve_cluster
from mlbench_tui.executors.slurm.state import JobInfo
from mlbench_tui.plan import RunPlan, worker_settings

SCHEME = "slurm"
JOB_FILE = "job.json"  # job id, cluster and layout, written at submission
FINAL_FILE = "final.json"  # the final state once seen: Slurm forgets finished jobs
COMMAND_TIMEOUT_S = 30.0
_JOB_ID = re.compile(r"^(\d+)(?:;(\S+))?$")
_WHERE = re.compile(r"^(?P<job>\d+)@(?P<cluster>[a-z][-a-z0-9]*)$")
_NOT_FOUND = ("Invalid job id", "Invalid job ID", "invalid job id")


class JobRecord(BaseModel):
    """The submitted job and its layout, kept in the run directory."""

    job_id: str
    cluster: str
    workers: int
    nodes: int
    tasks_per_node: int
    submitted_at: float


@dataclass(frozen=True)
class SlurmRequest:
    """The run's batch job and the worker config written beside it."""

    job: sbatch.BatchJob
    config: WorkerConfig

    def lines(self) -> list[str]:
        """sbatch's environment (the token as the placeholder), the script as a heredoc, the
        submission."""
        job = self.job
        return [*shell_exports(job.env), *heredoc(job.script_path, job.script), shlex.join(job.sbatch)]


def parse_handle(handle: RunHandle | str) -> tuple[RunHandle, str, str]:
    """``(handle, job id, cluster name)`` of a Slurm handle."""
    resolved = RunHandle.parse(handle) if isinstance(handle, str) else handle
    match = _WHERE.fullmatch(resolved.where) if resolved.scheme == SCHEME else None
    if match is None:
        raise ExecutorError(
            f"not a Slurm run: {resolved}", hint="Slurm handles look like slurm://JOB_ID@CLUSTER/RUN_ID"
        )
    return resolved, match["job"], match["cluster"]


class SlurmExecutor(Executor[SlurmRequest]):
    """Runs plans as Slurm batch jobs through the cluster's client tools."""

    name = SCHEME
    enforces_max_time = True
    reconciles = True
    plan_outputs = ("sbatch",)

    def __init__(
        self, runs_dir: str | Path | None = None, *, host: str | None = None, query_interval_s: float = 2.0
    ) -> None:
        if runs_dir is None:
            from mlbench_tui.settings import load_settings

            runs_dir = load_settings().runs_dir
        self.runs_dir = Path(runs_dir)
        self.host = host or socket.gethostname()
        self._hosts: dict[str, list[str]] = {}  # hostlist -> node names (scontrol show hostnames)
        self.query_interval_s = query_interval_s
        self._asked: dict[tuple[str, str], tuple[float, JobInfo | None]] = {}  # last answer per job

    # -- clusters and paths ------------------------------------------------------------------

    def cluster(self, name: str | None) -> SlurmCluster:
        """A recorded cluster (``default``: the login node's own Slurm configuration)."""
        return SlurmCluster() if name == DEFAULT_NAME else resolve_cluster(name)

    def run_dir(self, cluster: SlurmCluster, run_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_id) or run_id in (".", ".."):
            raise ExecutorError(f"invalid run id {run_id!r}")
        return Path(cluster.workdir or self.runs_dir) / run_id

    def _slurm(
        self, cluster: SlurmCluster, argv: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one Slurm client command (argument list, no shell) against ``cluster``."""
        try:
            return subprocess.run(
                argv,
                env={**cluster.client_env(), **slurm_state.TIME_ENV, **(env or {})},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError:
            raise ExecutorError(
                f"{argv[0]} not found: the slurm target needs Slurm's client tools on this host",
                hint="run mlbench on a login node of the cluster (with sbatch, squeue, scancel on PATH)",
            ) from None
        except subprocess.TimeoutExpired:
            raise ExecutorError(
                f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:.0f}s",
                hint="is slurmctld reachable from this host? (scontrol ping)",
            ) from None

    # -- dryrun / schedule -------------------------------------------------------------------

    def check_placement(self, plan: RunPlan) -> None:
        """A run with a network needs the site's network prolog on the cluster's nodes."""
        cluster = self.cluster(sbatch.slurm_target(plan).cluster)
        reason = network.refusal(plan.network, cluster.name, cluster.network_prolog)
        if reason is not None:
            raise ExecutorError(
                f"run {plan.name}: {reason}",
                hint="an administrator installs the prolog, then: mlbench cluster add slurm "
                f"{cluster.name} --network-prolog ...; or run it locally (target: local), where links "
                "are emulated",
            )

    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun[SlurmRequest]:
        """Pure apart from reading the cluster record: the script and the sbatch command."""
        cluster = self.cluster(sbatch.slurm_target(plan).cluster)
        run_dir = self.run_dir(cluster, launch.run_id)
        job = sbatch.render(
            plan,
            launch,
            cluster,
            run_dir=str(run_dir),
            python=cluster.python or sys.executable,
            host=self.host,
        )
        request = SlurmRequest(job=job, config=worker_settings(plan, launch.run_id))
        return DryRun(executor=SCHEME, plan=plan, launch=launch, request=request)

    def schedule(self, dryrun: DryRun[SlurmRequest]) -> RunHandle:
        """Write the run's files, submit the job, record its id; returns at once."""
        plan, run_id = dryrun.plan, dryrun.launch.run_id
        target = sbatch.slurm_target(plan)
        cluster = self.cluster(target.cluster)
        run_dir = self.run_dir(cluster, run_id)
        if (run_dir / JOB_FILE).exists():
            raise ExecutorError(f"run {run_id} was already submitted ({run_dir / JOB_FILE})")
        if plan.backend == "mpi":
            self._check_pmix(cluster)
        (run_dir / sbatch.LOG_DIR).mkdir(parents=True, exist_ok=True)
        (run_dir / "spool").mkdir(exist_ok=True)
        job = dryrun.request.job
        write_config(run_dir / sbatch.CONFIG_FILE, dryrun.request.config)
        Path(job.script_path).write_text(job.script)
        done = self._slurm(cluster, list(job.sbatch), env=job.env)
        match = _JOB_ID.fullmatch(done.stdout.strip())
        if done.returncode != 0 or match is None:
            detail = (done.stderr or done.stdout).strip().replace("sbatch: error: ", "")
            raise ExecutorError(
                f"sbatch refused the job: {detail}", hint=f"the batch script: {run_dir / sbatch.SCRIPT_FILE}"
            )
        job_id = match[1]
        nodes, per_node = target.layout(plan.workers, plan.ranks_per_node)
        record = JobRecord(
            job_id=job_id,
            cluster=cluster.name,
            workers=plan.workers,
            nodes=nodes,
            tasks_per_node=per_node,
            submitted_at=time.time(),
        )
        write_record(run_dir / JOB_FILE, record)
        return RunHandle(SCHEME, f"{job_id}@{cluster.name}", run_id)

    def render_plans(self, plans: Sequence[RunPlan], output: str) -> str | None:
        """``-o sbatch``: every run's batch script (plans of other targets are refused)."""
        return plan_scripts(plans, self) if output == "sbatch" else None

    def remove_files(self, handle: RunHandle) -> None:
        """The run's directory on the cluster's shared filesystem, while its cluster is known."""
        resolved, _, cluster_name = parse_handle(handle)
        try:
            run_dir = self.run_dir(self.cluster(cluster_name), resolved.run_id)
        except MlbenchError:
            return
        shutil.rmtree(run_dir, ignore_errors=True)

    def _check_pmix(self, cluster: SlurmCluster) -> None:
        """The mpi backend launches Open MPI ranks with ``srun --mpi=pmix``: refuse before
        submitting when this cluster's Slurm has no PMIx plugin."""
        listed = self._slurm(cluster, ["srun", "--mpi=list"])
        if "pmix" not in listed.stdout + listed.stderr:
            raise ExecutorError(
                "the mpi backend on Slurm needs Slurm's PMIx plugin (srun --mpi=pmix), which this "
                "cluster does not offer (srun --mpi=list)",
                hint="use backend gloo, or ask the cluster's administrators for the mpi/pmix plugin",
            )

    # -- watching ----------------------------------------------------------------------------

    def _job_now(self, cluster: SlurmCluster, job_id: str) -> JobInfo | None:
        """``_job``, asked at most once per ``query_interval_s`` per job: watchers poll often, and
        a cluster's controller should not answer each poll of each run."""
        now = time.monotonic()
        asked = self._asked.get((cluster.name, job_id))
        if asked is not None and now - asked[0] < self.query_interval_s:
            return asked[1]
        info = self._job(cluster, job_id)
        self._asked[(cluster.name, job_id)] = (now, info)
        return info

    def _job(self, cluster: SlurmCluster, job_id: str) -> JobInfo | None:
        """The job from squeue, else accounting; None when Slurm does not know it (any more)."""
        queue = self._slurm(
            cluster,
            [
                "squeue",
                f"--jobs={job_id}",
                "--states=all",
                "--noheader",
                f"--format={slurm_state.SQUEUE_FORMAT}",
            ],
        )
        if queue.returncode == 0:
            info = slurm_state.parse_squeue(queue.stdout, job_id)
            if info is not None:
                if info.run_state.is_terminal() or info.run_state is RunState.UNKNOWN:
                    shown = self._slurm(cluster, ["scontrol", "show", "job", "--oneliner", job_id])
                    return dataclasses.replace(info, exit_code=slurm_state.exit_code_of(shown.stdout))
                return info
        elif not any(text in queue.stderr for text in _NOT_FOUND):
            raise ExecutorError(f"squeue failed: {queue.stderr.strip() or queue.returncode}")
        return self._accounted(cluster, job_id)

    def _accounted(self, cluster: SlurmCluster, job_id: str) -> JobInfo | None:
        """A job that left the queue, from the accounting database or the job completion file."""
        fields = ["--noheader", "--parsable2", f"--format={slurm_state.SACCT_FIELDS}", f"--jobs={job_id}"]
        for argv in (["sacct", "--allocations", *fields], ["sacct", "--completion", *fields]):
            done = self._slurm(cluster, argv)
            if done.returncode == 0:
                info = slurm_state.parse_sacct(done.stdout, job_id)
                if info is not None:
                    return info
        return None

    def _node_names(self, cluster: SlurmCluster, hostlist: str) -> list[str]:
        if hostlist not in self._hosts:
            done = self._slurm(cluster, ["scontrol", "show", "hostnames", hostlist])
            self._hosts[hostlist] = done.stdout.split() if done.returncode == 0 else []
        return self._hosts[hostlist]

    def describe(self, handle: RunHandle | str) -> RunStatus | None:
        resolved, job_id, cluster_name = parse_handle(handle)
        cluster = self.cluster(cluster_name)
        run_dir = self.run_dir(cluster, resolved.run_id)
        final = read_record(run_dir / FINAL_FILE, JobInfo)
        info = final if final is not None else self._job_now(cluster, job_id)
        if info is None:
            return None
        if final is None and info.run_state.is_terminal():
            with contextlib.suppress(OSError):
                write_record(run_dir / FINAL_FILE, info)
        state = info.run_state
        layout = read_record(run_dir / JOB_FILE, JobRecord)
        workers = layout.workers if layout is not None else 0
        per_node = (layout.tasks_per_node if layout is not None else 1) or 1
        nodes = self._node_names(cluster, info.nodes) if info.nodes else []
        message = info.message()
        ranks = [
            RankStatus(
                rank=rank,
                state=state,
                host=nodes[rank // per_node] if rank // per_node < len(nodes) else None,
                message=message if state is RunState.PENDING else None,
            )
            for rank in range(workers)
        ]
        return RunStatus(
            handle=resolved, state=state, ranks=ranks, message=message, milestones=info.milestones()
        )

    # -- cancel ------------------------------------------------------------------------------

    def cancel(self, handle: RunHandle | str) -> None:
        """``scancel`` the job; a finished or unknown job is left as it is."""
        _, job_id, cluster_name = parse_handle(handle)
        cluster = self.cluster(cluster_name)
        done = self._slurm(cluster, ["scancel", job_id])
        self._asked.pop((cluster.name, job_id), None)  # the next describe asks Slurm again
        if done.returncode != 0 and not any(text in done.stderr for text in _NOT_FOUND):
            raise ExecutorError(f"scancel {job_id} failed: {done.stderr.strip() or done.returncode}")

    # -- logs --------------------------------------------------------------------------------

    def log_iter(
        self,
        handle: RunHandle | str,
        rank: int | None = None,
        follow: bool = False,
        since: float | None = None,
        regex: str | None = None,
    ) -> Iterator[str]:
        """Lines of one rank's log file (or every rank's, prefixed ``[rank N]``) from the run
        directory on the shared filesystem; ``follow`` reads on until the job has ended."""
        resolved, _, cluster_name = parse_handle(handle)
        log_dir = self.run_dir(self.cluster(cluster_name), resolved.run_id) / sbatch.LOG_DIR
        tailer = RankLogTailer(log_dir, ranks=None if rank is None else [rank])

        def finished() -> bool:
            status = self.describe(resolved)
            return status is None or status.state.is_terminal() or status.state is RunState.UNKNOWN

        yield from follow_rank_logs(tailer, finished, rank=rank, follow=follow, since=since, regex=regex)

    def spool_dir(self, handle: RunHandle | str) -> Path:
        """The run's spool folder on the cluster's shared file system (seen here as its logs are)."""
        resolved, _, cluster_name = parse_handle(handle)
        return self.run_dir(self.cluster(cluster_name), resolved.run_id) / "spool"

    def log_tailer(self, handle: RunHandle | str) -> RankLogTailer:
        """A tailer over the run's rank logs plus the batch script's own output (as rank -1);
        the runner ships its lines to the store."""
        resolved, _, cluster_name = parse_handle(handle)
        run_dir = self.run_dir(self.cluster(cluster_name), resolved.run_id)
        return RankLogTailer(run_dir / sbatch.LOG_DIR, extra={-1: run_dir / sbatch.BATCH_LOG})


def plan_scripts(plans: Sequence[RunPlan], executor: SlurmExecutor | None = None) -> str:
    """What ``mlbench plan -o sbatch`` prints: every run's batch script, the run id previewed as
    the run name (``apply`` picks the real one) and the token left out, as in the script itself."""
    from mlbench_tui.errors import UsageError
    from mlbench_tui.settings import load_settings

    others = []
    for plan in plans:
        try:
            sbatch.slurm_target(plan)
        except ExecutorError:
            others.append(plan.name)
    if others:
        raise UsageError(
            f"-o sbatch shows Slurm batch scripts, but {', '.join(others)} do(es) not target slurm",
            hint="use -o yaml for Kubernetes manifests, or -o table",
        )
    executor = executor or SlurmExecutor()
    server_url = load_settings().server_url
    chunks = []
    for plan in plans:
        job = executor.dryrun(
            plan, LaunchContext(run_id=plan.name, server_url=server_url, write_token="")
        ).request.job
        chunks.append(f"# ---- {job.script_path} (submitted with: {' '.join(job.sbatch)})\n{job.script}")
    return "\n".join(chunks)
