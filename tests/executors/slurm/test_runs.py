"""Runs through ``mlbench apply`` on a real two-node Slurm cluster (tests/support/slurm.py):
results, placement and logs in the store, a crashing rank, cancel, a queue that does not move,
and a rank stuck past max_time that Slurm stops.

The time-limit run waits for Slurm's minute, so it starts with the module (in its own
MLBENCH_HOME, beside the other runs: each node has CPUs for both) and is checked last.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.slurm import SlurmCluster
from support.smoke import mlbench
from support.waiting import wait_for

from mlbench_tui.executors.local import processes
from mlbench_tui.executors.slurm import cluster as slurm_clusters

pytestmark = pytest.mark.slow

SMALL_SWEEP = (
    "  hyperparameters: {sizes_max_exp: 3, num_sizes: 4, repetitions: 5, warmup: 1, dtypes: [fp32]}\n"
)
LONG_SWEEP = "  hyperparameters: {sizes_max_exp: 3, num_sizes: 4, repetitions: 1000000, dtypes: [fp32]}\n"


def spec_text(name: str, body: str, target: str = "") -> str:
    return (
        f"apiVersion: mlbench/v1\nkind: Benchmark\nmetadata:\n  name: {name}\nspec:\n{body}"
        f"  workers: 2\n  backend: gloo\n  target: {{kind: slurm, cluster: test{target}}}\n"
    )


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def run_json(spec: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "results", str(spec), "-o", "json"],
        capture_output=True,
        text=True,
        env=env or os.environ,
        timeout=60,
    )
    runs: list[dict[str, Any]] = json.loads(done.stdout)["runs"]
    return runs


def background_apply(spec: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or os.environ,
    )


def started_run_id(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """The run id ``apply`` prints when it has submitted the job (read from its stderr)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        match = re.search(r"started run (r-[0-9a-f]{12})", line)
        if match:
            return match[1]
        if not line and proc.poll() is not None:
            break
    raise AssertionError("apply never started its run:\n" + "".join(seen))


def rank_processes(run_id: str) -> dict[str, set[int]]:
    """Live processes of a run, by the Slurm node they run on."""
    nodes: dict[str, set[int]] = {}
    for pid in processes.marked_pids(run_id):
        node = processes.read_environ(pid).get("SLURMD_NODENAME", "?")
        nodes.setdefault(node, set()).add(pid)
    return nodes


@pytest.fixture(scope="module")
def timeout_run(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen[str], Path, dict[str, str]]]:
    """A run whose rank 1 hangs, with max_time 5s and a grace of 1s: Slurm's --time=1 stops it."""
    root = tmp_path_factory.mktemp("slurm-timeout")
    env = {**os.environ, "MLBENCH_HOME": str(root / "home")}
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlbench_tui",
            "cluster",
            "add",
            "slurm",
            "test",
            "--conf",
            str(slurm_cluster.conf),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert added.stdout == "slurm:test\n"
    body = (
        "  task: 0a\n  max_time: 5s\n"
        + LONG_SWEEP
        + '  env: {MLBENCH_INJECT_FAULT: "rank=1,step=0,mode=hang"}\n'
    )
    spec = write(root, "stuck", spec_text("stuck", body, ", time_limit_grace: 1s"))
    proc = background_apply(spec, env)
    try:
        yield proc, spec, env
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture(autouse=True)
def _timeout_run_starts_first(timeout_run: Any) -> None:
    """Every test of this module starts the time-limit run (once), so its wait overlaps theirs."""


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[str]:
    """``mlbench server --host 0.0.0.0`` on this test's store: reachable beyond loopback, so
    reads need the read token; ``apply`` finds and reuses it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=os.environ,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(15)


def test_allreduce_and_logreg_on_two_nodes(
    slurm_recorded: slurm_clusters.SlurmCluster, open_server: str, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write(specs, "ar", spec_text("ar", "  task: 0a\n" + SMALL_SWEEP))
    write(specs, "lr", spec_text("lr", "  task: 2a\n  goal: light\n  data: synthetic\n"))
    applied = mlbench("apply", str(specs), timeout=170)
    assert applied.returncode == 0, applied.stderr
    runs = {run["name"]: run for run in run_json(specs)}
    assert set(runs) == {"ar-gloo-2w", "lr-gloo-2w"}
    for run in runs.values():
        assert run["state"] == "succeeded"
        fingerprint = run["fingerprint"]
        assert (fingerprint["launcher"], fingerprint["node"]) == ("slurm", "n1")
        assert fingerprint["rank_nodes"] == ["n1", "n2"]  # rank 0 on n1, rank 1 on n2
    assert runs["ar-gloo-2w"]["allreduce"]["fp32"]["peak_busbw_gbps"] > 0
    assert runs["lr-gloo-2w"]["reached"] is True
    # the launcher's part of each start split where Slurm knows it: run created -> job start (from
    # squeue/sacct's Start) and job start -> the first rank's process
    for run in runs.values():
        startup = run["startup"]
        assert startup["launcher"] == "queued and spawned", startup
        parts = startup["launcher_parts"]
        assert list(parts) == ["queued", "spawned"] and min(parts.values()) >= 0, startup
        assert sum(parts.values()) == pytest.approx(startup["launcher_s"])

    # The workers reported to the server through this host's name, not loopback, and that
    # server answers reads only with the read token.
    port = open_server.rsplit(":", 1)[1]
    script = next((Path(os.environ["MLBENCH_HOME"]) / "state" / "runs").glob("*/job.sbatch")).read_text()
    assert f"export MLBENCH_SERVER_URL=http://{socket.gethostname()}:{port}\n" in script
    assert httpx.get(f"http://{socket.gethostname()}:{port}/v1/runs", timeout=10).status_code == 401

    status = mlbench("status", "ar-gloo-2w").stdout
    assert re.search(r"handle:\s+slurm://\d+@test/r-", status)
    assert re.search(
        r"(?m)^startup: .* before training; queued and spawned \S+ \S+ \(queued \S+ \S+, spawned ", status
    )
    # each rank's line: its node, then its hardware figures
    assert re.search(r"\n\s+0\s+succeeded\s+n1  rss [\d.]+ \S+\n\s+1\s+succeeded\s+n2  rss ", status), status
    logs = mlbench("logs", "ar-gloo-2w", "--rank", "0").stdout
    assert "all-reduce sweep" in logs and "run stopped: success" in logs


def test_a_crashing_rank_fails_the_run_with_its_traceback(
    slurm_recorded: slurm_clusters.SlurmCluster, tmp_path: Path
) -> None:
    body = '  task: 0a\n  env: {MLBENCH_INJECT_FAULT: "rank=1,step=0"}\n' + SMALL_SWEEP
    spec = write(tmp_path, "crash", spec_text("crash", body))
    applied = mlbench("apply", str(spec), timeout=120)
    assert applied.returncode == 1
    assert "rank 1 failed: InjectedFault" in applied.stderr
    status = mlbench("status", "crash-gloo-2w").stdout
    assert "state:    failed" in status and "error:    rank 1 failed: InjectedFault" in status
    rank1 = mlbench("logs", "crash-gloo-2w", "--rank", "1").stdout
    assert "Traceback (most recent call last)" in rank1 and "InjectedFault" in rank1


def test_cancel_mid_run_leaves_no_process_on_either_node(
    slurm_recorded: slurm_clusters.SlurmCluster, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    spec = write(tmp_path, "long", spec_text("long", "  task: 0a\n" + LONG_SWEEP))
    proc = background_apply(spec)
    follow: subprocess.Popen[str] | None = None
    try:
        run_id = started_run_id(proc)
        before = wait_for(
            lambda: (r := rank_processes(run_id)) and set(r) == {"n1", "n2"} and r, "ranks", 60, poll=0.2
        )
        job = re.search(r"slurm://(\d+)@test", mlbench("status", run_id).stdout)
        assert job is not None
        # mid-run: rank 0 is in its sweep (its processes exist long before it prints a line)
        wait_for(
            lambda: "all-reduce sweep" in mlbench("logs", run_id, "--rank", "0").stdout,
            "the sweep",
            60,
            poll=0.2,
        )
        follow = subprocess.Popen(
            [sys.executable, "-m", "mlbench_tui", "logs", run_id, "-f", "--rank", "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        cancelled = mlbench("cancel", run_id)
        assert cancelled.returncode == 0 and f"cancelled long-gloo-2w ({run_id})" in cancelled.stderr
        wait_for(lambda: not rank_processes(run_id), "the ranks to end", 30, poll=0.2)
        _, err = proc.communicate(timeout=60)
        followed, _ = follow.communicate(timeout=30)  # logs -f ends with the run
    finally:
        for child in (proc, follow):
            if child is not None and child.poll() is None:
                child.kill()
    assert "all-reduce sweep" in followed
    assert proc.returncode == 1, err
    assert not [pid for pids in before.values() for pid in pids if processes.is_alive(pid)]
    steps = [
        pid
        for pid in slurm_cluster.step_daemons()
        if f"[{job[1]}." in Path(f"/proc/{pid}/cmdline").read_text()
    ]
    assert steps == []  # no step daemon of the job on either node
    assert "state:    cancelled" in mlbench("status", run_id).stdout


def test_a_job_on_a_down_partition_shows_the_pending_reason(
    slurm_recorded: slurm_clusters.SlurmCluster, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    spec = write(tmp_path, "queued", spec_text("queued", "  task: 0a\n" + SMALL_SWEEP, ", partition: down"))
    proc = background_apply(spec)
    try:
        run_id = started_run_id(proc)
        reason = "pending in the Slurm queue: PartitionDown (the partition is down)"
        status = wait_for(
            lambda: (text := mlbench("status", run_id).stdout) and reason in text and text,
            "the reason",
            30,
            poll=0.2,
        )
        assert re.search(r"\n\s+0\s+pending\s+-\s+" + re.escape(reason), status), status
        proc.kill()  # apply dies without a word; the job is then cancelled behind mlbench's back
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert f"queued-gloo-2w: {reason}" in err
    job = re.search(r"slurm://(\d+)@test", status)
    assert job is not None
    slurm_cluster.run("scancel", job[1])
    # `mlbench status` asks Slurm about runs the store still thinks active.
    wait_for(
        lambda: "state:    cancelled" in mlbench("status", run_id).stdout,
        "the reconciled state",
        30,
        poll=0.2,
    )
    run_dir = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs" / run_id
    assert (run_dir / "job.sbatch").exists()
    assert mlbench("delete", run_id, "--yes").returncode == 0
    assert not run_dir.exists()  # its files on the shared filesystem went with it


def test_mpi_through_srun_and_pmix(slurm_recorded: slurm_clusters.SlurmCluster, tmp_path: Path) -> None:
    listed = subprocess.run(
        ["srun", "--mpi=list"], capture_output=True, text=True, env=slurm_recorded.client_env()
    )
    if "pmix" not in listed.stdout + listed.stderr:
        pytest.skip("this Slurm has no PMIx plugin (apt-get install libpmix-dev)")
    text = spec_text("armpi", "  task: 0a\n" + SMALL_SWEEP).replace("backend: gloo", "backend: mpi")
    spec = write(tmp_path, "armpi", text)
    applied = mlbench("apply", str(spec), timeout=120)
    assert applied.returncode == 0, applied.stderr
    (run,) = run_json(spec)
    assert run["fingerprint"]["rank_nodes"] == ["n1", "n2"]
    assert run["fingerprint"]["mpi_library"].startswith("Open MPI")


def test_a_rank_stuck_past_max_time_ends_as_timeout(
    timeout_run: tuple[subprocess.Popen[str], Path, dict[str, str]],
) -> None:
    proc, spec, env = timeout_run
    _, err = proc.communicate(timeout=420)  # Slurm checks time limits every 30 s or so: a bound for a hang
    assert proc.returncode == 1, err
    (run,) = run_json(spec, env)
    assert run["state"] == "failed"
    assert run["message"].startswith("TIMEOUT: Slurm stopped the job at its time limit (1:00)"), run[
        "message"
    ]
    assert "stuck-gloo-2w (failed)" in err
