"""Local launcher for TensorFlow runs: K plain worker processes with one ``TF_CONFIG`` each.

``python -m mlbench_tui.executors.local.tf_launch --nproc K -- COMMAND...`` plays torchrun's role for
``tf.distribute.MultiWorkerMirroredStrategy``: it picks K free ports on 127.0.0.1, starts COMMAND
K times with ``TF_CONFIG`` (the cluster and this worker's index) plus ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK`` (so the per-rank log shim and the worker know the rank), and waits. When a worker
fails the others are terminated and the launcher exits with the failing status; SIGTERM/SIGINT
are forwarded, so cancelling the launcher's process group leaves nothing behind. Stdlib only
(and the stdlib-only rank environment contract).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from mlbench_worker import rank_env

GRACE_S = 10.0


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_env(ports: list[int], index: int) -> dict[str, str]:
    """The environment that makes a process worker ``index`` of the local TensorFlow cluster."""
    workers = [f"127.0.0.1:{p}" for p in ports]
    doc = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    return {
        rank_env.TF_CONFIG: json.dumps(doc),
        rank_env.RANK: str(index),
        rank_env.LOCAL_RANK: str(index),
        rank_env.WORLD_SIZE: str(len(ports)),
    }


def _stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(nproc: int, command: list[str]) -> int:
    """Run the K workers to completion; return 0 or the first failing worker's exit status."""
    ports = free_ports(nproc)
    procs: list[subprocess.Popen[bytes]] = []
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        for index in range(nproc):
            env = {**os.environ, **cluster_env(ports, index)}
            procs.append(subprocess.Popen(command, env=env))
    except OSError as exc:
        print(f"tf_launch: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        _stop(procs)
        return 127
    status = 0
    while True:
        if received:
            _stop(procs, received[0])
            return 128 + received[0]
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            index, status = failed[0]
            print(f"tf_launch: worker {index} exited with {status}; stopping the others", file=sys.stderr)
            _stop(procs)
            return status if status > 0 else 128 - status
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--nproc" or not argv[1].isdigit() or argv[2] != "--" or int(argv[1]) < 1:
        print(
            "usage: python -m mlbench_tui.executors.local.tf_launch --nproc K -- COMMAND...", file=sys.stderr
        )
        return 2
    return launch(int(argv[1]), argv[3:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
