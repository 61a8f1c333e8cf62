"""``mlbench tui`` without --server starts a background server when none runs, and stops it when idle."""

from __future__ import annotations

from pathlib import Path

from mlbench_tui.server.serve import probe
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.tui.server_process import find_or_start, release


def test_starts_reuses_and_releases_a_background_server(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    started = find_or_start(db)
    try:
        assert started.process is not None and probe(started.info)
        again = find_or_start(db)  # a second TUI reuses it instead of starting another
        assert again.process is None and again.info.url == started.info.url
        client = started.info.client()
        run = client.create_run(RunCreate(name="going", task="0a", backend="gloo", workers=2)).run
        client.update_run(run.id, state="running")
        note = release(started)  # a run is going: the server stays for it
        assert note is not None and "keeps running" in note and started.process.poll() is None
        client.update_run(run.id, state="cancelled")
        client.close()
        assert release(started) is None
        assert started.process.wait(10) is not None
    finally:
        if started.process is not None and started.process.poll() is None:
            started.process.kill()
