"""The Slurm executor against a real two-node Slurm (tests/support/slurm.py): submission, the
queue's reasons, cancel, refusals, and a job's state after it left the queue."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.kube_api import make_plan
from support.slurm import SlurmCluster

from mlbench_tui.errors import ExecutorError, MlbenchError
from mlbench_tui.executors import get_executor
from mlbench_tui.executors.api import LaunchContext, RunHandle, RunState, RunStatus
from mlbench_tui.executors.slurm import cluster as slurm_clusters
from mlbench_tui.executors.slurm.executor import FINAL_FILE, SlurmExecutor
from mlbench_tui.plan import RunPlan, expand
from mlbench_tui.spec.loader import load_text

pytestmark = pytest.mark.slow


def slurm_plan(**target: Any) -> RunPlan:
    return make_plan(
        task="0a",
        task_name="allreduce",
        goal=None,
        max_time_s=None,
        resources={"memory": "256Mi"},
        target={"kind": "slurm", "cluster": "test", **target},
    )


def launch(run_id: str) -> LaunchContext:
    return LaunchContext(run_id=run_id, server_url="http://127.0.0.1:9", write_token="tok-secret")


def wait_for(executor: SlurmExecutor, handle: RunHandle, done: Any, timeout: float = 120) -> RunStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = executor.describe(handle)
        assert status is not None
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_srun_places_task_0_on_n1_and_task_1_on_n2(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run("srun", "-N2", "-n2", "--label", "printenv", "SLURMD_NODENAME").stdout
    assert sorted(out.split("\n")[:2]) == ["0: n1", "1: n2"]


def test_a_job_on_a_down_partition_shows_why_it_waits_and_cancel_is_idempotent(
    slurm_recorded: slurm_clusters.SlurmCluster, tmp_path: Path
) -> None:
    executor = get_executor("slurm")
    assert isinstance(executor, SlurmExecutor)
    before = time.time()
    handle = executor.submit(slurm_plan(partition="down"), launch("r-down"))
    assert handle.scheme == "slurm" and handle.where.endswith("@test")
    status = wait_for(executor, handle, lambda s: "PartitionDown" in (s.message or ""))
    assert status.state is RunState.PENDING
    assert status.message == "pending in the Slurm queue: PartitionDown (the partition is down)"
    assert [r.state for r in status.ranks] == [RunState.PENDING] * 2
    assert all(r.message == status.message for r in status.ranks)
    # Slurm's Submit, and no start for a job that waits (squeue's Start is only an estimate)
    assert status.milestones is not None and status.milestones.started is None
    submitted = status.milestones.submitted
    assert submitted is not None and int(before) <= submitted <= time.time()  # whole UNIX seconds

    executor.cancel(handle)
    status = wait_for(executor, handle, lambda s: s.state.is_terminal())
    assert status.state is RunState.CANCELLED
    executor.cancel(handle)  # again: nothing to do, no error
    executor.cancel(RunHandle("slurm", "999999@test", "r-nope"))  # a job Slurm never had

    # The final state is kept beside the run, so it stays known after Slurm forgets the job.
    run_dir = Path(executor.run_dir(slurm_recorded, "r-down"))
    assert json.loads((run_dir / FINAL_FILE).read_text())["state"] == "CANCELLED"
    # Without the kept state, the job completion file answers (this cluster has no accounting
    # database: plain sacct refuses, sacct --completion reads the file).
    (run_dir / FINAL_FILE).unlink()
    job_id = handle.where.split("@")[0]
    info = executor._accounted(slurm_recorded, job_id)
    assert info is not None and (info.state, info.run_state) == ("CANCELLED", RunState.CANCELLED)


def test_slurm_is_asked_at_most_once_per_interval(
    slurm_recorded: slurm_clusters.SlurmCluster, slurm_cluster: SlurmCluster
) -> None:
    patient = SlurmExecutor(query_interval_s=3600)
    handle = patient.submit(slurm_plan(partition="down"), launch("r-polled"))
    assert (status := patient.describe(handle)) is not None and status.state is RunState.PENDING
    job_id = handle.where.split("@")[0]
    slurm_cluster.run("scancel", job_id)  # behind this executor's back
    squeue = ["squeue", f"--jobs={job_id}", "--states=all", "--noheader", "--format=%T"]
    deadline = time.monotonic() + 30
    while slurm_cluster.run(*squeue).stdout.strip() != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (
        status := patient.describe(handle)
    ) is not None and status.state is RunState.PENDING  # its last answer
    patient.cancel(handle)  # its own cancel forgets the answer
    assert (status := patient.describe(handle)) is not None and status.state is RunState.CANCELLED


def test_the_script_holds_no_token_and_sbatch_refusals_are_clear(
    slurm_recorded: slurm_clusters.SlurmCluster,
) -> None:
    executor = SlurmExecutor()
    with pytest.raises(ExecutorError, match="sbatch refused the job: invalid partition specified: nope"):
        executor.submit(slurm_plan(partition="nope"), launch("r-nope"))
    run_dir = executor.run_dir(slurm_recorded, "r-nope")
    script = (run_dir / "job.sbatch").read_text()
    assert "tok-secret" not in script
    assert "tok-secret" not in (run_dir / "config.json").read_text()
    assert not (run_dir / "job.json").exists()  # nothing was submitted


def test_unknown_jobs_and_foreign_handles(slurm_recorded: slurm_clusters.SlurmCluster) -> None:
    executor = SlurmExecutor()
    assert executor.describe(RunHandle("slurm", "999999@test", "r-gone")) is None
    with pytest.raises(ExecutorError, match="not a Slurm run"):
        executor.describe(RunHandle("local", "host", "r-1"))
    with pytest.raises(MlbenchError, match="no Slurm cluster named 'elsewhere'"):
        executor.describe(RunHandle("slurm", "1@elsewhere", "r-1"))


def test_mpi_is_refused_before_submission_where_slurm_has_no_pmix(
    slurm_recorded: slurm_clusters.SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in srun answers --mpi=list as a Slurm built without PMIx does; sbatch must not run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'MPI plugin types are...'; echo '\tnone'; echo '\tpmi2'\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/submitted\n")
    for tool in ("srun", "sbatch"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    plan = slurm_plan().model_copy(update={"backend": "mpi"})
    with pytest.raises(ExecutorError, match=r"needs Slurm's PMIx plugin \(srun --mpi=pmix\)"):
        SlurmExecutor().submit(plan, launch("r-mpi"))
    assert not (tmp_path / "submitted").exists()


def test_extra_args_leave_the_job_name_task_count_and_time_limit_mlbench_set(
    slurm_recorded: slurm_clusters.SlurmCluster, slurm_cluster: SlurmCluster
) -> None:
    spec = (
        "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata:\n  name: named\nspec:\n  task: 0a\n"
        "  workers: 2\n  max_time: 30m\n  target:\n    kind: slurm\n    cluster: test\n"
        "    partition: down\n    extra_args: ['--comment=nightly', '-Q', '--nice=5']\n"
    )
    [loaded] = load_text(spec, "named.yaml")
    [plan] = expand(loaded.spec)
    executor = SlurmExecutor()
    handle = executor.submit(plan, launch("r-named"))
    try:
        job_id = handle.where.split("@")[0]
        shown = slurm_cluster.run("scontrol", "show", "job", job_id).stdout
        fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
        assert fields["JobName"] == plan.name == "named-gloo-2w"
        assert (fields["NumNodes"], fields["NumTasks"]) == ("2-2", "2")  # pending: min-max nodes
        assert fields["TimeLimit"] == "00:32:00"  # max_time plus the default grace of 2 minutes
        assert (fields["Comment"], fields["Nice"]) == ("nightly", "5")  # the extra options took effect
    finally:
        executor.cancel(handle)
