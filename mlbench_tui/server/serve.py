"""Serving a store over HTTP in this process: ``mlbench server`` in the foreground (also what a
detached server runs), and ``EmbeddedServer`` in a thread (tests and benchmarks).

A serving process records itself in its store's state file (``daemon.py``); given an idle
timeout it exits once unused for that long. One store has one writer: a second server on the
same file is refused by the store's lock file. Before it answers, a server imports every run's
spool (what ranks could not send) and records failed the runs whose ``apply`` ended before
launching them; it answers only requests naming its own address as Host. A store it cannot write
(a read-only mount) is served for reading.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui import __version__
from mlbench_tui.errors import MlbenchError, ServerError
from mlbench_tui.server.daemon import ServerInfo, remember_port, remove_state, store_identity, write_state

if TYPE_CHECKING:
    import uvicorn

    from mlbench_tui.server.auth import AuthConfig
    from mlbench_tui.server.idle import IdleWatch
    from mlbench_tui.server.spools import SpoolImporter
    from mlbench_tui.store.store import Store

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
SWEEP_S = 10.0  # how often a serving process looks for runs whose apply ended before launching them


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


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with its terminating NUL


def socket_path(store: str | Path) -> Path:
    """Where the server of ``store`` answers on a Unix socket: beside the store, or (a path too long
    for a socket address) in a private folder of the temporary directory named by the store."""
    beside = Path(store).with_name(Path(store).name + ".sock")
    if len(os.fsencode(beside)) <= UNIX_PATH_MAX:
        return beside
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(Path(store).resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"mlbench-{os.getuid()}" / f"{digest}.sock"


def bind_unix_socket(path: Path) -> socket.socket | None:
    """A listening Unix socket at ``path``, readable and writable by this user only; None (the server
    then answers on TCP alone) when it cannot be made. Whoever serves the store owns the path, so a
    file left there by a killed server is replaced."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.listen(listen_backlog())
        sock.set_inheritable(True)
        return sock
    except OSError:
        return None


def _close_unix(sock: socket.socket | None, path: Path) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.close()
    with contextlib.suppress(OSError):
        path.unlink()


def bind_preferred(host: str, port: int, preferred: int | None) -> socket.socket:
    """``bind_socket`` on ``preferred`` when given and free, else on ``port``."""
    if preferred:
        try:
            return bind_socket(host, preferred)
        except ServerError:
            pass
    return bind_socket(host, port)


def serving_tokens(
    store: Store,
    *,
    remembered: bool,
    admin: str | None = None,
    read: str | None = None,
    open_reads: bool = False,
) -> AuthConfig:
    """The tokens a server of ``store`` answers: the ones given, else (``remembered``) the store's
    identity, so clients and ranks holding them carry on across a restart, else new ones."""
    from mlbench_tui.server.auth import AuthConfig

    if remembered and not (admin and read):
        identity = store_identity(store.path)
        admin, read = admin or identity.admin_token, read or identity.read_token
    return AuthConfig.generate(open_reads=open_reads, admin=admin, read=read)


def prepare_serving(store: Store) -> SpoolImporter:
    """What a process does before it serves ``store``: import every run's spool and record
    failed the runs whose apply ended before launching them (both logged on stderr)."""
    from mlbench_tui.server.owned_runs import end_stranded
    from mlbench_tui.server.spools import SpoolImporter

    importer = SpoolImporter(store)
    if store.writer is None:
        return importer
    try:
        imported = importer.import_all()
        if imported.files:
            print(f"mlbench server: imported {imported}", file=sys.stderr, flush=True)
        stranded = end_stranded(store)
        if stranded:
            print(
                f"mlbench server: recorded never-launched runs failed: {', '.join(stranded)}", file=sys.stderr
            )
    except MlbenchError as exc:  # a full disk: serve what is stored; the spools stay for later
        print(f"mlbench server: {exc.render()}", file=sys.stderr, flush=True)
    return importer


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(app: Any, *, log_level: str = "warning") -> uvicorn.Server:
    """A uvicorn server for the ASGI ``app`` (not started)."""
    import uvicorn

    class _Server(uvicorn.Server):
        # uvicorn re-raises SIGINT/SIGTERM after a graceful shutdown, which would kill the
        # process before our cleanup (server.json, store lock) runs: shut down and return instead.
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True

    config = uvicorn.Config(
        app,
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
        open_reads: bool = False,
        record: bool = True,
        allow_hosts: tuple[str, ...] = (),
    ) -> None:
        from mlbench_tui.server.hosts import HostPolicy
        from mlbench_tui.store.store import Store

        self.store = Store.for_server(db_path)
        try:
            self.auth = serving_tokens(self.store, remembered=True, open_reads=open_reads)
            self._sock = bind_socket(host, port)
            spools = prepare_serving(self.store)
        except BaseException:
            self.store.close()
            raise
        self._unix_path = socket_path(self.store.path)
        self._unix = bind_unix_socket(self._unix_path)
        self.url = _url(self._sock)
        from mlbench_tui.server.app import create_app

        hosts = HostPolicy.for_address(host, self._sock.getsockname()[1], allow_hosts)
        self._server = make_server(create_app(self.store, self.auth, hosts, spools))
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
            version=__version__,
            socket=str(self._unix_path) if self._unix is not None else None,
        )
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock, *([self._unix] if self._unix is not None else [])])
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
        _close_unix(self._unix, self._unix_path)
        self.store.close()

    def __enter__(self) -> EmbeddedServer:
        return self.start() if not self._thread.is_alive() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_foreground(
    db_path: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    admin_token: str | None = None,
    read_token: str | None = None,
    on_ready: Any = None,
    idle_timeout: float | None = None,
    prefer_port: int | None = None,
    allow_hosts: tuple[str, ...] = (),
) -> int:
    """Run the server in this thread until SIGINT/SIGTERM, or until idle for ``idle_timeout``
    seconds when given; records itself in its store's state file meanwhile. ``prefer_port`` is
    tried before ``port``; ``allow_hosts`` are names it answers besides its own address."""

    from mlbench_tui.server.app import create_app
    from mlbench_tui.server.hosts import HostPolicy
    from mlbench_tui.server.idle import IdleWatch
    from mlbench_tui.store.store import Store

    store = Store.for_server(db_path)
    try:
        from mlbench_tui.executors import remove_leftovers

        for note in remove_leftovers():  # what a killed `apply` left, now that the store is in use
            print(f"mlbench server: {note}", file=sys.stderr, flush=True)
        auth = serving_tokens(store, remembered=True, admin=admin_token, read=read_token)
        sock = bind_preferred(host, port, prefer_port)
        bound = int(sock.getsockname()[1])
        unix_path = socket_path(store.path)
        unix = bind_unix_socket(unix_path)
        info = ServerInfo(
            url=_url(sock),
            pid=os.getpid(),
            store=str(store.path),
            admin_token=auth.admin_token,
            read_token=auth.read_token,
            open_reads=auth.open_reads,
            started=time.time(),
            version=__version__,
            idle_timeout=idle_timeout,
            socket=str(unix_path) if unix is not None else None,
        )
        spools = prepare_serving(store)
        app = create_app(store, auth, HostPolicy.for_address(host, bound, allow_hosts), spools)
        watch = IdleWatch(app) if idle_timeout is not None else None
        server = make_server(app if watch is None else watch)
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
        remember_port(store.path, bound)
        if on_ready is not None:
            on_ready(info)
        done = threading.Event()
        _keep_house(server, watch, store, idle_timeout, done)
        try:
            server.run(sockets=[sock, *([unix] if unix is not None else [])])
        finally:
            done.set()
            remove_state(info)
            sock.close()
            _close_unix(unix, unix_path)
    finally:
        store.close()
    return 0


def _keep_house(
    server: uvicorn.Server,
    idle: IdleWatch | None,
    store: Store,
    timeout: float | None,
    done: threading.Event,
) -> None:
    """While ``server`` serves: record failed, every ``SWEEP_S``, runs whose apply ended before
    launching them; with ``idle`` and ``timeout``, stop the server once idle that long with no
    run whose owner lives."""
    from mlbench_tui.server.idle import watch_idle
    from mlbench_tui.server.owned_runs import end_stranded, owners_alive

    swept = time.monotonic()

    def runs_going() -> bool:
        nonlocal swept
        if time.monotonic() - swept >= SWEEP_S:
            end_stranded(store)
            swept = time.monotonic()
        return owners_alive(store)

    def stop() -> None:
        server.should_exit = True

    def watch() -> None:  # the idle time counts from when the server answers, not from its start
        while not server.started:
            if done.wait(0.05):
                return
        if idle is None or timeout is None:
            while not done.wait(SWEEP_S):
                runs_going()
            return
        idle.touch()
        watch_idle(idle, timeout, runs_going, stop, done)

    threading.Thread(target=watch, name="mlbench-housekeeping", daemon=True).start()
