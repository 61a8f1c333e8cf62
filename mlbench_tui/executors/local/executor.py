"""The local executor: runs ranks as processes on this machine.

How the ranks start is decided once, in the dry run (``launch``: a ``LaunchMode`` and a typed
``LocalRequest``). The launcher (a cold one, or a forked group's) leads a new session, so Ctrl-C
in the terminal does not reach the ranks; the engine stops them through ``cancel``, which finds
every process of the run (see ``processes``) and leaves none behind. Everything another process
needs (launcher pid, exit status, cancel request) is kept as typed records in the run directory
(``records``), so ``mlbench status``/``cancel`` work from any shell.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from mlbench_worker import rank_env
from mlbench_worker.warm_protocol import SWITCH, GroupRecord, StartRequest

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import (
    DryRun,
    Executor,
    LaunchContext,
    RankStatus,
    RunHandle,
    RunState,
    RunStatus,
)
from mlbench_tui.executors.local import ports, processes, warm_start
from mlbench_tui.executors.local.failures import RankEnd, launch_failure
from mlbench_tui.executors.local.gpus import MachineGpus, machine_gpus
from mlbench_tui.executors.local.launch import (
    LaunchMode,
    LocalRequest,
    forked_ranks,
    launch_mode,
    launcher_argv,
    rank_environment,
    worker_main,
)
from mlbench_tui.executors.local.network import runs as emulated
from mlbench_tui.executors.local.records import (
    GROUP_FILE,
    LAUNCH_FILE,
    LAUNCHER_LOG,
    CancelRecord,
    ExitRecord,
    LaunchRecord,
    RunFiles,
)
from mlbench_tui.executors.rank_logs import RankLogTailer, follow_rank_logs
from mlbench_tui.executors.run_files import read_record, write_config
from mlbench_tui.lifecycle import NetworkCheck
from mlbench_tui.plan import RunPlan, worker_settings

SCHEME = "local"


class Launcher(Protocol):
    """What ``schedule`` started: a cold launcher process, or a forked group's launcher."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


# The launchers this process started and has not reaped yet, by run directory. Only a parent can
# read its child's exit status, so every executor instance in this process reaps through these.
_CHILDREN: dict[Path, Launcher] = {}


def _fork_environment(env: dict[str, str]) -> dict[str, str]:
    """Every forked rank's environment: ``env`` with what torchrun adds unless it is set."""
    return {rank_env.TORCH_NCCL_ASYNC_ERROR_HANDLING: "1", **env}


def default_runs_dir() -> Path:
    """The settings' runs directory (``<MLBENCH_HOME>/state/runs`` in tests): one directory per run."""
    from mlbench_tui.settings import load_settings

    return load_settings().runs_dir


class LocalExecutor(Executor[LocalRequest]):
    """Runs a plan's ranks as local processes: forked warm, or through a cold launcher."""

    name = SCHEME
    reconciles = True
    places_offline = True

    @classmethod
    def network_label(cls, plan: RunPlan) -> str:
        if plan.network is None:
            return "-"
        nodes = plan.emulated_nodes()
        return f"{plan.network.label()}, {nodes} node{'' if nodes == 1 else 's'}"

    @classmethod
    def network_notes(cls, plans: Sequence[RunPlan]) -> list[str]:
        notes = [
            "network: each emulated node is a network namespace on this machine, linked to the others "
            "through a bridge; tc shapes each node's link (ranks of one node talk unshaped)"
        ]
        if any(p.backend == "nccl" for p in plans):
            notes.append(
                "network: nccl runs use NCCL's socket transport between emulated nodes (P2P and shared "
                "memory within a node), so they compare only with other shaped nccl runs"
            )
        return notes

    def __init__(
        self, runs_dir: str | Path | None = None, *, cpu_count: int | None = None, warm: bool | None = None
    ) -> None:
        self.runs_dir = (Path(runs_dir) if runs_dir is not None else default_runs_dir()).absolute()
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.host = socket.gethostname().split(".")[0] or "localhost"
        self.warm = warm_start.enabled(os.environ) if warm is None else warm
        self._gpus: MachineGpus | None = None  # asked once, when a GPU run is placed

    # -- paths -------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_id) or run_id in (".", ".."):
            raise ExecutorError(f"invalid run id {run_id!r}")
        return self.runs_dir / run_id

    def log_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "logs"

    def handle_for(self, run_id: str) -> RunHandle:
        return RunHandle(SCHEME, self.host, run_id)

    def files(self, run_id: str) -> RunFiles:
        return RunFiles(self.run_dir(run_id))

    def remove_files(self, handle: RunHandle) -> None:
        """The run's directory: its config, records and rank logs."""
        shutil.rmtree(self.run_dir(self._resolve(handle).run_id), ignore_errors=True)

    # -- placement ---------------------------------------------------------------------------

    def check_placement(self, plan: RunPlan) -> None:
        """Every rank of a GPU run takes GPUs of its own (rank i: GPU LOCAL_RANK): refuse a run
        that needs more than this machine shows (NCCL fails two ranks on one GPU); and a run with
        a network this machine cannot emulate (privileges, iproute2, the kernel's qdiscs)."""
        emulated.check(plan)
        needed = plan.workers * plan.resources.gpus
        if not needed:
            return
        if self._gpus is None:
            self._gpus = machine_gpus()
        shown = self._gpus.visible
        if needed > shown:
            per_rank = f"{plan.resources.gpus} GPU{'' if plan.resources.gpus == 1 else 's'}"
            fit = shown // plan.resources.gpus
            if fit == 0:
                hint = (
                    "run it where there are GPUs (a GPU machine, or target kubernetes or slurm), widen "
                    "CUDA_VISIBLE_DEVICES, or leave out hardware.gpu (and use backend gloo) to train on CPU"
                )
            else:
                hint = (
                    f"lower workers to {fit} or fewer (or GPUs per rank), or widen CUDA_VISIBLE_DEVICES; "
                    "ranks never share a GPU"
                )
            raise ExecutorError(
                f"run {plan.name} needs {needed} GPU{'' if needed == 1 else 's'} ({plan.workers} rank(s) x "
                f"{per_rank}) but this machine shows {self._gpus.describe()}",
                hint=hint,
            )

    # -- dryrun / schedule -------------------------------------------------------------------

    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun[LocalRequest]:
        """Pure: how the ranks start (the launch mode, decided here once), the exact cold command
        and the environment added for every rank."""
        if plan.backend == "nccl" and plan.resources.gpus <= 0:
            raise ExecutorError("the nccl backend needs GPUs", hint="use backend: gloo on CPU")
        run_dir = self.run_dir(launch.run_id)
        config_path = launch.config_path or str(run_dir / "config.json")
        mode, fallback = launch_mode(plan, warm=self.warm)
        cold = fallback or mode
        reporting = rank_env.Reporting(
            config=config_path,
            run_id=launch.run_id,
            server_url=launch.server_url,
            spool_dir=str(run_dir / "spool"),
            run_token=launch.write_token,
        )
        request = LocalRequest(
            mode=mode,
            fallback=fallback,
            main=worker_main(config_path),
            launcher=launcher_argv(cold, plan, python=sys.executable, cpu_count=self.cpu_count),
            python=sys.executable,
            run_dir=str(run_dir),
            config_path=config_path,
            config=worker_settings(plan, launch.run_id),
            env=rank_environment(plan, reporting, cold, launch.server_socket),
            reserve_port=cold in (LaunchMode.DIRECT, LaunchMode.MPIEXEC)
            or (cold is LaunchMode.TORCHRUN and plan.network is not None),
            network=emulated.describe(plan),
        )
        return DryRun(executor=SCHEME, plan=plan, launch=launch, request=request)

    def schedule(self, dryrun: DryRun[LocalRequest]) -> RunHandle:
        """Start the run's ranks as the request says; return at once."""
        request, run_id = dryrun.request, dryrun.launch.run_id
        run_dir = self.run_dir(run_id)
        files = RunFiles(run_dir)
        if (run_dir / LAUNCH_FILE).exists():
            raise ExecutorError(f"run {run_id} was already started on this machine")
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / "spool").mkdir(exist_ok=True)
        write_config(Path(request.config_path), request.config)
        env = {**os.environ, **request.env}
        network = emulated.setup(dryrun.plan, run_id, self.runs_dir)
        if network is not None:
            files.write(network.made())
            env.update(emulated.shared_environment(dryrun.plan, network))
        proc: Launcher | None = None
        mode, port = request.mode, None
        try:
            if mode is LaunchMode.FORKED:
                proc = self._fork(emulated.place_forked(request, network), env, run_id)
            if proc is None:
                mode = request.cold
                port = ports.reserve(self.runs_dir, run_id) if request.reserve_port else None
                if port is not None:
                    env[rank_env.MASTER_PORT] = str(port)
                if network is not None and mode is LaunchMode.TORCHRUN and port is not None:
                    env[rank_env.PET_MASTER_ADDR] = str(network.layout.host_address)  # the agent's store
                    env[rank_env.PET_MASTER_PORT] = str(port)
                proc = self._spawn(request.command, env, run_dir)
        except BaseException:
            ports.release(self.runs_dir, run_id, port)
            emulated.finish(self.runs_dir, run_id, network)
            raise
        _CHILDREN[run_dir] = proc
        files.write(
            LaunchRecord(
                run_id=run_id,
                pid=proc.pid,
                start_ticks=processes.start_ticks(proc.pid),
                mode=mode,
                argv=list(request.command),
                backend=dryrun.plan.backend,
                workers=dryrun.plan.workers,
                host=self.host,
                started_at=time.time(),
                watcher_pid=os.getpid(),
                master_port=port,
            )
        )
        return self.handle_for(run_id)

    def _spawn(self, command: tuple[str, ...], env: dict[str, str], run_dir: Path) -> subprocess.Popen[bytes]:
        """A cold launcher leading a new session, its output in the launcher log."""
        with open(run_dir / LAUNCHER_LOG, "ab") as launcher_log:
            try:
                return subprocess.Popen(
                    list(command),
                    env=env,
                    cwd=run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=launcher_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ExecutorError(f"cannot start {command[0]}: {exc}") from exc

    def prepare(self, plan: RunPlan) -> None:
        """Start the warm-start server for ``plan``'s forked ranks now, so its imports overlap
        what ``apply`` does before the first run starts (the metrics server, the store)."""
        launch = LaunchContext(run_id="r-prepare", server_url="", write_token="")
        try:
            request = self.dryrun(plan, launch).request
        except ExecutorError:
            return  # the run itself will say why
        if request.mode is LaunchMode.FORKED:
            warm_start.prepare(_fork_environment({**os.environ, **request.env}), self.runs_dir)

    def _fork(self, request: LocalRequest, env: dict[str, str], run_id: str) -> warm_start.WarmProcess | None:
        """Every rank forked by the warm-start server (``warm_start``), under a launcher forked
        there too; None: start the run cold (the launcher log says why)."""
        run_dir = Path(request.run_dir)
        start = StartRequest(
            main=request.main,
            env=_fork_environment(env),
            cwd=str(run_dir),
            ranks=forked_ranks(request, run_id),
            launcher_log=str(run_dir / LAUNCHER_LOG),
            status_path=str(run_dir / warm_start.EXIT_FILE),
            record_path=str(run_dir / GROUP_FILE),
            master_host=request.master_addr,
        )
        group: warm_start.WarmProcess | None = None
        try:
            group = warm_start.start(start, self.runs_dir)
            server = group.server.pid
            note = (
                f"mlbench: {request.workers} rank(s) forked by the warm-start server (pid {server}) "
                f"under launcher pid {group.pid}; {SWITCH}=0 starts them cold"
            )
        except warm_start.Unavailable as exc:
            note = f"mlbench: no warm start ({exc}); starting the ranks cold ({request.cold.value})"
        with open(run_dir / LAUNCHER_LOG, "a", encoding="utf-8") as log:
            log.write(note + "\n")
        return group

    # -- watching ----------------------------------------------------------------------------

    def _resolve(self, handle: RunHandle | str) -> RunHandle:
        resolved = RunHandle.parse(handle) if isinstance(handle, str) else handle
        if resolved.scheme != SCHEME:
            raise ExecutorError(f"not a local run: {resolved}")
        return resolved

    def _reap(self, run_dir: Path, launch: LaunchRecord) -> ExitRecord | None:
        """Record the launcher's exit status once it has ended (only its parent can see it)."""
        files = RunFiles(run_dir)
        proc = _CHILDREN.get(run_dir)
        if proc is None:  # a forked group's end is on file even when its executor has gone
            existing = files.exit()
            if existing is not None or launch.mode is not LaunchMode.FORKED:
                return existing
            exited = warm_start.read_exit(run_dir / warm_start.EXIT_FILE)
            code: int | None = exited.exit_code if exited is not None else None
            if code is None and not processes.is_alive(launch.pid, launch.start_ticks):
                code = warm_start.end_of_group(run_dir / GROUP_FILE)  # the server died first
            if code is None:
                return None
        else:
            code = proc.poll()
            if code is None:
                if isinstance(proc, warm_start.WarmProcess) and proc.lost:
                    del _CHILDREN[run_dir]  # its end is unknown: describe says so
                    ports.release(self.runs_dir, launch.run_id, launch.master_port)
                return None
            del _CHILDREN[run_dir]
        ports.release(self.runs_dir, launch.run_id, launch.master_port)
        existing = files.exit()
        if existing is not None:
            return existing
        if files.cancelled():
            state = RunState.CANCELLED
        elif code == 0:
            state = RunState.SUCCEEDED
        else:
            state = RunState.FAILED
        record = ExitRecord(exit_code=code, state=state, finished_at=time.time())
        files.write(record)
        return record

    def describe(self, handle: RunHandle | str) -> RunStatus | None:
        resolved = self._resolve(handle)
        run_dir = self.run_dir(resolved.run_id)
        launch = RunFiles(run_dir).launch()
        if launch is None:
            return None
        finished = self._reap(run_dir, launch)
        if finished is not None:
            state = finished.state
            message = (
                None
                if state is RunState.SUCCEEDED
                else self._failure_message(launch, state, finished.exit_code)
            )
        elif run_dir in _CHILDREN:
            # Our own child, not reaped yet: only its wait status decides how it ended. /proc may
            # already show it ended (a leader whose other threads are still exiting is a zombie
            # that cannot be reaped yet); the next poll reaps it.
            alive = processes.is_alive(launch.pid, launch.start_ticks)
            state, message = RunState.RUNNING, None if alive else "finishing"
        elif processes.is_alive(launch.pid, launch.start_ticks):
            state, message = RunState.RUNNING, None
        elif self._watched_elsewhere(launch):
            # The launcher has ended; the process watching it will record how in a moment.
            state, message = RunState.RUNNING, "finishing"
        elif RunFiles(run_dir).cancelled():
            state, message = RunState.CANCELLED, "cancelled"
        else:
            state = RunState.UNKNOWN
            message = (
                f"the launcher ended while its watching process ({launch.watcher_pid}) was gone; "
                "exit status unknown"
            )
        ranks = self._rank_statuses(launch, state)
        network = self._settle_network(run_dir, launch.run_id, state)
        return RunStatus(handle=resolved, state=state, ranks=ranks, message=message, network=network)

    def _settle_network(self, run_dir: Path, run_id: str, state: RunState) -> NetworkCheck | None:
        """The run's emulated network as far as it is known; once the run is over, checked and
        removed (by whichever process sees it end first)."""
        files = RunFiles(run_dir)
        if state.is_terminal() or state is RunState.UNKNOWN:
            made = files.network()
            check = emulated.finish(self.runs_dir, run_id, made)
            if check is not None:
                files.write(check)
                return check
        return files.network()

    def _watched_elsewhere(self, launch: LaunchRecord) -> bool:
        if launch.watcher_pid == os.getpid():
            return False
        # A live process with the watcher's pid that is older than the launch is the watcher.
        if not processes.is_alive(launch.watcher_pid):
            return False
        age = processes.age_s(launch.watcher_pid)
        return age is None or age >= time.time() - launch.started_at - 1

    def _rank_statuses(self, launch: LaunchRecord, state: RunState) -> list[RankStatus]:
        live: dict[int, int] = {}
        if not state.is_terminal():
            group = self._group(launch.run_id) if launch.mode is LaunchMode.FORKED else None
            for forked in group.ranks if group is not None else ():  # no marker in /proc: in memory only
                if processes.is_alive(forked.pid):
                    live[forked.rank] = forked.pid
            for pid in processes.marked_pids(launch.run_id):
                env = processes.read_environ(pid)
                if any(name in env for name in (rank_env.RANK, rank_env.OMPI_RANK)):
                    live.setdefault(rank_env.rank_of(env), pid)
        statuses = []
        for rank in range(launch.workers):
            if state.is_terminal():
                rank_state = state
            else:
                rank_state = RunState.RUNNING if rank in live else RunState.PENDING
            statuses.append(RankStatus(rank=rank, state=rank_state, host=self.host, pid=live.get(rank)))
        return statuses

    def _group(self, run_id: str) -> GroupRecord | None:
        """A forked run's group record (its ranks' pids, and once it ended, its root cause)."""
        return read_record(self.run_dir(run_id) / GROUP_FILE, GroupRecord)

    def _failure_message(self, launch: LaunchRecord, state: RunState, code: int | None) -> str:
        if state is RunState.CANCELLED:
            return "cancelled"
        group = self._group(launch.run_id) if launch.mode is LaunchMode.FORKED else None
        if group is not None and group.failure is not None:
            failure = group.failure
            rank, exit_code = failure.rank, failure.exit_code
            ended = RankEnd(rank, signal=-exit_code) if exit_code < 0 else RankEnd(rank, code=exit_code)
            # The rank's own last error; a signal is named by the sentence already.
            cause = failure.cause if failure.cause and not failure.cause.startswith("killed by ") else None
            return ended.sentence(cause)
        if group is not None and group.start_error is not None:
            return f"the ranks were not all started: {group.start_error}"
        tail = self.launcher_log_tail(launch.run_id, lines=60)
        started = any(self.log_dir(launch.run_id).glob("rank-*.log"))
        return launch_failure(tail, code, direct=launch.mode is LaunchMode.DIRECT, ranks_started=started)

    def launcher_log_tail(self, run_id: str, lines: int = 20) -> list[str]:
        try:
            text = (self.run_dir(run_id) / LAUNCHER_LOG).read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def wait(self, handle: RunHandle | str, timeout: float | None = None, poll_s: float = 0.2) -> RunStatus:
        """Block until the run is terminal (or ``timeout`` passes); returns the last status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.describe(handle)
            if status is None:
                raise ExecutorError(f"unknown run {handle}")
            if status.state.is_terminal() or status.state is RunState.UNKNOWN:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status
            time.sleep(poll_s)

    # -- cancel ------------------------------------------------------------------------------

    def cancel(self, handle: RunHandle | str) -> None:
        """Stop every process of the run; a no-op for finished or unknown runs."""
        resolved = self._resolve(handle)
        run_dir = self.run_dir(resolved.run_id)
        files = RunFiles(run_dir)
        launch = files.launch()
        if launch is None:
            return
        finished = files.exit()
        if finished is None and not files.cancelled():
            with contextlib.suppress(OSError):  # a full disk: stop the ranks all the same
                files.write(CancelRecord(requested_at=time.time(), by_pid=os.getpid()))
        processes.terminate_run(resolved.run_id, launch.pid, launch.start_ticks)
        proc = _CHILDREN.get(run_dir)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self._reap(run_dir, launch)
        elif finished is None:
            files.write(ExitRecord(exit_code=None, state=RunState.CANCELLED, finished_at=time.time()))
            ports.release(self.runs_dir, launch.run_id, launch.master_port)
        self._settle_network(run_dir, launch.run_id, RunState.CANCELLED)  # its ranks are gone

    # -- logs --------------------------------------------------------------------------------

    def log_iter(
        self,
        handle: RunHandle | str,
        rank: int | None = None,
        follow: bool = False,
        since: float | None = None,
        regex: str | None = None,
    ) -> Iterator[str]:
        """Lines of one rank's log (or of every rank, prefixed ``[rank N]``), filtered by ``regex``.

        ``since`` (a UNIX time) skips log files not written since then; ``follow`` keeps reading
        until the run is over.
        """
        resolved = self._resolve(handle)
        if self.describe(resolved) is None:
            raise ExecutorError(f"unknown run {resolved}")
        tailer = RankLogTailer(self.log_dir(resolved.run_id), ranks=None if rank is None else [rank])
        yield from follow_rank_logs(
            tailer, lambda: self._finished(resolved), rank=rank, follow=follow, since=since, regex=regex
        )

    def spool_dir(self, handle: RunHandle | str) -> Path:
        return self.run_dir(self._resolve(handle).run_id) / "spool"

    def log_tailer(self, handle: RunHandle | str) -> RankLogTailer:
        """A tailer over this run's rank logs plus the launcher's own output (as rank -1)."""
        run_id = self._resolve(handle).run_id
        return RankLogTailer(self.log_dir(run_id), extra={-1: self.run_dir(run_id) / LAUNCHER_LOG})

    def _finished(self, handle: RunHandle) -> bool:
        status = self.describe(handle)
        return status is None or status.state.is_terminal() or status.state is RunState.UNKNOWN
