"""The emulated network on real namespaces: made and removed whole, shaped for real, checked, and
what a killed process left removed by its own names. Root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and
tbf are needed; the tests create only namespaces, links and bridges named after their own run ids
and send traffic only between those namespaces."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support.netns import WORKERS, needs_emulation, run_id, stream_rate

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.local.network import ledger, links, probe
from mlbench_tui.executors.local.network.layout import Step, group_ranks, plan_layout
from mlbench_tui.executors.shaping import Shaping

pytestmark = needs_emulation()
RANGE = ipaddress.IPv4Network("198.18.0.0/15")
MBIT = 1_000_000


def _reserve(runs_dir: Path, rate: int | None = 100 * MBIT, nodes: int = 2) -> ledger.Reservation:
    return ledger.reserve(runs_dir, run_id(), group_ranks(nodes, 1), Shaping(rate), Shaping(rate), RANGE)


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def test_apply_makes_every_named_object_and_remove_leaves_none(runs_dir: Path) -> None:
    layout = _reserve(runs_dir).layout
    try:
        links.apply(layout)
        assert sorted(links.remaining(layout)) == sorted(
            [*layout.namespaces, *layout.host_interfaces, layout.bridge]
        )
        counters = links.read_counters("eth0", layout.namespaces[0], layout.egress)
        assert counters is not None and counters.kinds == ("tbf",)
        assert links.shaping_held(layout) == []
    finally:
        assert links.remove(layout) == []
    assert links.remaining(layout) == []


def test_a_shaped_link_carries_its_rate_and_an_unshaped_one_far_more(runs_dir: Path) -> None:
    shaped = _reserve(runs_dir, rate=50 * MBIT).layout
    unshaped = _reserve(runs_dir, rate=None).layout
    try:
        links.apply(shaped)
        links.apply(unshaped)
        ns = [f"{links.NETNS_DIR}/{name}" for name in shaped.namespaces]
        rate = stream_rate(ns[1], ns[0], str(shaped.nodes[0].address), megabytes=12)
        assert 0.5 * 50 * MBIT / 8 <= rate <= 1.05 * 50 * MBIT / 8
        ns_free = [f"{links.NETNS_DIR}/{name}" for name in unshaped.namespaces]
        free = stream_rate(ns_free[1], ns_free[0], str(unshaped.nodes[0].address), megabytes=96)
        assert free > 4 * rate
        assert links.shaping_held(shaped) == []
    finally:
        links.remove(shaped)
        links.remove(unshaped)


def test_a_setup_that_fails_part_way_leaves_nothing(runs_dir: Path) -> None:
    layout = _reserve(runs_dir).layout
    # the run's own second link name is taken: creating it fails after the first node was made
    links.run_steps([Step("ip", ("link", "add", layout.host_interfaces[1], "type", "bridge"))])
    with pytest.raises(links.NetworkError, match="File exists") as info:
        links.apply(layout)
    assert "nothing was left behind" in (info.value.hint or "")
    assert links.remaining(layout) == []


def test_a_replaced_qdisc_is_noticed(runs_dir: Path) -> None:
    layout = _reserve(runs_dir).layout
    try:
        links.apply(layout)
        ns = [f"{links.NETNS_DIR}/{name}" for name in layout.namespaces]
        stream_rate(ns[1], ns[0], str(layout.nodes[0].address), megabytes=1)
        links.run_steps(
            [Step("tc", ("qdisc", "replace", "dev", "eth0", "root", "pfifo"), layout.namespaces[1])]
        )
        assert links.shaping_held(layout) == ["node 1's sending qdisc is pfifo, not tbf"]
    finally:
        links.remove(layout)


def test_two_runs_at_once_get_their_own_subnets_and_names(runs_dir: Path) -> None:
    reserved: list[ledger.Reservation] = []
    threads = [threading.Thread(target=lambda: reserved.append(_reserve(runs_dir))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = (r.layout for r in reserved)
    assert not first.subnet.overlaps(second.subnet)
    assert not {first.bridge, *first.namespaces} & {second.bridge, *second.namespaces}
    try:
        links.apply(first)
        links.apply(second)
        assert links.shaping_held(first) == links.shaping_held(second) == []
    finally:
        links.remove(first)
        links.remove(second)


_KILLED_OWNER = textwrap.dedent(
    """
    import ipaddress, os, signal, sys
    from pathlib import Path
    from mlbench_tui.executors.local.network import ledger, links
    from mlbench_tui.executors.local.network.layout import group_ranks
    from mlbench_tui.executors.shaping import Shaping
    rate = Shaping(10**8)
    net = ipaddress.IPv4Network("198.18.0.0/15")
    reserved = ledger.reserve(Path(sys.argv[1]), sys.argv[2], group_ranks(2, 1), rate, rate, net)
    links.apply(reserved.layout)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_what_a_killed_process_left_is_found_and_removed_by_its_names(runs_dir: Path) -> None:
    rid = run_id()
    done = subprocess.run([sys.executable, "-c", _KILLED_OWNER, str(runs_dir), rid], check=False, timeout=60)
    assert done.returncode == -signal.SIGKILL
    record = ledger.read(runs_dir, rid)
    assert record is not None
    layout = record.layout()
    assert len(links.remaining(layout)) == 5
    # a process still inside one of its namespaces keeps it: that run's ranks are still going
    sleeper = subprocess.Popen(
        [sys.executable, "-c", f"import sys,time; sys.path.insert(0, {WORKERS!r}); "
         "from mlbench_worker.launch.netns import join; "
         f"join({str(links.NETNS_DIR / layout.namespaces[0])!r}); "
         "print('in', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline().strip() == "in"
        assert ledger.sweep(runs_dir) == []
        assert len(links.remaining(layout)) == 5
    finally:
        sleeper.kill()
        sleeper.wait()
    assert ledger.sweep(runs_dir) == [f"removed the emulated network left by run {rid}"]
    assert links.remaining(layout) == []
    assert ledger.records(runs_dir) == []


def test_a_running_owner_keeps_its_network(runs_dir: Path) -> None:
    reserved = _reserve(runs_dir)
    try:
        links.apply(reserved.layout)
        assert ledger.sweep(runs_dir) == []  # this process made it and lives
        assert links.remaining(reserved.layout)
    finally:
        assert ledger.teardown(runs_dir, reserved.record.run_id) == []
    assert ledger.read(runs_dir, reserved.record.run_id) is None


def test_the_range_skips_subnets_this_machine_routes(runs_dir: Path) -> None:
    reserved = _reserve(runs_dir)
    try:
        links.apply(reserved.layout)  # its bridge now routes its subnet
        other = ledger.reserve(
            runs_dir / "other", run_id(), group_ranks(2, 1), Shaping(), Shaping(), reserved.layout.subnet
        )
        pytest.fail(f"took {other.layout.subnet}, a subnet this machine routes")
    except ExecutorError as exc:
        assert "no free subnet left in the emulated network range" in exc.message
    finally:
        links.remove(reserved.layout)


def test_probe_finds_what_the_kernel_has() -> None:
    caps = probe.probe(refresh=True)
    assert caps.missing == () and caps.tbf
    netem = links.run_steps([Step("ip", ("netns", "add", "mlbench-t-netem"))]) == []
    try:
        links.run_steps(
            [Step("ip", ("link", "add", "a", "type", "veth", "peer", "name", "b"), "mlbench-t-netem")]
        )
        has_netem = not links.run_steps(
            [Step("tc", ("qdisc", "add", "dev", "a", "root", "netem"), "mlbench-t-netem")]
        )
    finally:
        links.run_steps([Step("ip", ("netns", "del", "mlbench-t-netem"))], force=True)
    assert netem and caps.netem == has_netem
    assert not [name for name in os.listdir(links.NETNS_DIR) if name.startswith(probe.PROBE_PREFIX)]


def test_plan_layout_matches_what_the_ledger_records(runs_dir: Path) -> None:
    reserved = _reserve(runs_dir, nodes=3)
    assert reserved.record.layout() == reserved.layout
    assert reserved.layout == plan_layout(
        reserved.record.run_id,
        group_ranks(3, 1),
        reserved.layout.subnet,
        Shaping(100 * MBIT),
        Shaping(100 * MBIT),
    )
    ledger.release(runs_dir, reserved.record.run_id)


def test_the_stores_server_removes_what_a_killed_apply_left() -> None:
    from mlbench_tui.server.daemon import ensure_server, stop_server
    from mlbench_tui.settings import load_settings

    runs_dir = load_settings().runs_dir
    rid = run_id()
    done = subprocess.run([sys.executable, "-c", _KILLED_OWNER, str(runs_dir), rid], check=False, timeout=60)
    assert done.returncode == -signal.SIGKILL
    record = ledger.read(runs_dir, rid)
    assert record is not None and links.remaining(record.layout())
    server = ensure_server()  # the next command that uses the store starts its server
    try:
        assert links.remaining(record.layout()) == []
        assert ledger.records(runs_dir) == []
    finally:
        stop_server(server)
