"""Slurm's job states and reasons as run states and messages, from the commands' own output."""

from __future__ import annotations

import pytest

from mlbench_tui.executors.api import RunState
from mlbench_tui.executors.slurm.state import JobInfo, exit_code_of, parse_sacct, parse_squeue
from mlbench_tui.lifecycle import LaunchMilestones


@pytest.mark.parametrize(
    ("state", "run_state"),
    [
        ("PENDING", RunState.PENDING),
        ("RUNNING", RunState.RUNNING),
        ("COMPLETING", RunState.RUNNING),
        ("COMPLETED", RunState.SUCCEEDED),
        ("FAILED", RunState.FAILED),
        ("CANCELLED", RunState.CANCELLED),
        ("TIMEOUT", RunState.FAILED),
        ("NODE_FAIL", RunState.FAILED),
        ("OUT_OF_MEMORY", RunState.FAILED),
        ("PREEMPTED", RunState.FAILED),
        ("SOMETHING_NEW", RunState.UNKNOWN),
    ],
)
def test_states(state: str, run_state: RunState) -> None:
    assert JobInfo("7", state).run_state is run_state


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (
            JobInfo("7", "PENDING", reason="Resources"),
            "pending in the Slurm queue: Resources (waiting for free resources)",
        ),
        (
            JobInfo("7", "PENDING", reason="Priority"),
            "pending in the Slurm queue: Priority (jobs of higher priority are ahead)",
        ),
        (
            JobInfo("7", "PENDING", reason="PartitionDown"),
            "pending in the Slurm queue: PartitionDown (the partition is down)",
        ),
        (JobInfo("7", "PENDING", reason="SomeNewReason"), "pending in the Slurm queue: SomeNewReason"),
        (JobInfo("7", "PENDING", reason="None"), "pending in the Slurm queue"),
        (JobInfo("7", "RUNNING"), None),
        (JobInfo("7", "COMPLETED"), None),
        (
            JobInfo("7", "TIMEOUT", time_limit="1:00"),
            "TIMEOUT: Slurm stopped the job at its time limit (1:00): the ranks did not stop at max_time by "
            "themselves (raise max_time or target.time_limit_grace if setup takes long)",
        ),
        (JobInfo("7", "NODE_FAIL", nodes="n[1-2]"), "NODE_FAIL: a node of the job failed (n[1-2])"),
        (JobInfo("7", "OUT_OF_MEMORY"), "OUT_OF_MEMORY: a rank ran out of memory (raise hardware.memory)"),
        (JobInfo("7", "FAILED", exit_code="1:0"), "FAILED: the job failed (exit code 1:0)"),
        (JobInfo("7", "CANCELLED"), "CANCELLED: cancelled"),
        (JobInfo("7", "SOMETHING_NEW"), "unknown Slurm job state SOMETHING_NEW"),
    ],
)
def test_messages(info: JobInfo, message: str | None) -> None:
    assert info.message() == message


def test_squeue_lines() -> None:
    text = "12|RUNNING|None|n[1-2]|5:00\n13|PENDING|PartitionDown||1:00\n"
    assert parse_squeue(text, "13") == JobInfo("13", "PENDING", reason="PartitionDown", time_limit="1:00")
    assert parse_squeue(text, "12") == JobInfo(
        "12", "RUNNING", reason="None", nodes="n[1-2]", time_limit="5:00"
    )
    assert parse_squeue(text, "1") is None  # 1 is not 12 or 13


def test_sacct_skips_steps_and_reads_the_allocation() -> None:
    text = (
        "21|CANCELLED by 0|0:15|n[1-2]|00:01:00\n21.batch|CANCELLED|0:15|n1|\n21.0|CANCELLED|0:15|n[1-2]|\n"
    )
    assert parse_sacct(text, "21") == JobInfo(
        "21", "CANCELLED", exit_code="0:15", nodes="n[1-2]", time_limit="00:01:00"
    )
    assert parse_sacct("30|PENDING|0:0|None assigned|UNLIMITED\n", "30") == JobInfo(
        "30", "PENDING", exit_code="0:0", time_limit="UNLIMITED"
    )


def test_submit_and_start_times_as_unix_seconds_give_the_launch_milestones() -> None:
    text = (
        "12|RUNNING|None|n[1-2]|5:00|1764282001|1764282004\n13|PENDING|Priority||1:00|1764282002|1764290000\n"
    )
    running = parse_squeue(text, "12")
    assert running is not None and (running.submitted, running.started) == (1764282001.0, 1764282004.0)
    assert running.milestones() == LaunchMilestones(submitted=1764282001.0, started=1764282004.0)
    pending = parse_squeue(text, "13")  # its Start is the scheduler's estimate, not a start
    assert pending is not None and pending.milestones() == LaunchMilestones(submitted=1764282002.0)
    done = parse_sacct("21|COMPLETED|0:0|n[1-2]|00:01:00|1764282001|1764282003\n", "21")
    assert done is not None and done.milestones().started == 1764282003.0
    never = parse_sacct("30|CANCELLED by 0|0:0|None assigned|UNLIMITED|1764282001|Unknown\n", "30")
    assert never is not None and never.milestones() == LaunchMilestones(submitted=1764282001.0)


def test_exit_code_from_scontrol() -> None:
    line = "JobId=5 JobName=x JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=1:0 RunTime=0"
    assert exit_code_of(line) == "1:0"
    assert exit_code_of("slurm_load_jobs error: Invalid job id specified") is None
