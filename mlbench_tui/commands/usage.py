"""Every command's ``--help`` ends the same way: examples to copy, then what its exit status means.

Declared once here, by command path (``"status"``, ``"cluster create"``), and attached to the
parser after the command modules registered themselves (``attach``). Options follow one rule:
``-o``/``--output`` is always an output *format* (``table``, ``json``, ``yaml``, ``html``...),
``--out`` a path to write. Only argparse and the stdlib are imported (``mlbench --help`` stays fast).
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass, field
from typing import Any

OK = "0  done"
ERROR = "1  it could not be done (the reason is on stderr)"
USAGE = "2  a bad option or argument"
INTERRUPTED = "130  interrupted (Ctrl-C)"


@dataclass(frozen=True)
class Usage:
    """A command's examples (``# what it does`` after each) and its exit statuses."""

    examples: tuple[str, ...]
    exits: tuple[str, ...] = field(default=(OK, ERROR, USAGE))


SPEC_EXITS = (OK, "2  a spec has a problem (each printed as FILE:LINE:COL), or a bad option")
RUN_EXITS = (OK, "1  the run is not in the store, or the server could not be reached", USAGE)

COMMANDS: dict[str, Usage] = {
    "validate": Usage(
        (
            "mlbench validate specs/                 # every spec under specs/, every problem at once",
            "mlbench validate spec.yaml -o json      # machine-readable: specs, runs, issues",
            "cat spec.yaml | mlbench validate -      # from stdin",
        ),
        (
            OK + ": every spec is valid (a note on stderr when this machine could not place its runs)",
            SPEC_EXITS[1],
        ),
    ),
    "plan": Usage(
        (
            "mlbench plan specs/quickstart.yaml              # the runs it expands to",
            "mlbench plan specs/smoke-kind.yaml -o yaml      # the Kubernetes manifests",
            "mlbench plan specs/smoke-slurm.yaml -o sbatch   # the Slurm batch scripts",
        ),
        (OK, "1  this machine or the target cannot place a run (said why)", SPEC_EXITS[1]),
    ),
    "schema": Usage(("mlbench schema > specs/mlbench.schema.json   # for editors' YAML completion",), (OK,)),
    "tasks": Usage(
        (
            "mlbench tasks               # the official tasks",
            "mlbench tasks 1a            # one task: goals, datasets, hyperparameters and their policy",
            "mlbench tasks -o json       # the catalog as data",
        ),
        (OK, "2  no such task (the closest names are suggested)"),
    ),
    "explain": Usage(
        (
            "mlbench explain                    # every spec field, one per line",
            "mlbench explain spec.workers       # one field: type, default, bounds, example, targets",
            "mlbench explain hardware           # a field's whole section",
        ),
        (OK, "2  no such field (the closest names are suggested)"),
    ),
    "docs": Usage(
        (
            "mlbench docs                   # write docs/ (README.md, spec.md, tasks/<id>.md)",
            "mlbench docs --check           # exit 1 when docs/ is not what it would write",
        ),
        (OK, "1  (--check) docs/ differs; or it cannot be written", USAGE),
    ),
    "init": Usage(
        (
            "mlbench init 1a                        # a commented spec for task 1a on stdout",
            "mlbench init 0a --out allreduce.yaml   # written to a file (--force overwrites)",
        ),
    ),
    "server": Usage(
        (
            "mlbench server                         # serve the default store on 127.0.0.1:8765",
            "mlbench server --host 0.0.0.0          # for Slurm compute nodes (reads need the read token)",
        ),
        (OK + " (stopped)", ERROR, USAGE, INTERRUPTED),
    ),
    "apply": Usage(
        (
            "mlbench apply specs/quickstart.yaml          # run it, with live progress, then the results",
            "mlbench apply specs/ --dry-run               # the exact launch commands, nothing started",
            "mlbench apply spec.yaml --force --detach     # run again, in the background",
        ),
        (
            OK + ": every run succeeded (or was skipped: unchanged and already succeeded)",
            "1  a run failed (its reason is on stderr and in the table), or this machine or the target "
            "cannot place a run (nothing started)",
            "2  a spec has a problem (each printed as FILE:LINE:COL), or a bad option",
            INTERRUPTED + ": the runs were cancelled",
        ),
    ),
    "status": Usage(
        (
            "mlbench status                        # runs, newest first",
            "mlbench status quickstart-gloo-2w     # one run: result, checks, ranks",
            "mlbench status -o json                # the runs as data (one run: its whole record)",
        ),
        RUN_EXITS,
    ),
    "logs": Usage(
        (
            "mlbench logs quickstart-gloo-2w                   # every rank's lines, [rank N]-prefixed",
            "mlbench logs quickstart-gloo-2w --rank 1 -f       # one rank, following a running run",
            "mlbench logs quickstart-gloo-2w --grep 'epoch'    # lines matching a regular expression",
        ),
        (*RUN_EXITS[:2], "2  a bad option, or a rank the run did not have"),
    ),
    "cancel": Usage(
        ("mlbench cancel quickstart-gloo-2w    # stop every rank; the run ends cancelled",), RUN_EXITS
    ),
    "delete": Usage(
        (
            "mlbench delete quickstart-gloo-2w     # asks, then deletes it with its metrics and logs",
            "mlbench delete r-0123456789ab --yes   # without asking (scripts)",
        ),
        (
            OK,
            "1  the run is not in the store, or you declined (or no terminal to ask on: add --yes)",
            USAGE,
        ),
    ),
    "results": Usage(
        (
            "mlbench results                             # every finished run, newest first",
            "mlbench results specs/quickstart.yaml       # a spec's runs, with repeat scores and speedups",
            "mlbench results RUN --wide                  # every column, whatever the terminal's width",
            "mlbench results -o json                     # raw SI values",
            "mlbench results --recompute                 # recompute stored results with today's rules",
        ),
        RUN_EXITS,
    ),
    "compare": Usage(
        (
            "mlbench compare label:commit=abc label:commit=def  # two commits' runs, figure by figure",
            "mlbench compare base.zip specs/quickstart.yaml     # an exported archive against a spec",
            "mlbench compare BASE CAND --fail-on-regression 5   # exit 1 on a 5% regression (CI)",
            "mlbench compare BASE CAND -o json --seed 7         # as JSON, another bootstrap seed",
        ),
        (
            OK,
            "1  (--fail-on-regression) a figure regressed by more than PCT percent; or a side matches no run",
            "2  a bad option or argument, or a side with no succeeded run to compare",
        ),
    ),
    "export": Usage(
        (
            "mlbench export quickstart-gloo-2w --out run.zip           # spec, metrics, logs, result, MLLOG",
            "mlbench export quickstart-gloo-2w --out run.zip --check   # and check MLPerf compliance",
        ),
        (OK, "1  no such run, the archive cannot be written, or (--check) the log does not comply", USAGE),
    ),
    "tui": Usage(
        (
            "mlbench tui                                   # the local store",
            "mlbench tui --specs specs/                    # and browse, check and launch these specs",
            "mlbench tui --server http://host:8765 --token T   # another server's runs",
        ),
    ),
    "report": Usage(
        (
            "mlbench report specs/quickstart.yaml --out report.html   # one offline HTML page",
            "mlbench report -o png --out figs                          # every figure as a PNG file",
            "mlbench report RUN -o svg --width 1600                    # one run's figures, 1600 px wide",
        ),
        (OK, "1  no runs to report on, or the file cannot be written", USAGE),
    ),
    "cluster": Usage(("mlbench cluster list", "mlbench cluster create kind dev --nodes 2")),
    "cluster create": Usage(
        (
            "mlbench cluster create kind dev --nodes 2                     # a local KIND cluster",
            "mlbench cluster create gcp bench --nodes 2 --gpu 1xT4 --spot  # GKE through Pulumi",
        ),
        (OK, "1  it could not be created (or you declined the cost)", USAGE, INTERRUPTED),
    ),
    "cluster add": Usage(
        ("mlbench cluster add slurm hpc --partition gpu --account proj42 --workdir /shared/$USER/mlbench",)
    ),
    "cluster delete": Usage(("mlbench cluster delete gcp bench        # asks first; --yes does not",)),
    "cluster list": Usage(("mlbench cluster list", "mlbench cluster list -o json")),
    "cluster use": Usage(("mlbench cluster use bench                 # its context becomes current",)),
    "cluster init": Usage(("mlbench cluster init --context kind-dev    # the in-cluster server and RBAC",)),
    "data": Usage(("mlbench data list", "mlbench data prepare cifar10")),
    "data prepare": Usage(
        (
            "mlbench data prepare cifar10                  # into the workers' cache",
            "mlbench data prepare epsilon --dir /data/eps  # somewhere else (use it with data: {path: ...})",
        ),
    ),
    "data list": Usage(("mlbench data list", "mlbench data list -o json")),
}


class UsageFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a paragraph whose lines are indented (examples, exit
    statuses) keeps its lines as written; the rest wraps as usual."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                paragraphs.append(
                    textwrap.fill(
                        " ".join(paragraph.split()), width, initial_indent=indent, subsequent_indent=indent
                    )
                )
        return "\n\n".join(paragraphs)


def epilog(usage: Usage) -> str:
    """The text under a command's options: its examples, then its exit statuses."""
    examples = "\n".join(f"  {line}" for line in usage.examples)
    exits = "\n".join(f"  {line}" for line in usage.exits)
    return f"examples:\n{examples}\n\nexit status:\n{exits}"


def documented(path: str) -> dict[str, Any]:
    """``add_parser`` keywords that end the command's help with its examples and exit statuses."""
    return {"epilog": epilog(COMMANDS[path]), "formatter_class": UsageFormatter}
