"""Suite-wide fixtures: every test gets its own MLBENCH_HOME so no test touches a user's store;
``slurm_cluster`` is a real two-node Slurm cluster on 127.0.0.1 shared by the session, and
``scale_store`` / ``scale_server`` a finished 1,024-rank run and a server over it, built once."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.kube_api import KubeApi, kube_api
from support.slurm import SlurmCluster, start_cluster, why_unavailable

if TYPE_CHECKING:
    from benchmarks.scale_store import ScaleStore
    from mlbench_tui.executors.slurm import cluster as slurm_clusters
    from mlbench_tui.server.serve import EmbeddedServer


@functools.cache
def _no_cuda() -> str | None:
    import torch

    return None if torch.cuda.is_available() else f"needs an NVIDIA GPU (torch {torch.__version__} sees none)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``gpu`` skip, with the reason, where torch sees no CUDA device."""
    if item.get_closest_marker("gpu") is not None:
        reason = _no_cuda()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A fresh MLBENCH_HOME; the detached servers commands started in it are stopped after, and
    those a test starts under a home of its own exit 2 minutes after their last use."""
    from mlbench_tui.server.daemon import IDLE_TIMEOUT_ENV, recorded_servers, stop_server

    home = tmp_path_factory.mktemp("mlbench-home")
    monkeypatch.setenv("MLBENCH_HOME", str(home))
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "120")
    for var in ("MLBENCH_DB", "MLBENCH_SERVER_URL", "MLBENCH_TOKEN", "MLBENCH_READ_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    yield home
    monkeypatch.setenv("MLBENCH_HOME", str(home))  # a test may have pointed it elsewhere
    for info in recorded_servers():
        if info.idle_timeout is not None:
            stop_server(info)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd n1/n2 on 127.0.0.1 (skipped with the reason where they cannot
    run: not installed, or not root); every job is cancelled and every daemon stopped after."""
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(reason)
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_recorded(slurm_cluster: SlurmCluster, _isolated_home: Path) -> slurm_clusters.SlurmCluster:
    """The test cluster recorded as ``test`` (``mlbench cluster add slurm test``) in this test's
    MLBENCH_HOME, partition ``debug``, so specs say ``target: {kind: slurm, cluster: test}``."""
    from mlbench_tui.clusters.slurm import SlurmProvider
    from mlbench_tui.executors.slurm import cluster as slurm_clusters

    cluster = slurm_clusters.SlurmCluster(name="test", partition="debug", conf=str(slurm_cluster.conf))
    SlurmProvider().add(cluster)
    return cluster


@pytest.fixture(scope="session")
def scale_store(tmp_path_factory: pytest.TempPathFactory) -> ScaleStore:
    """A finished run of 1,024 ranks (``benchmarks.scale_store``: sent through a real server, with
    stragglers, tracker totals, telemetry and logs), built once per session: 2 epochs of 3
    report windows, telemetry every second window."""
    from benchmarks.scale_store import build_scale_store

    path = tmp_path_factory.mktemp("scale") / "store.db"
    return build_scale_store(path, ranks=1024, epochs=2, windows_per_epoch=3, telemetry_every=2)


@pytest.fixture(scope="session")
def scale_server(scale_store: ScaleStore) -> Iterator[EmbeddedServer]:
    """One server over ``scale_store`` for the session's readers (tests that write make their own)."""
    from mlbench_tui.server.serve import EmbeddedServer

    server = EmbeddedServer(scale_store.path, record=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def kube() -> Iterator[KubeApi]:
    """The Kubernetes API mock, a real HTTP server on 127.0.0.1, for one test."""
    with kube_api() as api:
        yield api
