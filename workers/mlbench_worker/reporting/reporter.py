"""Reporter: ships a rank's metrics, log lines and events to the mlbench server.

The training thread only appends to in-memory buffers (``metric``, ``log``, ``event`` never
touch the network). A background thread cuts the buffers into batches about every ``interval``
seconds (``next_wait``; sooner when they fill), POSTs them to
``/v1/runs/{id}/{metrics,logs,events}:batch`` with the run's write token, and retries with
exponential backoff. While the server is unreachable, batches go to a spool file (``spool.py``)
and are re-sent in order once it answers again; each batch keeps its ``(session, seq)`` so a
re-sent batch is stored once. A server that does not know the run (404: another store's server
took the dead one's port, or the run was deleted) counts as unreachable too: the batches stay in
the spool, which the run's own server imports. ``close()`` (also run at interpreter exit) flushes
what is left.

Without a server URL the reporter still works: batches are written to the spool directory when
one is configured (``MLBENCH_SPOOL_DIR``), so a later ``Reporter`` with a URL uploads them, and
are dropped otherwise (a no-op reporter). Non-finite values (NaN, +/-inf) are sent as ``null``,
the server's representation of "not a finite number".

Standard library only: this module runs inside worker containers without mlbench_tui.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import math
import os
import random
import re
import secrets
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
import weakref
from typing import Any

from mlbench_worker import rank_env
from mlbench_worker.reporting.spool import Batch, Spool
from mlbench_worker.wire import MAX_KIND_LEN, MAX_NAME_LEN, MAX_PAYLOAD_BYTES, MAX_TEXT_LEN

# The server's limits are the wire contract's (a contract test validates what this module sends
# against the server's models, derived from the same declarations); batches stay smaller.
MAX_BATCH_ITEMS = 1000
_KEYS = {"metrics": "metrics", "logs": "lines", "events": "events"}
_PERMANENT = {400, 401, 403, 409, 413, 422}  # refused for good: dropped (422: invalid; 409: run ended)
_NOT_THIS_RUN = 404  # a server that does not know the run: kept in the spool for the run's own
_CONTROL = re.compile(r"[\x00-\x1f]")
_KIND_BAD = re.compile(r"[^A-Za-z0-9_.:-]")


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: the request line and Host header are those of ``host:port``."""

    def __init__(self, path: str, host: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Reporter:
    """Batches one rank's metrics/logs/events to the server from a background thread."""

    def __init__(
        self,
        server_url: str | None,
        run_id: str,
        token: str,
        rank: int,
        *,
        spool_dir: str | None = None,
        interval: float = 0.5,
        timeout: float = 10.0,
        max_buffer: int = 1_000_000,
        server_socket: str | None = None,
    ) -> None:
        self.server_url = server_url.rstrip("/") if server_url else None
        # Where the server also answers on a Unix socket (a rank in an emulated network namespace
        # reaches it there, off the links it measures); requests still name the URL's host.
        self.server_socket = server_socket
        self.run_id = run_id
        self.rank = int(rank)
        self.session = secrets.token_hex(8)
        self.interval = interval
        self.timeout = timeout
        self.max_buffer = max_buffer
        self._token = token
        if spool_dir is None and self.server_url:
            spool_dir = os.path.join(tempfile.gettempdir(), f"mlbench-spool-{os.getuid()}", run_id or "run")
        self.spool: Spool | None = Spool(spool_dir, self.rank, self.session) if spool_dir else None
        self._buffers: dict[str, list[dict[str, Any]]] = {"metrics": [], "logs": [], "events": []}
        self._line_seq: dict[str, int] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._flush_requests = 0
        self._flushed = 0
        self._flush_ok = True
        self._closing = False
        self._closed = False
        self._down_until = 0.0
        self._backoff = 0.0
        self._conn: http.client.HTTPConnection | None = None
        self._warned: set[str] = set()
        self._rng = random.Random()  # its own: the training's seeded ``random`` stays untouched
        self.dropped = 0
        self.sent_batches = 0
        self._thread = threading.Thread(target=self._run, name=f"mlbench-reporter-{rank}", daemon=True)
        self._thread.start()
        _live.add(self)

    @classmethod
    def from_env(cls, rank: int) -> Reporter:
        """From ``MLBENCH_SERVER_URL``, ``MLBENCH_RUN_ID``, ``MLBENCH_RUN_TOKEN``, ``MLBENCH_SPOOL_DIR``
        and ``MLBENCH_SERVER_SOCKET``."""
        return cls(
            os.environ.get(rank_env.SERVER_URL) or None,
            os.environ.get(rank_env.RUN_ID, ""),
            os.environ.get(rank_env.RUN_TOKEN, ""),
            rank,
            spool_dir=os.environ.get(rank_env.SPOOL_DIR) or None,
            server_socket=os.environ.get(rank_env.SERVER_SOCKET) or None,
        )

    # ---------------------------------------------------------------- training-thread API

    def metric(
        self,
        name: str,
        value: float,
        *,
        step: int | None = None,
        epoch: float | None = None,
        t: float | None = None,
    ) -> None:
        """Record one metric value (non-blocking). NaN and infinity are sent as null."""
        try:
            number: float | None = float(value)
        except (TypeError, ValueError):
            self._warn("value", f"metric {name!r}: value {value!r} is not a number; dropped")
            return
        if number is not None and not math.isfinite(number):
            number = None
        clean = _CONTROL.sub("", str(name))[:MAX_NAME_LEN]
        if not clean:
            self._warn("name", f"metric name {name!r} is empty; dropped")
            return
        item: dict[str, Any] = {"name": clean, "value": number, "t": _time(t)}
        if step is not None:
            item["step"] = int(step)
        if epoch is not None and math.isfinite(float(epoch)):
            item["epoch"] = float(epoch)
        self._add("metrics", item)

    def log(self, text: str, stream: str = "stdout") -> None:
        """Record one log line (non-blocking); long lines are truncated to the server's limit."""
        stream = stream if stream in ("stdout", "stderr", "system") else "stdout"
        seq = self._line_seq.get(stream, 0)
        self._line_seq[stream] = seq + 1
        text = str(text)[:MAX_TEXT_LEN].encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
        self._add("logs", {"text": text, "stream": stream, "seq": seq, "t": time.time()})

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        """Record one structured event (non-blocking); payload must be JSON-like."""
        clean = _KIND_BAD.sub("_", str(kind))[:MAX_KIND_LEN] or "event"
        self._add("events", {"kind": clean, "payload": _json_safe(payload), "t": time.time()})

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything recorded so far; True when the server acknowledged all of it.

        False on timeout or when batches had to be spooled (the server is unreachable).
        """
        with self._cond:
            if self._closed:
                return self._flush_ok
            self._flush_requests += 1
            ticket = self._flush_requests
            self._cond.notify_all()
            ok = self._cond.wait_for(lambda: self._flushed >= ticket or self._closed, timeout)
            return bool(ok) and self._flush_ok

    def close(self, timeout: float = 10.0) -> None:
        """Flush, stop the background thread; anything unsent stays in the spool file."""
        if self._closed:
            return
        self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._closed = True
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        _live.discard(self)
        if self.spool is not None and self.server_url and self.spool.files():
            _stderr(f"mlbench reporter: unsent batches kept in {self.spool.dir}")

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _add(self, kind: str, item: dict[str, Any]) -> None:
        with self._lock:  # a plain lock: cheap, and the sender holds it only to swap lists
            buf = self._buffers[kind]
            if len(buf) >= self.max_buffer:  # bounded memory if the sender is stuck: drop oldest
                cut = max(1, len(buf) // 10)
                del buf[:cut]
                self.dropped += cut
            buf.append(item)
            full = len(buf) == MAX_BATCH_ITEMS
        if full:
            with self._cond:
                self._cond.notify_all()

    def next_wait(self) -> float:
        """Seconds until the next batch: ``interval`` on average, drawn anew each time between half
        and one and a half of it, so ranks started together do not all post at the same instant."""
        return self.interval * self._rng.uniform(0.5, 1.5)

    def _take(self) -> list[Batch]:
        batches: list[Batch] = []
        for kind, buf in self._buffers.items():
            if not buf:
                continue
            self._buffers[kind] = []
            for i in range(0, len(buf), MAX_BATCH_ITEMS):
                self._seq += 1
                batches.append(
                    {
                        "kind": kind,
                        "rank": self.rank,
                        "session": self.session,
                        "seq": self._seq,
                        "items": buf[i : i + MAX_BATCH_ITEMS],
                    }
                )
        return batches

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._closing
                        or self._flush_requests > self._flushed
                        or any(len(b) >= MAX_BATCH_ITEMS for b in self._buffers.values())
                    ),
                    self.next_wait(),
                )
                ticket = self._flush_requests
                closing = self._closing
            with self._lock:
                batches = self._take()
            ok = True
            try:
                ok = self._deliver(batches, force=ticket > self._flushed or closing)
            except Exception as exc:  # never let the thread die: spool and go on
                self._warn("internal", f"mlbench reporter error: {exc!r}")
                self._to_spool(batches)
                ok = False
            with self._cond:
                if ticket > self._flushed:
                    self._flush_ok = ok
                    self._flushed = ticket
                    self._cond.notify_all()
                if closing:
                    return

    def _deliver(self, batches: list[Batch], force: bool) -> bool:
        """Send spooled batches first (in order), then the new ones; spool what cannot be sent."""
        if not self.server_url:  # spool-only (or no-op without a spool directory)
            if self.spool is not None:
                self._to_spool(batches)
            return not batches or self.spool is None
        if not force and time.monotonic() < self._down_until:
            self._to_spool(batches)
            return False
        if self.spool is not None and not self._resend_spool():
            self._to_spool(batches)
            return False
        for i, batch in enumerate(batches):
            if not self._send(batch):
                self._to_spool(batches[i:])
                return False
        return True

    def _to_spool(self, batches: list[Batch]) -> None:
        if not batches:
            return
        if self.spool is None:
            self.dropped += sum(len(b["items"]) for b in batches)
            self._warn(
                "dropped", "mlbench reporter: server unreachable and no spool directory; dropping data"
            )
            return
        try:
            self.spool.append(batches)
        except OSError as exc:
            self.dropped += sum(len(b["items"]) for b in batches)
            self._warn("spool", f"mlbench reporter: cannot spool to {self.spool.dir}: {exc}")

    def _resend_spool(self) -> bool:
        assert self.spool is not None
        for path in self.spool.files():
            pending = Spool.read(path)
            for i, batch in enumerate(pending):
                if not self._send(batch):
                    Spool.rewrite(path, pending[i:])
                    return False
            Spool.rewrite(path, [])
        return True

    def _send(self, batch: Batch) -> bool:
        """POST one batch with a few quick retries; False means "server unreachable, spool it"."""
        body = json.dumps(
            {
                "rank": batch["rank"],
                "seq": batch["seq"],
                "session": batch["session"],
                _KEYS[batch["kind"]]: batch["items"],
            },
            separators=(",", ":"),
            allow_nan=False,
        ).encode()
        path = f"{self._base_path()}/v1/runs/{urllib.parse.quote(self.run_id)}/{batch['kind']}:batch"
        delay = 0.05
        for attempt in range(3):
            try:
                status, text = self._post(path, body)
            except (OSError, http.client.HTTPException):
                self._reset_conn()
                status, text = 0, ""
            if status == 200:
                self.sent_batches += 1
                self._backoff = 0.0
                self._down_until = 0.0
                return True
            if status == _NOT_THIS_RUN:
                self._warn("http404", f"mlbench reporter: server does not know run {self.run_id}; spooling")
                break
            if status in _PERMANENT:
                self.dropped += len(batch["items"])
                self._warn(
                    f"http{status}",
                    f"mlbench reporter: server rejected a {batch['kind']} batch ({status}): {text[:300]}",
                )
                return True  # not retryable: do not spool it forever
            if attempt < 2:
                time.sleep(delay)
                delay *= 4
        self._backoff = min(30.0, max(0.5, self._backoff * 2))
        self._down_until = time.monotonic() + self._backoff
        return False

    def _base_path(self) -> str:
        assert self.server_url
        return urllib.parse.urlsplit(self.server_url).path.rstrip("/")

    def _post(self, path: str, body: bytes) -> tuple[int, str]:
        if self._conn is None:
            assert self.server_url
            parts = urllib.parse.urlsplit(self.server_url)
            host = parts.hostname or "127.0.0.1"
            if self.server_socket:
                self._conn = UnixConnection(self.server_socket, host, parts.port, timeout=self.timeout)
            else:
                cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
                self._conn = cls(host, parts.port, timeout=self.timeout)
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {self._token}",
            "Connection": "keep-alive",
        }
        self._conn.request("POST", path, body=body, headers=headers)
        resp = self._conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        if resp.getheader("connection", "").lower() == "close":
            self._reset_conn()
        return resp.status, text

    def _reset_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _stderr(message)


def _time(t: float | None) -> float:
    if t is None:
        return time.time()
    t = float(t)
    return t if math.isfinite(t) else time.time()


def _json_safe(payload: Any) -> dict[str, Any]:
    """A JSON-serialisable copy of an event payload, under the server's size limit."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        if isinstance(value, bool | int | str) or value is None:
            return value[:MAX_TEXT_LEN] if isinstance(value, str) else value
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        try:
            return clean(float(value))  # numpy and torch scalars
        except (TypeError, ValueError):
            return str(value)[:MAX_TEXT_LEN]

    data = clean(payload) if isinstance(payload, dict) else {"value": clean(payload)}
    if len(json.dumps(data)) > MAX_PAYLOAD_BYTES:
        text = json.dumps(data)[: MAX_PAYLOAD_BYTES // 2]
        data = {"truncated": True, "preview": text}
    return data


def _stderr(message: str) -> None:
    with contextlib.suppress(Exception):
        print(message, file=sys.stderr, flush=True)


_live: weakref.WeakSet[Reporter] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for reporter in list(_live):
        with contextlib.suppress(Exception):
            reporter.close(timeout=5.0)


__all__ = ["Reporter", "Spool"]
