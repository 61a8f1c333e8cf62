"""The feeds' polling and streaming against a real embedded server (no Textual app needed)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from textual.message import Message

from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.tui.feed import HistoryPlan, RunFeed, RunsFeed
from mlbench_tui.tui.messages import ConnectionChanged, RunChanged, RunSlow, RunsUpdated

GOAL = {"metric": "val_global_Prec@1", "target": 80.0, "direction": "max", "kind": "full"}


def _running_goal_run(srv: EmbeddedServer) -> tuple[str, str]:
    client = srv.info.client()
    created = client.create_run(RunCreate(name="goal-run", task="1a", workers=2, goal=GOAL))
    client.update_run(created.run.id, state="running")
    client.close()
    return created.run.id, created.write_token


def _follow(feed: RunsFeed | RunFeed, until: Callable[[], bool], at_least: float = 0.0) -> float:
    """Run ``feed`` in a thread until ``until()`` holds and ``at_least`` seconds have passed (60 s
    at most: a guard, not a window); the seconds it ran."""
    stop = threading.Event()
    thread = threading.Thread(target=feed.run, args=(stop.is_set,), daemon=True)
    started = time.monotonic()
    thread.start()
    while time.monotonic() - started < 60 and not (until() and time.monotonic() - started >= at_least):
        time.sleep(0.02)
    stop.set()
    thread.join(10)
    return time.monotonic() - started


@contextlib.contextmanager
def _live_run_feed(srv: EmbeddedServer) -> Iterator[tuple[str, str, list[Message], MlbenchClient]]:
    """A running goal run followed by a RunFeed (4 updates/s) in a thread: yields (run id, write
    token, the messages posted so far, a writer client) once its history is read and posted."""
    run_id, token = _running_goal_run(srv)
    posted: list[Message] = []
    client = MlbenchClient(srv.info.url, srv.info.read_token)
    feed = RunFeed(client, run_id, posted.append, lambda _m: None, interval=0.25)
    stop = threading.Event()
    thread = threading.Thread(target=feed.run, args=(stop.is_set,), daemon=True)
    thread.start()
    writer = srv.info.client()
    deadline = time.monotonic() + 60
    while not feed.loaded and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield run_id, token, posted, writer
    finally:
        stop.set()
        thread.join(10)
        writer.close()


def test_runs_feed_polls_on_its_beat_while_a_goal_run_is_going(empty_server: EmbeddedServer) -> None:
    run_id, token = _running_goal_run(empty_server)
    writer = empty_server.info.client()
    writer.post_metrics(run_id, [{"name": "val_global_Prec@1", "value": 42.0, "step": 1}], token=token)
    posted: list[Message] = []
    client = MlbenchClient(empty_server.info.url, empty_server.info.read_token)
    feed = RunsFeed(client, posted.append, lambda _m: None, interval=0.5)

    def updates() -> list[RunsUpdated]:
        return [m for m in posted if isinstance(m, RunsUpdated)]

    def beat_seen() -> bool:  # the first list, its goal points right after, then a poll on the beat
        got = updates()
        return len(got) >= 3 and run_id in got[-1].goal_points

    ran = _follow(feed, beat_seen, at_least=1.6)
    got = updates()
    # one per 0.5 s of the time it ran, whatever the machine's speed: not a poll every 50 ms
    assert 3 <= len(got) <= 2 + ran / 0.5 + 1, (len(got), ran)
    assert [v for _, v in got[-1].goal_points[run_id]] == [42.0]
    writer.close()


def test_run_feed_gets_one_bucket_per_series_per_update(empty_server: EmbeddedServer) -> None:
    with _live_run_feed(empty_server) as (run_id, token, posted, writer):
        deadline = time.monotonic() + 60
        values = [1.0, 9.0, 0.25, 0.5]  # one batch with a spike: the bucket keeps it
        writer.post_metrics(
            run_id, [{"name": "train_loss", "value": v, "step": i} for i, v in enumerate(values)], token=token
        )
        while time.monotonic() < deadline and not any(
            isinstance(m, RunChanged) and m.batch.series for m in posted[1:]
        ):
            time.sleep(0.02)
    deltas = [d for m in posted[1:] if isinstance(m, RunChanged) for d in m.batch.series.values()]
    assert len(deltas) == 1
    delta = deltas[0]
    assert (delta.name, delta.rank, delta.steps, delta.values) == ("train_loss", 0, [3], [0.5])
    assert (delta.mins, delta.maxs) == ([0.25], [9.0])
    assert delta.xy() == [(3.0, 0.25), (3.0, 9.0), (3.0, 0.5)]


def test_run_feed_reports_a_slow_server_as_loading_and_retries() -> None:
    """A server that accepts but does not answer in time: the run screen is told "slow, retrying",
    the connection banner stays for servers that are gone."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.extend(listener.accept() for _ in range(2)), daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    posted: list[Message] = []
    status: list[Message] = []
    client = MlbenchClient(url, "token", timeout=0.3)
    feed = RunFeed(client, "r-000000000000", posted.append, status.append)
    _follow(feed, lambda: sum(isinstance(m, RunSlow) for m in posted) >= 2)
    slow = [m for m in posted if isinstance(m, RunSlow)]
    assert len(slow) >= 2, posted  # retried after the backoff
    assert "did not answer within 0.3 s" in slow[0].detail and slow[0].retry_in == 0.5
    assert not [m for m in status if isinstance(m, ConnectionChanged) and not m.connected]
    for conn in accepted:
        conn[0].close()
    listener.close()


def test_run_feed_stream_carries_only_the_metrics_shown(empty_server: EmbeddedServer) -> None:
    """The run screen's stream summarises the metrics it shows; showing another one reopens it."""
    run_id, token = _running_goal_run(empty_server)
    posted: list[Message] = []
    client = MlbenchClient(empty_server.info.url, empty_server.info.read_token)
    feed = RunFeed(
        client,
        run_id,
        posted.append,
        lambda _m: None,
        interval=0.1,
        history=lambda run: HistoryPlan(series=["loss"]),
    )
    stop = threading.Event()
    thread = threading.Thread(target=feed.run, args=(stop.is_set,), daemon=True)
    thread.start()
    writer = empty_server.info.client()

    def seen(name: str, value: float) -> bool:
        return any(
            d.name == name and value in d.values
            for m in posted
            if isinstance(m, RunChanged)
            for d in m.batch.series.values()
        )

    def post_until_seen(name: str, value: float) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batch = [{"name": "loss", "value": value, "step": 1}, {"name": "lr", "value": value, "step": 1}]
            writer.post_metrics(run_id, batch, token=token)
            time.sleep(0.15)
            if seen(name, value):
                return True
        return False

    try:
        assert post_until_seen("loss", 1.0) and not seen("lr", 1.0)  # lr is not shown: not sent
        feed.show(["loss", "lr"])
        assert post_until_seen("lr", 2.0)
    finally:
        stop.set()
        thread.join(10)
        writer.close()
    assert feed.loads == 2  # the stream was reopened once for the new metric


def test_run_feed_keeps_every_point_of_an_allreduce_sweep(empty_server: EmbeddedServer) -> None:
    """A summary folds a trend metric into one bucket per update, but an all-reduce sweep (x is
    the message size) needs each point of its curve: the feed reads those points exactly."""
    sizes = [2**i for i in range(12)]

    def deltas(posted: list[Message], name: str) -> list[Any]:
        changes = [m for m in posted[1:] if isinstance(m, RunChanged)]
        return [d for m in changes for d in m.batch.series.values() if d.name == name]

    with _live_run_feed(empty_server) as (run_id, token, posted, writer):
        deadline = time.monotonic() + 60
        batch = [{"name": "allreduce_fp32_busbw", "value": 0.1 * i, "step": n} for i, n in enumerate(sizes)]
        batch += [{"name": "train_loss", "value": 1.0 / (i + 1), "step": i} for i in range(12)]
        writer.post_metrics(run_id, batch, token=token)
        while time.monotonic() < deadline and not (
            deltas(posted, "allreduce_fp32_busbw") and deltas(posted, "train_loss")
        ):
            time.sleep(0.02)
    assert [s for d in deltas(posted, "allreduce_fp32_busbw") for s in d.steps] == sizes
    assert [len(d) for d in deltas(posted, "train_loss")] == [1]


def test_run_feed_waits_longer_for_a_big_run_s_history(empty_server: EmbeddedServer) -> None:
    """A run of millions of rows takes the server seconds to bucket its history: the first read
    of the run screen waits for it (the screen says "loading run…") instead of timing out at the
    client's ordinary limit and retrying the same long read forever."""
    run_id, _token = _running_goal_run(empty_server)
    real = empty_server.info.url

    class SlowHistory(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # a proxy that answers metric reads 6 s late
            if "/metrics" in self.path:
                time.sleep(6.0)
            ahead = {"Authorization": self.headers.get("Authorization", "")}
            with urllib.request.urlopen(urllib.request.Request(real + self.path, headers=ahead)) as upstream:
                body = upstream.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowHistory)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        client = MlbenchClient(
            # an ordinary limit well above what a loaded machine takes to answer, well below the delay
            f"http://127.0.0.1:{proxy.server_address[1]}",
            empty_server.info.read_token,
            timeout=2.0,
        )
        posted: list[Message] = []
        feed = RunFeed(
            client,
            run_id,
            posted.append,
            lambda _m: None,
            history=lambda _run: HistoryPlan(series=["train_loss"]),
        )
        stop = threading.Event()
        thread = threading.Thread(target=feed.run, args=(stop.is_set,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not feed.loaded and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
    finally:
        proxy.shutdown()
    assert posted and isinstance(posted[0], RunChanged) and posted[0].batch.run is not None
    assert not [m for m in posted if isinstance(m, RunSlow)] and feed.loads == 1


def test_a_stopped_run_feed_lets_go_of_its_stream(empty_server: EmbeddedServer) -> None:
    """Leaving a run screen ends its stream reader on its own (it checks at each keepalive the
    server sends a second when the run is quiet): no socket is shut down under httpx."""

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "mlbench-tui-stream"]

    with _live_run_feed(empty_server) as (_run_id, _token, posted, _writer):
        deadline = time.monotonic() + 60  # hang guard only
        while not readers():
            assert time.monotonic() < deadline, "the feed never opened its stream"
            time.sleep(0.02)
        assert posted
    deadline = time.monotonic() + 60  # hang guard only: it ends at the next keepalive
    while readers():
        assert time.monotonic() < deadline, "the stream reader outlived its feed"
        time.sleep(0.05)
