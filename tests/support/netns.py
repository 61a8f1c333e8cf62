"""Helpers for tests on real network namespaces: whether this machine can make them, unique run
ids, and a TCP stream between two emulated nodes to measure what a shaped link carries."""

from __future__ import annotations

import functools
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WORKERS = str(Path(__file__).resolve().parents[2] / "workers")


@functools.cache
def why_no_emulation() -> str | None:
    """None where this process can make namespaces, veth pairs and bridges and shape them with tbf."""
    from mlbench_tui.executors.local.network import probe

    caps = probe.probe()
    if caps.missing:
        return "; ".join(caps.missing)
    if not caps.tbf:
        return "this kernel has no tbf qdisc"
    return None


def needs_emulation() -> pytest.MarkDecorator:
    reason = why_no_emulation()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def run_id() -> str:
    """A run id no other test (or run) uses."""
    return "r-" + secrets.token_hex(6)


_SERVER = textwrap.dedent(
    """
    import socket, sys, time
    sys.path.insert(0, {workers!r})
    from mlbench_worker.netns import join
    join({netns!r})
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(({address!r}, 5201)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); got = 0; start = None
    while True:
        chunk = c.recv(1 << 20)
        if not chunk:
            break
        if start is None:
            start = time.perf_counter()
        got += len(chunk)
    print(got / (time.perf_counter() - start), flush=True)
    """
)
_CLIENT = textwrap.dedent(
    """
    import socket, sys
    sys.path.insert(0, {workers!r})
    from mlbench_worker.netns import join
    join({netns!r})
    s = socket.create_connection(({address!r}, 5201)); block = b"x" * (1 << 20)
    for _ in range({megabytes}):
        s.sendall(block)
    s.close()
    """
)


def stream_rate(sender_netns: str, receiver_netns: str, receiver_address: str, megabytes: int) -> float:
    """Bytes per second one TCP stream carries from one namespace to another (the receiver's count)."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SERVER.format(workers=WORKERS, netns=receiver_netns, address=receiver_address),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        client = _CLIENT.format(
            workers=WORKERS, netns=sender_netns, address=receiver_address, megabytes=megabytes
        )
        subprocess.run([sys.executable, "-c", client], check=True, timeout=120)
        out, _ = server.communicate(timeout=120)
        return float(out.strip())
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
