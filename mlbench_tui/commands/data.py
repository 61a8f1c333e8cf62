"""Dataset commands: ``mlbench data prepare NAME [--dir DIR]`` and ``mlbench data list``.

Preparation code lives with the worker (``mlbench_worker.data.<module>``) because ranks run the
same code when a spec says ``data: download``; this command only picks the function from a
lazily imported registry, so a new dataset is one module plus one line here. The default
directory is the one the worker uses for ``download`` without a path (``$MLBENCH_DATA_DIR`` or
``~/.cache/mlbench/data``, then the dataset name), so a prepared dataset is found by later runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from mlbench_tui.commands.usage import documented

# name -> "module:function"; the function takes the target directory and returns the prepared one.
DATASETS: dict[str, str] = {
    "epsilon": "mlbench_worker.data.epsilon:prepare",
    "wikitext2": "mlbench_worker.data.wikitext2:prepare",
    "cifar10": "mlbench_worker.data.cifar10:download",
    "imagenet": "mlbench_worker.data.imagenet:prepare",
    "wmt16": "mlbench_worker.data.wmt:prepare_wmt16",
    "wmt17": "mlbench_worker.data.wmt:prepare_wmt17",
}

DESCRIPTIONS: dict[str, str] = {
    "epsilon": "task 2a: LIBSVM epsilon_normalized (400k x 2000), ~12 GB after conversion",
    "wikitext2": "task 3a: WikiText-2 (v1, tokenised), ~10 MB",
    "cifar10": "task 1a: CIFAR-10 python batches, ~180 MB",
    "imagenet": "task 1b: ILSVRC 2012 archives (checked, read in place) or train/ val/ JPEGs, ~147 GB",
    "wmt16": "task 4a: WMT16 EN-DE (Europarl v7, CommonCrawl, NC v11; newstest2014), ~1.2 GB download",
    "wmt17": "task 4b: WMT17 EN-DE (Europarl v7, CommonCrawl, NC v12; newstest2014), ~1.3 GB download",
}


def default_data_dir() -> Path:
    """``$MLBENCH_DATA_DIR`` or ``~/.cache/mlbench/data`` (the worker's default for ``download``)."""
    from mlbench_worker import rank_env

    env = os.environ.get(rank_env.DATA_DIR)
    return Path(env) if env else Path.home() / ".cache" / "mlbench" / "data"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``data`` command group to the ``mlbench`` parser."""
    group = sub.add_parser(
        "data",
        help="download and prepare official datasets",
        description="Download (with checksum verification) and convert the official datasets once, "
        "so runs with data 'path' or 'download' start training at once.",
        **documented("data"),
    )
    actions = group.add_subparsers(dest="data_command", metavar="ACTION")
    p = actions.add_parser(
        "prepare",
        help="download and convert one dataset",
        description="Download NAME (files already in DIR are verified and reused), convert it to the "
        "format the worker memory-maps, and print the prepared directory.",
        **documented("data prepare"),
    )
    p.add_argument("name", choices=sorted(DATASETS), metavar="NAME", help=", ".join(sorted(DATASETS)))
    p.add_argument("--dir", type=Path, default=None, help="target directory (default: the worker's cache)")
    p.add_argument("--force", action="store_true", help="convert again even if DIR is already prepared")
    p.set_defaults(handler=cmd_prepare)
    p = actions.add_parser(
        "list", help="list the datasets and where they are prepared by default", **documented("data list")
    )
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.set_defaults(handler=cmd_list)
    group.set_defaults(handler=lambda args: _usage(group))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _target(name: str, directory: Path | None) -> Path:
    return (directory if directory is not None else default_data_dir() / name).expanduser()


def cmd_prepare(args: argparse.Namespace) -> int:
    """Run the dataset's preparation function; map its dataset errors to a clean CLI error."""
    import inspect

    from mlbench_tui.errors import MlbenchError

    module_name, _, func_name = DATASETS[args.name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise MlbenchError(
            f"preparing {args.name} needs the worker packages ({exc.name} is missing)",
            hint="pip install 'mlbench-tui[worker]'",
        ) from None
    prepare = getattr(module, func_name)
    target = _target(args.name, args.dir)
    kwargs: dict[str, Any] = {}
    if args.force:
        if "force" not in inspect.signature(prepare).parameters:
            raise MlbenchError(f"{args.name} has no --force: delete {target} to prepare it again")
        kwargs["force"] = True
    try:
        target.mkdir(parents=True, exist_ok=True)
        prepare(target, **kwargs)
    except OSError as exc:
        raise MlbenchError(f"cannot prepare {args.name} in {target}: {exc}") from None
    except Exception as exc:
        if type(exc).__name__ == "DatasetError":  # mlbench_worker.data.fetch.DatasetError
            raise MlbenchError(str(exc)) from None
        raise
    print(target)  # the directory to give a spec as data.path
    return 0


# Where a prepared dataset keeps its record, when not in meta.json (ImageNet's index beside the data).
META_FILES: dict[str, str] = {"imagenet": "mlbench-index/meta.json"}


def _status(name: str) -> dict[str, Any]:
    target = default_data_dir() / name
    meta = target / META_FILES.get(name, "meta.json")
    info: dict[str, Any] = {"name": name, "directory": str(target), "description": DESCRIPTIONS.get(name, "")}
    if meta.is_file():
        try:
            info["prepared"] = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            info["prepared"] = None
    else:
        info["prepared"] = (target / "cifar-10-batches-py").is_dir() or None
    return info


def cmd_list(args: argparse.Namespace) -> int:
    """The datasets, their default directories, and whether they are prepared there."""
    rows = [_status(name) for name in sorted(DATASETS)]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["directory"]) for r in rows)
    print(f"{'NAME':<10}  {'PREPARED':<8}  {'DIRECTORY':<{width}}  DESCRIPTION")
    for r in rows:
        state = "yes" if r["prepared"] else "no"
        print(f"{r['name']:<10}  {state:<8}  {r['directory']:<{width}}  {r['description']}")
    return 0
