"""The slurm target: its layout rule (one rank per Slurm task), defaults and refused values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mlbench_tui.spec.models import BenchmarkSpec
from mlbench_tui.spec.policy import policy_issues
from mlbench_tui.spec.targets import DEFAULT_SLURM_GRACE_S, SlurmTarget


def doc(target: Any, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mlbench/v1",
        "kind": "Benchmark",
        "metadata": {"name": "m"},
        "spec": {"task": "0a", "target": target, **body},
    }


def test_short_form_and_defaults() -> None:
    target = BenchmarkSpec.model_validate(doc("slurm")).spec.target
    assert isinstance(target, SlurmTarget)
    assert (target.cluster, target.partition, target.nodes, target.tasks_per_node) == (None, None, None, None)
    assert target.time_limit_grace == DEFAULT_SLURM_GRACE_S and target.extra_args == []


@pytest.mark.parametrize(
    ("nodes", "per_node", "workers", "layout"),
    [
        (None, None, 4, (4, 1)),  # one rank per node unless told otherwise
        (None, 4, 8, (2, 4)),
        (2, None, 8, (2, 4)),
        (2, 4, 8, (2, 4)),
        (1, None, 1, (1, 1)),
    ],
)
def test_layout(nodes: int | None, per_node: int | None, workers: int, layout: tuple[int, int]) -> None:
    target = SlurmTarget(kind="slurm", nodes=nodes, tasks_per_node=per_node)
    assert target.layout(workers) == layout


@pytest.mark.parametrize(
    ("nodes", "ranks_per_node", "workers", "layout"),
    [(None, 4, 8, (2, 4)), (None, 4, 2, (1, 2)), (2, 4, 8, (2, 4)), (None, 8, 8, (1, 8))],
)
def test_ranks_per_node_stands_for_an_unset_tasks_per_node(
    nodes: int | None, ranks_per_node: int, workers: int, layout: tuple[int, int]
) -> None:
    assert SlurmTarget(kind="slurm", nodes=nodes).layout(workers, ranks_per_node) == layout


def test_hardware_ranks_per_node_is_checked_against_every_world_size_on_slurm() -> None:
    spec = BenchmarkSpec.model_validate(doc("slurm", workers=[2, 4, 6, 8], hardware={"ranks_per_node": 4}))
    (issue,) = policy_issues(spec)
    assert (
        issue.loc == ("spec", "workers", 2) and "do not fill whole nodes of 4 task(s) each" in issue.message
    )


@pytest.mark.parametrize(
    ("nodes", "per_node", "workers", "words"),
    [
        (None, 4, 6, "do not fill whole nodes of 4 task(s) each"),
        (4, None, 6, "do not split evenly over 4 node(s)"),
        (2, 2, 2, "cannot be placed as 2 node(s) x 2 task(s) per node (= 4 ranks)"),
        (4, None, 2, "do not split evenly over 4 node(s)"),  # more nodes than ranks
    ],
)
def test_layouts_that_cannot_be_placed(
    nodes: int | None, per_node: int | None, workers: int, words: str
) -> None:
    target = SlurmTarget(kind="slurm", nodes=nodes, tasks_per_node=per_node)
    with pytest.raises(ValueError, match="one rank per Slurm task") as info:
        target.layout(workers)
    assert words in str(info.value)


def test_every_world_size_of_a_sweep_is_checked() -> None:
    spec = BenchmarkSpec.model_validate(doc({"kind": "slurm", "tasks_per_node": 2}, workers=[1, 2, 3, 4]))
    issues = policy_issues(spec)
    assert [issue.loc for issue in issues] == [("spec", "workers", 0), ("spec", "workers", 2)]


@pytest.mark.parametrize(
    "target",
    [
        {"partition": "debug\n#SBATCH --uid=0"},  # a second directive smuggled in
        {"partition": "a b"},
        {"account": "`id`"},
        {"qos": "x'y"},
        {"constraint": "a100; reboot"},
        {"cluster": "../etc"},
        {"extra_args": ["--comment=$(id)"]},
        {"extra_args": ["--exclusive --uid=0"]},
        {"extra_args": ["--export=NONE"]},  # the token travels in sbatch's environment
        {"extra_args": ["--output=/tmp/x"]},
        {"nodes": 0},
        {"tasks_per_node": "2"},
    ],
)
def test_values_that_cannot_go_into_a_batch_script_are_refused(target: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BenchmarkSpec.model_validate(doc({"kind": "slurm", **target}))


def test_accepted_slurm_values() -> None:
    target = SlurmTarget(
        kind="slurm",
        partition="gpu,gpu-long",
        account="proj_42",
        qos="normal",
        constraint="a100&(ib|roce)",
        extra_args=["--exclusive", "--reservation=bench", "--gpu-bind=closest"],
    )
    assert target.constraint == "a100&(ib|roce)"
