"""One load process of the scale benchmark: many simulated ranks on one asyncio loop.

Each simulated rank behaves like the worker reporter (``workers/mlbench_worker/reporting/reporter.py``):
one keep-alive HTTP/1.1 connection, one ``session`` and one ``seq`` counter for all its batches,
sent one after another, retried with the same ``(rank, session, seq)`` until acknowledged. Per
reporter interval it sends a metric batch (its report window's training metrics, the tracker's
phase totals and one telemetry sample), the log lines it printed and its events. All ranks start
together (rank 0 after rendezvous); each rank's reporter timer runs at its own phase; the
ranks leave validation together, so the next batch of every rank carries the validation metrics
and a log line; a batch sent late (the previous one waited for its ack) carries every window
since, as the reporter's buffer does; and at the end every rank flushes at the same moment (the
reporter's ``close()`` when all ranks stop on the goal). The load process records every
acknowledgement, the latency of every batch, its own CPU and how late its loop wakes, so a
saturated load generator shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from benchmarks.scale_model import RankProfile, RunModel, noise
from benchmarks.scale_server import cpu_wait_s

KEYS = {"metrics": "metrics", "logs": "lines", "events": "events"}
PHASES = ("start", "train", "final")
REQUEST_TIMEOUT_S = 60.0
GIVE_UP_AFTER_S = 120.0  # a batch unacknowledged this long after the run's end counts as lost


@dataclass(frozen=True)
class LoadConfig:
    """What one load process simulates (picklable: it crosses to a spawned process)."""

    host: str
    port: int
    run_id: str
    token: str
    ranks: tuple[int, ...]
    world: int
    seconds: float
    start: float = 0.0  # wall clock when the ranks start (the same in every load process)
    interval: float = 1.0
    validation_every: float = 10.0
    retry_every: int = 0  # re-send every k-th batch after its ack (an ack lost on the way): 0 = never
    seed: int = 0
    flavour: str = "ours"  # "ours", or "mlflow": MLflow's log-batch (it has no logs or events)
    metrics_only: bool = False  # send only the metric batches (the side-by-side with MLflow)


@dataclass
class LoadStats:
    """What one load process saw; ``merge`` sums several."""

    acked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KEYS, 0))
    batches: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KEYS, 0))
    duplicates: int = 0  # acknowledgements that said "already stored"
    forced_retries: int = 0
    retries: int = 0  # re-sends after an error or a timeout
    lost: int = 0  # items of batches never acknowledged
    # ack latency (seconds) of every batch by phase: "start" (every rank's first batches, with the
    # connection's setup), "train" (the reporter's ticks, validation included), "final" (the flush)
    latencies: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    lag: list[float] = field(default_factory=list)  # how late the loop woke from a sleep (a busy loop)
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    cpu_wait_s: float = 0.0  # runnable but waiting for a CPU (the machine's other processes)
    wall_s: float = 0.0

    def merge(self, other: LoadStats) -> None:
        for kind in KEYS:
            self.acked[kind] += other.acked[kind]
            self.batches[kind] += other.batches[kind]
        self.duplicates += other.duplicates
        self.forced_retries += other.forced_retries
        self.retries += other.retries
        self.lost += other.lost
        for phase in PHASES:
            self.latencies[phase] += other.latencies[phase]
        self.lag += other.lag
        self.errors += other.errors[: max(0, 10 - len(self.errors))]
        self.cpu_s += other.cpu_s
        self.cpu_wait_s += other.cpu_wait_s
        self.wall_s = max(self.wall_s, other.wall_s)


class HttpError(Exception):
    pass


class Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams (the load must stay cheap)."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n{extra}".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, self.head, len(body), body)
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        data = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class SimRank:
    """One simulated rank: its reporter's connection, session, sequence numbers and stats."""

    def __init__(self, cfg: LoadConfig, model: RunModel, rank: int, stats: LoadStats) -> None:
        self.cfg, self.model, self.stats = cfg, model, stats
        self.profile: RankProfile = model.profile(rank)
        self.session = secrets.token_hex(8)
        self.seq = 0
        self.line_seq = {"stdout": 0, "stderr": 0}
        headers = {"Authorization": f"Bearer {cfg.token}"} if cfg.flavour == "ours" else {}
        self.conn = Connection(cfg.host, cfg.port, headers)
        self.paths = {k: f"/v1/runs/{cfg.run_id}/{k}:batch".encode() for k in KEYS}

    async def run(self) -> None:
        cfg, model, p = self.cfg, self.model, self.profile
        end = cfg.start + cfg.seconds
        # Rendezvous ends within ~0.2 s on every rank; each reporter timer then has its own phase.
        await _sleep_until(cfg.start + 0.2 * (0.5 + 0.5 * _unit(p.rank, 1)))
        now = time.time()
        await self.send("events", model.start_events(p, now), phase="start")
        await self.send("logs", self.lines([("stdout", s) for s in model.start_logs(p)], now), phase="start")
        tick = now + cfg.interval * (0.5 + 0.5 * _unit(p.rank, 2))
        window = epoch = 0
        while tick < end:
            lag = await _sleep_until(tick)
            if lag is not None:
                self.stats.lag.append(lag)
            now = time.time()
            metrics: list[dict[str, Any]] = []
            texts: list[tuple[str, str]] = []
            events: list[dict[str, Any]] = []
            while tick <= now and tick < end:  # the windows since the last batch (one, unless it was slow)
                window += 1
                metrics += model.train_metrics(p, window, tick) + model.telemetry(
                    p, window, tick - cfg.start, tick
                )
                texts += model.window_logs(p, window)
                tick += cfg.interval
            metrics += model.totals(p, window, now)
            while math.floor((now - cfg.start) / cfg.validation_every) > epoch:  # the ranks validated
                epoch += 1
                metrics += model.validation(p, epoch, now)
                texts.append(("stdout", model.epoch_log(p, epoch)))
                events += model.epoch_events(p, epoch, now, last=False)
            await self.send("metrics", metrics, phase="train")
            if texts:
                await self.send("logs", self.lines(texts, now), phase="train")
            if events:
                await self.send("events", events, phase="train")
        await _sleep_until(end)  # every rank stops on the goal together and flushes (close())
        now = time.time()
        reached = model.val_accuracy(epoch) >= model.GOAL
        await self.send("metrics", model.totals(p, window, now), phase="final")
        await self.send("logs", self.lines([("stdout", model.end_log(p, reached))], now), phase="final")
        if p.rank == 0:
            await self.send("events", model.end_events(p, epoch, now), phase="final")
        self.conn.close()

    def lines(self, texts: list[tuple[str, str]], t: float) -> list[dict[str, Any]]:
        out = []
        for stream, text in texts:
            out.append({"text": text, "stream": stream, "seq": self.line_seq[stream], "t": t})
            self.line_seq[stream] += 1
        return out

    def body(self, kind: str, items: list[dict[str, Any]]) -> tuple[bytes, bytes]:
        """(path, body) of one batch."""
        if self.cfg.flavour == "mlflow":  # an MLflow run has no ranks: the rank goes in the key
            prefix = f"rank{self.profile.rank}/"
            metrics = [
                {
                    "key": prefix + m["name"].replace("@", "_at_"),
                    "value": m["value"],
                    "timestamp": int(m["t"] * 1000),
                    "step": m.get("step") or 0,
                }
                for m in items
            ]
            return b"/api/2.0/mlflow/runs/log-batch", orjson.dumps(
                {"run_id": self.cfg.run_id, "metrics": metrics}
            )
        self.seq += 1
        body = {"rank": self.profile.rank, "seq": self.seq, "session": self.session, KEYS[kind]: items}
        return self.paths[kind], orjson.dumps(body)

    async def send(self, kind: str, items: list[dict[str, Any]], *, phase: str) -> None:
        """POST one batch until acknowledged, as the reporter does (same seq on every try)."""
        if not items or (kind != "metrics" and (self.cfg.metrics_only or self.cfg.flavour == "mlflow")):
            return
        path, body = self.body(kind, items)
        stats = self.stats
        started = time.perf_counter()
        if not await self._deliver(path, body):
            stats.lost += len(items)
            return
        stats.latencies[phase].append(time.perf_counter() - started)
        stats.batches[kind] += 1
        stats.acked[kind] += len(items)
        if self.cfg.retry_every and self.seq % self.cfg.retry_every == 0 and self.cfg.flavour == "ours":
            # The ack was lost on the way: the reporter drops its connection and sends the batch again.
            stats.forced_retries += 1
            self.conn.close()
            await self._deliver(path, body)

    async def _deliver(self, path: bytes, body: bytes) -> bool:
        stats = self.stats
        deadline = self.cfg.start + self.cfg.seconds + GIVE_UP_AFTER_S
        delay = 0.05
        while True:
            try:
                status, data = await asyncio.wait_for(self.conn.post(path, body), REQUEST_TIMEOUT_S)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                self.conn.close()
                status, data = 0, repr(exc).encode()
            if status == 200:
                if self.cfg.flavour == "ours" and orjson.loads(data).get("duplicate"):
                    stats.duplicates += 1
                return True
            if len(stats.errors) < 10:
                stats.errors.append(f"rank {self.profile.rank}: {status} {data[:200]!r}")
            if 400 <= status < 500 or time.time() > deadline:
                return False
            stats.retries += 1
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 4)


def _unit(rank: int, salt: int) -> float:
    """A deterministic number in [-1, 1] per rank."""
    return noise(rank, 0, 100 + salt)


async def _sleep_until(when: float) -> float | None:
    """Sleep until the wall-clock time ``when``; returns how late the loop woke (None: no sleep)."""
    delay = when - time.time()
    if delay <= 0:
        return None
    await asyncio.sleep(delay)
    return time.time() - when


async def _run_all(cfg: LoadConfig, stats: LoadStats) -> None:
    windows = max(1, round(cfg.validation_every / cfg.interval))
    goal_epoch = max(1, math.ceil(cfg.seconds / cfg.validation_every) - 1)  # the last validation
    model = RunModel(cfg.world, seed=cfg.seed, windows_per_epoch=windows, goal_epoch=goal_epoch)
    ranks = [SimRank(cfg, model, r, stats) for r in cfg.ranks]
    await asyncio.gather(*(r.run() for r in ranks))


def run_load(cfg: LoadConfig) -> LoadStats:
    """Simulate ``cfg.ranks`` until the run's end; the entry point of a load process."""
    stats = LoadStats()
    runner: Callable[[Any], Any] = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        runner = uvloop.run
    cpu0, wait0, wall0 = time.process_time(), cpu_wait_s(), time.perf_counter()
    runner(_run_all(cfg, stats))
    stats.cpu_s, stats.wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    stats.cpu_wait_s = cpu_wait_s() - wait0
    return stats


def load_process(cfg: LoadConfig, ready: Any, go: Any, out: Any) -> None:
    """A spawned load process: say it is ready, get the common start time, simulate, report."""
    ready.put(True)
    out.put(run_load(dataclasses.replace(cfg, start=go.get())))
