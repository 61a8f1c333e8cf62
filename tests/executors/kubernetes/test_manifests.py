"""Kubernetes manifests: golden files, the real Kubernetes OpenAPI schemas, the client's models."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube_api import make_launch, make_plan

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.kubernetes import manifests, pod_status
from mlbench_tui.executors.kubernetes import pod as pod_template

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"
K8S_VERSION = "1.30"  # oldest version we support: Indexed Jobs, pod annotations, SSA all GA

CASES: dict[str, dict[str, Any]] = {
    "gloo-cpu-2w": {},
    "nccl-gpu-pvc-4w": {
        "name": "resnet-nccl-4w",
        "backend": "nccl",
        "workers": 4,
        "max_time_s": None,
        "resources": {
            "cpu": "4",
            "threads_per_rank": 4,
            "memory": "16Gi",
            "gpus": 1,
            "gpu_type": "T4",
            "precision": "amp",
        },
        "data": {"source": "path", "path": "pvc://cifar10/prepared/v1", "options": {}},
        "target": {
            "image": "registry.example/mlbench-worker:0.1.0-cuda",
            "image_pull_policy": "Always",
            "node_selector": {"cloud.google.com/gke-nodepool": "gpu"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}
            ],
            "service_account": "bench-runner",
            "server_url": "http://mlbench.example:8080",
        },
        "env": {"NCCL_DEBUG": "INFO"},
    },
    # 2 nodes x 4 GPUs: one pod per node, its torchrun starting the node's 4 ranks (one GPU each)
    "nccl-gpu-2x4": {
        "name": "resnet-nccl-8w",
        "backend": "nccl",
        "workers": 8,
        "ranks_per_node": 4,
        "resources": {
            "cpu": "500m",
            "threads_per_rank": 1,
            "memory": "12Gi",
            "gpus": 1,
            "gpu_type": "H100",
            "precision": "bf16",
        },
        "target": {"image": "registry.example/mlbench-worker:0.1.0-cuda"},
    },
    "mpi-cpu-2w": {
        "name": "allreduce-mpi-2w",
        "task": "0a",
        "task_name": "allreduce",
        "backend": "mpi",
        "goal": None,
    },
    # spec.network: the bandwidth CNI plugin's annotations, latency from init containers running tc
    "gloo-cpu-2w-network": {
        "name": "resnet-gloo-2w-100mbit-5ms",
        "network": {"bandwidth_bps": 100_000_000, "latency_s": 0.005},
    },
    # clusters without that plugin: tc in the pod for both, what arrives through an ifb device
    "gloo-cpu-2w-network-tc": {
        "name": "resnet-gloo-2w-10mbit",
        "network": {"bandwidth_bps": 10_000_000, "kubernetes_bandwidth": "tc"},
    },
    "mpi-cpu-2w-network": {
        "name": "allreduce-mpi-2w-1gbit",
        "task": "0a",
        "task_name": "allreduce",
        "backend": "mpi",
        "goal": None,
        "network": {"bandwidth_bps": 1_000_000_000, "latency_s": 0.001},
    },
}


def _render(case: str, **kwargs: Any) -> list[dict[str, Any]]:
    return manifests.render(make_plan(**json.loads(json.dumps(CASES[case]))), make_launch(), **kwargs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_golden_file(case: str) -> None:
    text = manifests.to_yaml(_render(case))
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("MLBENCH_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), (
        f"manifests drifted from {path}; rerun with MLBENCH_UPDATE_GOLDEN=1 and review"
    )


def _schema_validator(definition: str) -> Any:
    """A validator for one definition of the Kubernetes OpenAPI (as shipped by kubernetes-validate)."""
    import jsonschema
    import kubernetes_validate
    from referencing import Registry, Resource

    base = (
        Path(kubernetes_validate.__file__).parent
        / "kubernetes-json-schema"
        / f"v{K8S_VERSION}.0-local-strict"
    )
    schema = json.loads((base / f"{definition}.json").read_text())
    defs = json.loads((base / "_definitions.json").read_text())
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_validates_against_the_kubernetes_openapi_schema(case: str) -> None:
    import kubernetes_validate

    for obj in _render(case):
        if obj["kind"] == "MPIJob":
            # The MPIJob CRD schema is not shipped offline: validate what Kubernetes itself
            # defines inside it (metadata and both pod templates) against the core schemas.
            _schema_validator("objectmeta-meta-v1").validate(obj["metadata"])
            for replica in obj["spec"]["mpiReplicaSpecs"].values():
                _schema_validator("podtemplatespec-v1").validate(replica["template"])
            continue
        assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == K8S_VERSION


def test_schema_validation_catches_a_misspelled_field() -> None:
    import kubernetes_validate

    job = _render("gloo-cpu-2w")[0]
    job["spec"]["completionsMode"] = "Indexed"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


MODELS = {"Job": "V1Job", "Secret": "V1Secret", "ConfigMap": "V1ConfigMap", "Service": "V1Service"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_round_trips_through_the_kubernetes_client_models(case: str) -> None:
    from kubernetes import client

    api = client.ApiClient()
    for obj in _render(case):
        if obj["kind"] == "MPIJob":
            for replica in obj["spec"]["mpiReplicaSpecs"].values():
                model = api.deserialize(
                    json.dumps(replica["template"]), "V1PodTemplateSpec", "application/json"
                )
                assert api.sanitize_for_serialization(model) == replica["template"]
            continue
        model = api.deserialize(json.dumps(obj), MODELS[obj["kind"]], "application/json")
        assert type(model).__name__ == MODELS[obj["kind"]]
        assert api.sanitize_for_serialization(model) == obj


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = objects[0]["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_indexed_job_wires_rendezvous_from_the_completion_index() -> None:
    objects = _render("gloo-cpu-2w")
    job, _, _, svc = objects
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (2, 2, "Indexed")
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1800
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"] == job["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    env = _env(pod["containers"][0])
    index_ref = {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    assert env["RANK"] == env["PET_NODE_RANK"] == index_ref
    assert (
        env["MASTER_ADDR"]
        == env["PET_MASTER_ADDR"]
        == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    )
    assert env["WORLD_SIZE"] == env["PET_NNODES"] == "2"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
    assert env["MLBENCH_RUN_ID"] == "run-0001"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    template_labels = spec["template"]["metadata"]["labels"]
    assert all(template_labels[k] == v for k, v in svc["spec"]["selector"].items())


def test_token_lives_only_in_the_secret() -> None:
    objects = _render("gloo-cpu-2w")
    token = make_launch().write_token
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["stringData"] == {"token": token}
    others = json.dumps([o for o in objects if o["kind"] != "Secret"])
    assert token not in others
    ref = _env(_container(objects))["MLBENCH_RUN_TOKEN"]
    assert ref == {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "token"}}


def test_redacted_rendering_has_no_token_and_says_who_sets_it() -> None:
    objects = _render("gloo-cpu-2w", redact=True)
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert "stringData" not in secret and "data" not in secret
    assert "mlbench apply" in secret["metadata"]["annotations"][manifests.ANNOTATION_TOKEN]
    assert make_launch().write_token not in json.dumps(objects)


def test_gpu_run_gets_resources_selectors_tolerations_and_dataset_volume() -> None:
    objects = _render("nccl-gpu-pvc-4w")
    pod = objects[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert pod["nodeSelector"] == {
        "mlbench.io/gpu": "true",
        "mlbench.io/gpu-model": "t4",  # the label the project's GPU pools carry (placement)
        "cloud.google.com/gke-nodepool": "gpu",
    }
    assert objects[0]["spec"]["template"]["metadata"]["labels"]["mlbench.io/gpu-type"] == "t4"
    keys = [t["key"] for t in pod["tolerations"]]
    assert keys == ["mlbench.io/gpu", "nvidia.com/gpu", "dedicated"]
    assert pod["serviceAccountName"] == "bench-runner"
    assert container["image"].endswith("-cuda") and container["imagePullPolicy"] == "Always"
    assert {"name": "dataset", "persistentVolumeClaim": {"claimName": "cifar10", "readOnly": True}} in pod[
        "volumes"
    ]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    config = json.loads(objects[2]["data"]["config.json"])
    assert config["data"]["path"] == "/mnt/dataset/prepared/v1"
    assert "activeDeadlineSeconds" not in objects[0]["spec"]
    env = _env(container)
    assert env["MLBENCH_SERVER_URL"] == "http://mlbench.example:8080"
    assert env["NCCL_DEBUG"] == "INFO"


def test_two_nodes_of_four_gpus_run_one_pod_per_node_with_torchrun() -> None:
    objects = _render("nccl-gpu-2x4")
    job, _, config_map, service = objects
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (2, 2)
    assert job["metadata"]["annotations"]["mlbench.io/ranks-per-node"] == "4"
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == pod_template.node_command()
    assert container["command"][:3] == ["python", "-m", "torch.distributed.run"]
    assert container["command"][-4:] == ["-m", "mlbench_worker", "--config", pod_template.CONFIG_FILE]
    env = _env(container)
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"} & set(env)  # torchrun sets them
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("2", "4")
    assert env["PET_MASTER_ADDR"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"
    # every rank's share, four times over: 4 GPUs per pod, one for each rank (rank i: the i-th)
    assert container["resources"]["limits"] == {"cpu": "2000m", "memory": "48Gi", "nvidia.com/gpu": "4"}
    assert pod["nodeSelector"] == {"mlbench.io/gpu": "true", "mlbench.io/gpu-model": "h100"}
    assert json.loads(config_map["data"]["config.json"])["world_size"] == 8


def test_a_gpu_model_named_loosely_selects_any_gpu_node() -> None:
    loose = make_plan(backend="nccl", resources={"gpus": 1, "gpu_type": "T4", "gpu_type_strict": False})
    pod = manifests.job(loose, make_launch())["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"mlbench.io/gpu": "true"}  # strict: false, the type is a label only


@pytest.mark.parametrize(
    ("cpu", "memory", "pod"), [(".5", "1.5Gi", ("2", "6Gi")), ("250m", "512Mi", ("1000m", "2048Mi"))]
)
def test_a_pods_resources_are_its_ranks_shares_added_up(cpu: str, memory: str, pod: tuple[str, str]) -> None:
    plan = make_plan(workers=8, ranks_per_node=4, resources={"cpu": cpu, "memory": memory})
    limits = manifests.job(plan, make_launch())["spec"]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert (limits["cpu"], limits["memory"]) == pod


def test_a_world_size_that_does_not_fill_whole_pods_is_refused() -> None:
    with pytest.raises(ExecutorError, match="6 workers do not fill whole nodes of 4 ranks"):
        manifests.render(make_plan(workers=6, ranks_per_node=4), make_launch())


def test_a_deadline_beyond_an_int64_is_refused() -> None:
    with pytest.raises(ExecutorError, match="activeDeadlineSeconds"):
        manifests.render(make_plan(max_time_s=1e30), make_launch())


def test_a_config_larger_than_a_config_map_holds_is_refused() -> None:
    plan = make_plan(env={"QUOTES": '"' * 600_000})  # each escaped as two bytes
    with pytest.raises(ExecutorError, match="more than the 1 MiB a Kubernetes ConfigMap holds"):
        manifests.render(plan, make_launch())


def test_mpi_ranks_that_share_a_node_are_slots_of_one_worker_pod() -> None:
    plan = make_plan(task="0a", task_name="allreduce", backend="mpi", goal=None, workers=8, ranks_per_node=4)
    spec = manifests.mpijob(plan, make_launch())["spec"]
    assert (spec["slotsPerWorker"], spec["mpiReplicaSpecs"]["Worker"]["replicas"]) == (4, 2)
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:3] == ["mpirun", "-n", "8"]


SCALE_CASES = {
    "one rank per pod": {},
    "8 GPUs per node": {"backend": "nccl", "ranks_per_node": 8, "resources": {"gpus": 1, "gpu_type": "H100"}},
    "mpi, 8 slots per worker": {
        "task": "0a",
        "task_name": "allreduce",
        "backend": "mpi",
        "goal": None,
        "ranks_per_node": 8,
    },
}
MIB = 1 << 20


@pytest.mark.parametrize("case", sorted(SCALE_CASES))
def test_a_thousand_ranks_render_within_the_object_limits_and_nothing_grows_per_rank(case: str) -> None:
    """1,024 ranks: the same objects as 16 (one indexed owner, no object per rank or node), a few
    more digits in them, the ConfigMap and Secret far under Kubernetes' 1 MiB, and the manifests
    say 1,024 ranks. Nothing is rendered per rank, so it takes as long as 16; how long that is
    depends on the machine and is not asserted."""
    overrides = SCALE_CASES[case]
    small = manifests.render(make_plan(workers=16, **json.loads(json.dumps(overrides))), make_launch())
    plan = make_plan(workers=1024, **json.loads(json.dumps(overrides)))
    large = manifests.render(plan, make_launch())
    text = manifests.to_yaml(large)
    preview = manifests.plan_yaml([plan])  # what `mlbench plan` prints
    assert [o["kind"] for o in large] == [o["kind"] for o in small]
    assert len(text) - len(manifests.to_yaml(small)) <= 32  # digits, nothing per rank
    assert "token omitted" in preview and len(preview) < 2 * len(text)
    for obj in large:
        if obj["kind"] in ("ConfigMap", "Secret"):
            assert len(json.dumps(obj).encode()) < MIB // 16
    owner, _, config_map, *_ = large
    assert json.loads(config_map["data"]["config.json"])["world_size"] == 1024
    per_node = overrides.get("ranks_per_node", 1)
    assert pod_status.layout_of(owner) == (1024 // per_node, per_node)


def test_loopback_server_url_becomes_the_in_cluster_service() -> None:
    env = _env(_container(_render("gloo-cpu-2w")))
    assert env["MLBENCH_SERVER_URL"] == "http://mlbench-server.bench.svc:8080"


def test_mpi_backend_renders_an_mpijob_with_mpirun_launcher() -> None:
    objects = _render("mpi-cpu-2w")
    assert [o["kind"] for o in objects] == ["MPIJob", "Secret", "ConfigMap"]
    spec = objects[0]["spec"]
    assert objects[0]["apiVersion"] == "kubeflow.org/v2beta1"
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    command = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["mpirun", "-n", "2"]
    assert command[-5:] == ["python", "-m", "mlbench_worker", "--config", "/etc/mlbench/config.json"]
    assert spec["runPolicy"]["backoffLimit"] == 0


@pytest.mark.parametrize(
    "run_id",
    ["run-0001", "Smoke_Run.2024/11", "1a-resnet", "x" * 200, "ÄÖÜ weird id!"],
)
def test_object_names_are_valid_dns_labels_and_stable(run_id: str) -> None:
    import re

    name = manifests.object_name(run_id)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert len(f"{name}-99999") <= 63
    assert manifests.object_name(run_id) == name
    value = manifests.label_value(run_id)
    assert len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)


def test_distinct_long_ids_get_distinct_names() -> None:
    assert manifests.object_name("a" * 100 + "1") != manifests.object_name("a" * 100 + "2")


@pytest.mark.parametrize("path", ["pvc://Bad_Claim/x", "pvc://claim/../etc"])
def test_bad_pvc_path_is_a_clear_error(path: str) -> None:
    plan = make_plan(data={"source": "path", "path": path, "options": {}})
    with pytest.raises(ExecutorError, match=r"data\.path"):
        manifests.render(plan, make_launch())


def test_yaml_output_is_multi_document_and_parses_back() -> None:
    objects = _render("gloo-cpu-2w")
    assert list(yaml.safe_load_all(manifests.to_yaml(objects))) == objects


def test_plan_yaml_previews_every_run_without_tokens() -> None:
    plans = [make_plan(), make_plan(name="smoke-gloo-4w", workers=4)]
    text = manifests.plan_yaml(plans)
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [d["kind"] for d in docs] == ["Job", "Secret", "ConfigMap", "Service"] * 2
    assert docs[4]["spec"]["completions"] == 4
    assert all("stringData" not in d for d in docs)
    assert "token omitted" in text


def test_manifest_hash_ignores_the_token_but_not_the_plan() -> None:
    a = manifests.render(make_plan(), make_launch(token="one"))
    b = manifests.render(make_plan(), make_launch(token="two"))
    c = manifests.render(make_plan(workers=3), make_launch(token="one"))
    key = manifests.ANNOTATION_MANIFEST_HASH
    assert a[0]["metadata"]["annotations"][key] == b[0]["metadata"]["annotations"][key]
    assert a[0]["metadata"]["annotations"][key] != c[0]["metadata"]["annotations"][key]


def test_with_owner_sets_a_blocking_owner_reference() -> None:
    job, secret, *_ = _render("gloo-cpu-2w")
    owned = manifests.with_owner(secret, job, "1234-uid")
    assert owned["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job["metadata"]["name"],
            "uid": "1234-uid",
            "controller": False,
            "blockOwnerDeletion": True,
        }
    ]
    assert "ownerReferences" not in secret["metadata"]


def _pod_env(container: dict[str, Any], index: int, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The environment Kubernetes gives the container of completion index ``index``."""
    env: dict[str, str] = {}
    for item in container["env"]:
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = item["value"]
        elif "fieldRef" in source:
            assert (
                source["fieldRef"]["fieldPath"]
                == f"metadata.annotations['{pod_template.COMPLETION_INDEX_ANNOTATION}']"
            )
            env[item["name"]] = str(index)
        else:
            ref = source["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
    env["JOB_COMPLETION_INDEX"] = str(index)  # the Job controller adds it for Indexed Jobs
    return env


def test_worker_runtime_understands_the_pods_environment_and_config() -> None:
    """Contract with mlbench_worker: rendezvous and config as the worker itself parses them."""
    from mlbench_worker.config import parse_config
    from mlbench_worker.launch.detect import detect_rendezvous

    objects = _render("gloo-cpu-2w")
    job, secret, config_map, svc = objects
    container = _container(objects)
    secrets = {secret["metadata"]["name"]: secret["stringData"]}
    for index in (0, 1):
        env = _pod_env(container, index, secrets)
        rendezvous = detect_rendezvous(env)
        assert (rendezvous.rank, rendezvous.world_size) == (index, 2)
        assert rendezvous.master_addr == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
        assert rendezvous.master_port == pod_template.MASTER_PORT
        assert env["MLBENCH_RUN_TOKEN"] == make_launch().write_token
    config = parse_config(json.loads(config_map["data"]["config.json"]))
    assert config.run_id == "run-0001" and config.world_size == 2
    assert container["command"][-1] == pod_template.CONFIG_FILE
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert pod_template.CONFIG_DIR in mounts
