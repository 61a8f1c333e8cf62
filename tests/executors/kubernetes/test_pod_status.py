"""A run's status from its owner and pods: which ranks each pod runs, and how the run stands."""

from __future__ import annotations

import pytest
from support.kube_api import make_launch, make_plan, pod

from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes.pod_status import layout_of, run_status
from mlbench_tui.lifecycle import RunHandle, RunState

HANDLE = RunHandle("kubernetes", "bench", "run-0001")


@pytest.mark.parametrize(
    ("overrides", "layout"),
    [
        ({"workers": 8, "ranks_per_node": 4}, (2, 4)),
        ({"workers": 3}, (3, 1)),
        (
            {
                "workers": 8,
                "ranks_per_node": 4,
                "backend": "mpi",
                "task": "0a",
                "task_name": "allreduce",
                "goal": None,
            },
            (2, 4),
        ),
    ],
)
def test_the_layout_is_read_back_from_the_rendered_owner(
    overrides: dict[str, object], layout: tuple[int, int]
) -> None:
    owner = manifests.render(make_plan(**overrides), make_launch())[0]
    assert layout_of(owner) == layout


def test_a_job_without_the_ranks_per_node_annotation_runs_one_rank_per_pod() -> None:
    """Jobs created before the annotation existed keep reading as they did."""
    owner = manifests.render(make_plan(workers=2), make_launch())[0]
    del owner["metadata"]["annotations"][manifests.ANNOTATION_RANKS_PER_NODE]
    assert layout_of(owner) == (2, 1)


def test_each_pod_stands_for_its_nodes_ranks() -> None:
    owner = manifests.render(make_plan(workers=8, ranks_per_node=4), make_launch())[0]
    job = owner["metadata"]["name"]
    running = run_status(HANDLE, owner, [pod(job, 0, "Succeeded"), pod(job, 1, "Running")])
    assert running.state is RunState.RUNNING
    assert [(r.rank, r.state) for r in running.ranks] == [(r, RunState.SUCCEEDED) for r in range(4)] + [
        (r, RunState.RUNNING) for r in range(4, 8)
    ]
    half = run_status(HANDLE, owner, [pod(job, 0, "Succeeded")])
    assert half.state is not RunState.SUCCEEDED  # 4 of 8 ranks done: the second pod has not started
    done = run_status(HANDLE, owner, [pod(job, 0, "Succeeded"), pod(job, 1, "Succeeded")])
    assert done.state is RunState.SUCCEEDED and len(done.ranks) == 8
