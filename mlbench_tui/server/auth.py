"""Bearer-token checks: the admin token, the read token and per-run write tokens.

Tokens are compared in constant time (``hmac.compare_digest``) and never logged or echoed. A
missing or unknown token is 401; a valid token that may not do this (a read token writing, one
run's token writing to another run) is 403; a run's token once its run has ended is 409. Every
read needs the read (or admin) token, on loopback too: a web page the user visits can reach
127.0.0.1, but it cannot know the token, which only the server's 0600 files hold.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from enum import Enum

from starlette.requests import Request

from mlbench_tui.store.store import Store
from mlbench_tui.store.write_rules import run_ended


class AuthError(Exception):
    """Turned into a 401/403 JSON answer by the app."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class Access(Enum):
    """Who writes to a run: the engine (admin token) or the run's ranks (its write token)."""

    ADMIN = "admin"
    RUN = "run"


@dataclass(frozen=True)
class AuthConfig:
    """The server's tokens and read policy (``open_reads``: reads without a token, tests only)."""

    admin_token: str = field(repr=False)
    read_token: str = field(repr=False)
    open_reads: bool = False

    @classmethod
    def generate(
        cls, *, open_reads: bool = False, admin: str | None = None, read: str | None = None
    ) -> AuthConfig:
        return cls(
            admin_token=admin or secrets.token_urlsafe(32),
            read_token=read or secrets.token_urlsafe(32),
            open_reads=open_reads,
        )


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer(request: Request) -> str | None:
    """The bearer token of a request, or None."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _eq(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


class Authorizer:
    """Decides who may do what, given the auth config and the store (for run tokens)."""

    def __init__(self, config: AuthConfig, store: Store) -> None:
        self.config = config
        self.store = store

    def is_admin(self, token: str | None) -> bool:
        return token is not None and _eq(token, self.config.admin_token)

    def admin(self, request: Request) -> None:
        token = bearer(request)
        if token is None:
            raise AuthError(
                401, "missing_token", "this endpoint needs the admin token (Authorization: Bearer)"
            )
        if self.is_admin(token):
            return
        if _eq(token, self.config.read_token) or self._is_some_run_token(token):
            raise AuthError(403, "forbidden", "this token may not manage runs; use the admin token")
        raise AuthError(401, "invalid_token", "invalid token")

    def read(self, request: Request) -> None:
        if self.config.open_reads:
            return
        token = bearer(request)
        if token is None:
            raise AuthError(401, "missing_token", "reading needs the read token (Authorization: Bearer)")
        if _eq(token, self.config.read_token) or self.is_admin(token):
            return
        if self._is_some_run_token(token):
            raise AuthError(403, "forbidden", "a run write token cannot read; use the read token")
        raise AuthError(401, "invalid_token", "invalid token")

    def write_run(self, request: Request, run_id: str) -> Access | None:
        """Allow the run's own write token while the run lives (or the admin token); None when
        the run does not exist."""
        return self.write_run_token(bearer(request), run_id)

    def write_run_token(self, token: str | None, run_id: str) -> Access | None:
        """``write_run`` for an already extracted bearer token."""
        writer = self.store.writer
        if writer is not None and not writer.has_run(run_id):
            return None  # unknown run: 404 without touching the database
        if token is None:
            raise AuthError(
                401, "missing_token", "writing needs the run's write token (Authorization: Bearer)"
            )
        if self.is_admin(token):
            return Access.ADMIN
        ok = self.store.check_run_token(run_id, token)
        if ok is None:
            return None
        if ok:
            if writer is not None and writer.run_ended(run_id):
                raise run_ended(run_id)
            return Access.RUN
        if _eq(token, self.config.read_token) or self._is_some_run_token(token):
            raise AuthError(403, "forbidden", "this token may not write to this run")
        raise AuthError(401, "invalid_token", "invalid token")

    def _is_some_run_token(self, token: str) -> bool:
        from mlbench_tui.store.store import hash_token

        digest = hash_token(token)
        with self.store.engine.connect() as conn:
            return (
                conn.exec_driver_sql("SELECT 1 FROM runs WHERE token_hash = ?", (digest,)).first() is not None
            )
