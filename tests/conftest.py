"""Suite-wide fixtures: every test gets its own MLBENCH_HOME so no test touches a user's store."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("mlbench-home")
    monkeypatch.setenv("MLBENCH_HOME", str(home))
    for var in ("MLBENCH_DB", "MLBENCH_SERVER_URL", "MLBENCH_TOKEN", "MLBENCH_READ_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return home
