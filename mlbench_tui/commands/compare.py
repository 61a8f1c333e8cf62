"""``mlbench compare BASE CAND``: did the candidate's runs regress against the base's?

Thin: parse, call ``mlbench_tui.runs.compare``, print. Only argparse and the stdlib at module level.
"""

from __future__ import annotations

import argparse
import sys

from mlbench_tui.commands.usage import documented

EXIT_REGRESSED = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``compare`` to the ``mlbench`` parser."""
    p = sub.add_parser(
        "compare",
        help="compare two sets of runs figure by figure: change, 95%% interval, verdict",
        description="Compare the candidate's runs with the base's: per figure (time to accuracy, step "
        "time, 0a latency and bus bandwidth) the change of the median, its 95%% interval from a "
        "bootstrap (runs and their steps resampled when both sides have repeats), Mann-Whitney U's "
        "p-value, a verdict (regressed, improved, no significant difference) and the repeats per side "
        "that would detect a 5%% change at the measured noise. A side is a run id or name, a spec file "
        "or name, label:KEY=VALUE[,KEY=VALUE], or an archive from mlbench export. Exit 1 with "
        "--fail-on-regression when a figure regressed by more than PCT percent.",
        **documented("compare"),
    )
    p.add_argument("base", metavar="BASE", help="the runs to compare against")
    p.add_argument("candidate", metavar="CAND", help="the runs to judge")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.add_argument(
        "--fail-on-regression",
        type=_percent,
        metavar="PCT",
        help="exit 1 when a figure regressed significantly by more than PCT percent (for CI)",
    )
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.set_defaults(handler=cmd_compare)


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"expected 0 to 1000 percent, got {text!r}")
    return value


def cmd_compare(args: argparse.Namespace) -> int:
    from contextlib import closing

    from mlbench_tui.results.compare import regressions
    from mlbench_tui.runs.compare import compare_runs, comparison_json, comparison_text, select
    from mlbench_tui.server.daemon import run_reader

    with closing(run_reader()) as reader:
        comparison = compare_runs(select(reader, args.base), select(reader, args.candidate), seed=args.seed)
    if args.output == "json":
        import json

        sys.stdout.write(json.dumps(comparison_json(comparison), indent=2) + "\n")
    else:
        sys.stdout.write(comparison_text(comparison) + "\n")
    if args.fail_on_regression is None:
        return 0
    worse = regressions(comparison.figures, args.fail_on_regression)
    for c in worse:
        print(f"regressed: {c.figure} {c.change:+.1%} (over {args.fail_on_regression:g}%)", file=sys.stderr)
    return EXIT_REGRESSED if worse else 0
