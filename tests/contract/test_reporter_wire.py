"""Contract: what the worker reporter sends validates against the server's wire models.

The reporter (``workers/``) builds its JSON by hand with the standard library (the training
thread's path); this test captures its real requests with a plain HTTP server and validates every
body with the server's pydantic models (derived from ``mlbench_worker.wire``'s declarations),
including awkward inputs (NaN, infinity, over-long names and text, odd event kinds, numpy-like
scalars, oversized payloads).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from mlbench_worker.reporting import reporter as worker_reporter
from mlbench_worker.reporting.reporter import Reporter
from pydantic import BaseModel

from mlbench_tui.store import api_models
from mlbench_tui.store.api_models import EventBatch, LogBatch, MetricBatch

MODELS: dict[str, type[BaseModel]] = {"metrics": MetricBatch, "logs": LogBatch, "events": EventBatch}


class _Capture(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, dict(self.headers), body))
        data = json.loads(body)
        items = next(v for k, v in data.items() if isinstance(v, list))
        reply = json.dumps({"accepted": len(items), "duplicate": False}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def capture() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    _Capture.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Capture.seen
    httpd.shutdown()
    httpd.server_close()


class _Scalar:
    """Stands in for numpy/torch scalars: convertible with float()."""

    def __float__(self) -> float:
        return 0.25


def test_reporter_payloads_validate_against_server_models(
    capture: tuple[str, list[tuple[str, dict[str, str], bytes]]],
) -> None:
    url, seen = capture
    rep = Reporter(url, "r-0123456789ab", "secret-token", 3)
    rep.metric("train_loss", 0.5, step=1, epoch=0.5)
    rep.metric("val_global_Prec@1", float("nan"), step=2)
    rep.metric("lr", float("-inf"))
    rep.metric("n" * 500, 1.0)
    rep.metric("with\ncontrol\tchars", 1.0)
    rep.metric("scalar", _Scalar(), step=3)  # type: ignore[arg-type]
    rep.metric("", 1.0)  # dropped on the worker, never poisons the batch
    rep.log("x" * 100_000)
    rep.log("bad surrogate \udcff", stream="stderr")
    rep.log("odd stream", stream="nonsense")
    rep.event("goal_reached", {"metric": "val_global_Prec@1", "value": float("inf"), "scalar": _Scalar()})
    rep.event("rank failed!", {"traceback": "t" * 200_000})
    rep.event("run_stop", {"status": "success", "reason": "goal", "nested": {"a": [1, 2.5, None]}})
    for i in range(worker_reporter.MAX_BATCH_ITEMS + 5):
        rep.metric("many", float(i), step=i)
    assert rep.flush(10) is True
    rep.close()

    kinds: dict[str, int] = {}
    for path, headers, body in seen:
        assert path.startswith("/v1/runs/r-0123456789ab/") and path.endswith(":batch")
        kind = path.rsplit("/", 1)[1].split(":")[0]
        batch: Any = MODELS[kind].model_validate_json(body)  # raises on any contract break
        assert batch.rank == 3 and batch.session
        assert headers["Authorization"] == "Bearer secret-token"
        kinds[kind] = kinds.get(kind, 0) + 1
    assert set(kinds) == {"metrics", "logs", "events"}
    metrics = [m for p, _, b in seen if "metrics" in p for m in MetricBatch.model_validate_json(b).metrics]
    by_name = {m.name: m for m in metrics}
    assert by_name["val_global_Prec@1"].value is None and by_name["lr"].value is None
    assert by_name["scalar"].value == 0.25
    assert "n" * api_models.MAX_NAME_LEN in by_name and "" not in by_name
    assert len([m for m in metrics if m.name == "many"]) == worker_reporter.MAX_BATCH_ITEMS + 5
    seqs = [(json.loads(b)["session"], json.loads(b)["seq"]) for _, _, b in seen]
    assert len(set(seqs)) == len(seqs)  # every batch has its own (session, seq)


def test_reporter_batches_fit_the_server() -> None:
    assert worker_reporter.MAX_BATCH_ITEMS <= api_models.MAX_BATCH_ITEMS
