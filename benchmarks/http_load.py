"""A load generator for JSON-over-HTTP ingest servers: identical traffic for ours and the peer.

``Target`` says how to send one batch to one server; ``Conn`` is a minimal keep-alive HTTP/1.1
client (raw sockets, pre-encoded bodies) so that the client costs little and the same on both
sides; ``load`` runs many clients over several processes, ``sequential`` one client, and
``latency_under_load`` records the latency of every request at a given total rate.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from mlbench_worker import wire


@dataclass
class Target:
    """How to send one batch of metrics to one server."""

    name: str
    host: str
    port: int
    batch_path: str
    single_path: str
    headers: dict[str, str]
    kind: str  # "ours" | "mlflow"
    run_id: str

    def template(self, client: int, n: int) -> bytes:
        """The JSON body of one call with ``@SEQ@`` where the call number (from 1) goes.

        Bodies are made by substituting the call number into a pre-encoded template, so the load
        generator costs next to nothing and the servers, not the client, are measured. As in
        training, steps grow monotonically: step = call * 1000 + i. Every call is distinct:
        ours by batch ``seq`` (the server dedupes on it), MLflow's by timestamp and step (its key).
        """
        now = time.time()
        steps = [f"@STEP{i:03d}@" for i in range(n)]
        if self.kind == "ours":
            metrics = [{"name": wire.TRAIN_LOSS, "value": 0.5, "step": st, "t": now} for st in steps]
            body = json.dumps({"rank": client, "seq": "@CALL@", "metrics": metrics})
        elif n == 1:
            body = json.dumps(
                {
                    "run_id": self.run_id,
                    "key": f"single_{client}",
                    "value": 0.5,
                    "step": steps[0],
                    "timestamp": "@CALL@",
                }
            )
        else:
            metrics = [
                {"key": f"train_loss_{client}", "value": 0.5, "step": st, "timestamp": "@CALL@"}
                for st in steps
            ]
            body = json.dumps({"run_id": self.run_id, "metrics": metrics})
        body = re.sub(r'"@STEP(\d{3})@"', r"@SEQ@\1", body).replace('"@CALL@"', "@SEQ@")
        return body.encode()

    def batch_body(self, client: int, seq: int, n: int) -> bytes:
        return self.template(client, n).replace(b"@SEQ@", b"%d" % (seq + 1))

    def single_body(self, client: int, seq: int) -> bytes:
        return self.batch_body(client, seq, 1)


class Conn:
    """A minimal keep-alive HTTP/1.1 client (raw socket) that POSTs JSON and checks for 200.

    A load generator should cost far less than the server it measures; ``http.client`` spends
    about as much CPU per request as a fast server does, so requests are written as bytes.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.sock = self._connect()
        extra = "".join(f"{k}: {v}\r\n" for k, v in target.headers.items())
        self.head = f"Host: {target.host}:{target.port}\r\nContent-Type: application/json\r\n{extra}".encode()
        self.buf = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.target.host, self.target.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _closed_while_idle(self) -> bool:
        """True when the server closed this idle keep-alive connection (its keep-alive timeout)."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable) and not self.sock.recv(1, socket.MSG_PEEK)

    def post(self, path: str, body: bytes) -> None:
        if not self.buf and self._closed_while_idle():  # a slow sender, e.g. at a low rate
            self.sock.close()
            self.sock = self._connect()
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            path.encode(),
            self.head,
            len(body),
            body,
        )
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise RuntimeError(f"{self.target.name}: chunked answers are not supported here")
        while len(rest) < length:
            self._recv()
            rest = self.buf.partition(b"\r\n\r\n")[2]
        data, self.buf = rest[:length], rest[length:]
        if status != 200:
            raise RuntimeError(f"{self.target.name} answered {status}: {data[:200]!r}")

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"{self.target.name} closed the connection")
        self.buf += chunk


def _client_loop(
    target: Target,
    client: int,
    n: int,
    seconds: float,
    interval: float,
    start_at: float,
    seq0: int,
    phase: float = 0.0,
) -> tuple[int, list[float]]:
    """Send ``n``-metric batches for ``seconds`` (every ``interval`` s from ``phase`` on, or back to back).

    Returns (calls, latencies).
    """
    conn = Conn(target)
    path = target.batch_path if n > 1 or target.kind == "ours" else target.single_path
    template = target.template(client, n)
    while time.time() < start_at:
        time.sleep(0.001)
    end = time.perf_counter() + seconds
    calls, lat = 0, []
    seq = seq0
    next_at = time.perf_counter() + phase
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if interval:
            if now < next_at:
                time.sleep(next_at - now)
            next_at += interval
        body = template.replace(b"@SEQ@", b"%d" % (seq + 1))
        t0 = time.perf_counter()
        conn.post(path, body)
        lat.append(time.perf_counter() - t0)
        calls += 1
        seq += 1
    return calls, lat


def _proc_entry(
    args: tuple[Target, list[int], int, float, float, float, int, int], out: Any, steady: bool
) -> None:
    target, clients, n, seconds, interval, start_at, seq0, total = args
    results: list[tuple[int, list[float]]] = []
    threads = []

    def run(c: int) -> None:
        phase = interval * c / total if steady else 0.0
        results.append(_client_loop(target, c, n, seconds, interval, start_at, seq0, phase))

    for c in clients:
        t = threading.Thread(target=run, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    out.put(results)


def load(
    target: Target,
    clients: int,
    n: int,
    seconds: float,
    *,
    interval: float = 0.0,
    procs: int = 4,
    seq0: int = 0,
    steady: bool = True,
) -> tuple[float, list[float]]:
    """Run ``clients`` clients (spread over ``procs`` processes); returns (metrics/s, latencies).

    With an ``interval``, ``steady`` spreads the clients' send times evenly over the interval (a
    steady total rate); otherwise they all send at the same moments (bursts of ``clients``).
    """
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = min(procs, clients)
    groups = [list(range(i, clients, procs)) for i in range(procs)]
    start_at = time.time() + 0.3
    workers = [
        ctx.Process(
            target=_proc_entry,
            args=((target, g, n, seconds, interval, start_at, seq0, clients), queue, steady),
        )
        for g in groups
    ]
    for w in workers:
        w.start()
    results = [r for _ in workers for r in queue.get()]
    for w in workers:
        w.join()
    calls = sum(c for c, _ in results)
    return calls * n / seconds, [x for _, lat in results for x in lat]


def latency_under_load(
    target: Target, clients: int, rate_rps: float, secs: float, procs: int, steady: bool, seq: int
) -> list[float]:
    """Latencies of every request while ``clients`` clients send 100-metric batches at
    ``rate_rps`` requests/s in total, each at the same rate (see ``load``'s ``steady``)."""
    _, latencies = load(
        target, clients, 100, secs, interval=clients / rate_rps, procs=procs, seq0=seq * 10**6, steady=steady
    )
    return latencies


def sequential(target: Target, n: int, seconds: float, seq0: int) -> float:
    calls, _ = _client_loop(target, 0, n, seconds, 0.0, 0.0, seq0)
    return calls * n / seconds
