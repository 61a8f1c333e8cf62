"""Joining this rank's emulated node: its network namespace and hosts file, before any socket.

A local run with ``spec.network`` gives every rank ``MLBENCH_NETNS`` (the namespace files of the
nodes, ``{node}`` standing for the node index) and ``MLBENCH_RANKS_PER_NODE``; the rank finds its
node from its rank (whatever launcher started it: torchrun, mpiexec, a forked warm start), joins
that namespace with ``setns``, and sees the run's hosts file (``MLBENCH_HOSTS_FILE``) as
``/etc/hosts`` in a mount namespace of its own, so the peers' addresses resolve without a DNS
server (c10d names every peer it accepts). Must run while the process has one thread. Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from mlbench_worker import rank_env

NCCL_HOSTID = "NCCL_HOSTID"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2


class NamespaceError(OSError):
    """This rank could not join its emulated node."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(errno, f"{what}: {os.strerror(errno)}")


def node_namespace(env: Mapping[str, str]) -> str | None:
    """The namespace file this process joins (None when the run emulates no network)."""
    template = env.get(rank_env.NETNS)
    if not template:
        return None
    if "{node}" not in template:
        return template
    rank = next((int(env[name]) for name in rank_env.RANK_VARIABLES if env.get(name, "").isdigit()), None)
    if rank is None:
        raise NamespaceError(0, f"{rank_env.NETNS} is set but no launcher variable says this process's rank")
    per_node = int(env.get(rank_env.RANKS_PER_NODE) or 1)
    return template.replace("{node}", str(rank // max(1, per_node)))


def current_namespace() -> str:
    return os.readlink("/proc/self/ns/net")


def join(netns: str, hosts_file: str | None = None) -> None:
    """Move this process into network namespace ``netns`` (a file under /run/netns) and, with
    ``hosts_file``, a mount namespace where that file is /etc/hosts and /sys shows the node's links."""
    libc = _libc()
    fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(libc.setns(fd, CLONE_NEWNET), f"cannot join network namespace {netns}")
    finally:
        os.close(fd)
    if not hosts_file:
        return
    _check(libc.unshare(CLONE_NEWNS), "cannot make a mount namespace")
    # Mounts made here stay here: the host's /etc/hosts and /sys are untouched.
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "cannot make / private to this rank")
    _check(
        libc.mount(os.fsencode(hosts_file), b"/etc/hosts", None, MS_BIND, None), "cannot bind the hosts file"
    )
    if libc.umount2(b"/sys", MNT_DETACH) == 0:
        _check(libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "cannot mount this node's /sys")


def join_from_environment(env: Mapping[str, str] | None = None) -> str | None:
    """Join the node ``env`` names, once (a process already inside stays); returns its namespace file."""
    env = os.environ if env is None else env
    netns = node_namespace(env)
    if netns is None:
        return None
    if os.stat(netns).st_ino == os.stat("/proc/self/ns/net").st_ino:
        return netns
    join(netns, env.get(rank_env.HOSTS_FILE) or None)
    # each emulated node is a host of its own to NCCL: sockets between nodes, P2P/SHM within one
    os.environ.setdefault(NCCL_HOSTID, os.path.basename(netns))
    return netns
