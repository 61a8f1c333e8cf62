"""Slurm job states as mlbench run states: parsing ``squeue``/``sacct``/``scontrol`` output (pure).

A job is found in ``squeue --states=all`` while it is queued, running and for ``MinJobAge``
seconds after it ended; later only accounting knows it (``sacct`` with slurmdbd, or
``sacct --completion`` where the cluster writes a job completion file). Every final state maps to
a run state with a message saying what happened in Slurm's words and ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlbench_tui.executors.api import RunState
from mlbench_tui.lifecycle import LaunchMilestones

STATES: dict[str, RunState] = {
    "PENDING": RunState.PENDING,
    "CONFIGURING": RunState.PENDING,
    "REQUEUED": RunState.PENDING,
    "REQUEUE_FED": RunState.PENDING,
    "REQUEUE_HOLD": RunState.PENDING,
    "RESV_DEL_HOLD": RunState.PENDING,
    "RESIZING": RunState.PENDING,
    "SUSPENDED": RunState.PENDING,
    "RUNNING": RunState.RUNNING,
    "COMPLETING": RunState.RUNNING,  # ended, epilog still running: the final state comes next
    "SIGNALING": RunState.RUNNING,
    "STAGE_OUT": RunState.RUNNING,
    "STOPPED": RunState.RUNNING,
    "COMPLETED": RunState.SUCCEEDED,
    "CANCELLED": RunState.CANCELLED,
    "FAILED": RunState.FAILED,
    "TIMEOUT": RunState.FAILED,
    "NODE_FAIL": RunState.FAILED,
    "OUT_OF_MEMORY": RunState.FAILED,
    "BOOT_FAIL": RunState.FAILED,
    "DEADLINE": RunState.FAILED,
    "PREEMPTED": RunState.FAILED,
    "REVOKED": RunState.FAILED,
    "SPECIAL_EXIT": RunState.FAILED,
}

# Why a job waits, in a few words (Slurm's reason codes, squeue(1) "JOB REASON CODES").
PENDING_REASONS: dict[str, str] = {
    "Resources": "waiting for free resources",
    "Priority": "jobs of higher priority are ahead",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "PartitionNodeLimit": "more nodes than the partition allows or has",
    "PartitionTimeLimit": "the time limit is above the partition's",
    "ReqNodeNotAvail": "a required node is not available",
    "NodeDown": "a required node is down",
    "BadConstraints": "no node has the requested features",
    "InvalidAccount": "the account is invalid",
    "InvalidQOS": "the QOS is invalid",
    "Dependency": "waiting for a dependency",
    "DependencyNeverSatisfied": "a dependency can never be satisfied",
    "BeginTime": "its start time has not come",
    "JobHeldUser": "held by the user",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "waiting for its reservation",
    "QOSMaxJobsPerUserLimit": "the QOS limit of jobs per user is reached",
    "AssocGrpCpuLimit": "the account's CPU limit is reached",
    "AssocGrpGRES": "the account's GPU limit is reached",
    "AssocMaxJobsLimit": "the account's job limit is reached",
}

_FINAL_MESSAGES: dict[str, str] = {
    "TIMEOUT": "Slurm stopped the job at its time limit{limit}: the ranks did not stop at max_time by "
    "themselves (raise max_time or target.time_limit_grace if setup takes long)",
    "NODE_FAIL": "a node of the job failed{nodes}",
    "OUT_OF_MEMORY": "a rank ran out of memory (raise hardware.memory)",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "the job reached its deadline",
    "PREEMPTED": "the job was preempted",
    "REVOKED": "the job was revoked (federation)",
    "CANCELLED": "cancelled",
    "FAILED": "the job failed{exit}",
    "SPECIAL_EXIT": "the job ended with a special exit state",
}

_EXIT_CODE = re.compile(r"\bExitCode=(\d+:\d+)")


@dataclass(frozen=True)
class JobInfo:
    """One Slurm job as a command reported it."""

    job_id: str
    state: str  # Slurm's base state: RUNNING, TIMEOUT, ...
    reason: str | None = None
    nodes: str | None = None  # Slurm hostlist, e.g. n[1-2]
    exit_code: str | None = None  # "code:signal"
    time_limit: str | None = None
    submitted: float | None = None  # Slurm's Submit, UNIX seconds
    started: float | None = None  # Slurm's Start (a pending job's is only an estimate)

    @property
    def run_state(self) -> RunState:
        return STATES.get(self.state, RunState.UNKNOWN)

    def milestones(self) -> LaunchMilestones:
        """When Slurm accepted the job and when it started (once it has: a pending job's Start
        is the scheduler's estimate)."""
        started = self.started if self.run_state is not RunState.PENDING else None
        return LaunchMilestones(submitted=self.submitted, started=started)

    def message(self) -> str | None:
        """What a user needs to know about this state (None for a plain run or success)."""
        state = self.run_state
        if state is RunState.PENDING:
            reason = self.reason if self.reason and self.reason != "None" else None
            if reason is None:
                return f"{self.state.lower()} in the Slurm queue"
            why = PENDING_REASONS.get(reason)
            return f"pending in the Slurm queue: {reason}" + (f" ({why})" if why else "")
        if state in (RunState.RUNNING, RunState.SUCCEEDED):
            return None
        if state is RunState.UNKNOWN:
            return f"unknown Slurm job state {self.state}"
        template = _FINAL_MESSAGES.get(self.state, "the job ended as {state}")
        text = template.format(
            state=self.state,
            limit=f" ({self.time_limit})" if self.time_limit and self.time_limit != "UNLIMITED" else "",
            nodes=f" ({self.nodes})" if self.nodes else "",
            exit=f" (exit code {self.exit_code})" if self.exit_code else "",
        )
        return f"{self.state}: {text}"


def base_state(text: str) -> str:
    """``CANCELLED by 0`` / ``CANCELLED+`` -> ``CANCELLED``."""
    return text.split()[0].rstrip("+") if text.strip() else "UNKNOWN"


TIME_ENV = {"SLURM_TIME_FORMAT": "%s"}
"""The environment that makes squeue and sacct print times as UNIX seconds (strftime's %s), so
no time zone of the controller's needs guessing."""


def unix_time(text: str) -> float | None:
    """A time Slurm printed under ``TIME_ENV`` (None for ``N/A``, ``Unknown``, ``None`` or 0)."""
    text = text.strip()
    return float(text) if text.isdigit() and int(text) > 0 else None


SQUEUE_FORMAT = "%i|%T|%r|%N|%l|%V|%S"


def parse_squeue(text: str, job_id: str) -> JobInfo | None:
    """The job's line of ``squeue --noheader --format=SQUEUE_FORMAT`` output, or None."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 5 and fields[0] == job_id:
            return JobInfo(
                job_id=job_id,
                state=base_state(fields[1]),
                reason=fields[2] or None,
                nodes=fields[3] or None,
                time_limit=fields[4] or None,
                submitted=unix_time(fields[5]) if len(fields) > 5 else None,
                started=unix_time(fields[6]) if len(fields) > 6 else None,
            )
    return None


SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Timelimit,Submit,Start"


def parse_sacct(text: str, job_id: str) -> JobInfo | None:
    """The job's allocation line of ``sacct --noheader --parsable2 --format=SACCT_FIELDS``
    (its steps, ``JOB.batch`` and ``JOB.0``, are skipped); the last record wins (requeues)."""
    found = None
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 5 and fields[0] == job_id:
            found = JobInfo(
                job_id=job_id,
                state=base_state(fields[1]),
                exit_code=fields[2] or None,
                nodes=fields[3] if fields[3] not in ("", "None assigned", "(null)") else None,
                time_limit=fields[4] or None,
                submitted=unix_time(fields[5]) if len(fields) > 5 else None,
                started=unix_time(fields[6]) if len(fields) > 6 else None,
            )
    return found


def exit_code_of(scontrol_text: str) -> str | None:
    """``ExitCode=1:0`` from ``scontrol show job --oneliner`` output."""
    match = _EXIT_CODE.search(scontrol_text)
    return match[1] if match else None
