"""Running the server: foreground (``mlbench server``), embedded in a thread, or reused.

A running server records itself in ``server.json`` (0600) in the state directory: url, pid,
store path and its tokens. ``ensure_server(db_path)`` reuses a live server of the same store,
otherwise starts one embedded in a background thread on a free loopback port, so
``mlbench apply`` works without a separately started server. One store has one writer: a second
server on the same file is refused by the store's lock file.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.errors import ServerError

if TYPE_CHECKING:
    import uvicorn

    from mlbench_tui.server.auth import AuthConfig
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.reader import RunReader
    from mlbench_tui.store.store import Store

STATE_FILE = "server.json"
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


@dataclass(frozen=True)
class ServerInfo:
    """What ``server.json`` holds: how to reach a running server and its tokens."""

    url: str
    pid: int
    store: str
    admin_token: str = field(repr=False)
    read_token: str = field(repr=False)
    open_reads: bool = True
    started: float = 0.0

    def client(self, *, admin: bool = True, timeout: float = 30.0) -> MlbenchClient:
        from mlbench_tui.server.client import MlbenchClient

        return MlbenchClient(self.url, self.admin_token if admin else self.read_token, timeout=timeout)


def state_path() -> Path:
    """``<state dir>/server.json`` (under ``MLBENCH_HOME/state`` when MLBENCH_HOME is set)."""
    from mlbench_tui.settings import Paths

    return Paths.from_env().state_dir / STATE_FILE


def read_state(path: Path | None = None) -> ServerInfo | None:
    path = path or state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ServerInfo(**{k: data[k] for k in ServerInfo.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_state(info: ServerInfo, path: Path | None = None) -> Path:
    """Write ``server.json`` atomically with mode 0600 (it holds tokens)."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(asdict(info), fh)
    os.replace(tmp, path)
    return path


def remove_state(info: ServerInfo, path: Path | None = None) -> None:
    """Remove ``server.json`` if it still describes ``info`` (another server may have replaced it)."""
    path = path or state_path()
    current = read_state(path)
    if current is not None and current.url == info.url and current.pid == info.pid:
        with contextlib.suppress(OSError):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def probe(info: ServerInfo, store: Path | None = None, timeout: float = 1.0) -> bool:
    """True if ``info`` describes a live server (of ``store``, when given) that answers /healthz."""
    if info.pid != os.getpid() and not _alive(info.pid):
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


def listen_backlog() -> int:
    """The longest listen queue the system allows (``net.core.somaxconn``): thousands of ranks
    connect within a second of a run's start, and a full queue drops their handshakes."""
    try:
        return max(1, int(SOMAXCONN.read_text()))
    except (OSError, ValueError):  # not Linux: the platform's own limit
        return socket.SOMAXCONN


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint="pick another --port"
        ) from exc
    sock.listen(listen_backlog())
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(store: Store, auth: AuthConfig, *, log_level: str = "warning") -> uvicorn.Server:
    """A uvicorn server for the app over ``store`` (not started)."""
    import uvicorn

    class _Server(uvicorn.Server):
        # uvicorn re-raises SIGINT/SIGTERM after a graceful shutdown, which would kill the
        # process before our cleanup (server.json, store lock) runs: shut down and return instead.
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True

    from mlbench_tui.server.app import create_app

    config = uvicorn.Config(
        create_app(store, auth),
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=2,
        server_header=False,
        proxy_headers=False,  # no proxy in front; one ASGI layer less per request
        lifespan="on",
        backlog=listen_backlog(),  # uvicorn listens on the socket again, by default with 2048
    )
    return _Server(config)


class EmbeddedServer:
    """The server in a background thread of this process; ``stop()`` (or exit) ends it."""

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        open_reads: bool = True,
        record: bool = True,
    ) -> None:
        from mlbench_tui.server.auth import AuthConfig, is_loopback
        from mlbench_tui.store.store import Store

        self.store = Store(db_path)
        try:
            self.auth = AuthConfig.generate(open_reads=open_reads and is_loopback(host))
            self._sock = bind_socket(host, port)
        except BaseException:
            self.store.close()
            raise
        self.url = _url(self._sock)
        self._server = make_server(self.store, self.auth)
        self._thread = threading.Thread(target=self._run, name="mlbench-server", daemon=True)
        self._record = record
        self.info = ServerInfo(
            url=self.url,
            pid=os.getpid(),
            store=str(self.store.path),
            admin_token=self.auth.admin_token,
            read_token=self.auth.read_token,
            open_reads=self.auth.open_reads,
            started=time.time(),
        )
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                self.store.close()
                raise ServerError(f"embedded server failed to start: {self._error}")
            if time.monotonic() > deadline:
                raise ServerError("embedded server did not start in time")
            time.sleep(0.01)
        if self._record:
            current = read_state()
            if current is None or not probe(current):
                write_state(self.info)
        return self

    def stop(self) -> None:
        """Stop serving, finish queued writes, release the store."""
        if self._record:
            remove_state(self.info)
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
        with contextlib.suppress(OSError):
            self._sock.close()
        self.store.close()

    def __enter__(self) -> EmbeddedServer:
        return self.start() if not self._thread.is_alive() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_embedded: dict[Path, EmbeddedServer] = {}
_embedded_lock = threading.Lock()
_hooked = False  # _stop_before_pools_close registered


def ensure_server(db_path: str | Path | None = None, *, start: bool = True) -> ServerInfo:
    """A live server for ``db_path`` (default store): reuse the recorded one or start one embedded.

    ``MLBENCH_SERVER_URL`` set in the environment means "use that server" (with ``MLBENCH_TOKEN``
    and ``MLBENCH_READ_TOKEN``); nothing is started then.
    """
    from mlbench_tui.settings import load_settings  # not the store's modules: SQLAlchemy is slow to import

    url = os.environ.get("MLBENCH_SERVER_URL")
    if url:
        return ServerInfo(
            url=url.rstrip("/"),
            pid=0,
            store="",
            admin_token=os.environ.get("MLBENCH_TOKEN", ""),
            read_token=os.environ.get("MLBENCH_READ_TOKEN", os.environ.get("MLBENCH_TOKEN", "")),
        )
    path = (Path(db_path).expanduser() if db_path else load_settings().store_path).resolve()
    with _embedded_lock:
        mine = _embedded.get(path)
        if mine is not None and mine._thread.is_alive():
            return mine.info
        current = read_state()
        if current is not None and probe(current, path):
            return current
        if not start:
            raise ServerError(
                f"no mlbench server is running for {path}", hint="start one with: mlbench server"
            )
        from mlbench_tui.store.engine import StoreLocked

        try:
            server = EmbeddedServer(path).start()
        except StoreLocked:
            # Another process is starting its server on this store right now: use it once it
            # has recorded itself, instead of failing the command.
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                current = read_state()
                if current is not None and probe(current, path):
                    return current
                time.sleep(0.1)
            raise
        _embedded[path] = server
        _stop_before_pools_close()
        return server.info


def _stop_before_pools_close() -> None:
    """Stop the embedded servers as the main thread ends, before the interpreter closes every
    thread pool: concurrent.futures does that in threading's exit hooks, which run before
    ``atexit``, and a request arriving in between could not start its read and was answered
    500. Hooks run last-registered first; the pool module is imported (the app's read gate
    made a pool), so this one runs before it."""
    global _hooked
    if _hooked:
        return
    import concurrent.futures.thread  # noqa: F401  (registered its hook before this one)

    with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
        threading._register_atexit(stop_embedded)  # type: ignore[attr-defined]
    _hooked = True


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


def stop_embedded() -> None:
    """Stop every server this process embedded (tests; also runs at interpreter exit)."""
    with _embedded_lock:
        servers = list(_embedded.values())
        _embedded.clear()
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


def serve_foreground(
    db_path: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    open_reads: bool = True,
    admin_token: str | None = None,
    read_token: str | None = None,
    on_ready: Any = None,
) -> int:
    """Run the server in this thread until SIGINT/SIGTERM; records itself in ``server.json``."""
    from mlbench_tui.server.auth import AuthConfig, is_loopback
    from mlbench_tui.store.store import Store

    store = Store(db_path)
    try:
        auth = AuthConfig.generate(
            open_reads=open_reads and is_loopback(host), admin=admin_token, read=read_token
        )
        sock = bind_socket(host, port)
        info = ServerInfo(
            url=_url(sock),
            pid=os.getpid(),
            store=str(store.path),
            admin_token=auth.admin_token,
            read_token=auth.read_token,
            open_reads=auth.open_reads,
            started=time.time(),
        )
        server = make_server(store, auth, log_level="warning")
        # Move everything loaded so far out of the cyclic GC's way: fewer, shorter GC pauses
        # in the request path (tail latency) for a process that only serves.
        gc.collect()
        gc.freeze()

        def early_exit(_sig: int, _frame: Any) -> None:  # a signal before uvicorn took over
            server.should_exit = True

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, early_exit)
        write_state(info)
        if on_ready is not None:
            on_ready(info)
        try:
            server.run(sockets=[sock])
        finally:
            remove_state(info)
            sock.close()
    finally:
        store.close()
    return 0


import atexit  # noqa: E402

atexit.register(stop_embedded)
