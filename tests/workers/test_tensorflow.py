"""TensorFlow task 1a: cluster config, the local TF launcher, and a 2-worker smoke run via ``mlbench apply``.

The smoke run is the one test here that imports TensorFlow (in two worker processes): ResNet-20
with MultiWorkerMirroredStrategy on a small synthetic CIFAR-10 until a relaxed accuracy goal.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sqlite3
import sys
from pathlib import Path

import pytest
from mlbench_worker import wire
from mlbench_worker.config import ConfigError
from mlbench_worker.tasks.tf_resnet20 import tf_config
from support.smoke import apply_one

from mlbench_tui.executors.local import tf_launch
from mlbench_tui.store.engine import default_db_path


def test_tf_config_from_env_or_worker_list() -> None:
    given = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    assert tf_config({"TF_CONFIG": json.dumps(given)}, 1, 2) == given
    built = tf_config({"MLBENCH_TF_WORKERS": "job-0.svc:2222, job-1.svc:2222"}, 1, 2)
    assert built == {
        "cluster": {"worker": ["job-0.svc:2222", "job-1.svc:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert tf_config({}, 0, 1) == {}
    with pytest.raises(ConfigError, match="3 workers but the run plans 2"):
        tf_config({"MLBENCH_TF_WORKERS": "a:1,b:2,c:3"}, 0, 2)
    with pytest.raises(ConfigError, match="needs TF_CONFIG or MLBENCH_TF_WORKERS"):
        tf_config({}, 0, 2)


def test_launcher_starts_one_process_per_worker_with_its_own_tf_config(tmp_path: Path) -> None:
    script = "import os, sys; open(sys.argv[1] + os.environ['RANK'], 'w').write(os.environ['TF_CONFIG'])"
    code = tf_launch.main(["--nproc", "3", "--", sys.executable, "-c", script, str(tmp_path / "w")])
    assert code == 0
    docs = [json.loads((tmp_path / f"w{i}").read_text()) for i in range(3)]
    assert [d["task"]["index"] for d in docs] == [0, 1, 2]
    workers = docs[0]["cluster"]["worker"]
    assert len(set(workers)) == 3 and all(d["cluster"]["worker"] == workers for d in docs)


def test_launcher_stops_the_others_when_one_worker_fails(tmp_path: Path) -> None:
    script = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    code = tf_launch.main(["--nproc", "2", "--", sys.executable, "-c", script])
    assert code == 3
    assert tf_launch.main(["--nproc", "0", "--", "x"]) == 2


def test_executors_give_tensorflow_plans_a_cluster(tmp_path: Path) -> None:
    from support.kube_api import make_launch, make_plan

    from mlbench_tui.executors.kubernetes import manifests
    from mlbench_tui.executors.kubernetes import pod as pod_template
    from mlbench_tui.executors.local.executor import LocalExecutor

    plan = make_plan(framework="tensorflow", workers=3)
    launch = make_launch()
    (job,) = [o for o in manifests.render(plan, launch) if o["kind"] == "Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    peers = env["MLBENCH_TF_WORKERS"].split(",")
    assert len(peers) == 3 and peers[0].endswith(f":{pod_template.MASTER_PORT}")
    assert tf_config({"MLBENCH_TF_WORKERS": env["MLBENCH_TF_WORKERS"]}, 2, 3)["task"]["index"] == 2
    local = make_plan(framework="tensorflow", workers=2, target={"kind": "local"})
    request = LocalExecutor(tmp_path).dryrun(local, launch).request
    command = request.command
    assert request.mode.value == "tensorflow" and request.fallback is None  # never forked
    assert command[1:6] == ("-m", "mlbench_tui.executors.local.tf_launch", "--nproc", "2", "--")
    assert "torch.distributed.run" not in command


SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: tf-smoke
spec:
  task: resnet20-cifar10
  framework: tensorflow
  goal:
    metric: val_global_Prec@1
    target: 30
  max_time: 5m
  workers: 2
  backend: gloo
  hardware:
    cpu: "1"
  target: local
  data:
    source: synthetic
    options:
      train_samples: 512
      val_samples: 256
  hyperparameters:
    batch_size: 32
    max_epochs: 6
"""


@pytest.mark.slow
def test_two_tensorflow_workers_reach_a_relaxed_goal_through_mlbench_apply(tmp_path: Path) -> None:
    if importlib.util.find_spec("tensorflow") is None:  # without importing it here (slow)
        pytest.skip("the tensorflow extra is not installed")
    run = apply_one(tmp_path, SPEC, timeout=280)
    assert run["state"] == "succeeded" and run["reached"] is True, run["stop_reason"]
    assert run["fingerprint"]["framework"] == "tensorflow" and run["fingerprint"]["tensorflow"]
    assert run["time_split"]["communication"] > 0 and run["time_split"]["compute"] > 0
    with contextlib.closing(sqlite3.connect(f"file:{default_db_path()}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT rank, payload FROM events WHERE kind = ?", (wire.RUN_STOP,)).fetchall()
    stops = {rank: wire.RunStop.from_payload(json.loads(payload)) for rank, payload in rows}
    # every rank says how it stopped, with its exit status, as PyTorch ranks do
    assert sorted(stops) == [0, 1] and all(s.exit_code == 0 and s.status == "success" for s in stops.values())
