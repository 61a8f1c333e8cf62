"""Which ``Host`` a request may name: the server answers only requests addressed to itself.

A web page the user visits can send requests to 127.0.0.1, and through DNS rebinding a name it
controls can come to point there; such requests carry that name as ``Host``. The server answers
only Host values naming the address it is bound to: for a loopback server ``127.0.0.1:PORT``,
``localhost:PORT`` and ``[::1]:PORT`` (or the name without a port, as a Unix-socket request has
it); for a server bound to every interface also this machine's names and IP literals, on any
port (a port-forward or a Service in front changes the port). Names a deployment reaches it by
are added with ``mlbench server --allow-host NAME`` or ``MLBENCH_SERVER_HOSTS`` (comma-separated).
Anything else is answered 421 with a JSON reason, before any route runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from mlbench_tui.server.errors import ApiError, answer

HOSTS_ENV = "MLBENCH_SERVER_HOSTS"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("", "0.0.0.0", "::")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def split_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host header value (lowercase, without a final dot), or None when it
    is not one: ``example.org:80``, ``[::1]:8765``, ``localhost``."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    elif value.count(":") > 1:  # a bare IPv6 address is not a valid Host
        return None
    else:
        name, _, port_text = value.partition(":")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        port: int | None = int(port_text)
    else:
        port = None
    name = name.rstrip(".")
    return (name, port) if name else None


def configured_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """Names given on the command line plus ``MLBENCH_SERVER_HOSTS``, lowercased."""
    names = [*extra, *os.environ.get(HOSTS_ENV, "").split(",")]
    return frozenset(n.strip().lower().rstrip(".") for n in names if n.strip())


def machine_names() -> frozenset[str]:
    """This machine's host name and fully qualified name."""
    names = {socket.gethostname()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn())
    return frozenset(n.lower().rstrip(".") for n in names if n)


@dataclass(frozen=True)
class HostPolicy:
    """The Host values one server answers (see the module doc)."""

    port: int
    names: frozenset[str]
    any_port: bool = False  # a server on every interface: reached through forwarders too
    any_ip: bool = False  # ... and by any of its addresses

    @classmethod
    def for_address(cls, host: str, port: int, extra: Iterable[str] = ()) -> HostPolicy:
        """The policy of a server bound to ``host:port``, with ``extra`` names configured."""
        bound = host.strip("[]").lower()
        names = set(LOOPBACK_NAMES) | configured_names(extra)
        ip = _ip(bound)
        wildcard = bound in WILDCARDS
        if wildcard or ip is None or not ip.is_loopback:
            names |= machine_names()
        if not wildcard:
            names.add(bound)
        return cls(port=port, names=frozenset(names), any_port=wildcard, any_ip=wildcard)

    def allows(self, value: str | None) -> bool:
        """Whether a request whose Host header is ``value`` is addressed to this server."""
        parsed = split_host(value) if value else None
        if parsed is None:
            return False
        name, port = parsed
        if port is not None and port != self.port and not self.any_port:
            return False
        return name in self.names or (self.any_ip and _ip(name) is not None)

    def describe(self) -> str:
        shown = sorted(self.names)
        port = "" if self.any_port else f":{self.port}"
        text = ", ".join(f"[{n}]{port}" if ":" in n else f"{n}{port}" for n in shown)
        return text + (" or any of its IP addresses" if self.any_ip else "")


class HostCheck:
    """ASGI middleware: answers 421 (``wrong_host``) to a request whose Host is not this server's."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            value = next((v for k, v in scope["headers"] if k == b"host"), None)
            host = value.decode("latin-1") if value is not None else None
            if not self.policy.allows(host):
                shown = "no Host header" if host is None else f"Host {host[:200]!r}"
                refusal = ApiError(
                    421,
                    "wrong_host",
                    f"{shown} does not name this server; it answers {self.policy.describe()}",
                )
                status, body, headers = answer(refusal)
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
