"""Local runs on emulated links, through the real CLI: a shaped 2-rank all-reduce carries its link's
rate and no more, an unshaped one many times that; latency where the kernel has netem; nothing
left after cancel or a SIGKILLed apply; two shaped runs at once; the refusal without
CAP_NET_ADMIN."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import needs_emulation
from support.smoke import apply_one, mlbench
from support.waiting import wait_for

from mlbench_tui.executors.local import processes
from mlbench_tui.executors.local.network import ledger, links, probe
from mlbench_tui.settings import load_settings

pytestmark = [needs_emulation(), pytest.mark.slow]
MBIT = 1_000_000

ALLREDUCE = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: {name}}}
spec:
  task: 0a
  workers: 2
  backend: gloo
{network}  hyperparameters:
    {{sizes_min_exp: 6, sizes_max_exp: 6, num_sizes: 1, repetitions: 3, warmup: 1, dtypes: [fp32]}}
"""
LONG = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: {name}}}
spec:
  task: 2a
  workers: 2
  data: {{source: synthetic, options: {{train_samples: 200000, val_samples: 256}}}}
  goal: {{metric: val_global_Prec@1, target: 100, direction: max}}
  network: 100Mbit
  hyperparameters: {{max_epochs: 1000}}
"""


def _busbw(run: dict[str, object]) -> float:
    allreduce = run["allreduce"]
    assert isinstance(allreduce, dict)
    return float(allreduce["fp32"]["peak_busbw_gbps"]) * 1e9 * 8


def _leftovers() -> list[str]:
    """The namespaces of this test's runs (other runs on the machine may have theirs)."""
    runs_dir = load_settings().runs_dir
    ours = {entry.name for entry in runs_dir.iterdir()} if runs_dir.exists() else set()
    return [
        name
        for name in os.listdir(links.NETNS_DIR)
        if name.startswith("mlbench-r-") and name.rsplit("-n", 1)[0].removeprefix("mlbench-") in ours
    ]


def test_a_shaped_all_reduce_carries_its_link_and_an_unshaped_one_far_more(tmp_path: Path) -> None:
    shaped = apply_one(tmp_path, ALLREDUCE.format(name="shaped", network="  network: 100Mbit\n"))
    busbw = _busbw(shaped)
    assert 0.5 * 100 * MBIT <= busbw <= 1.05 * 100 * MBIT
    network = shaped["network"]
    assert isinstance(network, dict)
    assert network["method"] == "emulated" and network["held"] is True and network["nodes"] == 2
    assert 0.5 <= network["busbw_fraction"] <= 1.05
    assert shaped["suspects"] == []
    free = apply_one(tmp_path, ALLREDUCE.format(name="free", network=""))
    assert free.get("network") is None
    assert _busbw(free) > 4 * busbw
    assert _leftovers() == [] and ledger.records(load_settings().runs_dir) == []


def test_latency_is_emulated_where_the_kernel_has_netem(tmp_path: Path) -> None:
    if not probe.probe().netem:
        path = tmp_path / "spec.yaml"
        path.write_text(
            ALLREDUCE.format(name="delayed", network="  network: {bandwidth: 1Gbit, latency: 20ms}\n")
        )
        refused = mlbench("plan", str(path))
        assert refused.returncode != 0
        assert "this kernel has no netem: latency cannot be emulated here; bandwidth can" in refused.stderr
        pytest.skip("this kernel has no netem qdisc: latency cannot be emulated (the refusal is checked)")
    run = apply_one(tmp_path, ALLREDUCE.format(name="delayed", network="  network: {latency: 20ms}\n"))
    latency = run["allreduce"]["fp32"]["min_size_latency_p50_s"]  # type: ignore[index]
    assert latency >= 0.04  # an all-reduce of two ranks crosses the link both ways: 2 x 20 ms


def test_cancel_removes_the_runs_links(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(LONG.format(name="cancelled"))
    started = mlbench("apply", "--detach", str(path))
    assert started.returncode == 0, started.stderr
    wait_for(lambda: len(_leftovers()) == 2, "the run's two namespaces", 120, poll=0.2)
    done = mlbench("cancel", "cancelled-gloo-2w-100mbit")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _leftovers() == [], "its namespaces removed", 30, poll=0.2)
    (run,) = json.loads(mlbench("results", str(path), "-o", "json").stdout)["runs"]
    assert run["state"] == "cancelled"


def test_what_a_sigkilled_apply_left_goes_the_next_time_the_store_is_used(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(LONG.format(name="killed"))
    apply = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", str(path)], stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: len(_leftovers()) == 2, "the run's two namespaces", 120, poll=0.2)
    finally:
        apply.send_signal(signal.SIGKILL)
        apply.wait()
    (record,) = ledger.records(load_settings().runs_dir)
    # the ranks outlive apply (they run in sessions of their own): kill them too, as a crash would
    for pid in processes.marked_pids(record.run_id) | ledger.namespace_pids(record.layout().namespaces):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: not ledger.namespace_pids(record.layout().namespaces),
        "no process left in them",
        120,
        poll=0.2,
    )
    assert len(_leftovers()) == 2  # nobody is left to remove them...
    assert mlbench("status").returncode == 0  # ...until the store is used again
    assert _leftovers() == []
    assert ledger.records(load_settings().runs_dir) == []


def test_two_shaped_runs_at_once_do_not_collide(tmp_path: Path) -> None:
    paths = []
    for name in ("one", "two"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(ALLREDUCE.format(name=name, network="  network: 100Mbit\n"))
        paths.append(path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mlbench_tui", "apply", str(p)], stderr=subprocess.PIPE, text=True
        )
        for p in paths
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    for path in paths:
        (run,) = json.loads(mlbench("results", str(path), "-o", "json").stdout)["runs"]
        assert run["state"] == "succeeded" and run["network"]["held"] is True
    assert _leftovers() == []


def test_without_cap_net_admin_plan_and_apply_refuse_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(ALLREDUCE.format(name="unprivileged", network="  network: 100Mbit\n"))
    for command in ("plan", "apply"):
        done = subprocess.run(
            [
                "setpriv",
                "--bounding-set",
                "-net_admin,-sys_admin",
                "--",
                sys.executable,
                "-m",
                "mlbench_tui",
                command,
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        assert "lacks CAP_NET_ADMIN and CAP_SYS_ADMIN" in done.stderr
        assert "Runs without spec.network still work" in done.stderr
        assert "Traceback" not in done.stderr
    assert _leftovers() == []
    assert json.loads(mlbench("results", str(path), "-o", "json").stdout or '{"runs": []}')["runs"] == []


def test_the_dry_run_says_how_the_links_are_made(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(ALLREDUCE.format(name="dry", network="  network: 100Mbit\n"))
    done = mlbench("apply", "--dry-run", str(path))
    assert done.returncode == 0, done.stderr
    assert "# network: 100Mbit per rank, 2 emulated nodes" in done.stdout
    assert "export MLBENCH_SERVER_SOCKET=" in done.stdout
    assert _leftovers() == []


def test_mpi_ranks_talk_tcp_over_the_links(tmp_path: Path) -> None:
    spec = ALLREDUCE.format(name="mpi", network="  network: 100Mbit\n").replace(
        "backend: gloo", "backend: mpi"
    )
    run = apply_one(tmp_path, spec)
    assert run["network"]["held"] is True  # type: ignore[index]
    assert 0.2 * 100 * MBIT <= _busbw(run) <= 1.05 * 100 * MBIT
    assert _leftovers() == []
