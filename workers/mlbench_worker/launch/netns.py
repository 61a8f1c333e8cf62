"""Joining this rank's emulated node: its network namespace and hosts file, before any socket.

A local run with ``spec.network`` makes each emulated node a network namespace
(``/run/netns/NAME``). A rank forked from the warm-start server is moved into its node's namespace
by its launcher right after the fork (``join``, from its rank slot); a rank a cold launcher started
(torchrun, mpiexec) gets ``MLBENCH_NETNS`` (the namespace files of the nodes, ``{node}`` standing
for the node index) and ``MLBENCH_RANKS_PER_NODE``, finds its node from its rank and joins it
first thing (``join_from_environment``). Either way the rank sees the run's hosts file
(``MLBENCH_HOSTS_FILE``) as ``/etc/hosts`` in a mount namespace of its own, so the peers' addresses
resolve without a DNS server (c10d names every peer it accepts). A socket stays in the namespace it
was opened in, so joining must come before any; it must also run while the process has one thread.
Needs CAP_SYS_ADMIN (root). Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, Mapping

from mlbench_worker import rank_env

NCCL_HOSTID = "NCCL_HOSTID"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2
SELF = "/proc/self/ns/net"


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


def current() -> str:
    """This process's network namespace, as the kernel names it (``net:[4026531833]``)."""
    return os.readlink(SELF)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns = getattr(os, "setns", None)  # Python 3.12+
        if setns is not None:
            try:
                setns(fd, CLONE_NEWNET)
            except OSError as exc:
                raise NamespaceError(
                    exc.errno, f"cannot join network namespace {path}: {exc.strerror}"
                ) from None
            return
        _check(_libc().setns(fd, CLONE_NEWNET), f"cannot join network namespace {path}")
    finally:
        os.close(fd)


def join(path: str, hosts_file: str | None = None) -> None:
    """Move this process (its calling thread: call it before starting any) into the network
    namespace at ``path`` and, with ``hosts_file``, into a mount namespace where that file is
    /etc/hosts and /sys shows the node's links; ``OSError`` names the namespace and the reason."""
    _setns(path)
    if not hosts_file:
        return
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "cannot make a mount namespace")
    # Mounts made here stay here: the host's /etc/hosts and /sys are untouched.
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "cannot make / private to this rank")
    _check(
        libc.mount(os.fsencode(hosts_file), b"/etc/hosts", None, MS_BIND, None), "cannot bind the hosts file"
    )
    if libc.umount2(b"/sys", MNT_DETACH) == 0:
        _check(libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "cannot mount this node's /sys")


@contextlib.contextmanager
def entered(path: str | None) -> Iterator[None]:
    """Run the block inside the network namespace at ``path`` (None: where this process is), then
    come back: a socket opened in the block stays in that namespace."""
    if path is None:
        yield
        return
    home = os.open(SELF, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(path)
        try:
            yield
        finally:
            _setns(f"/proc/self/fd/{home}")
    finally:
        os.close(home)


def join_from_environment(env: Mapping[str, str] | None = None) -> str | None:
    """Join the node ``env`` names, once (a process already inside, such as a forked rank its
    launcher moved there, stays); returns its namespace file."""
    env = os.environ if env is None else env
    netns = node_namespace(env)
    if netns is None:
        return None
    if os.stat(netns).st_ino != os.stat(SELF).st_ino:
        join(netns, env.get(rank_env.HOSTS_FILE) or None)
    # each emulated node is a host of its own to NCCL: sockets between nodes, P2P/SHM within one
    os.environ.setdefault(NCCL_HOSTID, os.path.basename(netns))
    return netns
