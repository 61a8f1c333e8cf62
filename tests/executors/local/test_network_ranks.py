"""A rank on an emulated node: it joins its namespace, reaches the metrics server over the store's
Unix socket (loopback TCP to the host is out of its reach there), names its peers from the run's
hosts file, and reads its link's counters inside the namespace."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.netns import WORKERS, needs_emulation, run_id

from mlbench_tui.executors.local.network import ledger, links
from mlbench_tui.executors.local.network.layout import group_ranks
from mlbench_tui.executors.local.network.runs import hosts_text
from mlbench_tui.executors.shaping import Shaping
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import RunCreate

pytestmark = needs_emulation()

_RANK = textwrap.dedent(
    """
    import os, socket, sys, time
    sys.path.insert(0, {workers!r})
    from mlbench_worker.launch.netns import join_from_environment
    join_from_environment()
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
        print("tcp: reached", flush=True)
    except OSError:
        print("tcp: unreachable", flush=True)
    print("peer:", socket.getnameinfo(("::ffff:{peer}", 0), 0)[0], flush=True)
    import psutil
    from mlbench_worker.telemetry.sampler import LinkProbe
    from mlbench_worker.reporting.reporter import Reporter
    probe = LinkProbe(psutil, "eth0")
    with Reporter.from_env(int(os.environ["RANK"])) as reporter:
        for name, value in probe.totals():
            reporter.metric(name, value)
        reporter.metric("hello", 1.0)
    """
)


@pytest.fixture
def server(tmp_path: Path):
    with EmbeddedServer(tmp_path / "store.db", record=False) as running:
        yield running


def test_a_rank_in_its_namespace_reports_over_the_unix_socket(tmp_path: Path, server: EmbeddedServer) -> None:
    assert server.info.socket is not None and Path(server.info.socket).is_socket()
    created = server.store.create_run(RunCreate(name="in-namespace", workers=2))
    run, token = created
    rid = run_id()
    reserved = ledger.reserve(
        tmp_path / "runs",
        rid,
        group_ranks(2, 1),
        Shaping(10**8),
        Shaping(10**8),
        ipaddress.IPv4Network("198.18.0.0/15"),
    )
    layout = reserved.layout
    hosts = ledger.hosts_path(tmp_path / "runs", rid)
    hosts.write_text(hosts_text(layout, Path("/etc/hosts").read_text()))
    links.apply(layout)
    try:
        env = {
            "PATH": "/usr/bin:/bin",
            "MLBENCH_NETNS": str(links.NETNS_DIR / f"mlbench-{rid}-n{{node}}"),
            "MLBENCH_HOSTS_FILE": str(hosts),
            "RANK": "1",
            "MLBENCH_SERVER_URL": server.url,
            "MLBENCH_SERVER_SOCKET": server.info.socket,
            "MLBENCH_RUN_ID": run.id,
            "MLBENCH_RUN_TOKEN": token,
        }
        port = server.url.rsplit(":", 1)[1]
        script = _RANK.format(workers=WORKERS, port=port, peer=layout.nodes[0].address)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[:2] == ["tcp: unreachable", f"peer: mlbench-{rid}-n0"]
        assert "[c10d]" not in done.stderr
    finally:
        links.remove(layout)
        ledger.release(tmp_path / "runs", rid)
    names = {s.name: s for s in server.store.read(lambda c: queries.metrics(c, run.id)).series}
    assert names["hello"].rank == 1
    assert "sys/link_sent_bytes" in names and "sys/link_recv_bytes" in names


def test_the_unix_socket_is_removed_with_the_server(tmp_path: Path) -> None:
    with EmbeddedServer(tmp_path / "store.db", record=False) as running:
        path = Path(running.info.socket or "")
        assert path == tmp_path / "store.db.sock" and path.is_socket()
        assert path.stat().st_mode & 0o777 == 0o600
    assert not path.exists()
