"""A realistic store of one large run (1,024 ranks by default), for tests and benchmarks of the
TUI, ``mlbench status`` and ``mlbench results`` at scale.

``build_scale_store(path)`` registers the run from a real spec (``scale_model.SPEC_TEXT``) with an
``mlbench server`` over ``path`` and sends every rank's history through the HTTP ingest API, as the
worker reporter would have over the run (larger batches, the same wire format and ``(rank,
session, seq)`` keys); the executor's part, the ranks' states, goes through the same API. Per
rank: training metrics every report window, phase totals and telemetry, validation metrics
(rank 0), log lines (start, throughput, a straggler's throttling warnings, epoch and stop lines)
and events. A few ranks are stragglers (``RunModel.stragglers``, slowest first). A finished run
ends ``succeeded`` (the server computes its result, as for ``mlbench apply``); an unfinished
one stays ``running``, its last report just now.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from benchmarks.scale_load import KEYS
from benchmarks.scale_model import RunModel
from benchmarks.scale_server import create_run, start_ours, stop_ours

MAX_ITEMS = 10_000  # per batch (the server's limit)


@dataclass(frozen=True)
class ScaleStore:
    """What ``build_scale_store`` made."""

    path: Path
    run_id: str
    run_name: str
    ranks: int
    epochs: int
    windows: int  # report windows per rank
    telemetry_samples: int  # per rank and series
    stragglers: tuple[int, ...]  # slowest first
    rows: dict[str, int]  # acknowledged items per kind: metrics, logs, events
    model: RunModel


class _Poster:
    """One keep-alive connection to the server (the bulk of the requests: cheap and ordered)."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}

    def send(self, method: str, path: str, body: Any) -> Any:
        self.conn.request(method, path, body=orjson.dumps(body), headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
        return orjson.loads(data)

    def close(self) -> None:
        self.conn.close()


def rank_history(
    model: RunModel, rank: int, start: float, epochs: int, telemetry_every: int, finished: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(metrics, log lines, events) one rank reported over ``epochs`` epochs from ``start``."""
    p = model.profile(rank)
    metrics: list[dict[str, Any]] = []
    texts: list[tuple[str, str, float]] = [("stdout", s, start) for s in model.start_logs(p)]
    events = model.start_events(p, start)
    t = start
    window = 0
    for epoch in range(1, epochs + 1):
        for _ in range(model.windows_per_epoch):
            window += 1
            t += model.window_s
            metrics += model.train_metrics(p, window, t)
            if window % telemetry_every == 0:
                metrics += model.telemetry(p, window, t - start, t)
            texts += [(stream, text, t) for stream, text in model.window_logs(p, window)]
        t += model.VAL_S
        metrics += model.totals(p, window, t) + model.validation(p, epoch, t)
        texts.append(("stdout", model.epoch_log(p, epoch), t))
        events += model.epoch_events(p, epoch, t, last=epoch == epochs)
    if finished:
        texts.append(("stdout", model.end_log(p, model.val_accuracy(epochs) >= model.GOAL), t))
        events += model.end_events(p, epochs, t)
    seq = {"stdout": 0, "stderr": 0}
    lines = []
    for stream, text, when in texts:
        lines.append({"text": text, "stream": stream, "seq": seq[stream], "t": when})
        seq[stream] += 1
    return metrics, lines, events


def run_seconds(model: RunModel, epochs: int) -> float:
    """Wall seconds of ``epochs`` epochs (training and validation)."""
    return epochs * (model.windows_per_epoch * model.window_s + model.VAL_S)


def build_scale_store(
    path: str | Path,
    *,
    ranks: int = 1024,
    epochs: int = 3,
    windows_per_epoch: int = 10,
    telemetry_every: int = 3,
    finished: bool = True,
    seed: int = 0,
    senders: int = 4,
) -> ScaleStore:
    """Create (or add to) the store at ``path`` with one run of ``ranks`` ranks; see the module doc.

    The defaults (3 epochs of 10 report windows, telemetry every third window) make about 280
    metric rows per rank; the goal (val_global_Prec@1 >= 80) is reached in the last epoch. The
    server runs in its own process (its own core) and ``senders`` threads post concurrently, so
    the server commits several ranks' batches together.
    """
    from mlbench_tui.executors.api import RunState
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RankUpdate

    model = RunModel(ranks, seed=seed, windows_per_epoch=windows_per_epoch, goal_epoch=epochs)
    start = time.time() - run_seconds(model, epochs)
    rows = {"metrics": 0, "logs": 0, "events": 0}
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="mlbench-scale-home-") as home:
        server = start_ours(Path(home) / "home", Path(path).resolve())
        try:
            plan, run_id, token = create_run(server, ranks, start)
            state = RunState.SUCCEEDED if finished else RunState.RUNNING

            def send(first: int) -> None:
                poster = _Poster(server.url, token)
                ranker = _Poster(server.url, server.admin_token)
                sent = {"metrics": 0, "logs": 0, "events": 0}
                for rank in range(first, ranks, senders):
                    histories = rank_history(model, rank, start, epochs, telemetry_every, finished)
                    session, seq = secrets.token_hex(8), 0
                    for kind, items in zip(KEYS, histories, strict=True):
                        for i in range(0, len(items), MAX_ITEMS):
                            seq += 1
                            body = {
                                "rank": rank,
                                "seq": seq,
                                "session": session,
                                KEYS[kind]: items[i : i + MAX_ITEMS],
                            }
                            sent[kind] += poster.send("POST", f"/v1/runs/{run_id}/{kind}:batch", body)[
                                "accepted"
                            ]
                    update = RankUpdate(
                        state=state,
                        host=model.profile(rank).host,
                        pod=f"{plan.name}-{rank}",
                        exit_code=0 if finished else None,
                    )
                    body = update.model_dump(mode="json", exclude_none=True)
                    ranker.send("PUT", f"/v1/runs/{run_id}/ranks/{rank}", body)
                poster.close()
                ranker.close()
                with lock:
                    for kind, n in sent.items():
                        rows[kind] += n

            with concurrent.futures.ThreadPoolExecutor(senders) as pool:
                list(pool.map(send, range(senders)))
            if finished:
                with MlbenchClient(server.url, server.admin_token, timeout=120) as admin:
                    _finish(admin, run_id, start + run_seconds(model, epochs))
        finally:
            stop_ours(server)
    return ScaleStore(
        path=Path(path),
        run_id=run_id,
        run_name=plan.name,
        ranks=ranks,
        epochs=epochs,
        windows=epochs * windows_per_epoch,
        telemetry_samples=epochs * windows_per_epoch // telemetry_every,
        stragglers=model.stragglers,
        rows=rows,
        model=model,
    )


def _finish(client: Any, run_id: str, finished: float) -> None:
    """Store the final state as ``mlbench apply``'s runner does; the server computes the result."""
    from mlbench_tui.lifecycle import RunState
    from mlbench_tui.store.api_models import RunUpdate

    client.update_run(
        run_id, RunUpdate(state=RunState.SUCCEEDED, finished=datetime.fromtimestamp(finished, UTC))
    )
