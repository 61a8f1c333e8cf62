"""Helpers for tests on real network namespaces: whether this machine can make them, unique run
ids, and a TCP stream between two emulated nodes to measure what a shaped link carries (the
network benchmark's)."""

from __future__ import annotations

import functools
import secrets
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


def stream_rate(sender_netns: str, receiver_netns: str, receiver_address: str, megabytes: int) -> float:
    """Bytes per second one TCP stream carries from one namespace to another (the receiver's count)."""
    from benchmarks.network import stream_rate as measured

    return measured(sender_netns, receiver_netns, receiver_address, megabytes)
