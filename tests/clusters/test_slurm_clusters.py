"""``mlbench cluster add slurm``: Slurm clusters recorded beside the Kubernetes ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_tui.cli import main
from mlbench_tui.errors import InfraError
from mlbench_tui.executors.slurm.cluster import SlurmCluster, current_name, resolve_cluster


def test_add_list_use_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    argv = ["cluster", "add", "slurm", "hpc", "--partition", "gpu", "--account", "proj", "--conf", str(conf)]
    assert main([*argv, "--workdir", str(tmp_path / "runs"), "--server-url", "http://login1:8765"]) == 0
    assert capsys.readouterr().out == "slurm:hpc\n"
    assert resolve_cluster("hpc") == SlurmCluster(
        name="hpc",
        partition="gpu",
        account="proj",
        workdir=str(tmp_path / "runs"),
        server_url="http://login1:8765",
        conf=str(conf),
    )
    assert resolve_cluster(None) == SlurmCluster()  # nothing chosen: the login node's own Slurm

    assert main(["cluster", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["hpc", "slurm", "ready", "gpu", "-", "-", "-", "no", "slurm:hpc"]

    assert main(["cluster", "use", "hpc"]) == 0
    assert capsys.readouterr().out == "slurm:hpc\n"
    assert current_name() == "hpc" and resolve_cluster(None).name == "hpc"
    assert main(["cluster", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("*")

    assert main(["cluster", "delete", "slurm", "hpc"]) == 0  # a record only: no confirmation
    assert current_name() is None and resolve_cluster(None) == SlurmCluster()
    with pytest.raises(InfraError, match="no Slurm cluster named 'hpc'"):
        resolve_cluster("hpc")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["default"], "names the login node's own Slurm configuration"),
        (["Bad_Name"], "invalid cluster name"),
        (["hpc", "--partition", "a b"], "--partition: 'a b' is not a Slurm name"),
        (["hpc", "--workdir", "relative/dir"], "--workdir must be an absolute path"),
        (["hpc", "--conf", "/no/such/slurm.conf"], "--conf /no/such/slurm.conf: no such file"),
        (["hpc", "--server-url", "login1:8765"], "must start with http:// or https://"),
    ],
)
def test_add_refuses_bad_options(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "add", "slurm", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert main(["cluster", "list", "-o", "json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"  # nothing recorded


def test_create_says_slurm_clusters_are_added_not_created(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "create", "slurm", "hpc", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "mlbench does not create Slurm clusters" in err and "mlbench cluster add slurm hpc" in err
