"""The Kubernetes executor against a real HTTP Kubernetes API mock (kmock) on 127.0.0.1.

The tests play the Job controller and the kubelet by writing pod objects into the mock API;
the executor only ever talks HTTP to it through the real kubernetes client.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.kube_api import MPIJOBS, KubeApi, make_launch, make_plan, pod
from support.waiting import wait_for

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors import get_executor
from mlbench_tui.executors.kubernetes import manifests
from mlbench_tui.executors.kubernetes.executor import KubernetesExecutor
from mlbench_tui.lifecycle import RunHandle, RunState

NS = "bench"
JOB = "run-0001"
HANDLE = RunHandle("kubernetes", NS, "run-0001")


@pytest.fixture()
def executor(kube: KubeApi) -> KubernetesExecutor:
    return KubernetesExecutor(kube.api_client(), request_timeout=5)


def _schedule(executor: KubernetesExecutor, **overrides: object) -> RunHandle:
    return executor.submit(make_plan(**overrides), make_launch())


def test_registry_resolves_the_kubernetes_executor_lazily() -> None:
    assert isinstance(get_executor("kubernetes"), KubernetesExecutor)


def test_dryrun_is_pure_and_returns_the_manifests(executor: KubernetesExecutor, kube: KubeApi) -> None:
    dry = executor.dryrun(make_plan(), make_launch())
    assert [m["kind"] for m in dry.request.manifests] == ["Job", "Secret", "ConfigMap", "Service"]
    assert list(dry.request.manifests) == manifests.render(make_plan(), make_launch())
    assert not [r for r in kube.requests() if r.resource is not None]


def test_schedule_applies_owner_suspended_then_children_owned_then_resumes(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    assert handle == HANDLE
    patches = [r for r in kube.requests() if r.method.value == "PATCH"]
    assert [(r.resource.plural if r.resource else None, r.name) for r in patches] == [
        ("jobs", JOB),
        ("secrets", f"{JOB}-token"),
        ("configmaps", f"{JOB}-config"),
        ("services", JOB),
        ("jobs", JOB),
    ]
    assert all(r.headers["Content-Type"].startswith("application/apply-patch+yaml") for r in patches)
    assert all(r.params.get("fieldManager") == "mlbench" for r in patches)
    assert [patches[0].data["spec"]["suspend"], patches[-1].data["spec"]["suspend"]] == [True, False]
    job = kube.get("batch/v1/jobs", NS, JOB)
    assert job is not None and job["spec"]["suspend"] is False
    uid = job["metadata"]["uid"]
    for resource, name in (
        ("v1/secrets", f"{JOB}-token"),
        ("v1/configmaps", f"{JOB}-config"),
        ("v1/services", JOB),
    ):
        child = kube.get(resource, NS, name)
        assert child is not None
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
    # the token travels only inside the Secret
    token = make_launch().write_token
    assert [r.resource.plural for r in kube.requests() if r.resource and token in r.text] == ["secrets"]


def test_reapplying_an_unchanged_run_is_a_no_op(executor: KubernetesExecutor, kube: KubeApi) -> None:
    _schedule(executor)
    before = {
        name: kube.get(res, NS, name)["metadata"]["resourceVersion"]
        for res, name in (("batch/v1/jobs", JOB), ("v1/secrets", f"{JOB}-token"), ("v1/services", JOB))
    }
    assert _schedule(executor) == HANDLE
    after = {
        name: kube.get(res, NS, name)["metadata"]["resourceVersion"]
        for res, name in (("batch/v1/jobs", JOB), ("v1/secrets", f"{JOB}-token"), ("v1/services", JOB))
    }
    assert after == before
    assert kube.names("batch/v1/jobs", NS) == [JOB]


def test_same_run_id_with_a_different_plan_is_a_conflict(executor: KubernetesExecutor, kube: KubeApi) -> None:
    _schedule(executor)
    with pytest.raises(ExecutorError, match="different plan") as info:
        _schedule(executor, workers=3)
    assert "cancel it first" in (info.value.hint or "")
    job = kube.get("batch/v1/jobs", NS, JOB)
    assert job is not None and job["spec"]["completions"] == 2


def test_existing_object_of_another_owner_under_the_name_is_a_conflict(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    other = manifests.job(make_plan(), make_launch())
    del other["metadata"]["annotations"]
    kube.put("batch/v1/jobs", NS, JOB, other)
    with pytest.raises(ExecutorError, match=f"Job {NS}/{JOB} already exists"):
        _schedule(executor)


def _evolve(
    kube: KubeApi, steps: list[tuple[str, str, dict[str, Any]]], delay: float = 0.15
) -> threading.Thread:
    """Apply controller/kubelet changes in the background, one every ``delay`` seconds."""

    def run() -> None:
        for resource, name, obj in steps:
            time.sleep(delay)
            kube.put(resource, NS, name, obj)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _pod(index: int, phase: str, **status: Any) -> tuple[str, str, dict[str, Any]]:
    return ("v1/pods", f"{JOB}-{index}-abcde", pod(JOB, index, phase, **status))


def test_watch_follows_pod_phases_to_success(executor: KubernetesExecutor, kube: KubeApi) -> None:
    """The watch reports the run pending, running and succeeded as its pods go through them; the
    pods finish only once the watch has seen them running, so no phase is shorter than one of the
    watch's reads however slow the machine."""
    handle = _schedule(executor)
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 2}}
    watch = executor.watch(handle, timeout=60, poll=0.5)  # a guard, not a window
    states = [next(watch).state]
    started = _evolve(kube, [_pod(0, "Pending"), _pod(1, "Pending"), _pod(0, "Running"), _pod(1, "Running")])
    for status in watch:
        states.append(status.state)
        if status.state is RunState.RUNNING:
            break
    started.join()
    finished = _evolve(kube, [_pod(0, "Succeeded"), _pod(1, "Succeeded"), ("batch/v1/jobs", JOB, complete)])
    states += [status.state for status in watch]
    finished.join()
    assert states[0] is RunState.PENDING
    assert RunState.RUNNING in states
    assert states[-1] is RunState.SUCCEEDED
    assert states.index(RunState.RUNNING) < states.index(RunState.SUCCEEDED)


def test_watch_reports_the_failed_rank_and_its_exit_code(executor: KubernetesExecutor, kube: KubeApi) -> None:
    handle = _schedule(executor)
    terminated = {"terminated": {"exitCode": 3, "reason": "Error"}}
    container = {
        "name": "worker",
        "image": "mlbench-worker:0.1.0",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
    }
    failed = {"containerStatuses": [{**container, "state": terminated}]}
    job_failed = {
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        }
    }
    thread = _evolve(
        kube,
        [
            _pod(0, "Running"),
            _pod(1, "Running"),
            _pod(1, "Failed", **failed),
            ("batch/v1/jobs", JOB, job_failed),
        ],
    )
    statuses = list(executor.watch(handle, timeout=20, poll=0.5))
    thread.join()
    last = statuses[-1]
    assert last.state is RunState.FAILED
    assert "rank 1" in (last.message or "") and "exit code 3" in (last.message or "")
    assert [r.exit_code for r in last.ranks if r.rank == 1] == [3]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    }
                ]
            },
            "rank 0 pending: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ),
        (
            {
                "containerStatuses": [
                    {
                        "name": "worker",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "mlbench-worker:0.1.0"',
                            }
                        },
                    }
                ]
            },
            'rank 0 pending: ImagePullBackOff: Back-off pulling image "mlbench-worker:0.1.0"',
        ),
    ],
)
def test_pending_reasons_reach_the_user(
    executor: KubernetesExecutor, kube: KubeApi, status: dict[str, object], expected: str
) -> None:
    handle = _schedule(executor)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", pod(JOB, 0, "Pending", **status))
    described = executor.describe(handle)
    assert described is not None
    assert described.state is RunState.PENDING
    assert described.message == expected


def test_deadline_exceeded_is_a_failure_with_the_reason(executor: KubernetesExecutor, kube: KubeApi) -> None:
    handle = _schedule(executor)
    condition = {
        "type": "Failed",
        "status": "True",
        "reason": "DeadlineExceeded",
        "message": "Job was active longer than specified deadline",
    }
    kube.put("batch/v1/jobs", NS, JOB, {"status": {"conditions": [condition]}})
    described = executor.describe(handle)
    assert described is not None and described.state is RunState.FAILED
    assert (described.message or "").startswith("DeadlineExceeded")


def test_log_streaming_follows_a_rank_until_its_pod_ends(executor: KubernetesExecutor, kube: KubeApi) -> None:
    handle = _schedule(executor)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", pod(JOB, 0, "Running"))
    kube.put("v1/pods", NS, f"{JOB}-1-abcde", pod(JOB, 1, "Running"))
    kube.log(NS, f"{JOB}-0-abcde", "epoch 0 loss 2.30")

    def more() -> None:
        time.sleep(0.3)
        kube.log(NS, f"{JOB}-0-abcde", "epoch 1 loss 1.70", "goal reached", finished=True)

    threading.Thread(target=more, daemon=True).start()
    started = time.monotonic()
    lines = list(executor.log_iter(handle, rank=0, follow=True))
    assert lines == ["epoch 0 loss 2.30", "epoch 1 loss 1.70", "goal reached"]
    assert time.monotonic() - started >= 0.25  # it really waited for the later lines
    log_requests = [r for r in kube.requests() if r.subresource == "log"]
    assert log_requests[-1].params["follow"] == "true" and log_requests[-1].params["container"] == "worker"


def _follow_in_background(
    executor: KubernetesExecutor, handle: RunHandle
) -> tuple[list[str], threading.Thread]:
    lines: list[str] = []

    def follow() -> None:
        lines.extend(executor.log_iter(handle, rank=0, follow=True))

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return lines, thread


def test_following_a_log_survives_transient_errors_and_a_dropped_connection_showing_each_line_once(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    name = f"{JOB}-0-abcde"
    kube.put("v1/pods", NS, name, pod(JOB, 0, "Running"))
    kube.log_fault(NS, name, 404, "NotFound")  # the log is not there yet
    kube.log_fault(NS, name, 503, "ServiceUnavailable")
    same = time.time_ns()
    kube.log(NS, name, "epoch 0", "epoch 0 again, same nanosecond", at_ns=same)
    lines, thread = _follow_in_background(executor, handle)
    wait_for(lambda: len(lines) == 2, "the followed lines", 60, poll=0.02)
    kube.log(NS, name, "epoch 1")
    wait_for(lambda: len(lines) == 3, "the followed lines", 60, poll=0.02)
    kube.drop_log_streams(NS, name)  # the API server goes away mid-stream ...
    kube.log(NS, name, "epoch 2", "goal reached", finished=True)  # ... and the rank carries on
    thread.join(15)
    assert not thread.is_alive()
    assert lines == ["epoch 0", "epoch 0 again, same nanosecond", "epoch 1", "epoch 2", "goal reached"]
    reads = [r for r in kube.requests() if r.subresource == "log"]
    assert len(reads) >= 4 and all(r.params.get("timestamps") == "true" for r in reads)


def test_a_follow_cut_off_after_the_run_ended_reads_the_rest_once_and_stops(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    name = f"{JOB}-0-abcde"
    kube.put("v1/pods", NS, name, pod(JOB, 0, "Running"))
    kube.log(NS, name, "epoch 0")
    lines, thread = _follow_in_background(executor, handle)
    wait_for(lambda: lines == ["epoch 0"], "the followed lines", 60, poll=0.02)
    kube.log(NS, name, "goal reached")
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}}
    kube.put("batch/v1/jobs", NS, JOB, complete)
    kube.put("v1/pods", NS, name, pod(JOB, 0, "Succeeded"))
    kube.drop_log_streams(NS, name)  # never marked finished: only a plain read can end it
    thread.join(15)
    assert not thread.is_alive()
    assert lines == ["epoch 0", "goal reached"]
    assert [r.params["follow"] for r in kube.requests() if r.subresource == "log"][-1] == "false"


def test_following_a_log_does_not_retry_a_permission_error(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", pod(JOB, 0, "Running"))
    kube.log_fault(NS, f"{JOB}-0-abcde", 403, "Forbidden")
    with pytest.raises(ExecutorError, match=r"forbidden \(403\).*read the log of pod bench/run-0001-0-abcde"):
        list(executor.log_iter(handle, rank=0, follow=True))
    # one read, refused at once: no retry, so no backoff sleep before it
    assert len([r for r in kube.requests() if r.subresource == "log"]) == 1


def test_logs_of_every_rank_are_prefixed_and_filtered(executor: KubernetesExecutor, kube: KubeApi) -> None:
    handle = _schedule(executor)
    for index in (0, 1):
        kube.put("v1/pods", NS, f"{JOB}-{index}-abcde", pod(JOB, index, "Succeeded"))
        kube.log(NS, f"{JOB}-{index}-abcde", f"hello from {index}", "loss 1.0", finished=True)
    assert list(executor.log_iter(handle, regex="hello")) == [
        "[rank 0] hello from 0",
        "[rank 1] hello from 1",
    ]
    followed = sorted(executor.log_iter(handle, follow=True, regex="hello"))
    assert followed == ["[rank 0] hello from 0", "[rank 1] hello from 1"]
    with pytest.raises(ExecutorError, match="invalid regular expression"):
        list(executor.log_iter(handle, regex="("))


def test_cancel_deletes_the_owner_in_the_foreground_and_is_idempotent(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    executor.cancel(handle)
    executor.cancel(handle)  # already gone: no error
    deletes = [r for r in kube.requests() if r.method.value == "DELETE"]
    assert deletes and all(r.data == {"propagationPolicy": "Foreground"} for r in deletes)
    assert deletes[0].resource is not None and deletes[0].resource.plural == "jobs"
    assert kube.names("batch/v1/jobs", NS) == []
    assert executor.describe(handle) is None


def test_describe_unknown_run_is_none(executor: KubernetesExecutor) -> None:
    assert executor.describe("kubernetes://bench/never-existed") is None
    with pytest.raises(ExecutorError, match="not a Kubernetes run"):
        executor.describe("local://host/run-1")


@pytest.mark.parametrize(
    ("method", "plural", "status", "reason", "expected", "hint"),
    [
        (
            "PATCH",
            "jobs",
            403,
            "Forbidden",
            r"forbidden \(403\): not allowed to apply Job bench/run-0001",
            "mlbench cluster init",
        ),
        (
            "PATCH",
            "secrets",
            409,
            "Conflict",
            r"conflict \(409\) while trying to apply Secret bench/run-0001-token",
            "new run id",
        ),
        (
            "GET",
            "jobs",
            500,
            "InternalError",
            r"the Kubernetes API server failed \(500\) while trying to read Job",
            "try again",
        ),
    ],
)
def test_api_errors_become_clear_messages(
    executor: KubernetesExecutor,
    kube: KubeApi,
    method: str,
    plural: str,
    status: int,
    reason: str,
    expected: str,
    hint: str,
) -> None:
    kube.fault(method, plural, status, reason, f"injected {reason.lower()}")
    with pytest.raises(ExecutorError, match=expected) as info:
        _schedule(executor)
    assert f"injected {reason.lower()}" in info.value.message
    assert hint in (info.value.hint or "")


def test_unreachable_api_server_is_a_clear_error() -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = "http://127.0.0.1:9"  # discard port: nothing listens
    config.retries = 0
    executor = KubernetesExecutor(client.ApiClient(config), request_timeout=2)
    with pytest.raises(ExecutorError, match="cannot reach the Kubernetes API"):
        executor.describe(HANDLE)


def test_mpi_without_the_operator_names_what_to_install(executor: KubernetesExecutor, kube: KubeApi) -> None:
    with pytest.raises(ExecutorError, match="Kubeflow MPI Operator") as info:
        _schedule(executor, backend="mpi")
    assert "mpi-operator" in (info.value.hint or "")
    assert kube.names("v1/secrets", NS) == []


def test_mpi_with_the_operator_applies_an_mpijob(executor: KubernetesExecutor, kube: KubeApi) -> None:
    kube.declare(MPIJOBS, "MPIJob")
    handle = _schedule(executor, backend="mpi")
    mpijob = kube.get(MPIJOBS, NS, JOB)
    assert mpijob is not None and mpijob["spec"]["runPolicy"]["suspend"] is False
    secret = kube.get("v1/secrets", NS, f"{JOB}-token")
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    described = executor.describe(handle)
    assert described is not None and described.state is RunState.PENDING
    executor.cancel(handle)
    assert kube.names(MPIJOBS, NS) == []


def test_missing_kubeconfig_context_is_a_clear_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []})
    )
    executor = KubernetesExecutor(context="nope", kubeconfig=str(kubeconfig))
    with pytest.raises(ExecutorError, match="cannot load a Kubernetes configuration for context 'nope'"):
        executor.describe(HANDLE)


def test_log_tailer_ships_every_ranks_lines_as_the_runner_expects(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    handle = _schedule(executor)
    tailer = executor.log_tailer(handle)
    for index in (0, 1):
        kube.put("v1/pods", NS, f"{JOB}-{index}-abcde", pod(JOB, index, "Running"))
        kube.log(NS, f"{JOB}-{index}-abcde", f"rank {index} epoch 0")
    deadline = time.monotonic() + 60
    got: list[tuple[int, str]] = []
    while len(got) < 2 and time.monotonic() < deadline:
        got += tailer.poll()
        time.sleep(0.05)
    assert sorted(got) == [(0, "rank 0 epoch 0"), (1, "rank 1 epoch 0")]
    for index in (0, 1):
        kube.log(NS, f"{JOB}-{index}-abcde", f"rank {index} done", finished=True)
        kube.put("v1/pods", NS, f"{JOB}-{index}-abcde", pod(JOB, index, "Succeeded"))
    assert sorted(tailer.poll(final=True)) == [(0, "rank 0 done"), (1, "rank 1 done")]
    with pytest.raises(ExecutorError, match="unknown run"):
        executor.log_tailer(RunHandle("kubernetes", NS, "other-run"))


def test_two_runs_in_one_namespace_keep_their_own_pods(executor: KubernetesExecutor, kube: KubeApi) -> None:
    first = _schedule(executor)
    second = executor.submit(make_plan(), make_launch(run_id="run-0002"))
    kube.put("v1/pods", NS, f"{JOB}-0-abcde", pod(JOB, 0, "Running"))
    kube.put("v1/pods", NS, "run-0002-0-abcde", pod("run-0002", 0, "Failed", run_id="run-0002"))
    one, two = executor.describe(first), executor.describe(second)
    assert one is not None and [(r.rank, r.state) for r in one.ranks] == [(0, RunState.RUNNING)]
    assert two is not None and two.state is RunState.FAILED
    assert kube.names("batch/v1/jobs", NS) == [JOB, "run-0002"]


def _two_nodes_of_four(executor: KubernetesExecutor) -> RunHandle:
    return _schedule(
        executor,
        backend="nccl",
        workers=8,
        ranks_per_node=4,
        resources={"gpus": 1, "gpu_type": "H100"},
    )


def test_ranks_that_share_a_node_share_a_pod(executor: KubernetesExecutor, kube: KubeApi) -> None:
    """2 nodes x 4 GPUs: one pod per node asks for its node's 4 GPUs on an H100 node, the pod's
    torchrun starts its 4 ranks, and each rank's status and log come from its node's pod."""
    handle = _two_nodes_of_four(executor)
    job = kube.get("batch/v1/jobs", NS, JOB)
    assert job is not None and (job["spec"]["completions"], job["spec"]["parallelism"]) == (2, 2)
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"mlbench.io/gpu": "true", "mlbench.io/gpu-model": "h100"}
    assert pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod_spec["containers"][0]["command"][:3] == ["python", "-m", "torch.distributed.run"]

    for index in (0, 1):
        kube.put("v1/pods", NS, f"{JOB}-{index}-abcde", pod(JOB, index, "Running"))
        rank = 4 * index
        kube.log(
            NS,
            f"{JOB}-{index}-abcde",
            f"[rank{rank}]:[rank {rank}] training 1a on 8 rank(s)",
            f"[rank{rank + 1}]:[rank {rank + 1}] device cuda:1",
            "[W init] torchrun's own warning",
        )
    status = executor.describe(handle)
    assert status is not None and status.state is RunState.RUNNING
    assert [(r.rank, r.state) for r in status.ranks] == [(r, RunState.RUNNING) for r in range(8)]
    assert list(executor.log_iter(handle, rank=5)) == ["[rank 5] device cuda:1"]
    assert list(executor.log_iter(handle, regex="device|torchrun")) == [
        "[rank 1] [rank 1] device cuda:1",
        "[pod 0] [W init] torchrun's own warning",
        "[rank 5] [rank 5] device cuda:1",
        "[pod 1] [W init] torchrun's own warning",
    ]
    tailer = executor.log_tailer(handle)
    for index in (0, 1):
        kube.log(NS, f"{JOB}-{index}-abcde", f"[rank{4 * index + 3}]:run stopped: success", finished=True)
        kube.put("v1/pods", NS, f"{JOB}-{index}-abcde", pod(JOB, index, "Succeeded"))
    shipped = tailer.poll(final=True)
    assert (3, "run stopped: success") in shipped and (7, "run stopped: success") in shipped
    assert (-1, "[pod 1] [W init] torchrun's own warning") in shipped
    assert (4, "[rank 4] training 1a on 8 rank(s)") in shipped
    final = executor.describe(handle)
    assert final is not None and final.state is RunState.SUCCEEDED and len(final.ranks) == 8


def test_a_run_with_a_network_reaches_the_api_with_its_link_limits(
    executor: KubernetesExecutor, kube: KubeApi
) -> None:
    network = {"bandwidth_bps": 100_000_000, "latency_s": 0.005}
    _schedule(executor, network=network)
    job = kube.get("batch/v1/jobs", NS, JOB)
    assert job is not None
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"]["kubernetes.io/egress-bandwidth"] == "100M"
    assert template["metadata"]["annotations"]["kubernetes.io/ingress-bandwidth"] == "100M"
    (shaper,) = template["spec"]["initContainers"]
    assert shaper["command"] == ["tc", "-batch", "/etc/mlbench/shaping.tc"]
    assert shaper["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    worker = template["spec"]["containers"][0]
    assert worker["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the rank itself gets none
    assert {"name": "MLBENCH_LINK_INTERFACE", "value": "eth0"} in worker["env"]
    config = kube.get("v1/configmaps", NS, f"{JOB}-config")
    assert config is not None
    assert (
        config["data"]["shaping.tc"] == "qdisc add dev eth0 root handle 1: netem delay 5000us limit 10000\n"
    )
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "config")
    assert {"key": "shaping.tc", "path": "shaping.tc"} in volume["configMap"]["items"]
