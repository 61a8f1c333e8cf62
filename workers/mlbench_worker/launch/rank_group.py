"""A forked group of ranks: the launcher the warm-start server forks for one run, which forks the
run's ranks and watches them as torchrun's local agent watches its workers.

The launcher leads a session of its own, and so does each rank (as torchrun's workers: the
scheduler shares CPU between sessions). It appends what it says to the run's launcher log and,
when the request names a master host, holds a free port there for the rendezvous (in rank 0's
network namespace when it has one): its socket stays bound (not listening, with
``SO_REUSEADDR``) until the group ends, so no other process is handed that port while rank 0's
store binds it (``SO_REUSEADDR`` too). Each rank is forked with
torchrun's environment (from the request), dies with its launcher (``PR_SET_PDEATHSIG``), joins
its node's network namespace if it has one, and becomes the rank a cold start would be: the
run's whole environment, its own log, unbuffered, then the rank's main. When a rank fails the
launcher stops the others (SIGTERM, then SIGKILL after the grace) and names the root cause as
torchrun does: the first failure a rank recorded in its error file that was not only a peer's
death, else a rank that failed without recording why. Its ``GroupRecord`` keeps the ranks' pids
and, once it ends, that failure. Stdlib and pydantic.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from types import FrameType

from mlbench_worker import rank_env
from mlbench_worker.launch import netns
from mlbench_worker.reporting import error_file
from mlbench_worker.warm_protocol import (
    GroupRecord,
    RankFailure,
    RankMain,
    RankPid,
    RankSlot,
    StartRequest,
)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
POLL_S = 0.02


@dataclass(frozen=True)
class RankOrder:
    """In a forked rank: what it becomes (returned up to the server's main, which runs it)."""

    main: RankMain
    env: dict[str, str]
    log_path: str


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _Group:
    request: StartRequest
    record: GroupRecord
    live: dict[int, RankSlot] = field(default_factory=dict)  # pid -> slot, not reaped yet
    failed: list[RankFailure] = field(default_factory=list)  # in the order they were reaped
    recorded: dict[int, error_file.RankError] = field(default_factory=dict)  # pid -> its error file
    signalled: set[int] = field(default_factory=set)  # pids the launcher stopped itself
    stopping: bool = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.stopping = True
            raise _Stop(signum)


def lead(request: StartRequest) -> int | RankOrder:
    """In the server's forked child: lead the group and return its exit status (0 when every
    rank ended with 0); in a rank forked here, return what the rank becomes."""
    os.setsid()
    _redirect(request.launcher_log)
    os.chdir(request.cwd)
    held = None
    if request.master_host is not None:
        where = request.ranks[0].netns if request.ranks else None  # rank 0 serves the rendezvous
        try:
            with netns.entered(where):
                held = _hold_port(request.master_host)
        except OSError as exc:
            why = f"cannot hold a rendezvous port on {request.master_host}: {exc}"
            return _finish(_Group(request, GroupRecord(pid=os.getpid(), start_error=why)))
    port = held.getsockname()[1] if held is not None else None
    group = _Group(request, GroupRecord(pid=os.getpid(), master_port=port))
    launcher = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # no stop half way through the forks
    for signum in STOP_SIGNALS:
        signal.signal(signum, group.on_signal)
    for slot in request.ranks:
        try:
            pid = os.fork()
        except OSError as exc:
            group.record.start_error = f"cannot fork rank {slot.rank}: {exc}"
            break
        if pid == 0:
            return _rank_order(request, slot, port, held, launcher)
        group.live[pid] = slot
        group.record.ranks.append(RankPid(rank=slot.rank, pid=pid))
    _save(group)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if group.record.start_error is not None:
            _stop(group)
        _watch(group)
    except _Stop as stop:
        group.record.stopped_by = stop.signum
        print(
            f"mlbench: {signal.Signals(stop.signum).name} received; stopping {len(group.live)} rank(s)",
            flush=True,
        )
        _stop(group)
    if held is not None:
        held.close()
    return _finish(group)


def _rank_order(
    request: StartRequest, slot: RankSlot, port: int | None, held: socket.socket | None, launcher: int
) -> RankOrder:
    """In a forked rank: drop the launcher's state, lead a session of its own (as torchrun's
    workers do: the scheduler shares CPU between sessions, so ranks sharing one would get one
    share between them on a busy machine), die with the launcher, join the node's network."""
    os.setsid()
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if held is not None:
        held.close()
    _die_with_parent(launcher)
    env = {**request.env, **slot.env}
    if slot.netns is not None:  # before the rank opens any socket; the run's hosts file with it
        try:
            netns.join(slot.netns, env.get(rank_env.HOSTS_FILE) or None)
        except OSError as exc:  # the rank cannot run where it belongs: it fails, saying why
            path = slot.env.get(rank_env.TORCHELASTIC_ERROR_FILE)
            error_file.record(exc, traceback.format_exc(), peer_failure=False, path=path)
            print(f"mlbench: rank {slot.rank}: {exc}", flush=True)
            os._exit(1)
    if port is not None:
        env[rank_env.MASTER_PORT] = str(port)
    return RankOrder(main=request.main, env=env, log_path=slot.log_path)


def _watch(group: _Group) -> None:
    """Reap ranks as they end; at the first failure stop the others."""
    while group.live:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if _reaped(group, pid, status) and not group.stopping:
            first = group.failed[0]
            others = f"; stopping the other {len(group.live)} rank(s)" if group.live else ""
            print(f"mlbench: rank {first.rank} (pid {pid}) {_ended(first.exit_code)}{others}", flush=True)
            _stop(group)


def _reaped(group: _Group, pid: int, status: int) -> bool:
    """Account for one ended child; True when it is a rank that failed on its own."""
    slot = group.live.pop(pid, None)
    if slot is None:
        return False
    code = os.waitstatus_to_exitcode(status)
    if code == 0 or pid in group.signalled:
        return False
    path = slot.env.get(rank_env.TORCHELASTIC_ERROR_FILE)
    recorded = error_file.read(path) if path else None
    if recorded is not None:
        group.recorded[pid] = recorded
    cause = recorded.message if recorded is not None else (_signal_name(code) if code < 0 else None)
    group.failed.append(
        RankFailure(rank=slot.rank, pid=pid, exit_code=code, cause=cause, ended_at=time.time())
    )
    return True


def _stop(group: _Group) -> None:
    """SIGTERM every live rank, SIGKILL what is left after the grace, reap them all."""
    group.stopping = True
    for pid in group.live:
        group.signalled.add(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + group.request.grace_s
    killed = False
    while group.live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            _reaped(group, pid, status)
            continue
        if not killed and time.monotonic() >= deadline:
            for left in group.live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(left, signal.SIGKILL)
            killed = True
        time.sleep(POLL_S)


def _root_cause(group: _Group) -> RankFailure | None:
    """torchrun's rule: the earliest failure a rank recorded itself, leaving out ranks that only
    noticed a peer's death; a rank that failed without recording why (killed, ``sys.exit``)
    before those; the first rank reaped when nothing says more."""
    recorded = group.recorded
    own = [f for f in group.failed if f.pid in recorded and not recorded[f.pid].peer_failure]
    if own:
        return min(own, key=lambda f: recorded[f.pid].time)
    silent = [f for f in group.failed if f.pid not in recorded]
    if silent:
        return silent[0]
    return min(group.failed, key=lambda f: recorded[f.pid].time) if group.failed else None


def _finish(group: _Group) -> int:
    record = group.record
    failure = _root_cause(group)
    record.failure, record.ended = failure, True
    _save(group)
    if failure is not None:
        cause = f": {failure.cause}" if failure.cause else ""
        print(f"mlbench: root cause: rank {failure.rank} {_ended(failure.exit_code)}{cause}", flush=True)
    elif record.start_error is not None:
        print(f"mlbench: {record.start_error}", flush=True)
    status = record.exit_status()
    assert status is not None
    return status


def _save(group: _Group) -> None:
    tmp = f"{group.request.record_path}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(group.record.model_dump_json())
        os.replace(tmp, group.request.record_path)


def _ended(code: int) -> str:
    return (
        f"was killed by {_signal_name(code)[len('killed by ') :]}" if code < 0 else f"exited with code {code}"
    )


def _signal_name(code: int) -> str:
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _hold_port(host: str) -> socket.socket:
    """A socket bound (not listening) to a free port on ``host``, reusable by rank 0's store."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind((host, 0))
    return held


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the launcher dies (Linux); if it already has, go now."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGTERM)


def _redirect(log_path: str) -> None:
    """stdin from /dev/null, stdout and stderr appended to ``log_path``."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if null != 0:
        os.close(null)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if log > 2:
        os.close(log)


def become_rank(order: RankOrder) -> int:
    """In a forked rank: turn into the rank a cold start would be, run it, return its status."""
    _redirect(order.log_path)
    # what `python -u` gives a cold rank: text written through to the log as it is printed
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True, errors="backslashreplace"
    )
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    os.environ.clear()
    os.environ.update(order.env)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    return run_main(order.main)


def run_main(main: RankMain) -> int:
    """Run what ``python -u -m MODULE`` (or ``-c CODE``) would, in this process, with its
    preloaded modules; returns the exit status the interpreter would have ended with."""
    import runpy

    from mlbench_worker.timing.startup import CLOCK

    CLOCK.restart()  # this process's start is the fork, not the server's
    try:
        if main.module is not None:
            sys.argv = [main.module, *main.args]  # run_module puts the module's file first
            runpy.run_module(main.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *main.args]
            exec(compile(main.code or "", "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        return _exit_status(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
