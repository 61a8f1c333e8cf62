"""Finding or starting the local metrics server: one detached process per store, gone when idle.

Every command that needs the server (apply, status, logs, cancel, results, export, the TUI)
calls ``ensure_server``. It reuses the server recorded for the store when that one is alive,
answers, is of this version and serves this store; otherwise it starts ``mlbench server
--idle-timeout`` in a session of its own and waits until it answers (Bazel's client/server
model). No command serves HTTP in its own process, so a server never vanishes with the command
that started it. A lock file per store makes commands starting at once meet on one server (a
lock held too long is reported with its holder, never waited on in silence); a record whose
process is gone is replaced; a detached server of another version is stopped first.

Each store keeps an identity beside its record (a 0600 file): its admin and read tokens and the
port its last server listened on. A server started after another was killed takes the same
tokens and, when free, the same port, so ranks, ``apply`` and the TUI carry on against it; a
client made from a record re-attaches to the store's server (found or started again here) when
its server went away.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench_tui import __version__
from mlbench_tui.errors import ServerError
from mlbench_tui.server.records import servers_dir

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.read_api import RunReader

IDLE_TIMEOUT_ENV = "MLBENCH_SERVER_IDLE_TIMEOUT"
IDLE_TIMEOUT_S = 900.0  # a detached server's default: exit 15 minutes after its last use
START_TIMEOUT_S = 60.0  # hang guard for a detached server's start (importing the app is slow)
STOP_TIMEOUT_S = 15.0
LOCK_WAIT_S = START_TIMEOUT_S + 15.0  # another command may hold the lock while its server starts


@dataclass(frozen=True)
class ServerInfo:
    """What a server's state file holds: how to reach it, its tokens, version and idle timeout."""

    url: str
    pid: int
    store: str
    admin_token: str = field(repr=False)
    read_token: str = field(repr=False)
    open_reads: bool = True
    started: float = 0.0
    version: str = ""
    idle_timeout: float | None = None  # set for a detached server (it exits when idle)
    # A Unix socket the server also answers on, beside its store: ranks inside emulated network
    # namespaces (spec.network) reach it there without crossing the links being measured.
    socket: str | None = None

    def client(self, *, admin: bool = True, timeout: float = 30.0) -> MlbenchClient:
        """A client of this server that re-attaches to the store's server (found, or started
        again) when this one went away; a server named by ``MLBENCH_SERVER_URL`` is not replaced."""
        from mlbench_tui.server.client import Attachment, MlbenchClient

        store = self.store

        def reattach() -> Attachment:
            info = ensure_server(store)
            return Attachment(info.url, info.admin_token if admin else info.read_token)

        token = self.admin_token if admin else self.read_token
        return MlbenchClient(self.url, token, timeout=timeout, reattach=reattach if store else None)


@dataclass(frozen=True)
class StoreIdentity:
    """What every server of one store keeps (a 0600 file beside its record): its tokens, so a
    restarted server honours the ones clients hold, and the port it last listened on."""

    admin_token: str = field(repr=False)
    read_token: str = field(repr=False)
    port: int | None = None


def state_path(store: str | Path) -> Path:
    """The state file of the server of ``store`` (named by a digest of its absolute path)."""
    digest = hashlib.sha256(str(Path(store).expanduser().resolve()).encode()).hexdigest()[:16]
    return servers_dir() / f"{digest}.json"


def identity_path(store: str | Path) -> Path:
    return state_path(store).with_suffix(".identity")


def store_identity(store: str | Path) -> StoreIdentity:
    """The store's identity, made (with new tokens) the first time a server serves it."""
    path = identity_path(store)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return StoreIdentity(str(data["admin_token"]), str(data["read_token"]), data.get("port"))
    except (OSError, ValueError, TypeError, KeyError):
        pass
    identity = StoreIdentity(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
    _write_private(path, asdict(identity))
    return identity


def remember_port(store: str | Path, port: int) -> None:
    """Record the port the store's server listens on now (its successor tries it first)."""
    identity = store_identity(store)
    if identity.port != port:
        with contextlib.suppress(OSError):
            _write_private(identity_path(store), {**asdict(identity), "port": port})


def _write_private(path: Path, data: dict[str, object]) -> None:
    """Write JSON ``data`` to ``path`` atomically with mode 0600 (an ``OSError`` names ``path``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def read_state(path: Path) -> ServerInfo | None:
    """The record in ``path``, or None when there is none or it is unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ServerInfo(**{k: data[k] for k in ServerInfo.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def recorded_servers() -> list[ServerInfo]:
    """Every server recorded in this state directory (alive or not)."""
    found = (read_state(path) for path in sorted(servers_dir().glob("*.json")))
    return [info for info in found if info is not None]


def write_state(info: ServerInfo) -> Path:
    """Record ``info`` atomically with mode 0600 (it holds tokens)."""
    path = state_path(info.store)
    _write_private(path, asdict(info))
    return path


def remove_state(info: ServerInfo) -> None:
    """Remove the record of ``info`` if it still describes it (another may have replaced it)."""
    path = state_path(info.store)
    current = read_state(path)
    if current is not None and current.url == info.url and current.pid == info.pid:
        with contextlib.suppress(OSError):
            path.unlink()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a child of ours that exited is reaped, not counted)."""
    from mlbench_tui.owners import pid_alive

    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return pid_alive(pid)


def probe(info: ServerInfo, store: Path | None = None, timeout: float = 2.0) -> bool:
    """True if ``info`` describes a live server (of ``store``, when given) that answers /healthz."""
    if info.pid and info.pid != os.getpid() and not alive(info.pid):
        return False
    if store is not None and Path(info.store) != store.resolve():
        return False
    import httpx

    from mlbench_tui.server.client import needs_tls

    try:
        resp = httpx.get(f"{info.url}/healthz", timeout=timeout, verify=needs_tls(info.url))
        data = resp.json()
    except (httpx.HTTPError, ValueError):
        return False
    return resp.status_code == 200 and (store is None or Path(data.get("store", "")) == store.resolve())


def stop_server(info: ServerInfo, timeout: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM the server of ``info`` and wait until it exited; False if it is still there."""
    if not info.pid or info.pid == os.getpid():
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(info.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    remove_state(info)
    return True


def idle_timeout() -> float:
    """Seconds a detached server stays up unused: ``MLBENCH_SERVER_IDLE_TIMEOUT``, default 900."""
    raw = os.environ.get(IDLE_TIMEOUT_ENV)
    if not raw:
        return IDLE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ServerError(
            f"{IDLE_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}",
            hint=f"unset it for the default ({IDLE_TIMEOUT_S:g} s)",
        )
    return value


@contextlib.contextmanager
def _store_lock(store: Path) -> Iterator[None]:
    """Exclusive ``flock`` on the store's server lock file: one finder/starter at a time; a
    holder that keeps it too long is named on stderr, then in the error."""
    from mlbench_tui.locks import held, wait_bound

    def note(text: str) -> None:
        print(f"mlbench: {text}", file=sys.stderr, flush=True)

    with held(
        state_path(store).with_suffix(".lock"),
        what=f"the server lock of store {store}",
        wait=wait_bound(LOCK_WAIT_S),
        hint="another mlbench command is finding or starting this store's server; if that process "
        "is stuck, stop it (kill PID) and run the command again",
        note=note,
    ):
        yield


def _env_server() -> ServerInfo | None:
    url = os.environ.get("MLBENCH_SERVER_URL")
    if not url:
        return None
    url = url.rstrip("/")
    # a server of this state directory named by its URL (the TUI's launches): its Unix socket too
    recorded = next((info for info in recorded_servers() if info.url == url), None)
    return ServerInfo(
        url=url,
        pid=0,
        store="",
        admin_token=os.environ.get("MLBENCH_TOKEN", ""),
        read_token=os.environ.get("MLBENCH_READ_TOKEN", os.environ.get("MLBENCH_TOKEN", "")),
        socket=recorded.socket if recorded is not None else None,
    )


def _reusable(info: ServerInfo | None, store: Path) -> ServerInfo | None:
    """``info`` when it is a live server of ``store`` and this version; a detached server of
    another version is stopped (its successor takes the store over); a stale record is dropped."""
    if info is None:
        return None
    if not probe(info, store):
        if not (info.pid and alive(info.pid)):
            with contextlib.suppress(OSError):
                state_path(store).unlink()
        return None
    if info.version == __version__:
        return info
    if info.idle_timeout is None:
        raise ServerError(
            f"the mlbench server {info.url} (pid {info.pid}) for {store} is version "
            f"{info.version or 'unknown'}, this mlbench is {__version__}",
            hint=f"stop it (kill {info.pid}) and start it again with this version: mlbench server",
        )
    if not stop_server(info):
        raise ServerError(f"the mlbench server of version {info.version} (pid {info.pid}) did not stop")
    return None


def ensure_server(db_path: str | Path | None = None) -> ServerInfo:
    """The server of ``db_path`` (default store): the recorded one, or a detached one started now.

    ``MLBENCH_SERVER_URL`` set in the environment means "use that server" (with ``MLBENCH_TOKEN``
    and ``MLBENCH_READ_TOKEN``); nothing is started then.
    """
    from mlbench_tui.settings import load_settings  # not the store's modules: SQLAlchemy is slow to import

    named = _env_server()
    if named is not None:
        return named
    store = (Path(db_path).expanduser() if db_path else load_settings().store_path).resolve()
    _remove_network_leftovers()
    with _store_lock(store):
        found = _reusable(read_state(state_path(store)), store)
        if found is not None:
            return found
        return _start_detached(store)


def _remove_network_leftovers() -> None:
    """What a killed ``apply`` left (its runs' emulated networks) goes the next time the store is
    used."""
    from mlbench_tui.executors import remove_leftovers

    for note in remove_leftovers():
        print(f"mlbench: {note}", file=sys.stderr)


def _start_detached(store: Path) -> ServerInfo:
    """``mlbench server --port 0 --idle-timeout T`` for ``store`` in its own session (on the port
    its last server had, when free); returns its record once it answers. It takes the store's
    tokens (the caller's MLBENCH_TOKEN is not passed)."""
    from mlbench_tui.detached import Detached, start_detached

    argv = [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(store)]
    argv += ["--idle-timeout", f"{idle_timeout():g}"]
    last = store_identity(store).port
    if last:
        argv += ["--prefer-port", str(last)]
    env = {k: v for k, v in os.environ.items() if k not in ("MLBENCH_TOKEN", "MLBENCH_READ_TOKEN")}
    log_path = state_path(store).with_suffix(".log")
    found: list[ServerInfo] = []

    def serving(started: Detached) -> bool:
        info = read_state(state_path(store))
        if info is None or info.pid != started.proc.pid or not probe(info, store):
            return False
        found.append(info)
        return True

    started, ready = start_detached(argv, log_path, serving, timeout=START_TIMEOUT_S, env=env)
    if ready:
        return found[-1]
    if started.proc.poll() is not None:
        raise ServerError(
            "the local mlbench server could not start: "
            + (" | ".join(started.tail()) or f"exit code {started.proc.returncode}"),
            hint=f"see {log_path}",
        )
    started.proc.terminate()
    raise ServerError(
        f"the local mlbench server did not start within {START_TIMEOUT_S:g}s", hint=f"see {log_path}"
    )


def run_reader(db_path: str | Path | None = None) -> RunReader:
    """What a read-only command reads runs through: ``MLBENCH_SERVER_URL``'s server when set, else
    the store file itself (no server to start) unless it must first be created or upgraded, which
    ``ensure_server``'s server does."""
    from mlbench_tui.store.reader import StoreReader

    if not os.environ.get("MLBENCH_SERVER_URL"):
        reader = StoreReader.open(db_path)
        if reader is not None:
            return reader
    return ensure_server(db_path).client()
