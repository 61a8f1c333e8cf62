"""Warm rank starts: one process that has imported torch and the tasks forks every local rank.

Every local run would otherwise start fresh interpreters that import torch, CUDA's libraries and
the task before the first step: seconds per rank on a GPU machine (4.6 s of every case of
``gpu_suite`` on an H200), paid again by every run of a sweep. The local executor starts
``python -m mlbench_worker.launch.warm`` once; it imports those modules (never CUDA: a CUDA context does
not survive a fork), says ``Ready`` and then forks one child per ``StartRequest`` line on its
stdin: the run's launcher (``rank_group``), which forks the run's ranks and watches them as
torchrun's agent would. The server answers each request with ``Started`` (the launcher's pid),
reaps its children as they end and writes each one's ``Exited`` status to the file the request
named, which is how the executor learns an exit status it cannot wait for. At end of input it
exits once its last child has been reaped.

Only what a module reads when it is imported can differ from a cold start, so the executor
starts a server for one import-time environment and sends it only runs whose environment adds
nothing read at import. The protocol is ``mlbench_worker.warm_protocol``. Stdlib and pydantic
at import.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import selectors
import sys
import time
from typing import IO

from pydantic import BaseModel

from mlbench_worker.launch import rank_group
from mlbench_worker.timing.startup import LAZY_IMPORTS
from mlbench_worker.warm_protocol import Exited, Ready, Started, StartRequest

PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn",
    "torch.optim",
    "numpy",
    "mlbench_worker.__main__",
    "mlbench_worker.launch.allocator",
    "mlbench_worker.comm",
    "mlbench_worker.context",
    "mlbench_worker.telemetry.fingerprint",
    "mlbench_worker.reporting.reporter",
    "mlbench_worker.telemetry.sampler",
    "mlbench_worker.timing.tracker",
    "mlbench_worker.tasks",
    "runpy",
    *LAZY_IMPORTS,
)
"""Imported once by the server; the task modules of ``mlbench_worker.tasks.TASKS`` follow."""

REAP_POLL_S = 0.1  # without pidfds (before Linux 5.3), how often ended children are looked for


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``names`` and every task module; a module that cannot be imported is left to the
    rank (which then fails on it as a cold start would). Returns what was imported."""
    done = []
    for name in names:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
            done.append(name)
    from mlbench_worker.tasks import TASKS

    for target in TASKS.values():
        module = target.partition(":")[0]
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
            done.append(module)
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_initialized():  # a preloaded module touched CUDA: forks could not use it
            raise RuntimeError("CUDA was initialised while preloading: ranks cannot be forked from here")
    return done


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _reply(out: IO[bytes], message: BaseModel) -> None:
    out.write(message.model_dump_json().encode() + b"\n")
    out.flush()


class Server:
    """Forks ranks on request and records how each ended."""

    def __init__(self, requests: int, replies: IO[bytes]) -> None:
        self.requests = requests
        self.replies = replies
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, str] = {}  # pid -> status path
        self.pidfds: dict[int, int] = {}  # pid -> pidfd (where the kernel has them)

    def serve(self) -> StartRequest | None:
        """Answer requests until end of input and the last child's end; in a forked child,
        return its request (the caller then runs the rank)."""
        self.selector.register(self.requests, selectors.EVENT_READ, None)
        pending = b""
        reading = True
        while reading or self.children:
            timeout = None if not self.children or self.pidfds.keys() >= self.children.keys() else REAP_POLL_S
            for key, _ in self.selector.select(timeout):
                if key.data is not None:
                    continue  # a pidfd: its child ended; reaped below
                chunk = os.read(self.requests, 65536)
                if not chunk:
                    reading = False
                    self.selector.unregister(self.requests)
                    continue
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    order = self._start(line)
                    if order is not None:
                        return order
            self._reap()
        return None

    def _start(self, line: bytes) -> StartRequest | None:
        try:
            request = StartRequest.model_validate_json(line)
        except ValueError as exc:
            _reply(self.replies, Started(error=f"unreadable request: {exc}"))
            return None
        sys.stdout.flush()  # nothing the server buffered may reach the rank's log
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            _reply(self.replies, Started(error=f"fork failed: {exc}"))
            return None
        if pid == 0:
            self._forget()
            return request
        self.children[pid] = request.status_path
        if hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                self.pidfds[pid] = fd
                self.selector.register(fd, selectors.EVENT_READ, pid)
        _reply(self.replies, Started(pid=pid))
        return None

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            path = self.children.pop(pid, None)
            fd = self.pidfds.pop(pid, None)
            if fd is not None:
                self.selector.unregister(fd)
                os.close(fd)
            if path is not None:
                exited = Exited(pid=pid, exit_code=os.waitstatus_to_exitcode(status), ended_at=time.time())
                with contextlib.suppress(OSError):
                    _write_atomic(path, exited.model_dump_json())

    def _forget(self) -> None:
        """In a new child: drop the server's descriptors (the child owns none of them).

        Each is closed through its owner, once: closing ``replies`` by number would leave its file
        object to close that number again at exit, by then some library's descriptor (gloo's
        store loop, say, which then spins on a closed epoll). The request pipe (fd 0) is left for
        ``become_rank`` to replace with /dev/null.
        """
        self.selector.close()
        with contextlib.suppress(OSError):
            self.replies.close()
        for fd in self.pidfds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.children.clear()
        self.pidfds.clear()


def main() -> int:
    started = time.monotonic()
    replies: IO[bytes] = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from preloaded modules go to the server's log, not the protocol
    try:
        done = preload()
    except Exception as exc:  # any failure means: start ranks cold
        _reply(replies, Ready(pid=os.getpid(), error=f"{type(exc).__name__}: {exc}"))
        return 1
    _reply(replies, Ready(pid=os.getpid(), preloaded=done, seconds=round(time.monotonic() - started, 3)))
    order = Server(sys.stdin.fileno(), replies).serve()
    if order is None:
        return 0
    outcome = rank_group.lead(order)  # in the group's launcher; a rank forked there gets its order
    if isinstance(outcome, int):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(outcome)  # the launcher imported nothing it must tear down
    from mlbench_worker.__main__ import end_process

    end_process(rank_group.become_rank(outcome))


if __name__ == "__main__":
    raise SystemExit(main())
