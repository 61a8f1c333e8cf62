"""The wheel is the whole product: built, installed alone in a fresh venv, used from elsewhere.

The wheel is built from a copy of the package sources (so no build/ or egg-info lands in the
checkout) and installed with --no-deps into a new virtual environment that sees this
environment's dependencies through a .pth file appended after its own site-packages: nothing
is downloaded, and the checkout (its editable install's finder, PYTHONPATH, the working
directory) cannot shadow the wheel. Every command runs from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PREVIEW_SCRIPT = Path(__file__).parent / "support" / "gke_preview.py"


def package_dirs() -> dict[str, Path]:
    """Top-level package name -> its source directory, as pyproject's package finder sees them."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = {}
    for pattern in find["include"]:
        name = pattern.rstrip("*")
        found[name] = next(ROOT / where / name for where in find["where"] if (ROOT / where / name).is_dir())
    return found


def copy_sources(target: Path) -> None:
    """The files the build reads: the top-level files and each package's top-level directory."""
    target.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, target / path.name)
    for top in {source.relative_to(ROOT).parts[0] for source in package_dirs().values()}:
        shutil.copytree(ROOT / top, target / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path
    env: dict[str, str]

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one of the venv's programs (python, the mlbench console script) from elsewhere."""
        return subprocess.run(
            [self.venv / "bin" / program, *args],
            cwd=self.elsewhere,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def _check(args: list[str | Path], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    copy_sources(tmp / "src")
    # --no-build-isolation: setuptools comes from this environment (the dev extra), not PyPI.
    build = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", tmp / "src"]
    _check([sys.executable, "-m", "pip", *build])
    (wheel,) = (tmp / "dist").glob("*.whl")
    venv = tmp / "venv"
    _check([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    # Nothing of the checkout on the path: with it on PYTHONPATH, pip would take the checkout's
    # egg-info (an editable install's) for the package already installed and skip the wheel.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # pip runs from here with the new interpreter, which sees nothing installed but the wheel.
    _check(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
        env,
    )
    site = Path(_check([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    paths = sysconfig.get_paths()
    # Plain paths in a .pth go after the venv's own site-packages, and the .pth files in them
    # (the checkout's editable finder among them) are not run.
    (site / "dependencies.pth").write_text(f"{paths['purelib']}\n{paths['platlib']}\n")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", MLBENCH_HOME=str(tmp / "home"))
    return Installed(wheel, venv, elsewhere, env)


def test_wheel_holds_every_module_and_data_file_of_the_packages(installed: Installed) -> None:
    in_wheel = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [
        f"{name}/{path.relative_to(source).as_posix()}"
        for name, source in package_dirs().items()
        for path in sorted(source.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        if f"{name}/{path.relative_to(source).as_posix()}" not in in_wheel
    ]
    assert not missing, f"source files the wheel lacks: {missing}"
    read_at_run_time = [
        "mlbench_tui/tui/mlbench.tcss",
        "mlbench_tui/clusters/prices.json",
        "mlbench_infra/gke.py",
    ]
    assert set(read_at_run_time) <= in_wheel


def test_installed_cli_writes_and_validates_a_spec_outside_the_checkout(installed: Installed) -> None:
    where = installed.run("python", "-c", "import mlbench_tui, mlbench_worker; print(mlbench_tui.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where.stdout + where.stderr

    version = installed.run("mlbench", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"mlbench {installed.wheel.name.split('-')[1]}"

    init = installed.run("mlbench", "init", "1a", "--out", "bench.yaml")
    assert init.returncode == 0, init.stderr
    assert "task: 1a" in (installed.elsewhere / "bench.yaml").read_text()
    validate = installed.run("mlbench", "validate", "bench.yaml")
    assert validate.returncode == 0, validate.stdout + validate.stderr

    (installed.elsewhere / "bad.yaml").write_text(
        (installed.elsewhere / "bench.yaml").read_text().replace("workers: 2", "wokers: 2")
    )
    bad = installed.run("mlbench", "validate", "bad.yaml")
    assert bad.returncode == 2 and "bad.yaml:" in bad.stderr and "workers" in bad.stderr


def test_installed_gke_program_previews_under_pulumi_mocks(installed: Installed) -> None:
    script = shutil.copy(PREVIEW_SCRIPT, installed.elsewhere / PREVIEW_SCRIPT.name)
    done = installed.run("python", str(script))
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert Path(found["automation"]).is_relative_to(installed.venv)
    program = Path(found["program"])
    assert program.is_relative_to(installed.venv) and program.parts[-2:] == ("mlbench_infra", "gke.py")

    by_type: dict[str, list[dict[str, object]]] = {}
    for resource in found["resources"]:
        by_type.setdefault(resource["type"], []).append(resource["inputs"])
    (cluster,) = by_type["gcp:container/cluster:Cluster"]
    assert (cluster["name"], cluster["project"]) == ("mlbench-wheel", "proj-wheel")
    pools = {pool["name"]: pool for pool in by_type["gcp:container/nodePool:NodePool"]}
    assert set(pools) == {"system", "gpu"}
    gpu = pools["gpu"]["nodeConfig"]
    assert isinstance(gpu, dict) and gpu["spot"] is True
    assert gpu["guestAccelerators"][0]["type"] == "nvidia-tesla-t4"


def test_installed_tui_finds_the_shipped_quickstart_outside_the_checkout(installed: Installed) -> None:
    find = (
        "from pathlib import Path; from mlbench_tui.tui.screens.first_run import quickstart_spec;"
        " print(quickstart_spec(Path.cwd()))"
    )
    found = installed.run("python", "-c", find)
    assert found.returncode == 0, found.stderr
    spec = Path(found.stdout.strip())
    assert spec.is_relative_to(installed.venv) and spec.name == "quickstart.yaml"
    validate = installed.run("mlbench", "validate", str(spec))
    assert validate.returncode == 0 and "quickstart" in validate.stdout, validate.stdout + validate.stderr
