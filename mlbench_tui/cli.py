"""The ``mlbench`` command line: a thin layer that parses, calls one library function, prints.

Commands live in ``mlbench_tui.commands.<group>`` modules that import only ``argparse`` at module
level, so ``mlbench --help`` stays fast; heavy imports happen inside the command handlers.
stdout carries only the requested output; errors go to stderr with a non-zero exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from mlbench_tui import __version__
from mlbench_tui.errors import MlbenchError, from_os_error

# Registry of command groups: one module per group, each exposing ``register(subparsers)``.
# A new group is one new module plus one line here.
COMMAND_MODULES: tuple[str, ...] = (
    "mlbench_tui.commands.spec",
    "mlbench_tui.commands.server",
    "mlbench_tui.commands.run",
    "mlbench_tui.commands.tui",
    "mlbench_tui.commands.cluster",
    "mlbench_tui.commands.data",
    "mlbench_tui.commands.report",
    "mlbench_tui.commands.compare",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser from the registered command modules."""
    parser = argparse.ArgumentParser(
        prog="mlbench",
        description="Declarative, reproducible benchmarks for distributed machine learning.",
    )
    parser.add_argument("--version", action="version", version=f"mlbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code; never lets a traceback reach the user."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(handler(args) or 0)
    except MlbenchError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a full disk, a read-only folder: say which and what to do
        error = from_os_error(exc)
        print(error.render(), file=sys.stderr)
        return error.exit_code
