"""The spec commands through a real subprocess: exit codes, stdout/stderr split, formats."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "fixtures" / "bad_specs"


def mlbench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_validate_examples_directory() -> None:
    proc = mlbench("validate", "specs")
    assert proc.returncode == 0, proc.stderr
    assert "ok  specs/quickstart.yaml: quickstart (task 1a, 1 run(s))" in proc.stdout
    # only notes that this machine cannot run an example as it is (1b's 8 GPUs on a CPU machine)
    for line in proc.stderr.splitlines():
        assert line.startswith("note: specs/") and "this machine cannot run it as it is" in line, line
    quiet = mlbench("validate", "-q", "specs/quickstart.yaml")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_validate_misspelled_key_prints_location_and_hint() -> None:
    proc = mlbench("validate", "specs/quickstart.yaml", str(BAD / "01-misspelled-key.yaml"))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (
        f"{BAD / '01-misspelled-key.yaml'}:7:3: unknown key 'wokers' in spec (hint: did you mean 'workers'?)"
        in (proc.stderr)
    )
    assert "Traceback" not in proc.stderr


def test_validate_json_output() -> None:
    proc = mlbench("validate", "-o", "json", "specs/quickstart.yaml", str(BAD / "21-duplicate-key.yaml"))
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False
    assert [s["name"] for s in doc["specs"]] == ["quickstart"]
    assert len(doc["specs"][0]["spec_hash"]) == 64
    (issue,) = doc["issues"]
    assert (issue["line"], issue["col"]) == (8, 3) and "duplicate key" in issue["message"]


def test_every_bad_fixture_exits_2_without_traceback() -> None:
    proc = mlbench("validate", str(BAD))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) > 40


def test_plan_formats() -> None:
    table = mlbench("plan", "specs/task-0a-allreduce.yaml")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "TASK", "BACKEND", "WORKERS"]
    assert [ln.split()[0] for ln in lines[1:]] == [
        "allreduce-cpu-gloo-2w",
        "allreduce-cpu-gloo-4w",
        "allreduce-cpu-mpi-2w",
        "allreduce-cpu-mpi-4w",
    ]
    plans = json.loads(mlbench("plan", "-o", "json", "specs/quickstart.yaml").stdout)
    assert [p["name"] for p in plans] == ["quickstart-gloo-2w"]
    assert plans[0]["hyperparameters"]["batch_size"] == 64
    yaml_out = mlbench("plan", "-o", "yaml", "specs/smoke-kind.yaml")
    assert yaml_out.returncode == 0, yaml_out.stderr
    docs = list(YAML(typ="safe").load_all(yaml_out.stdout))
    # Kubernetes targets print their manifests (kubectl apply -f - accepts them), token left out.
    assert [d["kind"] for d in docs] == ["Job", "Secret", "ConfigMap", "Service"]
    assert docs[0]["metadata"]["annotations"]["mlbench.io/run-name"] == "smoke-kind-gloo-2w"


def test_plan_prints_slurm_batch_scripts() -> None:
    script = mlbench("plan", "-o", "sbatch", "specs/smoke-slurm.yaml")
    assert script.returncode == 0, script.stderr
    assert (
        "#SBATCH --job-name=smoke-slurm-gloo-2w\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
        in script.stdout
    )
    assert "#SBATCH --time=7\n" in script.stdout  # max_time 5m + 2m grace
    assert "exec srun --ntasks=2" in script.stdout and "MLBENCH_RUN_TOKEN=" not in script.stdout
    others = mlbench("plan", "-o", "sbatch", "specs/quickstart.yaml")
    assert others.returncode == 2 and "quickstart-gloo-2w do(es) not target slurm" in others.stderr


def test_plan_of_a_bad_spec_exits_2() -> None:
    proc = mlbench("plan", str(BAD / "04-nccl-without-gpu.yaml"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "backend nccl needs GPUs" in proc.stderr


def test_schema_prints_the_committed_schema() -> None:
    proc = mlbench("schema")
    assert proc.returncode == 0
    assert proc.stdout == (ROOT / "specs" / "mlbench.schema.json").read_text()


def test_tasks_table_detail_and_unknown() -> None:
    table = mlbench("tasks")
    assert table.returncode == 0
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "MODEL", "DATASET"]
    assert [r.split()[0] for r in rows] == ["0a", "1a", "1b", "2a", "3a", "4a", "4b"]
    assert re.search(r"val_global_Perplexity +<= 70 +<= 90", table.stdout)
    detail = mlbench("tasks", "resnet20-cifar10")
    assert "batch_size" in detail.stdout and "momentum" in detail.stdout
    assert "`data: {source: synthetic, options: {...}}` takes:" in detail.stdout  # 1a's synthetic set
    detail = mlbench("tasks", "1b")  # its data options too, per source, with their bounds
    assert "| `image_size` | `224` | >= 32, <= 1024 |" in detail.stdout
    assert "`data: {source: path, options: {...}}` takes:" in detail.stdout
    assert "`data: {source: download, options: {...}}` takes:" in detail.stdout
    assert '| `decoder` | `"auto"` | auto, cpu, gpu |' in detail.stdout
    as_json = json.loads(mlbench("tasks", "-o", "json").stdout)
    assert as_json[1]["goal"]["full"] == 80 and "batch_size" in as_json[1]["overridable"]
    unknown = mlbench("tasks", "resnet")
    assert unknown.returncode == 2 and "unknown task 'resnet'" in unknown.stderr


def test_init_writes_a_valid_spec_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "my.yaml"
    proc = mlbench("init", "3a", "--out", str(target), "--name", "mine")
    assert proc.returncode == 0, proc.stderr
    assert mlbench("validate", "-q", str(target)).returncode == 0
    again = mlbench("init", "3a", "--out", str(target))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert mlbench("init", "1a", "--out", str(target), "--force").returncode == 0
    stdout = mlbench("init", "allreduce")
    assert stdout.stdout.startswith("# yaml-language-server: $schema=") and "task: 0a" in stdout.stdout


def test_version() -> None:
    from mlbench_tui import __version__

    proc = mlbench("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"mlbench {__version__}"


def test_validate_reads_stdin() -> None:
    text = (ROOT / "specs" / "quickstart.yaml").read_text().replace("workers: 2", "workers: two")
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "validate", "-"],
        input=text,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert (
        "<stdin>:17:12: spec.workers: workers must be a positive integer or a list of them, got 'two'"
        in proc.stderr
    )
