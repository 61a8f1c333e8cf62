"""sbatch's own option table (Slurm 22.05), and how one ``extra_args`` entry reads against it.

sbatch parses options with getopt_long, which takes any unambiguous prefix of a long option
(``--job-nam`` is ``--job-name``) and clusters of short ones (``-QJx``), so the options mlbench
manages are recognised here the way sbatch recognises them, not by their full names. The table
was read from sbatch itself (its ambiguity and argument errors); a test compares it with the
installed sbatch where Slurm is present.

One entry is one ``#SBATCH`` line holding one option: ``--name``, ``--name=value``,
``--name value``, ``-X``, ``-Xvalue`` or ``-X value``. Values hold no whitespace, quotes or shell
characters, so a line is exactly the tokens written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Argument = Literal["required", "optional", "none"]

_REQUIRED = (
    "account acctg-freq array batch begin bb bbf cluster-constraint chdir cluster clusters comment "
    "container context constraint core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task "
    "deadline delay-boot dependency distribution error exclude export export-file extra-node-info gid "
    "gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input "
    "job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu "
    "mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu "
    "ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output partition power prefer "
    "priority profile qos reservation signal sockets-per-node switches tasks-per-node thread-spec "
    "threads-per-core time time-min tmp uid wait-all-nodes wckey wrap"
)
_NONE = (
    "contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue "
    "spread-job test-only use-min-nodes usage verbose version wait"
)
_OPTIONAL = "exclusive get-user-env nice no-kill propagate"

LONG_OPTIONS: dict[str, Argument] = {
    **{name: "required" for name in _REQUIRED.split()},
    **{name: "none" for name in _NONE.split()},
    **{name: "optional" for name in _OPTIONAL.split()},
}
SHORT_OPTIONS: dict[str, str] = {
    "a": "array", "b": "begin", "c": "cpus-per-task", "d": "dependency", "e": "error", "h": "help",
    "i": "input", "k": "no-kill", "m": "distribution", "n": "ntasks", "o": "output", "p": "partition",
    "q": "qos", "s": "oversubscribe", "t": "time", "v": "verbose", "w": "nodelist", "x": "exclude",
    "A": "account", "B": "extra-node-info", "C": "constraint", "D": "chdir", "F": "nodefile",
    "G": "gpus", "H": "hold", "J": "job-name", "L": "licenses", "M": "clusters", "N": "nodes",
    "O": "overcommit", "Q": "quiet", "S": "core-spec", "V": "version", "W": "wait",
}  # fmt: skip
SHORT_TAKES_NONE = frozenset("hksvHOQVW")  # -k is --no-kill without its optional value
ALIASES: dict[str, str] = {"tasks-per-node": "ntasks-per-node", "cluster": "clusters"}

_SHELL_SPECIAL = re.compile(r"[\s|&<>();$`'\"\\#]")


class SbatchArgError(ValueError):
    """An ``extra_args`` entry sbatch would not read as one allowed option."""


@dataclass(frozen=True)
class SbatchArg:
    """One option of an entry: sbatch's full name for it, how it was written, and its value."""

    name: str
    written: str
    value: str | None


def resolve_long(written: str) -> str:
    """sbatch's full name for ``--written``: itself, or the one option it is a prefix of."""
    if written in LONG_OPTIONS:
        return written
    matches = [name for name in LONG_OPTIONS if name.startswith(written)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(f"--{m}" for m in matches)
        raise SbatchArgError(f"--{written} is ambiguous for sbatch: it could be {shown}")
    raise SbatchArgError(f"sbatch has no option --{written}")


def parse_entry(entry: str) -> list[SbatchArg]:
    """The options one ``extra_args`` entry sets, as sbatch reads them; ``SbatchArgError`` says why
    an entry is not one clean option."""
    parts = entry.split(" ")
    if len(parts) > 2 or not all(parts) or any(_SHELL_SPECIAL.search(p) for p in parts):
        raise SbatchArgError(
            f"{entry!r} is not one sbatch option: write '--name', '--name=value' or '--name value' "
            "(no quotes, shell characters or extra spaces)"
        )
    head, apart = parts[0], (parts[1] if len(parts) == 2 else None)
    if head.startswith("--") and len(head) > 2:
        written, eq, inline = head[2:].partition("=")
        if eq and apart is not None:
            raise SbatchArgError(f"{entry!r} gives --{written} two values")
        arg = SbatchArg(resolve_long(written), f"--{written}", inline if eq else apart)
        _check_value(arg, LONG_OPTIONS[arg.name], inline_only=arg.value is not None and not eq)
        return [arg]
    if head.startswith("-") and len(head) > 1 and not head.startswith("--"):
        return _short_cluster(head[1:], apart)
    raise SbatchArgError(f"{entry!r} is not an sbatch option: each entry starts with '--name' or '-X'")


def _short_cluster(letters: str, apart: str | None) -> list[SbatchArg]:
    out: list[SbatchArg] = []
    for i, letter in enumerate(letters):
        name = SHORT_OPTIONS.get(letter)
        if name is None:
            raise SbatchArgError(f"sbatch has no option -{letter}")
        if letter not in SHORT_TAKES_NONE:
            value = letters[i + 1 :] or apart
            out.append(SbatchArg(name, f"-{letter}", value))
            _check_value(out[-1], "required", inline_only=False)
            return out
        out.append(SbatchArg(name, f"-{letter}", None))
    if apart is not None:
        raise SbatchArgError(f"-{letters[-1]} takes no value, got {apart!r}")
    return out


def _check_value(arg: SbatchArg, takes: Argument, *, inline_only: bool) -> None:
    if takes == "required" and not arg.value:
        raise SbatchArgError(f"{arg.written} needs a value: write '{arg.written}=VALUE'")
    if takes == "none" and arg.value is not None:
        raise SbatchArgError(f"{arg.written} takes no value")
    if takes == "optional" and inline_only:
        raise SbatchArgError(
            f"sbatch reads '{arg.written} {arg.value}' as {arg.written} and a script named "
            f"{arg.value!r}: write '{arg.written}={arg.value}'"
        )
