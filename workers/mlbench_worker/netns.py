"""Joining a network namespace: how a forked rank enters its emulated node's network.

With the network dimension a local run's emulated nodes are network namespaces
(``/run/netns/NAME``, made by ``ip netns add``). A rank forked from the warm-start server joins
its node's namespace with ``setns(2)`` right after the fork and before it opens any socket: a
socket stays in the namespace it was opened in. Python 3.11 has no ``os.setns``, so libc's is
called through ctypes. Needs CAP_SYS_ADMIN (root). Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
SELF = "/proc/self/ns/net"


def join(path: str) -> None:
    """Move this process (its calling thread: call it before starting any) into the network
    namespace at ``path``; ``OSError`` names the namespace and the reason when it cannot."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns = getattr(os, "setns", None)  # Python 3.12+
        if setns is not None:
            try:
                setns(fd, CLONE_NEWNET)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot join network namespace {path}: {exc.strerror}") from None
            return
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot join network namespace {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def entered(path: str | None) -> Iterator[None]:
    """Run the block inside the network namespace at ``path`` (None: where this process is), then
    come back: a socket opened in the block stays in that namespace."""
    if path is None:
        yield
        return
    home = os.open(SELF, os.O_RDONLY | os.O_CLOEXEC)
    try:
        join(path)
        try:
            yield
        finally:
            join(f"/proc/self/fd/{home}")
    finally:
        os.close(home)


def current() -> str:
    """This process's network namespace, as the kernel names it (``net:[4026531833]``)."""
    return os.readlink(SELF)
