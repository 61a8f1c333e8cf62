"""extra_args read the way sbatch reads them: the option table matches the installed sbatch, and a
managed option is refused under every name getopt_long would take for it."""

from __future__ import annotations

import os
import shutil
import string
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mlbench_tui.spec.sbatch_options import (
    LONG_OPTIONS,
    SHORT_OPTIONS,
    SHORT_TAKES_NONE,
    SbatchArg,
    SbatchArgError,
    parse_entry,
)
from mlbench_tui.spec.targets import SLURM_MANAGED_OPTIONS, SlurmTarget


def _sbatch(conf: Path, arg: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    done = subprocess.run(["sbatch", arg], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.stderr


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="Slurm's sbatch is not installed")
def test_the_option_table_is_the_installed_sbatchs(tmp_path: Path) -> None:
    probes = [f"--{c}" for c in string.ascii_lowercase] + [f"-{c}" for c in string.ascii_letters]
    probes += [f"--{name}{tail}" for name in LONG_OPTIONS for tail in ("", "=x")]
    conf = tmp_path / "slurm.conf"  # sbatch reads a configuration before its arguments
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    with ThreadPoolExecutor(8) as pool:  # each sbatch stops at its first argument error
        said = dict(zip(probes, pool.map(lambda arg: _sbatch(conf, arg), probes), strict=True))
    names: set[str] = set()
    for letter in string.ascii_lowercase:
        err = said[f"--{letter}"]
        if "possibilities:" in err:
            names |= {p.strip("'-") for p in err.split("possibilities:")[1].splitlines()[0].split()}
        elif "requires an argument" in err:  # a prefix of one option only
            names.add(err.split("'--")[1].split("'")[0])
    assert names == set(LONG_OPTIONS)
    for name, takes in LONG_OPTIONS.items():
        needs = "requires an argument" in said[f"--{name}"]
        refuses = "allow an argument" in said[f"--{name}=x"]
        assert (needs, refuses) == (takes == "required", takes == "none"), name
    for letter in string.ascii_letters:
        err = said[f"-{letter}"]
        if "invalid option" in err:
            assert letter not in SHORT_OPTIONS
        else:
            assert letter in SHORT_OPTIONS, letter
            assert ("requires an argument" not in err) == (letter in SHORT_TAKES_NONE), letter


def _prefixes(name: str) -> list[str]:
    """Every prefix of ``--name`` that sbatch reads as that option alone."""
    unique = [
        name[:n] for n in range(1, len(name)) if [o for o in LONG_OPTIONS if o.startswith(name[:n])] == [name]
    ]
    return [*unique, name]


@pytest.mark.parametrize("name", sorted(SLURM_MANAGED_OPTIONS))
def test_a_managed_option_is_refused_under_every_prefix_and_form(name: str) -> None:
    takes = LONG_OPTIONS[name]
    value = {"required": "=2", "optional": "", "none": ""}[takes]
    forms = [f"--{p}{value}" for p in _prefixes(name)]
    if takes == "required":
        forms += [f"--{p} 2" for p in _prefixes(name)]
    forms += [
        f"-{s}" + ("" if s in SHORT_TAKES_NONE else "2") for s, long in SHORT_OPTIONS.items() if long == name
    ]
    for form in forms:
        with pytest.raises(ValueError, match=f"may not set --{name}"):
            SlurmTarget(kind="slurm", extra_args=[form])


def test_aliases_count_as_the_option_they_stand_for() -> None:
    for form in ("--tasks-per-node=2", "--tasks-per-no=2", "--cluster=x", "-M x"):
        with pytest.raises(ValueError, match="may not set"):
            SlurmTarget(kind="slurm", extra_args=[form])


def test_short_options_read_like_getopt() -> None:
    assert parse_entry("-QJx") == [SbatchArg("quiet", "-Q", None), SbatchArg("job-name", "-J", "x")]
    assert parse_entry("-J x") == [SbatchArg("job-name", "-J", "x")]
    assert parse_entry("--reservation bench") == [SbatchArg("reservation", "--reservation", "bench")]
    assert parse_entry("--exclusiv") == [SbatchArg("exclusive", "--exclusiv", None)]
    with pytest.raises(SbatchArgError, match="no option -y"):
        parse_entry("-y")


@pytest.mark.parametrize("char", [*"|&<>();$`'\"\\#", "\n", "\t", "  "])
def test_shell_characters_are_refused(char: str) -> None:
    with pytest.raises(ValueError, match="not one sbatch option"):
        SlurmTarget(kind="slurm", extra_args=[f"--comment=a{char}b"])


def test_allowed_options_pass_as_written() -> None:
    args = ["--exclusive", "--reservation=bench", "--reservation bench", "-Q", "--comment=nightly", "-k"]
    assert SlurmTarget(kind="slurm", extra_args=args).extra_args == args
