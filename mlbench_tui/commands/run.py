"""Run commands: ``apply``, ``status``, ``logs``, ``cancel``, ``delete``, ``results``, ``export``.

Thin: parse, call one function of ``mlbench_tui.runs``, print. Only argparse and the
stdlib at module level (``mlbench --help`` stays fast).
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from mlbench_tui.commands.spec import max_runs_option, positive_int
from mlbench_tui.commands.usage import documented

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the run commands to the ``mlbench`` parser."""
    p = sub.add_parser(
        "apply",
        help="run the benchmarks of spec files or directories and show their results",
        description="Validate specs, plan their runs, run each (sweeps and repeats in order) with live "
        "progress on stderr, and print the results table on stdout. Runs whose spec is unchanged and that "
        "already succeeded are skipped (use --force to run them again).",
        **documented("apply"),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="spec file or directory")
    p.add_argument("--dry-run", action="store_true", help="print the exact commands and exit")
    p.add_argument(
        "-d", "--detach", action="store_true", help="return at once; the runs go on in the background"
    )
    p.add_argument("-f", "--force", action="store_true", help="rerun runs that already succeeded")
    p.add_argument(
        "-p",
        "--parallel",
        action="store_true",
        help="run several runs at once while cores allow (ranks x threads)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    max_runs_option(p)
    p.set_defaults(handler=cmd_apply)

    p = sub.add_parser(
        "status",
        help="list runs, or show one run in detail",
        description="The latest runs, newest first, or one run with its result, checks and ranks.",
        **documented("status"),
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or name")
    p.add_argument("-n", "--limit", type=positive_int, default=50, help="how many runs to list (default 50)")
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="output format (json: the runs as the server records them, one run with its ranks)",
    )
    _ranks_option(p)
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser(
        "logs",
        help="print a run's logs (all ranks, or one)",
        description="A run's stored log lines: every rank's, prefixed [rank N], or one rank's. When "
        "nothing matches, a note on stderr says whether the rank wrote nothing or --grep matched nothing.",
        **documented("logs"),
    )
    p.add_argument("run", metavar="RUN", help="run id or name")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    p.add_argument("--rank", type=_rank, metavar="R", help="only rank R (lines without prefix)")
    p.add_argument("--grep", metavar="REGEX", help="only lines matching the Python regular expression")
    p.set_defaults(handler=cmd_logs)

    p = sub.add_parser("cancel", help="stop every rank of a run", **documented("cancel"))
    p.add_argument("run", metavar="RUN", help="run id or name")
    p.set_defaults(handler=cmd_cancel)

    p = sub.add_parser(
        "delete",
        help="delete a run (cancelling it first) with its metrics and logs",
        description="Delete a run with its metrics, logs and events, after asking (a running run is "
        "cancelled first). Without a terminal to ask on, --yes is needed.",
        **documented("delete"),
    )
    p.add_argument("run", metavar="RUN", help="run id or name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_delete)

    p = sub.add_parser(
        "results",
        help="results table of a run, a spec, or every finished run",
        description="Time to accuracy, epochs and steps to goal, compute/communication split, speedup and "
        "efficiency versus 1 worker, cost, and the olympic mean over repeats; newest run first, like "
        "status. The table fits the terminal: the least important columns are left out (named under "
        "it) and long outcomes fold; --wide shows every column.",
        **documented("results"),
    )
    p.add_argument(
        "ref", nargs="?", metavar="RUN|SPEC", help="run id/name, spec file/directory, or spec name"
    )
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.add_argument("-w", "--wide", action="store_true", help="every column, however wide the terminal")
    p.add_argument(
        "--recompute",
        action="store_true",
        help="recompute these runs' results from their stored metrics and events with this version's "
        "rules (stale results are recomputed when read anyway; this forces it)",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="every run of each configuration (spec point and machine) over time, oldest first, with "
        "its step time, verdicts and the versions from its fingerprint (what changed since the run before)",
    )
    _ranks_option(p)
    p.set_defaults(handler=cmd_results)

    p = sub.add_parser(
        "export",
        help="write a run as a zip (spec, metrics CSV/JSON, logs, MLLOG, result)",
        description="Write a run's archive: spec, plan, metrics (CSV and JSON), events, logs per rank, "
        "official_result.json, MLPerf's training log mllog.txt (written with MLCommons' mlperf-logging, "
        "the 'mlperf' extra) and the ruleset that checks it (mllog_rules/).",
        **documented("export"),
    )
    p.add_argument("run", metavar="RUN", help="run id or name")
    p.add_argument("--out", required=True, metavar="FILE.zip", help="archive to write")
    p.add_argument(
        "--org", metavar="NAME", help="submission_org of the MLPerf log (default: the spec's 'org' label)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="run MLCommons' compliance checker on the archive's mllog.txt with its ruleset; "
        "print its report and exit 1 when the log does not comply",
    )
    p.set_defaults(handler=cmd_export)


def _ranks_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ranks",
        type=_rank_choice,
        metavar="all|SET",
        help="list these ranks of a run, each on a line: all, or a set such as 0-7,512 (by default a "
        "large run's ranks are summarised: spread of their figures, worst ranks, ranks in odd states)",
    )


def _rank_choice(text: str) -> object:
    from mlbench_tui.ranksets import RankSetError
    from mlbench_tui.runs.ranks import parse_rank_choice

    try:
        return parse_rank_choice(text)
    except RankSetError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def _client() -> MlbenchClient:
    from mlbench_tui.server.daemon import ensure_server

    return ensure_server().client()


def write_text(stream: TextIO, text: str) -> None:
    """``text`` on ``stream`` as lines (stdout carries only the requested output)."""
    if text:
        stream.write(text if text.endswith("\n") else text + "\n")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cmd_apply(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.apply import ApplyOptions, apply

    # SIGTERM stops apply like Ctrl-C: active runs are cancelled, no rank is left behind.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        options = ApplyOptions(
            dry_run=args.dry_run,
            detach=args.detach,
            force=args.force,
            parallel=args.parallel,
            quiet=args.quiet,
            max_runs=args.max_runs,
        )
        return apply(args.paths, options)
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_status(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.status import status_detail, status_json, status_table

    client = _client()
    if args.output == "json":
        write_text(sys.stdout, status_json(client, args.run, args.limit))
    elif args.run:
        write_text(sys.stdout, status_detail(client, args.run, args.ranks))
    elif args.ranks is not None:
        from mlbench_tui.errors import UsageError

        raise UsageError("--ranks lists the ranks of one run", hint="name it: mlbench status RUN --ranks all")
    else:
        write_text(sys.stdout, status_table(client, args.limit))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.logs import iter_logs, no_lines_note

    printed = 0
    for line in iter_logs(_client(), args.run, follow=args.follow, rank=args.rank, grep=args.grep):
        print(line, flush=args.follow)
        printed += 1
    if not printed:
        print(no_lines_note(args.run, args.rank, args.grep), file=sys.stderr)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.control import cancel_run

    print(cancel_run(_client(), args.run), file=sys.stderr)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from mlbench_tui.commands.confirm import confirm
    from mlbench_tui.runs.control import delete_question, delete_run
    from mlbench_tui.runs.lookup import resolve_run

    client = _client()
    run = resolve_run(client, args.run)
    if not confirm(delete_question(run), assume_yes=args.yes, action="delete a run"):
        print("cancelled: nothing was deleted", file=sys.stderr)
        return 1
    print(delete_run(client, run.id), file=sys.stderr)
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.results import collect_results, results_output, run_ranks, sweep_curves

    if args.history:
        return _history(args)
    client = _client()
    results = collect_results(client, args.ref)
    if args.recompute:
        from mlbench_tui.runs.results import recompute

        results = recompute(client, results)
    ranks = run_ranks(client, results, args.ranks)
    width = None if args.wide else terminal_width(sys.stdout)
    curves = sweep_curves(client, results)
    write_text(sys.stdout, results_output(results, args.output, curves, ranks, width=width))
    return 0


def terminal_width(stream: TextIO) -> int | None:
    """The columns a table may take on ``stream``: ``COLUMNS`` when set, the terminal's width on
    a terminal, else None (a pipe or file gets every column)."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    isatty = getattr(stream, "isatty", None)
    return shutil.get_terminal_size().columns if callable(isatty) and isatty() else None


def _history(args: argparse.Namespace) -> int:
    from contextlib import closing

    from mlbench_tui.results.history import history_json, history_text
    from mlbench_tui.runs.results import history_entries
    from mlbench_tui.server.daemon import run_reader

    with closing(run_reader()) as reader:
        entries = history_entries(reader, args.ref)
    if args.output == "json":
        import json

        write_text(sys.stdout, json.dumps(history_json(entries), indent=2, default=str))
    else:
        write_text(sys.stdout, history_text(entries))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from mlbench_tui.runs.export import export_run

    if args.check:
        from mlbench_tui.results.mllog import require_mlperf_logging

        require_mlperf_logging("--check")  # before the export: fail fast, with the install hint
    exported = export_run(_client(), args.run, args.out, org=args.org)
    print(f"wrote {exported.path}", file=sys.stderr)
    for note in exported.left_out:
        print(f"note: left out {note}", file=sys.stderr)
    if not args.check:
        return 0
    from mlbench_tui.runs.export import check_export

    verdict = check_export(exported.path)
    sys.stdout.write(verdict.report)
    print(f"mllog.txt {'complies' if verdict.ok else 'does not comply'} with mllog_rules/", file=sys.stderr)
    return 0 if verdict.ok else 1
