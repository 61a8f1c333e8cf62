"""``mlbench cluster``: missing tools and credentials, the cost confirmation, list and use.

The first tests run the real CLI in a subprocess with a controlled PATH and HOME. Where a pulumi
binary must exist, a two-line shell script stands in for it (it answers ``pulumi version`` and
logs every call, so the tests also prove nothing else was run).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_tui.cli import main
from mlbench_tui.cluster_records import ClusterRecord, save_record
from mlbench_tui.clusters import kubeconfig
from mlbench_tui.commands.confirm import confirm
from mlbench_tui.errors import UsageError

CREATE = ["cluster", "create", "gcp", "test", "--nodes", "2", "--gpu", "1xT4"]


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _fake_pulumi(bin_dir: Path, log: Path, version: str = "v3.150.0") -> None:
    _tool(bin_dir, "pulumi", f'echo "$@" >> "{log}"\necho {version}')


def _run(args: list[str], tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {
        "PATH": str(bin_dir),
        "HOME": str(home),
        "MLBENCH_HOME": str(tmp_path / "mlbench"),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_create_without_pulumi_says_what_is_missing_and_how_to_install(tmp_path: Path, bin_dir: Path) -> None:
    done = _run([*CREATE, "--yes"], tmp_path, bin_dir)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "the pulumi CLI (not found on PATH)" in done.stderr
    assert "curl -fsSL https://get.pulumi.com | sh" in done.stderr
    # Everything else that is missing is listed in the same message.
    assert (
        "Google Cloud credentials" in done.stderr and "gcloud auth application-default login" in done.stderr
    )
    assert "a GCP project" in done.stderr
    assert "gke-gcloud-auth-plugin" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "kubeconfig").exists()


def test_missing_aws_credentials_and_old_pulumi(tmp_path: Path, bin_dir: Path) -> None:
    log = tmp_path / "pulumi.log"
    _fake_pulumi(bin_dir, log, version="v3.1.0")
    done = _run(["cluster", "create", "aws", "test", "--gpu", "1xT4", "--yes"], tmp_path, bin_dir)
    assert done.returncode == 1, done.stderr
    assert "pulumi CLI >= 3.100.0 (found 3.1.0)" in done.stderr
    assert "AWS credentials" in done.stderr and "aws configure" in done.stderr
    assert "the AWS CLI v2" in done.stderr
    assert log.read_text().split() == ["version"]


def test_credentials_are_the_only_thing_missing(tmp_path: Path, bin_dir: Path) -> None:
    _fake_pulumi(bin_dir, tmp_path / "pulumi.log")
    _tool(bin_dir, "gke-gcloud-auth-plugin", "exit 0")
    done = _run([*CREATE, "--project", "p", "--yes"], tmp_path, bin_dir)
    assert done.returncode == 1
    assert "missing:\n  - Google Cloud credentials" in done.stderr
    assert "pulumi CLI" not in done.stderr and "GCP project" not in done.stderr


def test_estimate_then_refuse_without_tty_or_yes(tmp_path: Path, bin_dir: Path) -> None:
    log = tmp_path / "pulumi.log"
    _fake_pulumi(bin_dir, log)
    _tool(bin_dir, "gke-gcloud-auth-plugin", "exit 0")
    key = tmp_path / "key.json"
    key.write_text("{}")
    done = _run([*CREATE, "--project", "p"], tmp_path, bin_dir, GOOGLE_APPLICATION_CREDENTIALS=str(key))
    assert done.returncode == 2, done.stderr
    assert "gcp cluster test: 2 x n1-standard-4 with 1xT4" in done.stderr
    assert "Estimated cost (us-central1 list prices as of" in done.stderr
    assert "total ~ $1.25/h" in done.stderr
    assert "refusing to create a paid cloud cluster without confirmation" in done.stderr
    assert "pass --yes" in done.stderr
    assert log.read_text().split() == ["version"]  # nothing was created


def test_delete_checks_tools_before_asking(tmp_path: Path, bin_dir: Path) -> None:
    done = _run(["cluster", "delete", "aws", "test"], tmp_path, bin_dir)
    assert done.returncode == 1
    assert "cannot delete the aws cluster test; missing:" in done.stderr
    assert "the pulumi CLI" in done.stderr and "AWS credentials" in done.stderr
    assert "confirmation" not in done.stderr


def test_bad_input_fails_before_any_tool_check(tmp_path: Path, bin_dir: Path) -> None:
    done = _run(["cluster", "create", "gcp", "test", "--gpu", "2xA10G", "--yes"], tmp_path, bin_dir)
    assert done.returncode == 2
    assert "A10G is not offered on gcp" in done.stderr and "pulumi" not in done.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_confirm() -> None:
    assert confirm("Create?", assume_yes=True, action="create", stdin=io.StringIO()) is True
    assert confirm("Create?", assume_yes=False, action="create", stdin=_Tty("y\n")) is True
    assert confirm("Create?", assume_yes=False, action="create", stdin=_Tty("\n")) is False
    assert confirm("Create?", assume_yes=False, action="create", stdin=_Tty("no\n")) is False
    with pytest.raises(UsageError, match="stdin is not a terminal"):
        confirm("Create?", assume_yes=False, action="create", stdin=io.StringIO("y\n"))


KUBECONFIG_TEXT = """apiVersion: v1
clusters:
- {name: c, cluster: {server: 'https://203.0.113.7'}}
users:
- {name: c, user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1beta1}}}
contexts:
- {name: c, context: {cluster: c, user: c}}
"""


def test_list_and_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setenv("PATH", os.defpath)
    for provider, name in (("aws", "bench"), ("gcp", "bench"), ("gcp", "other")):
        kubeconfig.merge_context(KUBECONFIG_TEXT, f"mlbench-{provider}-{name}")
        save_record(
            ClusterRecord(
                provider=provider,
                name=name,
                context=f"mlbench-{provider}-{name}",
                zone="us-central1-a" if provider == "gcp" else None,
                region="us-east-1" if provider == "aws" else "us-central1",
                nodes=2,
                gpu="1xT4",
                machine_type="n1-standard-4" if provider == "gcp" else "g4dn.xlarge",
                status="failed" if (provider, name) == ("gcp", "bench") else "ready",
            )
        )
    assert main(["cluster", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PROVIDER",
        "STATUS",
        "LOCATION",
        "NODES",
        "GPU",
        "MACHINE",
        "SPOT",
        "CONTEXT",
    ]
    rows = {tuple(line.split()[-9:-7]): line for line in lines[1:]}
    assert rows[("bench", "gcp")].split()[2] == "failed"
    assert rows[("bench", "aws")].lstrip().startswith("bench")
    assert rows[("other", "gcp")].startswith("*")  # the current context (created last)

    assert main(["cluster", "use", "bench"]) == 1
    assert "several clusters are named 'bench'" in capsys.readouterr().err
    assert main(["cluster", "use", "bench", "--provider", "aws"]) == 0
    assert capsys.readouterr().out.strip() == "mlbench-aws-bench"
    assert kubeconfig.current_context() == "mlbench-aws-bench"
    assert main(["cluster", "use", "nope"]) == 1
    assert "no cluster named 'nope'" in capsys.readouterr().err

    assert main(["cluster", "list", "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert '"context": "mlbench-gcp-other"' in out


def test_kind_create_takes_workers_as_the_node_count() -> None:
    from mlbench_tui.cli import build_parser

    args = build_parser().parse_args(["cluster", "create", "kind", "smoke", "--workers", "3"])
    assert (args.provider, args.name, args.nodes) == ("kind", "smoke", 3)
